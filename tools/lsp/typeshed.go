package lsp

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools/internal/proc"
)

// The workspace's own standard-library names. pyright resolves an absolute
// import to a stub of its bundled typeshed's stdlib before it looks at the
// workspace, so a project whose own top-level package is named like a
// standard module (email/, logging/) gets answers about the stub, not its
// code ("unknown import symbol"), though Python imports the project's:
// the script's directory comes first on sys.path. When the server's root,
// or its src/, holds such a package or module, the server starts with a
// typeshed of its own (Server.Typeshed), made in a private directory of
// the sandbox that goes when the server ends (sandbox.Cmd.Remove): links
// to every entry of the bundled typeshed but those modules, and a
// VERSIONS without them. pyright then has no stub of them and resolves the
// workspace's. Nothing is made, and nothing run, for a root with no such
// name. The modules that the stubs of builtins and typing import, and
// those Python has loaded before any workspace code runs (typeshedKept),
// keep their stubs.

// typeshedStdlib is the embedded list of typeshed's top-level stdlib
// modules.
//
//go:embed typeshed_stdlib.txt
var typeshedStdlib string

// stdlibModules is typeshedStdlib as a set, without __main__: a
// workspace's __main__.py is run, never imported by that name.
var stdlibModules = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(typeshedStdlib, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") && line != "__main__" {
			out[line] = true
		}
	}
	return out
})

// typeshedKept are the standard modules whose stubs a private typeshed
// keeps though the workspace has a package of the same name: those the
// stubs of builtins, typing, typing_extensions, _typeshed, types, enum,
// dataclasses, abc and collections.abc import, transitively, in the
// typeshed of pyright 1.1.414 (without them every type pyright infers goes
// astray: a workspace types.py makes a coroutine's type Unknown), and
// those python3 -I -S has loaded before it runs any code, which no
// workspace module replaces.
var typeshedKept = map[string]bool{
	"_abc": true, "_ast": true, "_codecs": true, "_collections_abc": true, "_frozen_importlib": true,
	"_frozen_importlib_external": true, "_imp": true, "_io": true, "_signal": true, "_sitebuiltins": true,
	"_thread": true, "_typeshed": true, "_warnings": true, "_weakref": true, "_winapi": true,
	"abc": true, "annotationlib": true, "ast": true, "builtins": true, "codecs": true, "collections": true,
	"contextlib": true, "dataclasses": true, "encodings": true, "enum": true, "importlib": true, "io": true,
	"marshal": true, "os": true, "pathlib": true, "posix": true, "re": true, "resource": true,
	"subprocess": true, "sys": true, "time": true, "types": true, "typing": true, "typing_extensions": true,
	"warnings": true, "zipfile": true, "zipimport": true,
}

// typeshedState is what a generation's start made of the workspace's
// standard-library names.
type typeshedState struct {
	// dir is the private typeshed the server was given; "" when none.
	dir string
	// modules are the workspace's packages the server resolves to the
	// workspace's code instead of their stubs (only with dir).
	modules []string
	// kept are the workspace's packages whose stubs were kept
	// (typeshedKept).
	kept []string
	// why says why no private typeshed was made for modules that wanted
	// one.
	why string
}

// String says, for status, which of the workspace's packages named like
// standard modules the server resolves to the workspace's code and which
// to its bundled stub; "" for a nil state.
func (ts *typeshedState) String() string {
	if ts == nil {
		return ""
	}
	var parts []string
	if len(ts.modules) > 0 {
		parts = append(parts, fmt.Sprintf("the workspace's %s resolved to its own code (a typeshed without their stubs: %s)", strings.Join(ts.modules, ", "), ts.dir))
	}
	if ts.why != "" {
		parts = append(parts, "no typeshed of its own: "+ts.why)
	}
	if len(ts.kept) > 0 {
		parts = append(parts, fmt.Sprintf("the workspace's %s resolved to the bundled stubs, which the stubs of builtins and typing need", strings.Join(ts.kept, ", ")))
	}
	return strings.Join(parts, "; ")
}

