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
// clients: the tool layer, the controller, the question port, the sandbox
// contract and the protocol engines (those that exist).
var layered = []string{"./tools/...", "./controller/...", "./questions", "./sandbox", "./lsp/...", "./dap/...", "./kernel/...", "./syntax/..."}

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
	"framing":     nil,
	"lsp":         {"berth.dev/berth/framing"},
	"dap":         {"berth.dev/berth/framing"},
	"kernel":      {"berth.dev/berth/kernel/zmtp"},
	"kernel/zmtp": nil,
	"syntax":      nil,
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

// sharedTools are the packages under tools/ that every tool may import: the
// helpers a tool is built from, not tools of their own.
var sharedTools = []string{"internal", "workspace"}

// TestToolsImportNoControllerNorSibling keeps the tool layer below the
// controller and its tools apart. For every package under tools/, call its
// tool the first path element after tools/ (tools/lsp/projectcheck belongs
// to lsp; tools itself, the registry, belongs to none). Then:
//
//   - no file of it, test files included, imports controller or anything
//     under controller/: what a tool shares with the controller (the
//     question port, the sandbox contract) lives beside sandbox;
//   - its non-test files import from tools/ only the registry (tools), its
//     own tool's packages, the shared pieces under tools/internal/ and
//     tools/workspace, and test helper packages (named …test, such as
//     tools/lsp/lsptest), never another tool.
//
// Test files may import another tool: a test that builds a registry of
// several tools (apply_patch beside eval, a permission card before an LSP
// call) is the caller that composes them, as the controller is.
func TestToolsImportNoControllerNorSibling(t *testing.T) {
	root := moduleRoot(t)
	const mod = "berth.dev/berth/"
	format := "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}"
	for _, line := range goList(t, root, "-e", "-f", format, "./tools/...") {
		pkg, rest, _ := strings.Cut(line, "|")
		imports, testImports, _ := strings.Cut(rest, "|")
		own := toolOf(strings.TrimPrefix(pkg, mod))
		all := strings.Fields(imports + " " + testImports)
		slices.Sort(all)
		for _, imp := range slices.Compact(all) {
			if imp == mod+"controller" || strings.HasPrefix(imp, mod+"controller/") {
				t.Errorf("%s imports %s: a tool may not import the controller; move what both need beside sandbox", pkg, imp)
			}
		}
		for _, imp := range strings.Fields(imports) {
			rel, ok := strings.CutPrefix(imp, mod)
			if !ok || !strings.HasPrefix(rel, "tools/") || strings.HasSuffix(rel, "test") {
				continue
			}
			if other := toolOf(rel); other != own && !slices.Contains(sharedTools, other) {
				t.Errorf("%s imports %s: a tool may not import another tool; share it through tools/workspace or tools/internal/", pkg, imp)
			}
		}
	}
}

// toolOf returns the tool a package path relative to the module belongs to:
// "lsp" for tools/lsp and tools/lsp/projectcheck, "" for tools itself.
func toolOf(rel string) string {
	rest, ok := strings.CutPrefix(rel, "tools/")
	if !ok {
		return ""
	}
	tool, _, _ := strings.Cut(rest, "/")
	return tool
}
