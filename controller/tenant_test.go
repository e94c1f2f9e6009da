package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"berth.dev/berth/tools"
)

func TestLookupIsScopedToTenant(t *testing.T) {
	rg := newRig(t, nil)
	ctx := context.Background()
	open := func(tenant string) *Run {
		t.Helper()
		r, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: t.TempDir(), Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := open("acme"), open("globex")
	if a.Info().Tenant != "acme" {
		t.Fatalf("RunInfo.Tenant = %q, want acme", a.Info().Tenant)
	}
	const missing = "00000000000000000000000000000000"
	tests := []struct {
		name, tenant, id string
		want             *Run
	}{
		{"own run", "acme", a.ID(), a},
		{"another tenant's run", "acme", b.ID(), nil},
		{"a missing run", "acme", missing, nil},
		{"the other tenant's own run", "globex", b.ID(), b},
		{"the default tenant sees no named tenant's run", "", a.ID(), nil},
		{"operator sees acme", AllTenants, a.ID(), a},
		{"operator sees globex", AllTenants, b.ID(), b},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := rg.c.Lookup(tt.tenant, tt.id)
			if tt.want != nil {
				if err != nil || r != tt.want {
					t.Fatalf("Lookup(%q, %s) = %v, %v; want the run", tt.tenant, tt.id, r, err)
				}
				return
			}
			if !errors.Is(err, ErrUnknownRun) || r != nil {
				t.Fatalf("Lookup(%q, %s) = %v, %v; want ErrUnknownRun", tt.tenant, tt.id, r, err)
			}
		})
	}

	// No oracle: a foreign run and a missing one read the same, but for the id.
	_, foreign := rg.c.Lookup("acme", b.ID())
	_, none := rg.c.Lookup("acme", missing)
	if f, n := strings.ReplaceAll(foreign.Error(), b.ID(), "ID"), strings.ReplaceAll(none.Error(), missing, "ID"); f != n {
		t.Errorf("a foreign run and a missing run answer differently:\n%s\n%s", f, n)
	}

	// Get is the operator's view, for existing callers.
	if r, err := rg.c.Get(b.ID()); err != nil || r != b {
		t.Errorf("Get(%s) = %v, %v", b.ID(), r, err)
	}

	lists := map[string][]string{"acme": {a.ID()}, "globex": {b.ID()}, "nobody": nil, AllTenants: {a.ID(), b.ID()}}
	for tenant, want := range lists {
		var got []string
		for _, info := range rg.c.ListFor(tenant) {
			got = append(got, info.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ListFor(%q) = %v, want %v", tenant, got, want)
		}
	}
	if n := len(rg.c.List()); n != 2 {
		t.Errorf("List() has %d runs, want 2", n)
	}
	js, _ := json.Marshal(a.Info())
	if !strings.Contains(string(js), `"tenant":"acme"`) {
		t.Errorf("RunInfo JSON %s has no tenant", js)
	}
	if js, _ := json.Marshal(RunSpec{Tenant: "acme"}); strings.Contains(string(js), "acme") {
		t.Errorf("RunSpec JSON %s carries the tenant: it must come from the credential only", js)
	}
}

func TestRunCapUnderConcurrency(t *testing.T) {
	const max, tries = 5, 40
	rg := newRig(t, func(c *Config) { c.MaxRunsPerTenant = max })
	ctx := context.Background()
	ws := t.TempDir()

	var ok, refused atomic.Int32
	var mu sync.Mutex
	var opened []*Run
	var wg sync.WaitGroup
	for range tries {
		wg.Go(func() {
			r, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: ws, Tenant: "acme"})
			switch {
			case err == nil:
				ok.Add(1)
				mu.Lock()
				opened = append(opened, r)
				mu.Unlock()
			case errors.Is(err, ErrTooMany):
				refused.Add(1)
				for _, s := range []string{"5 runs open", "DELETE /v1/runs/{id}", "expire"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal %q does not say %q", err, s)
					}
				}
			default:
				t.Errorf("Open: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != max || refused.Load() != tries-max {
		t.Fatalf("%d opened, %d refused; want %d and %d", ok.Load(), refused.Load(), max, tries-max)
	}
	// Another tenant has its own cap.
	if _, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: ws, Tenant: "globex"}); err != nil {
		t.Fatalf("another tenant's run: %v", err)
	}
	// Failed opens do not leak their reservation: with one slot free,
	// many failures, then the slot is still there.
	if err := opened[0].Close(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		_, err := rg.c.Open(ctx, RunSpec{ConversationID: "c-7", Sandbox: "docker://feed", Workspace: "/missing", Tenant: "acme"})
		if err == nil || errors.Is(err, ErrTooMany) {
			t.Fatalf("Open of a missing workspace: %v, want its own failure", err)
		}
	}
	if _, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: ws, Tenant: "acme"}); err != nil {
		t.Fatalf("Open into the freed slot after failed opens: %v", err)
	}
	if _, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: ws, Tenant: "acme"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("Open beyond the cap again: %v, want ErrTooMany", err)
	}
}

