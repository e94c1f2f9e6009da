package controller

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
)

// sleeperTools registers "sleeper" (read): it starts `sleep 60` in the
// run's sandbox, bound to the run's context, and answers its pid.
func sleeperTools(ctx context.Context, r *tools.Registry, env *Env) error {
	tools.Register(r, tools.Tool{Name: "sleeper", Description: "start sleep 60", Level: tools.LevelRead},
		func(ctx context.Context, in struct{}) (*tools.Result, error) {
			p, err := env.Sandbox.Start(env.Context, &sandbox.Cmd{Args: []string{"sleep", "60"}})
			if err != nil {
				return nil, err
			}
			// The run cancels env.Context before its closers run, so sleep
			// gets SIGTERM and this returns.
			env.OnClose(func() error { _, err := p.Wait(); return err })
			return tools.Text(strconv.Itoa(p.Pid())), nil
		})
	return nil
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	stat := string(b)
	// pid (comm) STATE ...
	i := strings.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// waitFor polls cond every few ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestIdleRunExpiresWithNothingLeft(t *testing.T) {
	const expiry = 60 * time.Millisecond
	rg := newRig(t, func(c *Config) {
		c.Providers = append(c.Providers[:1], &host.Provider{}) // the real host
		c.Tools = []Binder{sleeperTools, testTools}
		c.IdleExpiry = expiry
		c.NoQuestions = true
	})
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: t.TempDir(), Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Call(ctx, "", "sleeper", json.RawMessage(`{}`))
	if err != nil || res.IsError {
		t.Fatalf("sleeper: %v %v", res, err)
	}
	pid, err := strconv.Atoi(res.AllText())
	if err != nil || pid <= 0 || !alive(pid) {
		t.Fatalf("sleeper answered %q (%v): not a live process", res.AllText(), err)
	}

	waitFor(t, 5*time.Second, "the idle run is still open", func() bool {
		_, err := rg.c.Lookup("acme", r.ID())
		return errors.Is(err, ErrRunExpired)
	})
	waitFor(t, 5*time.Second, "the expired run's process still runs", func() bool { return !alive(pid) })

	_, err = rg.c.Lookup("acme", r.ID())
	for _, s := range []string{r.ID(), "expired after", "idle", "open a new run with POST /v1/runs"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Lookup of the expired run: %q does not say %q", err, s)
		}
	}
	if _, err := rg.c.Get(r.ID()); !errors.Is(err, ErrRunExpired) {
		t.Errorf("Get of the expired run: %v, want ErrRunExpired", err)
	}
	if _, err := rg.c.Lookup("globex", r.ID()); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("another tenant's Lookup of the expired run: %v, want ErrUnknownRun (no oracle)", err)
	}
	if _, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"x"}`)); !errors.Is(err, ErrRunExpired) {
		t.Errorf("a call on the expired run's handle: %v, want ErrRunExpired", err)
	}
	if n := len(rg.c.List()); n != 0 {
		t.Errorf("%d runs listed after expiry", n)
	}
	if got := testutil.ToFloat64(rg.c.m.runsExpired); got != 1 {
		t.Errorf("berth_runs_expired_total = %v, want 1", got)
	}
	rg.c.mu.Lock()
	if u := rg.c.tenants["acme"]; u != nil {
		t.Errorf("acme still holds %+v after its only run expired", *u)
	}
	rg.c.mu.Unlock()
}

func TestUseKeepsARunAlive(t *testing.T) {
	const expiry = 200 * time.Millisecond
	rg := newRig(t, func(c *Config) { c.IdleExpiry = expiry })
	ctx := context.Background()

	// A call in flight for longer than the expiry keeps its run.
	busy, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := busy.Call(cctx, "", "block", json.RawMessage(`{}`)); done <- err }()

	// A client on the event stream keeps its run.
	watched, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	sub := watched.Questions().Subscribe(0)

	// Calls more often than the expiry keep their run.
	used, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	// Until the unused run expires, and for as long again.
	const every = expiry / 10
	var expiredAt time.Time
	for deadline := time.Now().Add(5 * time.Second); expiredAt.IsZero() || time.Since(expiredAt) < expiry; {
		if time.Now().After(deadline) {
			t.Fatalf("the unused run did not expire within 5s (expiry %s)", expiry)
		}
		time.Sleep(every)
		if _, err := used.Call(ctx, "", "look", json.RawMessage(`{"path":"x"}`)); err != nil {
			t.Fatalf("a run used every %s: %v", every, err)
		}
		if _, err := rg.c.Get(idle.ID()); expiredAt.IsZero() && errors.Is(err, ErrRunExpired) {
			expiredAt = time.Now()
		}
	}
	for _, r := range []*Run{busy, watched, used} {
		if _, err := rg.c.Get(r.ID()); err != nil {
			t.Errorf("a run in use expired: %v", err)
		}
	}

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the blocked call: %v, want context.Canceled", err)
	}
	sub.Close()
	for _, r := range []*Run{busy, watched} {
		waitFor(t, 5*time.Second, "a run no longer in use does not expire", func() bool {
			_, err := rg.c.Get(r.ID())
			return errors.Is(err, ErrRunExpired)
		})
	}
}

func TestNoExpiry(t *testing.T) {
	rg := newRig(t, func(c *Config) { c.IdleExpiry = -1 })
	r, err := rg.c.Open(context.Background(), RunSpec{Sandbox: "host", Workspace: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if rg.c.stopJanitor != nil {
		t.Error("a janitor runs with IdleExpiry < 0")
	}
	if _, err := rg.c.Get(r.ID()); err != nil {
		t.Fatal(err)
	}
}

func TestExpiredIdsAreBounded(t *testing.T) {
	rg := newRig(t, nil)
	for i := range MaxExpiredRemembered + 10 {
		rg.c.rememberExpired(strconv.Itoa(i), "acme", time.Hour)
	}
	if n := len(rg.c.expired); n != MaxExpiredRemembered {
		t.Fatalf("%d expired ids remembered, want %d", n, MaxExpiredRemembered)
	}
	if _, err := rg.c.Lookup("acme", "0"); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("the oldest expired id: %v, want forgotten", err)
	}
	if _, err := rg.c.Lookup("acme", strconv.Itoa(MaxExpiredRemembered+9)); !errors.Is(err, ErrRunExpired) {
		t.Errorf("the newest expired id: %v, want ErrRunExpired", err)
	}
}

func TestJanitorInterval(t *testing.T) {
	for _, tt := range []struct{ expiry, want time.Duration }{
		{DefaultIdleExpiry, janitorMaxInterval},
		{40 * time.Millisecond, 10 * time.Millisecond},
		{time.Millisecond, janitorMinInterval},
	} {
		if got := janitorInterval(tt.expiry); got != tt.want {
			t.Errorf("janitorInterval(%s) = %s, want %s", tt.expiry, got, tt.want)
		}
	}
}
