package lsp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"

	"berth.dev/berth/sandbox"
)

// Compilation databases. clangd looks for compile_commands.json (or
// compile_flags.txt) only in the directories above each file and in their
// build/ subdirectory. A project configured into out/, build-debug/,
// cmake-build-debug/ or builddir/ has a database clangd never finds, and
// clangd then compiles every file with its fallback flags and links only
// the files it has open. Before a server that reads one
// (Server.CompileCommandsDir) starts, berth looks for the root's database
// with a bounded search and, when clangd would not look there itself,
// passes its directory. The database is data clangd reads: it runs no
// compiler it names unless told to with --query-driver, which berth never
// passes.

const (
	// MaxCompDBDirs bounds the directories the search lists.
	MaxCompDBDirs = 256
	// compDBTimeout bounds the whole search.
	compDBTimeout = 10 * time.Second
)

// compDBFiles are the files a directory may hold its database in, the
// more precise first.
var compDBFiles = []string{"compile_commands.json", "compile_flags.txt"}

// compDBSkip are directory names the search does not enter, besides the
// hidden ones.
var compDBSkip = map[string]bool{"node_modules": true, "vendor": true, "__pycache__": true, "target": true}

// compDB is what the search found for one root.
type compDB struct {
	// file is the database, workspace-relative ("out/compile_commands.json");
	// "" when none was found.
	file string
	// own says clangd finds file by itself (in the root, a directory above
	// it, or their build/): no flag is needed.
	own bool
	// others are further databases the search found and did not choose.
	others []string
	// listed is how many directories the search listed; cut says it
	// stopped at MaxCompDBDirs before listing them all.
	listed int
	cut    bool
}

// dir is the directory passed to the server: the database's.
func (d compDB) dir() string { return path.Dir(d.file) }

// describe says what was found, for status and notes.
func (d compDB) describe(flag string) string {
	var s string
	switch {
	case d.file == "":
		s = "none found"
	case d.own:
		s = d.file + " (where the server looks by itself)"
	default:
		s = fmt.Sprintf("%s (passed as %s%s)", d.file, flag, d.dir())
	}
	if len(d.others) > 0 {
		s += fmt.Sprintf("; also found, not used: %s", strings.Join(d.others, ", "))
	}
	if d.cut {
		s += fmt.Sprintf("; the search stopped after %d directories", d.listed)
	}
	return s
}

// findCompDB looks for the compilation database of the files under root
// (workspace-relative): first where clangd looks by itself (root and the
// directories above it up to the workspace root, each with its build/),
// then in the directories below root up to two levels deep, breadth
// first in name order, skipping hidden directories, node_modules and
// vendor, listing at most MaxCompDBDirs of them. The shallowest
// compile_commands.json wins, first by name at its depth; a
// compile_flags.txt is taken only when no directory holds a
// compile_commands.json.
func findCompDB(ctx context.Context, ws sandbox.FS, root string) (compDB, error) {
	ctx, cancel := context.WithTimeout(ctx, compDBTimeout)
	defer cancel()
	isFile := func(name string) (bool, error) {
		fi, err := ws.Stat(ctx, name)
		switch {
		case err == nil:
			return !fi.IsDir(), nil
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, sandbox.ErrEscape), errors.Is(err, syscall.ENOTDIR):
			return false, nil
		}
		return false, err
	}
	// Where clangd looks by itself, nearest first, in its own order.
	for dir := root; ; dir = path.Dir(dir) {
		for _, f := range []string{"compile_commands.json", "build/compile_commands.json", "compile_flags.txt"} {
			name := path.Join(dir, f)
			ok, err := isFile(name)
			if err != nil {
				return compDB{}, fmt.Errorf("lsp: looking for a compilation database: %w", err)
			}
			if ok {
				return compDB{file: name, own: true}, nil
			}
		}
		if dir == "." {
			break
		}
	}
	var d compDB
	var found []string // databases by depth, then name; compile_flags.txt after all compile_commands.json
	var flags []string
	level := []string{root}
	for depth := 0; depth <= 2 && len(level) > 0; depth++ {
		var next []string
		for _, dir := range level {
			if d.listed >= MaxCompDBDirs {
				d.cut = true
				break
			}
			d.listed++
			ents, err := ws.ReadDir(ctx, dir)
			if err != nil {
				if ctx.Err() != nil {
					return compDB{}, fmt.Errorf("lsp: looking for a compilation database: %w", ctx.Err())
				}
				continue // unreadable or gone: not a database
			}
			for _, e := range ents {
				name := e.Name()
				switch {
				case e.IsDir():
					if depth < 2 && !strings.HasPrefix(name, ".") && !compDBSkip[name] {
						next = append(next, path.Join(dir, name))
					}
				case depth > 0 && name == compDBFiles[0]:
					found = append(found, path.Join(dir, name))
				case depth > 0 && name == compDBFiles[1]:
					flags = append(flags, path.Join(dir, name))
				}
			}
		}
		level = next
	}
	found = append(found, flags...)
	if len(found) > 0 {
		d.file, d.others = found[0], found[1:]
	}
	return d, nil
}

// compDBArgs returns the arguments that point sv at d, with wsRoot the
// workspace's absolute path in the sandbox (none when sv reads no
// database or finds d by itself).
func (sv Server) compDBArgs(d compDB, wsRoot string) []string {
	if sv.CompileCommandsDir == "" || d.file == "" || d.own {
		return nil
	}
	return []string{sv.CompileCommandsDir + path.Join(wsRoot, d.dir())}
}

// compDBCause names why a server that reads a compilation database may
// not have linked the files where a name occurs ("" when it had one): g
// started without one, and the search says whether one has appeared
// since.
func (q *query) compDBCause(ctx context.Context) string {
	in, g := q.in, q.g
	if g.compDB.file != "" {
		return ""
	}
	now, err := findCompDB(ctx, in.s.ws, in.key.root)
	switch {
	case err != nil:
		return fmt.Sprintf("; %s started without a compilation database (compile_commands.json), so it links only the files it has open", in.spec.ID)
	case now.file != "":
		return fmt.Sprintf("; %s started without a compilation database, so it links only the files it has open; %s has appeared since: call lsp with action reload to restart it with it", in.spec.ID, now.file)
	}
	where := showRoot(in.key.root)
	if in.key.root != "." {
		where += ", the directories above it"
	}
	cut := ""
	if now.cut {
		cut = fmt.Sprintf("; berth looked in the first %d directories only", now.listed)
	}
	return fmt.Sprintf("; %s has no compilation database (no compile_commands.json or compile_flags.txt in %s, their build/ or the directories up to two levels below%s), so it links only the files it has open", in.spec.ID, where, cut)
}

// compDBFor returns the database of c's root for status: the one the
// running generation started with, else what a search finds now.
func (s *Supervisor) compDBFor(ctx context.Context, root string, in *instance) (compDB, bool) {
	if in != nil {
		in.mu.Lock()
		g := in.gen
		in.mu.Unlock()
		if g != nil {
			select {
			case <-g.ready:
				if g.err == nil && g.compDBSearched {
					return g.compDB, true
				}
			default:
			}
		}
	}
	d, err := findCompDB(ctx, s.ws, root)
	return d, err == nil
}