func TestUnlimitedRuns(t *testing.T) {
	rg := newRig(t, func(c *Config) { c.MaxRunsPerTenant = -1 })
	for i := range DefaultMaxRunsPerTenant + 1 {
		if _, err := rg.c.Open(context.Background(), RunSpec{Sandbox: "host", Workspace: "/tmp"}); err != nil {
			t.Fatalf("run %d with no cap: %v", i, err)
		}
	}
}

// holdTools registers "hold" (read): it reports on entered, then waits
// for release or its context.
func holdTools(entered chan<- struct{}, release <-chan struct{}) Binder {
	return func(ctx context.Context, r *tools.Registry, env *Env) error {
		tools.Register(r, tools.Tool{Name: "hold", Description: "hold", Level: tools.LevelRead},
			func(ctx context.Context, in struct{}) (*tools.Result, error) {
				entered <- struct{}{}
				select {
				case <-release:
					return tools.Text("released"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})
		return nil
	}
}

func TestCallCapUnderConcurrency(t *testing.T) {
	const max, tries = 8, 40
	entered, release := make(chan struct{}, tries), make(chan struct{})
	rg := newRig(t, func(c *Config) {
		c.MaxCallsPerTenant = max
		c.Tools = []Binder{testTools, holdTools(entered, release)}
	})
	ctx := context.Background()
	// The tenant's calls spread over two runs share one cap.
	var runs []*Run
	for range 2 {
		r, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: "/tmp", Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	other, err := rg.c.Open(ctx, RunSpec{Sandbox: "host", Workspace: "/tmp", Tenant: "globex"})
	if err != nil {
		t.Fatal(err)
	}

	refused := make(chan error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			res, err := runs[i%2].Call(ctx, "", "hold", json.RawMessage(`{}`))
			if errors.Is(err, ErrTooMany) {
				refused <- err
				return
			}
			if err != nil || res.AllText() != "released" {
				t.Errorf("admitted call: %v %v", res, err)
			}
		})
	}
	for range tries {
		select {
		case <-entered:
		case err := <-refused:
			if !strings.Contains(err.Error(), "wait for a call to return") || !strings.Contains(err.Error(), "8 tool calls in flight") {
				t.Errorf("refusal %q does not say what to do", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("calls neither entered nor were refused")
		}
	}
	if n := len(entered) + len(refused); n != 0 {
		t.Fatalf("%d more calls than tried", n)
	}
	// At the cap: only this tenant is refused.
	if _, err := runs[0].Call(ctx, "", "look", json.RawMessage(`{"path":"x"}`)); !errors.Is(err, ErrTooMany) {
		t.Errorf("a call at the cap: %v, want ErrTooMany", err)
	}
	if _, err := other.Call(ctx, "", "look", json.RawMessage(`{"path":"x"}`)); err != nil {
		t.Errorf("another tenant's call: %v", err)
	}
	close(release)
	wg.Wait()
	if got := testutil.ToFloat64(rg.c.m.calls.WithLabelValues("hold", OutcomeTooMany)); got != tries-max {
		t.Errorf("berth_tool_calls_total{tool=hold,outcome=too_many} = %v, want %d", got, tries-max)
	}
	// Every slot came back.
	for i := range max + 1 {
		if _, err := runs[i%2].Call(ctx, "", "look", json.RawMessage(`{"path":"x"}`)); err != nil {
			t.Fatalf("call %d after the held calls returned: %v", i, err)
		}
	}
	rg.c.mu.Lock()
	if u := rg.c.tenants["acme"]; u == nil || u.calls != 0 || u.runs != 2 {
		t.Errorf("acme's counts after the calls: %+v, want 0 calls and 2 runs", u)
	}
	rg.c.mu.Unlock()
}
