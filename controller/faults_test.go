package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// TestHungEngine: an engine that does not answer a state check (a hung
// dockerd, a stalled connection) is unavailable, not a reason to hang:
// every look the run takes at its sandbox — the watch of a call in
// flight, the check after a failed call, the recheck of an unavailable
// sandbox — ends within sandbox.CheckTimeout with the retryable error.
// The clock is synctest's, so the bounds are exact.
func TestHungEngine(t *testing.T) {
	tests := []struct {
		name string
		// prepare runs before the engine hangs.
		prepare func(t *testing.T, r *Run, sb *fakeSandbox)
		tool    string
		args    string
		want    time.Duration // when the call answers
	}{
		{name: "call in flight", tool: "block", want: UnavailableCheckAfter + sandbox.CheckTimeout},
		{name: "check after a failed call", tool: "fail", want: sandbox.CheckTimeout},
		{name: "recheck of an unavailable sandbox", tool: "look", args: `{"path":"a"}`, want: sandbox.CheckTimeout,
			prepare: func(t *testing.T, r *Run, sb *fakeSandbox) {
				sb.paused.Store(true)
				if _, err := r.Call(context.Background(), "", "fail", nil); !errors.Is(err, sandbox.ErrUnavailable) {
					t.Fatalf("paused: %v", err)
				}
				sb.paused.Store(false)
				r.mu.Lock()
				r.retryAt = time.Now()
				r.mu.Unlock()
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRig(t, nil)
				r, err := rg.c.Open(context.Background(), RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
				if err != nil {
					t.Fatal(err)
				}
				sb := rg.docker.opened[0]
				if tt.prepare != nil {
					tt.prepare(t, r, sb)
				}
				sb.hung.Store(true)
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				var args json.RawMessage
				if tt.args != "" {
					args = json.RawMessage(tt.args)
				}
				start := time.Now()
				_, err = r.Call(ctx, "", tt.tool, args)
				if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "kept") {
					t.Fatalf("%s on a hung engine: err = %v, want ErrUnavailable saying the run is kept", tt.tool, err)
				}
				if got := time.Since(start); got != tt.want {
					t.Errorf("%s answered after %v, want %v", tt.tool, got, tt.want)
				}
				// Within the wait the next call fails fast, without a look.
				checks := sb.checks.Load()
				start = time.Now()
				if _, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); !errors.Is(err, sandbox.ErrUnavailable) || time.Since(start) != 0 {
					t.Errorf("the next call: err = %v after %v, want ErrUnavailable at once", err, time.Since(start))
				}
				if sb.checks.Load() != checks {
					t.Errorf("the next call within the wait looked at the sandbox again")
				}
				// The engine answers again: after the wait the run is used
				// as before.
				sb.hung.Store(false)
				time.Sleep(UnavailableRetryMax)
				if res, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); err != nil || !strings.Contains(res.AllText(), "looked at a") {
					t.Fatalf("look once the engine answers: %v %v", res, err)
				}
			})
		})
	}
}

// TestOutageOverByTheCheck: a call that met an outage (its exec stream
// broke) which is over by the time the run looks at the sandbox returns
// its own error, and the run is not marked unavailable: the next call
// runs at once.
func TestOutageOverByTheCheck(t *testing.T) {
	drop := func(ctx context.Context, r *tools.Registry, env *Env) error {
		tools.Register(r, tools.Tool{Name: "drop", Description: "drop", Level: tools.LevelRead},
			func(ctx context.Context, in struct{}) (*tools.Result, error) {
				// What a backend returns when the engine connection
				// carrying the call's stream broke.
				return nil, fmt.Errorf("fake: the exec stream broke: %w: %w", sandbox.ErrUnavailable, sandbox.ErrGone)
			})
		return nil
	}
	rg := newRig(t, func(c *Config) { c.Tools = append(c.Tools, drop) })
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb := rg.docker.opened[0]
	res, err := r.Call(ctx, "", "drop", nil)
	if err != nil || !res.IsError || !strings.Contains(res.AllText(), "exec stream broke") {
		t.Fatalf("drop: %v %v, want the call's own error as a tool error, not the run's unavailable one", res, err)
	}
	if sb.checks.Load() != 1 {
		t.Errorf("the sandbox was checked %d times after the call, want 1", sb.checks.Load())
	}
	r.mu.Lock()
	unavailable := r.unavailable
	r.mu.Unlock()
	if unavailable != nil {
		t.Errorf("the run was marked unavailable: %v", unavailable)
	}
	if res, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); err != nil || !strings.Contains(res.AllText(), "looked at a") {
		t.Fatalf("the next call: %v %v, want it to run", res, err)
	}
	// A broken stream while the sandbox is still unavailable marks it.
	sb.paused.Store(true)
	if _, err := r.Call(ctx, "", "drop", nil); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "retry in") {
		t.Fatalf("drop while paused: err = %v, want the run's unavailable error", err)
	}
}

