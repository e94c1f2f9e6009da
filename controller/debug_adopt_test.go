package controller

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
)

// debugController is a controller on the real host with the debug tool
// and a store in dir.
func debugController(t *testing.T, dir string) *Controller {
	t.Helper()
	st, _, err := runstore.Open(dir, runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Providers: []sandbox.Provider{&host.Provider{}}, Tools: []Binder{DebugTools},
		Registerer: prometheus.NewRegistry(), Store: st, NoQuestions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		st.Close()
	})
	return c
}

// debugCall calls the debug tool of r and wants a result (isError as
// given) holding every one of wants; it returns the result's text.
func debugCall(t *testing.T, r *Run, args string, isError bool, wants ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	res, err := r.Call(ctx, tools.SurfaceDefault, "debug", json.RawMessage(args))
	if err != nil {
		t.Fatalf("debug %s: %v", args, err)
	}
	text := res.AllText()
	if res.IsError != isError {
		t.Fatalf("debug %s: isError %v, want %v:\n%s", args, res.IsError, isError, text)
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Fatalf("debug %s lacks %q:\n%s", args, w, text)
		}
	}
	return text
}

// TestDebugSessionLostAcrossRestart: a delve session cannot outlive berth
// (dlv dap serves one connection), and a run that debugged only Go never
// started a resident supervisor. After berth restarts — shut down
// (Detach) or killed (its last stored state, nothing detached) — the
// adopted run's next debug call says the session was lost when berth
// restarted and to launch again, once; the breakpoints are kept.
func TestDebugSessionLostAcrossRestart(t *testing.T) {
	if _, err := exec.LookPath("dlv"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no dlv on PATH (%v)", err)
		}
		t.Skipf("no dlv on PATH (%v): install dlv v1.27.2", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH: dlv's debug mode builds the program")
	}
	for _, how := range []string{"detached", "killed"} {
		t.Run(how, func(t *testing.T) {
			ws := t.TempDir()
			for name, content := range map[string]string{
				"go.mod":  "module example.com/hello\n\ngo 1.22\n",
				"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tx := 2\n\tfmt.Println(x)\n}\n",
			} {
				if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			c1 := debugController(t, dir)
			r, err := c1.Open(t.Context(), RunSpec{Sandbox: HostScheme, Workspace: ws, ConversationID: "conv-1"})
			if err != nil {
				t.Fatal(err)
			}
			debugCall(t, r, `{"op":"breakpoints","file":"main.go","lines":[7]}`, false)
			debugCall(t, r, `{"op":"launch","program":"."}`, false, "stopped at main.go:7")
			switch how {
			case "detached":
				if err := c1.Detach(); err != nil {
					t.Fatal(err)
				}
				c1.cfg.Store.Close()
			case "killed":
				// A killed berth leaves the state stored before the last
				// call answered; its processes end with it (here: when
				// the test ends c1).
				c1.cfg.Store.Close()
			}

			c2 := debugController(t, dir)
			rep, err := c2.Adopt(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Adopted) != 1 || rep.Adopted[0] != r.ID() {
				t.Fatalf("adopt report %+v; want run %s adopted", rep, r.ID())
			}
			r2, err := c2.Lookup("", r.ID())
			if err != nil {
				t.Fatal(err)
			}
			debugCall(t, r2, `{"op":"stack"}`, true, "berth restarted, and debug session 1 (delve, launched .) ended with it",
				"single client connection", "launch again", "no debug session")
			// Said once; the breakpoints are kept.
			text := debugCall(t, r2, `{"op":"status"}`, false, "no debug session", "main.go:\n  line 7: pending")
			if strings.Contains(text, "berth restarted") {
				t.Errorf("the note is said twice:\n%s", text)
			}
			debugCall(t, r2, `{"op":"launch","program":"."}`, false, "session 2", "stopped at main.go:7")
			debugCall(t, r2, `{"op":"terminate"}`, false, "terminated session 2")
		})
	}
}
