package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
	"berth.dev/berth/syntax"
	"berth.dev/berth/tools/structural"
)

// Exit codes of ast-grep and ast-edit, as grep's: matches, none, trouble.
const (
	exitMatched   = 0
	exitNoMatch   = 1
	exitTrouble   = 2
	astGrepPrefix = "berth ast-grep: "
	astEditPrefix = "berth ast-edit: "
)

// structFlags are the flags ast-grep and ast-edit share.
type structFlags struct {
	pattern string
	lang    string
}

func (f *structFlags) add(cmd *cobra.Command) {
	cmd.Annotations = map[string]string{grammarsAnnotation: grammarsOnDemand}
	fl := cmd.Flags()
	fl.StringVarP(&f.pattern, "pattern", "p", "", "the code pattern, with $NAME, $$$NAME and $_ metavariables (required)")
	fl.StringVarP(&f.lang, "lang", "l", "", "language id (go, python, rust, …); inferred when every PATH is a file")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitTrouble, msg: "berth " + cmd.Name() + ": " + err.Error()}
	})
}

// loadGrammars loads the configured grammars unless --lang names a bundled
// language: loading them opens shared libraries (milliseconds), which a
// search in a bundled language does not need.
func (f *structFlags) loadGrammars(stderr io.Writer) {
	if _, err := syntax.Lookup(f.lang); f.lang != "" && err == nil {
		return
	}
	loadConfiguredGrammars(stderr)
}

// required refuses an empty flag value with exit status 2.
func required(prefix, flag, value string) error {
	if strings.TrimSpace(value) == "" {
		return &exitError{code: exitTrouble, msg: prefix + "--" + flag + " is required"}
	}
	return nil
}

// target is one PATH argument resolved to a directory served by dirfs and
// a path inside it.
type target struct {
	arg     string // as given
	root    string // absolute directory the FS serves
	shown   string // how root is printed: "." for the working directory, else as given
	relPath string // the PATH inside root, slash-separated ("." for root itself)
}

// resolveTarget picks the FS root for a PATH: the working directory when
// the PATH lies inside it, else the PATH itself (a directory) or its parent
// (a file), so matches print relative to the working directory or prefixed
// with the PATH as given, as the ast-grep CLI prints them.
func resolveTarget(cwd, arg string) (target, error) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return target{}, fmt.Errorf("cannot make %s absolute: %w", arg, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return target{}, fmt.Errorf("cannot search %s: %w; pass an existing file or directory", arg, err)
	}
	if rel, err := filepath.Rel(cwd, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return target{arg: arg, root: cwd, shown: ".", relPath: filepath.ToSlash(rel)}, nil
	}
	if fi.IsDir() {
		return target{arg: arg, root: abs, shown: filepath.Clean(arg), relPath: "."}, nil
	}
	return target{arg: arg, root: filepath.Dir(abs), shown: filepath.Dir(filepath.Clean(arg)), relPath: filepath.Base(abs)}, nil
}

// display turns a root-relative slash path into the path printed.
func (t target) display(file string) string {
	return filepath.Join(t.shown, filepath.FromSlash(file))
}

// cliEngine is the engine of a one-shot ast-grep or ast-edit: no parse
// cache (nothing is searched twice), and as many parse workers as the
// runtime has Ps, with one P more for everything else (see parseWorkers).
func cliEngine() *structural.Engine {
	return structural.NewEngine(structural.Options{CacheBytes: -1, Workers: parseWorkers()})
}

// parseWorkers is how many files a one-shot search parses at once: the
// runtime's GOMAXPROCS as it started, after which it gets one P more unless
// the user set GOMAXPROCS. A parse is a cgo call, which holds its P; with
// every P inside a parse, the runtime's monitor takes Ps back every few
// tens of microseconds to run the walk, the garbage collector and the
// output, waking threads each time. The spare P runs those instead
// (measured on 2 CPUs, a search of a Python library: 5 % less wall time
// and CPU, 40 % fewer context switches).
var parseWorkers = sync.OnceValue(func() int {
	n := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(n + 1)
	}
	return n
})

