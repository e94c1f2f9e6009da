package controller

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools"
)

func TestClaims(t *testing.T) {
	var c claims
	k := claimKey{tenant: "t1", conversation: "conv", kind: "debug"}
	release, err := c.take(k, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.take(k, "run-1"); err != nil {
		t.Errorf("the holder claiming again: %v", err)
	}
	_, err = c.take(k, "run-2")
	if !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "run-1") {
		t.Errorf("second run: %v, want ErrClaimed naming run-1", err)
	}
	for _, other := range []claimKey{
		{tenant: "t2", conversation: "conv", kind: "debug"},
		{tenant: "t1", conversation: "other", kind: "debug"},
		{tenant: "t1", conversation: "conv", kind: "kernel"},
	} {
		r, err := c.take(other, "run-2")
		if err != nil {
			t.Errorf("%+v: %v", other, err)
			continue
		}
		r()
	}
	release()
	release() // idempotent
	r2, err := c.take(k, "run-2")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	release() // run-1's stale release must not drop run-2's hold
	if _, err := c.take(k, "run-3"); !errors.Is(err, ErrClaimed) {
		t.Errorf("a stale release dropped run-2's hold: %v", err)
	}
	c.releaseRun("run-2")
	if _, err := c.take(k, "run-3"); err != nil {
		t.Errorf("after the holder's run closed: %v", err)
	}
	r2()
}

// TestDebugOneSessionPerConversation: two runs of one conversation on the
// host share its one debug session (DBG-3). The second run's launch is
// refused, naming the first run; once the first terminates, the second
// launches; once the second run closes, the first launches again.
func TestDebugOneSessionPerConversation(t *testing.T) {
	const python = "/usr/bin/python3" // Debian's, which has python3-debugpy
	if err := exec.Command(python, "-c", "import debugpy").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s cannot import debugpy (%v); CI must install python3-debugpy", python, err)
		}
		t.Skipf("%s cannot import debugpy (%v); install python3-debugpy", python, err)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{"requirements.txt": "", "main.py": "x = 1\nprint(x)\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, ".venv/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(python, filepath.Join(dir, ".venv/bin/python")); err != nil {
		t.Fatal(err)
	}
	rg := newRig(t, func(c *Config) { realHost(c); c.Tools = []Binder{DebugTools} })
	open := func(conv string) *Run {
		t.Helper()
		r, err := rg.c.Open(t.Context(), RunSpec{Sandbox: HostScheme, Workspace: dir, ConversationID: conv})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	call := func(r *Run, args string, isError bool, wants ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		res, err := r.Call(ctx, tools.SurfaceDefault, "debug", json.RawMessage(args))
		if err != nil {
			t.Fatalf("run %s: debug %s: %v", r.Info().ID, args, err)
		}
		text := res.AllText()
		if res.IsError != isError {
			t.Fatalf("run %s: debug %s: isError %v, want %v:\n%s", r.Info().ID, args, res.IsError, isError, text)
		}
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Fatalf("run %s: debug %s lacks %q:\n%s", r.Info().ID, args, w, text)
			}
		}
	}
	const launch = `{"op":"launch","program":"main.py","stop_on_entry":true}`
	const terminate = `{"op":"terminate"}`
	first, second := open("conv-1"), open("conv-1")
	call(first, launch, false, "stopped at main.py:1")
	call(second, launch, true, "only one debug session per conversation", "in run "+first.Info().ID, "debug terminate")
	call(second, `{"op":"attach","port":5678}`, true, "in run "+first.Info().ID)
	other := open("conv-2") // another conversation is not held off
	call(other, launch, false, "stopped at main.py:1")
	call(other, terminate, false, "terminated")

	call(first, terminate, false, "terminated")
	call(second, launch, false, "stopped at main.py:1")
	call(first, launch, true, "in run "+second.Info().ID)
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	call(first, launch, false, "stopped at main.py:1")
	call(first, terminate, false, "terminated")
}
