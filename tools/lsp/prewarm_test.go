package lsp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

func TestLanguageExt(t *testing.T) {
	servers := lsp.DefaultServers()
	for _, tc := range []struct {
		lang, want string
		ok         bool
	}{
		{"go", ".go", true},
		{"Go", ".go", true},
		{"python", ".py", true},
		{"javascript", ".js", true},
		{"typescript", ".ts", true},
		{"rs", ".rs", true},
		{"cobol", "", false},
		{"", "", false},
	} {
		got, ok := lsp.LanguageExt(servers, tc.lang)
		if got != tc.want || ok != tc.ok {
			t.Errorf("LanguageExt(%q) = %q, %v; want %q, %v", tc.lang, got, ok, tc.want, tc.ok)
		}
	}
	if langs := strings.Join(lsp.Languages(servers), ","); !strings.Contains(langs, "go,") || !strings.Contains(langs, "python") {
		t.Errorf("Languages: %s", langs)
	}
}

// serverState is the state of the run's resource named name, "" when
// there is none.
func serverState(sup *lsp.Supervisor, name string) string {
	for _, r := range sup.Resources() {
		if r.Name == name {
			return r.State
		}
	}
	return ""
}

// TestPrewarmOnHost: Prewarm starts gopls for the workspace root once
// approved, before any call, and the first call finds it; a refused
// prewarm starts nothing and its reason is the next result's note, given
// once; Close ends a prewarm still waiting for its approval.
func TestPrewarmOnHost(t *testing.T) {
	need(t, "gopls")
	const gopls = "gopls at the workspace root"
	t.Run("approved", func(t *testing.T) {
		h := newHostRun(t, lsp.Options{})
		e := h.env()
		e.PutAll(t, lsptest.GoProject)
		asked := make(chan string, 4)
		h.sup.Prewarm([]string{"go"}, func(_ context.Context, lang string) error {
			asked <- lang
			return nil
		})
		deadline := time.Now().Add(2 * time.Minute)
		for serverState(h.sup, gopls) != "running" {
			if time.Now().After(deadline) {
				t.Fatalf("the prewarmed gopls is %q after 2 minutes: %+v", serverState(h.sup, gopls), h.sup.Resources())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(asked) != 1 || <-asked != "go" {
			t.Errorf("approve was asked %d times, want once for go", len(asked)+1)
		}
		r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"})
		if r.IsError || !strings.Contains(r.Text, "func greet.Hello") || strings.Contains(r.Text, "prewarm") {
			t.Fatalf("the first call after the prewarm: %s", r.Text)
		}
	})
	t.Run("refused", func(t *testing.T) {
		h := newHostRun(t, lsp.Options{})
		e := h.env()
		e.PutAll(t, lsptest.GoProject)
		done := make(chan struct{})
		h.sup.Prewarm([]string{"go"}, func(context.Context, string) error {
			defer close(done)
			return context.DeadlineExceeded
		})
		<-done
		time.Sleep(100 * time.Millisecond) // the note is written after approve returns
		if st := serverState(h.sup, gopls); st != "" {
			t.Fatalf("a refused prewarm started gopls: %q", st)
		}
		r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"})
		if !strings.Contains(r.Text, "the go language server asked for when the run opened (prewarm) was not started: context deadline exceeded") {
			t.Fatalf("the first call does not say the prewarm failed:\n%s", r.Text)
		}
		if r = e.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"}); strings.Contains(r.Text, "prewarm") {
			t.Fatalf("the note is given twice:\n%s", r.Text)
		}
	})
	t.Run("close", func(t *testing.T) {
		h := newHostRun(t, lsp.Options{})
		waiting := make(chan struct{})
		h.sup.Prewarm([]string{"go"}, func(ctx context.Context, _ string) error {
			close(waiting)
			<-ctx.Done() // an approval nobody gives
			return ctx.Err()
		})
		<-waiting
		closed := make(chan error, 1)
		go func() { closed <- h.sup.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not end a prewarm waiting for its approval")
		}
		if rs := h.sup.Resources(); len(rs) != 0 {
			t.Errorf("resources after close: %+v", rs)
		}
	})
}