// fsCache opens one dirfs per root and closes them all at the end.
type fsCache map[string]sandbox.FS

func (c fsCache) open(root string) (sandbox.FS, error) {
	if f, ok := c[root]; ok {
		return f, nil
	}
	f, err := dirfs.New(root)
	if err != nil {
		return nil, err
	}
	c[root] = f
	return f, nil
}

func (c fsCache) close() {
	for _, f := range c {
		if cl, ok := f.(io.Closer); ok {
			cl.Close()
		}
	}
}

// targets resolves args (default ".") against the working directory.
func targets(args []string) ([]target, error) {
	if len(args) == 0 {
		args = []string{"."}
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("cannot read the working directory: %w", err)
	}
	out := make([]target, 0, len(args))
	for _, a := range args {
		t, err := resolveTarget(cwd, a)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// trouble is an exit-2 error with the command's prefix.
func trouble(prefix string, err error) error {
	// The engine's messages are written for the tool's arguments; name the
	// flags instead.
	msg := strings.NewReplacer("pass language,", "pass --lang,", "max_results", "--max").Replace(err.Error())
	if !strings.HasPrefix(msg, "berth") {
		msg = prefix + msg
	}
	return &exitError{code: exitTrouble, msg: msg}
}

func newASTGrep() *cobra.Command {
	f := &structFlags{}
	var asJSON bool
	var max int
	cmd := &cobra.Command{
		Use:   "ast-grep --pattern P [--lang L] [--json] [--max N] [PATH...]",
		Short: "Search files by syntax-tree shape (structural search, ast-grep compatible)",
		Long: `ast-grep searches each PATH (file or directory, default ".") for code shaped
like the pattern, with the same engine as the ast_grep tool: .gitignore is
honoured, .git, binary and oversized files are skipped.

Output is one "path:line:text" line per matched line, or with --json one JSON
object per match (JSON Lines): file, start_line, start_col, end_line,
end_col, text, enclosing (the declarations around the match, such as
"HTTPConnection.putheader" or "(*Server).Serve"; left out at the top
level), captures (lines 1-based, columns 0-based bytes). Paths print
relative to the working directory, or prefixed with PATH as given when PATH
lies outside it.

Exit status: 0 when something matched, 1 when nothing did, 2 on errors
(invalid pattern, unknown language, missing path).`,
		Example: `  berth ast-grep -p 'if err != nil { return $$$ }' -l go .
  berth ast-grep -p 'print($$$)' -l python --json src/
  berth ast-grep -p '$X.Lock()' main.go`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := required(astGrepPrefix, "pattern", f.pattern); err != nil {
				return err
			}
			f.loadGrammars(cmd.ErrOrStderr())
			return runASTGrep(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, asJSON, max, args)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON Lines, one match per line")
	cmd.Flags().IntVar(&max, "max", 0, "stop after N matches (default: all)")
	return cmd
}

func runASTGrep(ctx context.Context, out, stderr io.Writer, f *structFlags, asJSON bool, max int, args []string) (err error) {
	ts, err := targets(args)
	if err != nil {
		return trouble(astGrepPrefix, err)
	}
	stdout := bufio.NewWriterSize(out, 64<<10)
	defer func() {
		if ferr := stdout.Flush(); ferr != nil && err == nil {
			err = trouble(astGrepPrefix, ferr)
		}
	}()
	fss := fsCache{}
	defer fss.close()
	eng := cliEngine()
	limit := -1
	if max > 0 {
		limit = max
	}
	total := 0
	for _, t := range ts {
		fsys, err := fss.open(t.root)
		if err != nil {
			return trouble(astGrepPrefix, err)
		}
		req := structural.SearchRequest{Pattern: f.pattern, Language: f.lang, Path: t.relPath, MaxResults: limit, Enclosing: asJSON}
		var res *structural.SearchResult
		if limit > 0 {
			// The first matches in path order: the engine keeps them.
			res, err = eng.Search(ctx, fsys, req)
			if err != nil {
				return trouble(astGrepPrefix, err)
			}
			for _, m := range res.Matches {
				if total >= limit {
					break
				}
				total++
				if _, err := stdout.Write(appendMatch(nil, asJSON, t.display(m.File), m)); err != nil {
					return trouble(astGrepPrefix, err)
				}
			}
		} else {
			// Every match: each file's are formatted by the search's
			// workers as they find them, and written in walk order as
			// soon as the files before it are done, so nothing waits
			// for the end. A failed write (a closed pipe) ends the
			// search.
			sctx, stop := context.WithCancel(ctx)
			var werr error // written only by the emits, which run one at a time
			res, err = eng.SearchEach(sctx, fsys, req, func(file string, ms []syntax.Match, enc []string) func() {
				shown := t.display(file)
				out := make([]byte, 0, outputSize(ms))
				var fm structural.FileMatch // one for all: its captures map is reused
				for i, m := range ms {
					var e string
					if i < len(enc) {
						e = enc[i]
					}
					structural.FillMatch(&fm, file, m, e)
					out = appendMatch(out, asJSON, shown, fm)
				}
				return func() {
					if werr != nil {
						return
					}
					if _, werr = stdout.Write(out); werr != nil {
						stop()
					}
				}
			})
			stop()
			if werr != nil {
				return trouble(astGrepPrefix, werr)
			}
			if err != nil {
				return trouble(astGrepPrefix, err)
			}
			total += res.Total
		}
		if n := res.FilesSkipped; n > 0 && !asJSON {
			stdout.Flush()
			fmt.Fprintf(stderr, "%sskipped %d file(s) under %s: %s\n", astGrepPrefix, n, t.arg, skipText(res.Skipped))
		}
	}
	if total == 0 {
		return &exitError{code: exitNoMatch}
	}
	return nil
}

// outputSize estimates the bytes ms print as: their texts and captures and
// a line's worth of fields each, so a file's output buffer is allocated
// once instead of regrown.
func outputSize(ms []syntax.Match) int {
	n := 0
	for _, m := range ms {
		n += len(m.Text) + 160
		for k, c := range m.Captures {
			n += len(k) + len(c.Text) + 8
		}
	}
	return n + n/8
}

// appendMatch appends one match as ast-grep prints it: a JSON line, or,
// as ast-grep does without a heading, one "path:line:text" line per line of
// the matched text.
func appendMatch(dst []byte, asJSON bool, file string, m structural.FileMatch) []byte {
	if asJSON {
		return appendMatchJSON(dst, file, m)
	}
	text := m.Text
	for line := m.StartLine; ; line++ {
		l, rest, more := strings.Cut(text, "\n")
		dst = append(dst, file...)
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, int64(line), 10)
		dst = append(dst, ':')
		dst = append(dst, l...)
		dst = append(dst, '\n')
		if !more {
			return dst
		}
		text = rest
	}
}

// skipText renders skip counts as "2 binary, 1 too_large".
func skipText(m map[string]int) string {
	var parts []string
	for _, k := range []string{structural.SkipBinary, structural.SkipTooLarge, structural.SkipParseBudget, structural.SkipUnreadable, structural.SkipHardLinks} {
		if n := m[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(parts) == 0 {
		return "ignored by .gitignore"
	}
	return strings.Join(parts, ", ")
}

func newASTEdit() *cobra.Command {
	f := &structFlags{}
	var rewrite string
	var apply bool
	cmd := &cobra.Command{
		Use:   "ast-edit --pattern P --rewrite R [--lang L] [--apply] [PATH...]",
		Short: "Rewrite code by syntax-tree shape: print the diff, or write it with --apply",
		Long: `ast-edit replaces every match of the pattern under each PATH (default ".")
with the rewrite template, its metavariables substituted. Without --apply it
prints the unified diff and writes nothing; with --apply it writes the files
(each compared with what was read first, all or nothing) and prints what
changed.

Exit status: 0 when something matched, 1 when nothing did, 2 on errors.`,
		Example: `  berth ast-edit -p 'errors.New(fmt.Sprintf($$$A))' -r 'fmt.Errorf($$$A)' -l go .
  berth ast-edit -p 'print $X' -r 'print($X)' -l python --apply scripts/`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := required(astEditPrefix, "pattern", f.pattern); err != nil {
				return err
			}
			if !cmd.Flags().Changed("rewrite") {
				return &exitError{code: exitTrouble, msg: astEditPrefix + "--rewrite is required (it may be empty to delete matches)"}
			}
			f.loadGrammars(cmd.ErrOrStderr())
			return runASTEdit(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, rewrite, apply, args)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVarP(&rewrite, "rewrite", "r", "", "the replacement, with the pattern's metavariables (required)")
	cmd.Flags().BoolVar(&apply, "apply", false, "write the changes instead of printing the diff")
	return cmd
}

// staged is one PATH's proposal with the FS it was staged on.
type staged struct {
	t    target
	fsys sandbox.FS
	p    *structural.Proposal
}

func runASTEdit(ctx context.Context, stdout, stderr io.Writer, f *structFlags, rewrite string, apply bool, args []string) error {
	ts, err := targets(args)
	if err != nil {
		return trouble(astEditPrefix, err)
	}
	fss := fsCache{}
	defer fss.close()
	eng := cliEngine()
	var all []staged
	discard := func() {
		for _, s := range all {
			_, _ = eng.Resolve(context.WithoutCancel(ctx), s.fsys, s.p.ID, structural.ActionDiscard)
		}
	}
	for _, t := range ts {
		fsys, err := fss.open(t.root)
		if err != nil {
			discard()
			return trouble(astEditPrefix, err)
		}
		p, err := eng.Stage(ctx, fsys, structural.EditRequest{Pattern: f.pattern, Rewrite: rewrite, Language: f.lang, Path: t.relPath})
		if err != nil {
			discard()
			return trouble(astEditPrefix, err)
		}
		if p.Replacements == 0 {
			_, _ = eng.Resolve(ctx, fsys, p.ID, structural.ActionDiscard)
			continue
		}
		all = append(all, staged{t: t, fsys: fsys, p: p})
		for _, fe := range p.Files {
			for _, w := range fe.SyntaxWarnings {
				fmt.Fprintf(stderr, "%swarning: %s:%d: the rewritten code has a syntax error here: %s\n", astEditPrefix, t.display(fe.Path), w.Line, w.What)
			}
		}
	}
	if len(all) == 0 {
		return &exitError{code: exitNoMatch}
	}
	if !apply {
		defer discard()
		for _, s := range all {
			if _, err := io.WriteString(stdout, displayDiff(s.p.Diff, s.t)); err != nil {
				return trouble(astEditPrefix, err)
			}
		}
		return nil
	}
	files, repl := 0, 0
	for i, s := range all {
		a, err := eng.Resolve(ctx, s.fsys, s.p.ID, structural.ActionAccept)
		if err != nil {
			for _, rest := range all[i+1:] {
				_, _ = eng.Resolve(context.WithoutCancel(ctx), rest.fsys, rest.p.ID, structural.ActionDiscard)
			}
			if files > 0 {
				err = fmt.Errorf("%w (already written under other paths: %d replacements in %d files)", err, repl, files)
			}
			return trouble(astEditPrefix, err)
		}
		for _, af := range a.Files {
			fmt.Fprintf(stdout, "%s: %d replacement(s)\n", s.t.display(af.Path), af.Replacements)
		}
		for _, w := range a.Warnings {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		files += len(a.Files)
		repl += a.Replacements
	}
	fmt.Fprintf(stdout, "applied %d replacement(s) in %d file(s)\n", repl, files)
	return nil
}

// displayDiff rewrites the diff's file headers ("--- a/x", "+++ b/x") to
// the paths as printed for t, so a diff of a PATH outside the working
// directory names its files as the user wrote them.
func displayDiff(diff string, t target) string {
	if t.shown == "." {
		return diff
	}
	lines := strings.SplitAfter(diff, "\n")
	for i, l := range lines {
		for _, pre := range []string{"--- a/", "+++ b/"} {
			if rest, ok := strings.CutPrefix(l, pre); ok {
				lines[i] = pre + filepath.ToSlash(t.display(rest))
			}
		}
	}
	return strings.Join(lines, "")
}
