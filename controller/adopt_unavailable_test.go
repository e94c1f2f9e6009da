package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
)

// Adoption tells transient from gone (issue 33, finding 1): a sandbox
// that is only unavailable while berth restarts — the container paused,
// its engine not answering — keeps its run.

// faultyProvider is residenceProvider with faults a test turns on and
// off while adoption runs in the background: each, when set, is the
// error of Open, of Locate, or of reattaching a resident supervisor.
type faultyProvider struct {
	residenceProvider
	open, locate, resident atomic.Pointer[error]
}

func (p *faultyProvider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	if err := p.open.Load(); err != nil {
		return nil, *err
	}
	sb, err := p.residenceProvider.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	return faultySandbox{sb.(residenceSandbox), p}, nil
}

func (p *faultyProvider) Locate(ctx context.Context, o sandbox.Owner) (string, error) {
	if err := p.locate.Load(); err != nil {
		return "", *err
	}
	return p.residenceProvider.Locate(ctx, o)
}

type faultySandbox struct {
	residenceSandbox
	p *faultyProvider
}

func (s faultySandbox) Resident(ctx context.Context, spec sandbox.ResidentSpec) (sandbox.Resident, error) {
	if err := s.p.resident.Load(); err != nil && spec.Adopt {
		return nil, *err
	}
	return s.residenceSandbox.Resident(ctx, spec)
}

func TestAdoptKeepsUnavailableSandbox(t *testing.T) {
	// What the backends say: docker's stateError for a paused container
	// and engineError for an unreachable engine, kube's explain.
	paused := fmt.Errorf("fake: container ctr1 is paused; exec would block until it is unpaused (docker unpause): %w: %w", sandbox.ErrUnavailable, sandbox.ErrGone)
	engine := fmt.Errorf("fake: cannot reach the Docker engine: %w: %w", sandbox.ErrUnavailable, sandbox.ErrGone)
	// A resident whose dial the engine could not carry: unavailable,
	// whatever else the error says.
	dial := fmt.Errorf("fake: dial the resident: %w: %w (%w)", sandbox.ErrUnavailable, sandbox.ErrGone, sandbox.ErrNotFound)
	for _, tc := range []struct {
		name  string
		fault func(p *faultyProvider) *atomic.Pointer[error]
		err   error
	}{
		{"paused at open", func(p *faultyProvider) *atomic.Pointer[error] { return &p.open }, paused},
		{"engine unreachable at open", func(p *faultyProvider) *atomic.Pointer[error] { return &p.open }, engine},
		{"engine unreachable at the label check", func(p *faultyProvider) *atomic.Pointer[error] { return &p.locate }, engine},
		{"paused at the resident", func(p *faultyProvider) *atomic.Pointer[error] { return &p.resident }, dial},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			prov := &faultyProvider{residenceProvider: residenceProvider{&fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}, &residents{}}}
			c1 := policyController(t, dir, Config{}, prov)
			r, err := c1.Open(ctx, RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			restart(t, c1)

			fault := tc.fault(prov)
			fault.Store(&tc.err)
			c2 := policyController(t, dir, Config{}, prov)
			rep, err := c2.Adopt(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Adopted) != 0 || rep.Gone[r.ID()] != "" || rep.Refused[r.ID()] != "" || rep.Unavailable[r.ID()] == "" {
				t.Fatalf("report %+v; want the run unavailable, neither gone nor refused", rep)
			}
			if _, err := c2.cfg.Store.Get(ctx, r.ID()); err != nil {
				t.Fatalf("the run is not in the store after an adoption that found its sandbox unavailable: %v", err)
			}
			if prov.res.closed.Load() != 0 {
				t.Fatalf("the run's resident supervisor was ended %d times", prov.res.closed.Load())
			}
			_, err = c2.Lookup("acme", r.ID())
			if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "kept") || !strings.Contains(err.Error(), "tries again") {
				t.Fatalf("the run answers %v; want sandbox.ErrUnavailable saying it is kept and tried again", err)
			}
			if _, err := c2.Lookup("other", r.ID()); !errors.Is(err, ErrUnknownRun) {
				t.Fatalf("another tenant learns of the run: %v", err)
			}

			// The container runs again: the run is adopted in the
			// background, with its resident, within the retry's backoff.
			fault.Store(nil)
			deadline := time.Now().Add(time.Minute)
			for {
				if _, err = c2.Lookup("acme", r.ID()); err == nil {
					break
				}
				if !errors.Is(err, sandbox.ErrUnavailable) && !errors.Is(err, ErrAdopting) {
					t.Fatalf("while it is tried again, the run answers %v; want unavailable or adopting", err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the run was not adopted a minute after its sandbox came back: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if c2.Adopting() != 0 {
				t.Errorf("%d runs are still being adopted", c2.Adopting())
			}
			if _, err := c2.cfg.Store.Get(ctx, r.ID()); err != nil {
				t.Errorf("the adopted run is not in the store: %v", err)
			}
		})
	}
}

// TestAdoptGivesUpOnShutdown: a berth that stops while a run's sandbox is
// unavailable ends its tries, leaves the run in the store, untouched, for
// the next berth, and says so to a call meanwhile.
func TestAdoptGivesUpOnShutdown(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	prov := &faultyProvider{residenceProvider: residenceProvider{&fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}, &residents{}}}
	c1 := policyController(t, dir, Config{}, prov)
	r, err := c1.Open(ctx, RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	restart(t, c1)
	paused := fmt.Errorf("fake: paused: %w: %w", sandbox.ErrUnavailable, sandbox.ErrGone)
	prov.open.Store(&paused)
	c2 := policyController(t, dir, Config{}, prov)
	if rep, err := c2.Adopt(ctx); err != nil || rep.Unavailable[r.ID()] == "" {
		t.Fatalf("report %+v, %v; want the run unavailable", rep, err)
	}
	restart(t, c2) // returns once the tries ended (goleak checks at exit)
	if _, err := c2.Lookup("acme", r.ID()); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "next berth") {
		t.Errorf("during shutdown the run answers %v; want ErrClosed saying the next berth serves it", err)
	}
	st, _, err := runstore.Open(dir, runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Get(ctx, r.ID()); err != nil {
		t.Fatalf("the run is not in the store after berth stopped: %v", err)
	}
}
