package lsp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/files"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

// need skips (or under CI fails) when a server binary is not on PATH.
func need(t *testing.T, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not on PATH; tests/run installs it", bin)
		}
		t.Skipf("%s is not on PATH", bin)
	}
}

type hostRun struct {
	dir string
	sb  *host.Sandbox
	reg *tools.Registry
	sup *lsp.Supervisor
}

func newHostRun(t *testing.T, opts lsp.Options) *hostRun {
	t.Helper()
	dir := t.TempDir()
	sb := host.New(host.Options{})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	files.Register(reg, ws)
	opts.Host = true
	sup := lsp.Register(reg, sb, ws, runCtx, opts)
	t.Cleanup(func() {
		if err := sup.Close(); err != nil {
			t.Errorf("supervisor close: %v", err)
		}
		cancel()
		sb.Close()
	})
	return &hostRun{dir: dir, sb: sb, reg: reg, sup: sup}
}

func (h *hostRun) env() lsptest.Env {
	return lsptest.Env{
		Call: func(t *testing.T, tool string, args map[string]any) lsptest.Result {
			t.Helper()
			raw, _ := json.Marshal(args)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := h.reg.Call(ctx, tools.SurfaceDefault, tool, raw)
			if err != nil {
				t.Fatalf("%s %s: call error: %v", tool, raw, err)
			}
			sc, _ := json.Marshal(res.StructuredContent)
			return lsptest.Result{Text: res.AllText(), IsError: res.IsError, Structured: sc}
		},
		Put: func(t *testing.T, name, content string) {
			t.Helper()
			p := filepath.Join(h.dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		Sh: func(t *testing.T, script string) string {
			t.Helper()
			var out bytes.Buffer
			p, err := h.sb.Start(t.Context(), &sandbox.Cmd{Args: []string{"/bin/sh", "-c", script}, Dir: h.dir, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Wait(); err != nil {
				t.Fatal(err)
			}
			return out.String()
		},
	}
}

func TestGoplsOnHost(t *testing.T) {
	need(t, "gopls")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.PutAll(t, lsptest.GoProject)
	t.Run("actions", func(t *testing.T) { lsptest.CheckGo(t, e) })
	t.Run("write", func(t *testing.T) { lsptest.CheckGoWriteScenario(t, e) })
	t.Run("rename", func(t *testing.T) { lsptest.CheckGoRename(t, e) })
	t.Run("lifecycle", func(t *testing.T) { lsptest.CheckLifecycle(t, e, "gopls", "main.go", 11, "Hello") })
}
