// Package tests holds berth's end-to-end tests (tests/e2e) and the checks
// on the package graph that keep the layers apart.
package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// forbidden are the module path prefixes that only cmd/ and the sandbox
// backends may pull in.
var forbidden = []string{"github.com/moby/", "github.com/docker/", "github.com/containerd/", "k8s.io/"}

// layered are the package patterns that must stay free of container-engine
// clients: the tool layer, the controller, the sandbox contract and the
// protocol engines (those that exist).
var layered = []string{"./tools/...", "./controller/...", "./sandbox", "./lsp/...", "./dap/...", "./kernel/...", "./syntax/..."}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod above tests/: %v", err)
	}
	return dir
}

func goList(t *testing.T, root string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	cmd.Stderr = new(strings.Builder)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, cmd.Stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestLayersImportNoContainerEngine(t *testing.T) {
	root := moduleRoot(t)
	var patterns []string
	for _, p := range layered {
		dir := filepath.Join(root, strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/..."))
		if _, err := os.Stat(dir); err == nil {
			patterns = append(patterns, p)
		}
	}
	for _, pkg := range patterns {
		deps := goList(t, root, append([]string{"-deps"}, pkg)...)
		for _, d := range deps {
			for _, f := range forbidden {
				if strings.HasPrefix(d, f) {
					t.Errorf("%s depends on %s: only cmd/ and the sandbox backends may import %s*", pkg, d, f)
				}
			}
		}
	}
}

func TestNoProductionPackageImportsTesting(t *testing.T) {
	root := moduleRoot(t)
	for _, line := range goList(t, root, "-e", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		pkg, imports, _ := strings.Cut(line, " ")
		// Conformance suites (sandbox/sandboxtest) and test helpers are
		// named …test and are meant to import testing.
		if strings.HasSuffix(pkg, "test") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == "testing" || strings.HasPrefix(imp, "testing/") {
				t.Errorf("%s imports %s: only _test.go files and …test packages may", pkg, imp)
			}
		}
	}
}

// lifecycleCall matches Docker Engine client calls that create, start,
// stop, restart, pause, change or remove a container.
var lifecycleCall = regexp.MustCompile(`\.(Container(Create|Start|Restart|Stop|Kill|Remove|Pause|Unpause|Update|Rename|Commit)|ContainersPrune)\(`)

// TestBerthNeverManagesContainers scans the source of every package the
// berth binary is built from: none may call the Engine API to create,
// start, stop, restart or remove a container (PLC-1). The e2e tests check
// the same from the daemon's side.
func TestBerthNeverManagesContainers(t *testing.T) {
	root := moduleRoot(t)
	for _, line := range goList(t, root, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}{{end}}", "./cmd/berth") {
		pkg, rest, _ := strings.Cut(line, "|")
		dir, files, _ := strings.Cut(rest, "|")
		if !strings.HasPrefix(pkg, "berth.dev/berth") || files == "" {
			continue
		}
		for _, f := range strings.Split(files, ",") {
			src, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range strings.Split(string(src), "\n") {
				if m := lifecycleCall.FindString(l); m != "" {
					t.Errorf("%s/%s:%d calls %s: berth only uses containers that exist and never changes their state", pkg, f, i+1, strings.Trim(m, ".("))
				}
			}
		}
	}
}

// engines maps each protocol engine to the only packages of this module it
// may import: engines take a stream, a dialer or bytes, and know nothing of
// sandboxes, tools or the controller.
var engines = map[string][]string{
	"framing": nil,
	"lsp":     {"berth.dev/berth/framing"},
	"dap":     {"berth.dev/berth/framing"},
	"kernel":  nil,
	"syntax":  nil,
}

func TestEnginesStandAlone(t *testing.T) {
	root := moduleRoot(t)
	for engine, allowed := range engines {
		if _, err := os.Stat(filepath.Join(root, engine)); err != nil {
			continue
		}
		line := goList(t, root, "-f", "{{join .Imports \" \"}}", "./"+engine)[0]
		for _, imp := range strings.Fields(line) {
			if strings.HasPrefix(imp, "berth.dev/berth/") && !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s; it may import only %v from this module", engine, imp, allowed)
			}
		}
	}
}
