package lsp_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

func TestClangdOnHost(t *testing.T) {
	need(t, "clangd")
	h := newHostRun(t, lsp.Options{})
	lsptest.CheckLang(t, h.env(), lsptest.Clangd(h.dir))
}

// TestClangdCompileCommandsInOut: the same project with its
// compile_commands.json in out/.
func TestClangdCompileCommandsInOut(t *testing.T) {
	need(t, "clangd")
	h := newHostRun(t, lsp.Options{})
	lsptest.CheckLang(t, h.env(), lsptest.ClangdOut(h.dir))
}

// TestClangdWithoutCompileCommands: a loose .c file, no marker anywhere.
func TestClangdWithoutCompileCommands(t *testing.T) {
	need(t, "clangd")
	h := newHostRun(t, lsp.Options{})
	lsptest.CheckCLoose(t, h.env())
}

// TestClangdWaitsForIndex: on 300 sources the first references waits for
// clangd's background index (before it, clangd listed only the open
// file's uses), and lsp_rename refuses while the index runs.
func TestClangdWaitsForIndex(t *testing.T) {
	need(t, "clangd")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	const n = 300
	e.PutAll(t, lsptest.CManySources(h.dir, n))
	lsptest.CheckCIndexWait(t, e, n)
}

// TestClangdRunsNoWorkspaceCodeOnHost: a workspace whose
// compile_commands.json names its own compiler, a -fplugin library and an
// -Xclang -load library, and whose .clangd adds another plugin, names the
// compiler again and points clangd at a remote index: on the host clangd
// runs none of them and connects nowhere, and still answers.
func TestClangdRunsNoWorkspaceCodeOnHost(t *testing.T) {
	need(t, "clangd")
	need(t, "gcc")
	dir, marks := t.TempDir(), t.TempDir()
	// The remote index: a listener that counts who connects.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })

	// Libraries that leave a mark when loaded.
	for _, lib := range []string{"plugin", "load", "cfgplugin"} {
		src := filepath.Join(marks, lib+".c")
		code := fmt.Sprintf("#include <stdio.h>\n__attribute__((constructor)) static void mark(void) { FILE *f = fopen(%q, \"w\"); if (f) fclose(f); }\n", filepath.Join(marks, "ran-"+lib))
		if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(dir, lib+".so"), src).CombinedOutput(); err != nil {
			t.Fatalf("building %s.so: %v\n%s", lib, err, out)
		}
	}
	cc := filepath.Join(dir, "tools/cc")
	writeTree(t, dir, map[string]string{
		"tools/cc": spy(marks),
		"compile_commands.json": fmt.Sprintf(`[{"directory": %q, "file": "a.c", "arguments": [%q, "-fplugin=%s/plugin.so", "-Xclang", "-load", "-Xclang", "%s/load.so", "-DVALUE=7", "-c", "a.c"]}]`+"\n",
			dir, cc, dir, dir),
		".clangd": fmt.Sprintf("CompileFlags:\n  Add: [-fplugin=%s/cfgplugin.so]\n  Compiler: %s\nIndex:\n  External:\n    Server: %s\n    MountPoint: %s\n", dir, cc, ln.Addr(), dir),
		"a.c":     "int value(void) { return VALUE; }\n\nint twice(void) { return 2 * value(); }\n",
	})
	h := newHostRunIn(t, dir, nil, lsp.Options{})
	e := h.env()
	for _, args := range []map[string]any{
		{"action": "hover", "file": "a.c", "line": 1, "symbol": "VALUE"},
		{"action": "references", "file": "a.c", "line": 1, "symbol": "value"},
		{"action": "symbols", "query": "twice"},
		{"action": "diagnostics", "file": "a.c"},
	} {
		r := e.Call(t, "lsp", args)
		if r.IsError {
			t.Fatalf("lsp %v: %s", args, r.Text)
		}
		t.Logf("lsp %v:\n%s", args, r.Text)
		if args["action"] == "hover" && !strings.Contains(r.Text, "7") {
			t.Errorf("hover of VALUE does not show the -DVALUE=7 of compile_commands.json: %s", r.Text)
		}
	}
	// Give a lazy connection or a late load its chance.
	time.Sleep(2 * time.Second)
	noMarks(t, marks)
	if n := dials.Load(); n > 0 {
		t.Errorf("clangd connected %d times to the remote index the workspace's .clangd names", n)
	}
	if st := status(t, e, "a.c")["clangd"]; st.State != "running" {
		t.Errorf("clangd: %+v", st)
	}
}