// stdlibShadows returns the names of the top-level packages (a directory
// holding __init__.py or __init__.pyi) and modules (name.py, name.pyi) at
// the instance's root and in its src/ that are standard modules of
// typeshed, sorted. Only entries whose names are standard are looked at
// closer.
func (in *instance) stdlibShadows(ctx context.Context) []string {
	std := stdlibModules()
	var out []string
	for _, dir := range []string{in.key.root, path.Join(in.key.root, "src")} {
		ents, err := in.s.ws.ReadDir(ctx, dir)
		if err != nil {
			continue // no src/, or unreadable: nothing of it shadows
		}
		for _, e := range ents {
			name := e.Name()
			stem := strings.TrimSuffix(strings.TrimSuffix(name, ".pyi"), ".py")
			if !std[stem] || slices.Contains(out, stem) {
				continue
			}
			p := path.Join(dir, name)
			fi, err := in.s.ws.Stat(ctx, p)
			if err != nil {
				continue
			}
			switch {
			case stem != name && fi.Mode().IsRegular():
				out = append(out, stem)
			case stem == name && fi.IsDir():
				for _, init := range []string{"__init__.py", "__init__.pyi"} {
					if fi, err := in.s.ws.Stat(ctx, path.Join(p, init)); err == nil && fi.Mode().IsRegular() {
						out = append(out, stem)
						break
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// inModule reports whether the workspace file name is module m's, at the
// instance's root or in its src/: m.py, m.pyi, or a file under m/.
func (in *instance) inModule(name, m string) bool {
	for _, dir := range []string{in.key.root, path.Join(in.key.root, "src")} {
		p := path.Join(dir, m)
		if name == p+".py" || name == p+".pyi" || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	return false
}

// typeshedScript makes a private typeshed for the server program $1
// without the stubs of the standard modules named after it. It finds the
// bundled typeshed beside the program's real file ($1 followed through
// its links, then the directory $2 below the file's), keeps only the
// names its VERSIONS lists, and prints "none WHY" when it makes nothing,
// else "dir D" and a "module M" for each module left out. PATH is the
// system's, so that on the host no program of the workspace runs.
const typeshedScript = `PATH=/usr/bin:/bin
b=$(readlink -f "$1") || { echo "none $1 does not resolve to a file"; exit 0; }
ts=${b%/*}/$2
v=$ts/stdlib/VERSIONS
shift 2
[ -f "$v" ] || { echo "none no bundled typeshed at $ts"; exit 0; }
pat=
for n in "$@"; do
  grep -q "^$n:" "$v" && pat="$pat|$n"
done
[ -n "$pat" ] || { echo "none its typeshed at $ts has no stub of them"; exit 0; }
umask 077
d=$(mktemp -d /tmp/berth-typeshed.XXXXXX) || exit 1
echo "dir $d"
mkdir "$d/stdlib" && ln -s "$ts/stubs" "$d/stubs" && ln -s "$ts"/stdlib/* "$d/stdlib/" && rm "$d/stdlib/VERSIONS" || exit 1
for n in "$@"; do
  case "$pat|" in *"|$n|"*) rm -f "$d/stdlib/$n" "$d/stdlib/$n.pyi" && echo "module $n" || exit 1 ;; esac
done
grep -Ev "^(${pat#|})[.:]" "$v" > "$d/stdlib/VERSIONS"
`

// makeTypeshed makes, for a server with Server.Typeshed whose root holds
// packages named like standard modules, the private typeshed that leaves
// their stubs out, in the sandbox, for binary; ctx bounds it. It returns
// nil, having run nothing, when the root holds no such package. A
// typeshed that cannot be made is a state with why set: the server starts
// with its bundled one.
func (in *instance) makeTypeshed(ctx context.Context, binary string) *typeshedState {
	if in.spec.Typeshed == "" || in.spec.TypeshedSetting == "" {
		return nil
	}
	shadows := in.stdlibShadows(ctx)
	if len(shadows) == 0 {
		return nil
	}
	st := &typeshedState{}
	var want []string
	for _, m := range shadows {
		if typeshedKept[m] {
			st.kept = append(st.kept, m)
		} else {
			want = append(want, m)
		}
	}
	if len(want) == 0 {
		return st
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	args := append([]string{"/bin/sh", "-c", typeshedScript, "berth-lsp-typeshed", binary, in.spec.Typeshed}, want...)
	p, err := in.s.sb.Start(ctx, &sandbox.Cmd{Args: args, Stdout: &out, Stderr: &errb})
	if err != nil {
		st.why = fmt.Sprintf("starting the script that makes it failed: %v", err)
		return st
	}
	res, err := p.Wait()
	var dir, none string
	var modules []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "dir":
			dir = rest
		case "module":
			modules = append(modules, rest)
		case "none":
			none = rest
		}
	}
	switch {
	case err != nil || !res.Success():
		st.why = fmt.Sprintf("making it failed (%v %v): %s", res, err, proc.Clip(errb.String(), 400))
		if dir != "" {
			removeSandboxDir(in.s.runCtx, in.s.sb, dir)
		}
	case dir == "":
		st.why = none
	default:
		st.dir, st.modules = dir, modules
	}
	return st
}

// removeSandboxDir removes a private directory berth made in the sandbox
// whose process never started (a started one's goes with it:
// sandbox.Cmd.Remove). It is bounded by probeTimeout, also when ctx is
// done.
func removeSandboxDir(ctx context.Context, sb sandbox.Sandbox, dir string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	if p, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"rm", "-rf", "--", dir}}); err == nil {
		p.Wait()
	}
}

// stubCause says which of the workspace's own packages at q's root, named
// like standard modules, pyright may have resolved to its bundled stub:
// of those that hold one of files (the file asked about and those the
// answer left out), the ones whose stubs its start kept (typeshedKept),
// could not leave out, or were added since it started. It returns "" when
// there are none, and the general label for a server berth gives no
// typeshed of its own.
func (q *query) stubCause(ctx context.Context, files []string) string {
	const general = "; pyright may have resolved the import to its bundled stub of a standard or installed module that shadows a workspace package of the same name"
	if q.in.spec.Typeshed == "" {
		return general
	}
	ts := q.g.typeshed
	var kept, failed, late []string
	for _, m := range q.in.stdlibShadows(ctx) {
		if !slices.ContainsFunc(files, func(f string) bool { return q.in.inModule(f, m) }) {
			continue
		}
		switch {
		case ts != nil && slices.Contains(ts.modules, m):
		case ts != nil && slices.Contains(ts.kept, m):
			kept = append(kept, m)
		case ts != nil && ts.why != "":
			failed = append(failed, m)
		default:
			late = append(late, m)
		}
	}
	var parts []string
	if len(kept) > 0 {
		parts = append(parts, fmt.Sprintf("%s (berth keeps pyright's stubs of the modules its stubs of builtins and typing import, and of those Python loads before any workspace code)", strings.Join(kept, ", ")))
	}
	if len(failed) > 0 {
		parts = append(parts, fmt.Sprintf("%s (berth could not give pyright a typeshed without their stubs: %s)", strings.Join(failed, ", "), ts.why))
	}
	if len(late) > 0 {
		parts = append(parts, fmt.Sprintf("%s (added after the server started: call lsp with action reload, and the workspace's own is resolved)", strings.Join(late, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; pyright may have resolved the import to its bundled stub of the standard module, not to the workspace's own package of that name: " + strings.Join(parts, "; ")
}
