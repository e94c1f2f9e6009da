package debug

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"berth.dev/berth/tools"
)

// goPackage reads the Go package in the workspace directory dir
// (workspace-relative) as go build would select its files for this
// machine's GOOS and GOARCH: its name, and its files and test files.
// The files are read through the workspace FS, so it works in any
// sandbox and runs nothing.
func (s *Supervisor) goPackage(ctx context.Context, dir string) (*build.Package, error) {
	bc := build.Default
	bc.GOROOT, bc.GOPATH, bc.Dir = "", "", ""
	bc.JoinPath = path.Join
	bc.IsAbsPath = path.IsAbs
	bc.SplitPathList = func(string) []string { return nil }
	bc.HasSubdir = func(string, string) (string, bool) { return "", false }
	bc.IsDir = func(p string) bool {
		fi, err := s.ws.Stat(ctx, p)
		return err == nil && fi.IsDir()
	}
	bc.ReadDir = func(p string) ([]fs.FileInfo, error) {
		des, err := s.ws.ReadDir(ctx, p)
		if err != nil {
			return nil, err
		}
		out := make([]fs.FileInfo, 0, len(des))
		for _, de := range des {
			if fi, err := de.Info(); err == nil {
				out = append(out, fi)
			}
		}
		return out, nil
	}
	bc.OpenFile = func(p string) (io.ReadCloser, error) {
		data, err := s.ws.ReadFile(ctx, p)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	return bc.ImportDir(dir, build.ImportComment)
}

// goTestFlags are go test's flags that a test binary takes as -test.NAME:
// a launch's args may give them as go test does (-run X, -v), and they
// are passed on as the test binary wants them.
var goTestFlags = []string{"bench", "benchmem", "benchtime", "count", "cpu", "failfast", "fullpath", "fuzz", "fuzztime", "list", "parallel", "run", "short", "shuffle", "skip", "timeout", "v"}

// testArgs writes a test binary's arguments: go test's flags in args
// become -test.NAME, and run, when set, is given as -test.run.
func testArgs(args []string, run string) ([]string, error) {
	out := make([]string, 0, len(args)+2)
	if run != "" {
		if choosesTests(args) {
			return nil, tools.Fail("test_run and a -run (or -test.run) in args both choose the tests: give one of them")
		}
		out = append(out, "-test.run", run)
	}
	rest := false
	for _, a := range args {
		if !rest && a == "--" {
			rest = true
		}
		if !rest && strings.HasPrefix(a, "-") && !strings.HasPrefix(strings.TrimLeft(a, "-"), "test.") {
			dashes := len(a) - len(strings.TrimLeft(a, "-"))
			name, _, _ := strings.Cut(a[dashes:], "=")
			if slices.Contains(goTestFlags, name) {
				a = "-test." + a[dashes:]
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// choosesTests reports whether args hold go test's -run (or -test.run)
// before any "--".
func choosesTests(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false // the rest are the tests' own arguments
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.TrimPrefix(name, "test.") == "run" {
			return true
		}
	}
	return false
}

// fileTests lists the tests, fuzz targets and examples a _test.go file
// declares, as go test names them.
func fileTests(src []byte, name string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil {
			continue
		}
		for _, prefix := range []string{"Test", "Fuzz", "Example"} {
			if isTestName(fn.Name.Name, prefix) && (prefix == "Example" || fn.Type.Params.NumFields() == 1) {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names, nil
}

// isTestName is go test's rule: name is prefix, or prefix followed by
// something that does not start with a lower-case letter.
func isTestName(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return !unicode.IsLower(r)
}

// goTarget settles a delve launch of tg from in: a _test.go program,
// test or test_run debug the package's tests (delve's test mode, as go
// test builds them); a package that is not a main package is refused
// with how to debug its tests, before delve builds anything.
func (s *Supervisor) goTarget(ctx context.Context, in Input, tg *target) error {
	testFile := !tg.isDir && strings.HasSuffix(tg.program, "_test.go")
	test := in.Test || in.TestRun != "" || testFile
	if !tg.isDir && path.Ext(tg.program) != ".go" {
		if test {
			return tools.Fail("%s is a binary: test and test_run build a package's tests; give the package directory (or one of its _test.go files) as program. A test binary built with go test -c is launched as any binary, with -test.run NAME in args", tg.program)
		}
		return nil // exec mode: nothing to build
	}
	pkgDir := tg.program
	if !tg.isDir {
		pkgDir = path.Dir(tg.program)
	}
	pkg, err := s.goPackage(ctx, pkgDir)
	var noGo *build.NoGoError
	switch {
	case errors.As(err, &noGo):
		return tools.Fail("%s holds no Go files to build (for this machine's GOOS and GOARCH): give a package directory, a main package to run or a package with tests", pkgDir)
	case err != nil && pkg.Name == "":
		if test {
			return tools.Fail("cannot read the Go package in %s: %v", pkgDir, err)
		}
		return nil // delve's build will say what is wrong
	}
	hasTests := len(pkg.TestGoFiles)+len(pkg.XTestGoFiles) > 0
	if !test {
		name := pkg.Name
		if !tg.isDir {
			// go build of one file builds that file alone: its own package clause counts.
			if src, err := s.ws.ReadFile(ctx, tg.program); err == nil {
				if f, err := parser.ParseFile(token.NewFileSet(), tg.program, src, parser.PackageClauseOnly); err == nil {
					name = f.Name.Name
				}
			}
		}
		if name == "main" {
			return nil
		}
		if hasTests {
			return tools.Fail("%s is package %s, not a main package, so there is no program to run: to debug its tests, launch it with test: true (add test_run: \"^TestName$\" to run only some; a _test.go file as program runs that file's tests), with your breakpoints set first", pkgDir, pkg.Name)
		}
		return tools.Fail("%s is package %s, not a main package, and it has no tests: launch a main package (a directory of package main) that uses it, or write a test for it and launch the package with test: true", pkgDir, pkg.Name)
	}
	if !hasTests {
		return tools.Fail("%s (package %s) has no _test.go files, so there are no tests to debug: launch a main package instead (without test)", pkgDir, pkg.Name)
	}
	run := in.TestRun
	if run != "" {
		if _, err := regexp.Compile(run); err != nil {
			return tools.Fail("test_run %q is not a regular expression as go test -run takes it: %v", run, err)
		}
	} else if testFile && !choosesTests(in.Args) {
		src, err := s.ws.ReadFile(ctx, tg.program)
		if err != nil {
			return tools.Fail("cannot read %s: %v", tg.program, err)
		}
		names, err := fileTests(src, tg.program)
		if err != nil {
			return tools.Fail("cannot parse %s: %v", tg.program, err)
		}
		if len(names) == 0 {
			return tools.Fail("%s declares no Test, Fuzz or Example function: give the package directory %s as program with test: true, and test_run to choose the tests", tg.program, pkgDir)
		}
		run = "^(" + strings.Join(names, "|") + ")$"
		tg.testOf = path.Base(tg.program)
	}
	args, err := testArgs(in.Args, run)
	if err != nil {
		return err
	}
	tg.program, tg.isDir, tg.test, tg.testRun, tg.args = pkgDir, true, true, run, args
	if tg.cwd == "" {
		tg.cwd = s.abs(pkgDir) // go test runs a package's tests in its directory
	}
	return nil
}

// buildNote is the progress note while delve builds: "delve is building
// the tests of list (go test -c)", with the time it has taken.
func buildNote(tg target) string {
	if tg.test {
		return fmt.Sprintf("delve is building the tests of %s (go test -c)", tg.program)
	}
	return fmt.Sprintf("delve is building %s (go build)", tg.program)
}

// progressEvery is how often a launch repeats its progress note while the
// adapter works, with the time taken, so that a follower sees the launch
// at work rather than the run's other resources.
const progressEvery = time.Second

// reportWhile reports note, and the time since it began, every
// progressEvery until the returned stop is called; stop waits for the
// reporting goroutine to end. Nothing runs when no transport follows ctx.
func reportWhile(ctx context.Context, note string) (stop func()) {
	if !tools.Following(ctx) {
		return func() {}
	}
	tools.Progress(ctx, note)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { // owned by stop
		defer close(done)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				tools.Progress(ctx, fmt.Sprintf("%s: %s", note, time.Since(start).Round(time.Second)))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