// TestClosersRunConcurrently: a run's resources close at once, so closing
// a run takes its slowest closer's grace, not the sum of them; the
// question port closes after them (a closer may still publish), and the
// sandbox last. The clock is synctest's, so the time is exact.
func TestClosersRunConcurrently(t *testing.T) {
	const grace = 2 * time.Second
	synctest.Test(t, func(t *testing.T) {
		var closed []string // in closing order, after each closer's grace
		var mu = make(chan struct{}, 1)
		slow := func(name string, d time.Duration) Binder {
			return func(ctx context.Context, r *tools.Registry, env *Env) error {
				env.OnClose(func() error {
					time.Sleep(d) // a kernel or server given its grace to exit
					if err := env.Questions.Publish("closing", name); err != nil {
						t.Errorf("closer %s could not publish: %v", name, err)
					}
					if env.Sandbox.(*fakeSandbox).closed.Load() != 0 {
						t.Errorf("sandbox closed before closer %s ended", name)
					}
					mu <- struct{}{}
					closed = append(closed, name)
					<-mu
					return nil
				})
				return nil
			}
		}
		rg := newRig(t, func(c *Config) {
			c.Tools = []Binder{testTools, slow("kernel", grace), slow("server", grace), slow("adapter", grace/2)}
		})
		r, err := rg.c.Open(context.Background(), RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != grace {
			t.Errorf("closing a run with closers of %v, %v and %v took %v, want %v (the slowest)", grace, grace, grace/2, got, grace)
		}
		if len(closed) != 3 || closed[0] != "adapter" {
			t.Errorf("closers ended in order %v, want all three, the adapter first", closed)
		}
		if n := rg.docker.opened[0].closed.Load(); n != 1 {
			t.Errorf("sandbox closed %d times, want 1", n)
		}
		if err := r.questions.Publish("after", nil); err == nil {
			t.Error("the question port is still open after the run closed")
		}
	})
}

// TestCallCutEvenWhenToolLingers: a call the sandbox's unavailability cut
// short answers at once, even when the tool itself takes longer to end
// (its stream's teardown asks the engine that does not answer); the tool
// ends in the background, and the run's Close still waits for it.
func TestCallCutEvenWhenToolLingers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var toolEnded bool
		linger := func(ctx context.Context, r *tools.Registry, env *Env) error {
			tools.Register(r, tools.Tool{Name: "linger", Description: "linger", Level: tools.LevelRead},
				func(ctx context.Context, in struct{}) (*tools.Result, error) {
					<-ctx.Done()
					<-release // a teardown that waits on the engine
					toolEnded = true
					return nil, ctx.Err()
				})
			return nil
		}
		rg := newRig(t, func(c *Config) { c.Tools = append(c.Tools, linger) })
		r, err := rg.c.Open(context.Background(), RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		rg.docker.opened[0].paused.Store(true)
		start := time.Now()
		if _, err := r.Call(context.Background(), "", "linger", nil); !errors.Is(err, sandbox.ErrUnavailable) {
			t.Fatalf("linger while paused: err = %v, want ErrUnavailable", err)
		}
		if got := time.Since(start); got != UnavailableCheckAfter {
			t.Errorf("the call answered after %v, want %v (the watch's first look)", got, UnavailableCheckAfter)
		}
		r.mu.Lock()
		inflight := r.inflight
		r.mu.Unlock()
		if inflight != 1 {
			t.Errorf("%d calls in flight while the tool lingers, want 1", inflight)
		}
		closed := make(chan error, 1)
		go func() { closed <- r.Close() }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while the cut call's tool still ran (within the close grace)")
		default:
		}
		close(release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if !toolEnded {
			t.Error("the run closed its sandbox before the lingering tool ended (within the close grace)")
		}
	})
}
