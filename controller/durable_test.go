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

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// counter is a Persister a test tool changes: its state is a number.
type counter struct {
	n   atomic.Int64
	gen atomic.Uint64
}

func (c *counter) Generation() uint64        { return c.gen.Load() }
func (c *counter) Snapshot() ([]byte, error) { return fmt.Appendf(nil, "%d", c.n.Load()), nil }

// counterTools registers "bump" (adds one to the run's counter) and
// "value" (says it), with the counter persisted as "counter"; an adopted
// run starts from its stored value. adopted records what each run was
// handed back (runs are adopted concurrently: read it once Adopt returned).
func counterTools(adopted map[string]string) Binder {
	var mu sync.Mutex // guards adopted
	return func(ctx context.Context, r *tools.Registry, env *Env) error {
		c := &counter{}
		if b := env.Adopted("counter"); b != nil {
			mu.Lock()
			adopted[env.RunID] = string(b)
			mu.Unlock()
			var n int64
			fmt.Sscan(string(b), &n)
			c.n.Store(n)
		}
		env.Persist("counter", c)
		tools.Register(r, tools.Tool{Name: "bump", Description: "bump the counter", Level: tools.LevelRead},
			func(ctx context.Context, in struct{}) (*tools.Result, error) {
				c.n.Add(1)
				c.gen.Add(1)
				return tools.Text("bumped"), nil
			})
		tools.Register(r, tools.Tool{Name: "value", Description: "say the counter", Level: tools.LevelRead},
			func(ctx context.Context, in struct{}) (*tools.Result, error) {
				return tools.Textf("%d", c.n.Load()), nil
			})
		return nil
	}
}

// durableController is a controller over prov with a store in dir.
func durableController(t *testing.T, dir string, prov sandbox.Provider, adopted map[string]string) (*Controller, *runstore.Dir) {
	t.Helper()
	st, _, err := runstore.Open(dir, runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Providers: []sandbox.Provider{prov}, Tools: []Binder{counterTools(adopted)},
		Registerer: prometheus.NewRegistry(), Store: st, AllowUnlabelled: true, NoQuestions: true})
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

func callText(t *testing.T, r *Run, tool string) string {
	t.Helper()
	res, err := r.Call(context.Background(), tools.SurfaceDefault, tool, []byte(`{}`))
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res.Content[0].Text
}

func TestRunOutlivesController(t *testing.T) {
	dir := t.TempDir()
	prov := &fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}
	c1, st1 := durableController(t, dir, prov, map[string]string{})
	r, err := c1.Open(context.Background(), RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	callText(t, r, "bump")
	callText(t, r, "bump")
	// Stored before the call answered: no wait for the persister.
	rec, err := st1.Get(context.Background(), r.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(rec.State["counter"]); got != "2" || rec.Tenant != "acme" || rec.Sandbox != "docker://ctr1" {
		t.Fatalf("stored record: state %q tenant %q sandbox %q; want 2, acme, docker://ctr1", got, rec.Tenant, rec.Sandbox)
	}
	if err := c1.Detach(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Call(context.Background(), tools.SurfaceDefault, "value", []byte(`{}`)); !errors.Is(err, ErrRestarting) || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("a call on a detached run: %v; want ErrRestarting saying to retry", err)
	}
	if _, err := c1.Lookup("acme", r.ID()); !errors.Is(err, ErrRestarting) {
		t.Fatalf("the id of a detached run looked up on the berth that let it go: %v; want ErrRestarting, not unknown", err)
	}
	st1.Close()

	adopted := map[string]string{}
	c2, st2 := durableController(t, dir, prov, adopted)
	defer st2.Close()
	defer c2.Close()
	rep, err := c2.Adopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted) != 1 || rep.Adopted[0] != r.ID() {
		t.Fatalf("adopted %v (gone %v, failed %v); want [%s]", rep.Adopted, rep.Gone, rep.Failed, r.ID())
	}
	if adopted[r.ID()] != "2" {
		t.Fatalf("the binder was handed %q; want the stored state 2", adopted[r.ID()])
	}
	if _, err := c2.Lookup("other", r.ID()); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("another tenant looked the adopted run up: %v", err)
	}
	r2, err := c2.Lookup("acme", r.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := callText(t, r2, "value"); got != "2" {
		t.Fatalf("the adopted run's counter is %s; want 2", got)
	}
	if info := r2.Info(); info.Tenant != "acme" || info.ConversationID != "c-1" || !info.Opened.Equal(r.Info().Opened) {
		t.Fatalf("adopted run info %+v; want tenant acme, conversation c-1, opened %v", info, r.Info().Opened)
	}

	// Closing for good removes it from the store.
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st2.Get(context.Background(), r.ID()); !errors.Is(err, runstore.ErrNotFound) {
		t.Fatalf("a closed run is still in the store: %v", err)
	}
}

func TestAdoptGoneSandbox(t *testing.T) {
	dir := t.TempDir()
	prov := &fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}
	c1, st1 := durableController(t, dir, prov, map[string]string{})
	r, err := c1.Open(context.Background(), RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	c1.Detach()
	st1.Close()

	delete(prov.containers, "c-1") // the container was removed while berth was down
	c2, st2 := durableController(t, dir, prov, map[string]string{})
	defer st2.Close()
	defer c2.Close()
	rep, err := c2.Adopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rep.Gone[r.ID()]; !ok || len(rep.Adopted) != 0 {
		t.Fatalf("report %+v; want the run gone", rep)
	}
	if _, err := c2.Lookup("acme", r.ID()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("the gone run's id answers %v; want sandbox.ErrGone", err)
	}
	if _, err := c2.Lookup("other", r.ID()); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("another tenant learns of the gone run: %v", err)
	}
	if _, err := st2.Get(context.Background(), r.ID()); !errors.Is(err, runstore.ErrNotFound) {
		t.Fatalf("the gone run is still in the store: %v", err)
	}
}

func TestAdoptKeepsRunWhenEngineFails(t *testing.T) {
	dir := t.TempDir()
	prov := &fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}
	c1, st1 := durableController(t, dir, prov, map[string]string{})
	r, err := c1.Open(context.Background(), RunSpec{ConversationID: "c-1", Workspace: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	c1.Detach()
	st1.Close()

	prov.openErr = errors.New("fake: permission denied on the engine's socket")
	c2, st2 := durableController(t, dir, prov, map[string]string{})
	rep, _ := c2.Adopt(context.Background())
	c2.Close()
	st2.Close()
	if _, ok := rep.Failed[r.ID()]; !ok {
		t.Fatalf("report %+v; want the run failed", rep)
	}

	prov.openErr = nil // the engine answers again at the next start
	c3, st3 := durableController(t, dir, prov, map[string]string{})
	defer st3.Close()
	defer c3.Close()
	rep, _ = c3.Adopt(context.Background())
	if len(rep.Adopted) != 1 {
		t.Fatalf("report %+v; want the run adopted at the next start", rep)
	}
}

// limitStore is a run store that holds records up to limit bytes of JSON,
// as kubestore holds at most MaxRecord (a Secret's 1 MiB).
type limitStore struct {
	runstore.Store
	limit int
}

func (s limitStore) Put(ctx context.Context, r runstore.Record) error {
	b, _ := json.Marshal(r)
	if len(b) > s.limit {
		return fmt.Errorf("%w: run %s's record is %d bytes, over %d", runstore.ErrTooLarge, r.ID, len(b), s.limit)
	}
	return s.Store.Put(ctx, r)
}

// TestUnsavedStateIsReported: a call whose change of the run's state
// cannot be stored (the record outgrew the store) says so in its result,
// with what to do; a call that changed nothing after the state shrank
// again says nothing.
func TestUnsavedStateIsReported(t *testing.T) {
	dir, _, err := runstore.Open(t.TempDir(), runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	prov := &fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}
	grow := func(ctx context.Context, reg *tools.Registry, env *Env) error {
		c := &counter{}
		env.Persist("counter", c)
		tools.Register(reg, tools.Tool{Name: "set", Description: "set the counter", Level: tools.LevelRead},
			func(ctx context.Context, in struct{ N int64 }) (*tools.Result, error) {
				c.n.Store(in.N)
				c.gen.Add(1)
				return tools.Text("set"), nil
			})
		return nil
	}
	c, err := New(Config{Providers: []sandbox.Provider{prov}, Tools: []Binder{grow}, Registerer: prometheus.NewRegistry(),
		Store: limitStore{Store: dir, limit: runstore.MaxRecord}, AllowUnlabelled: true, NoQuestions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Open(context.Background(), RunSpec{ConversationID: "c-1", Workspace: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	// From now on the record holds a counter of at most three digits.
	rec, _ := dir.Get(context.Background(), r.ID())
	b, _ := json.Marshal(rec)
	r.durable.store = limitStore{Store: dir, limit: len(b) + 2}
	for _, tc := range []struct {
		n    int64
		note bool
	}{{7, false}, {123456789, true}, {8, false}} {
		res, err := r.Call(context.Background(), tools.SurfaceDefault, "set", fmt.Appendf(nil, `{"N":%d}`, tc.n))
		if err != nil {
			t.Fatal(err)
		}
		text := res.AllText()
		if got := strings.Contains(text, "could not save this run's state") && strings.Contains(text, "resolve"); got != tc.note {
			t.Errorf("set %d: note %v, want %v: %q", tc.n, got, tc.note, text)
		}
	}
	if rec, _ := dir.Get(context.Background(), r.ID()); string(rec.State["counter"]) != "8" {
		t.Errorf("stored state %q after the record fit again; want 8", rec.State["counter"])
	}
}

// TestFailedAdoptionKeepsTheRun: an adoption that fails (a binder cannot
// take its state over) or is cut short (berth shuts down) lets the run go
// as it is: its record stays in the store with its state, and the next
// start adopts it whole. Before, a failed binder closed the run, which
// removed its record and ended its resident's kernels.
func TestFailedAdoptionKeepsTheRun(t *testing.T) {
	dir := t.TempDir()
	prov := &fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}
	c1, st1 := durableController(t, dir, prov, map[string]string{})
	r, err := c1.Open(context.Background(), RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	callText(t, r, "bump")
	c1.Detach()
	st1.Close()

	cancelled := func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}
	// cutAtOpen ends the adoption's context as the sandbox is reopened
	// (berth's shutdown arriving mid-adoption), after the store was read.
	cutAtOpen := func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		prov.onOpen = cancel
		return ctx
	}
	for _, tc := range []struct {
		name    string
		ctx     func() context.Context
		fail    bool
		openErr error // what the engine answers the reopen
	}{
		{"a binder fails", context.Background, true, nil},
		{"cut short", cancelled, false, nil},
		// An engine may answer a lookup that its cancellation cut short
		// as "not found": that is no proof the sandbox is gone, and the
		// record (and the resident it names) must stay.
		{"cut short, engine says not found", cutAtOpen, false, fmt.Errorf("fake: lookup: %w", sandbox.ErrNotFound)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prov.openErr = tc.openErr
			defer func() { prov.openErr, prov.onOpen = nil, nil }()
			st, _, err := runstore.Open(dir, runstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			failing := func(ctx context.Context, reg *tools.Registry, env *Env) error {
				if tc.fail && env.Adopted("counter") != nil {
					return errors.New("cannot take the counter over")
				}
				return nil
			}
			c, err := New(Config{Providers: []sandbox.Provider{prov}, Tools: []Binder{counterTools(map[string]string{}), failing},
				Registerer: prometheus.NewRegistry(), Store: st, AllowUnlabelled: true, NoQuestions: true})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := c.Adopt(tc.ctx())
			if len(rep.Adopted) != 0 || (err == nil && rep.Failed[r.ID()] == "") {
				t.Errorf("adopted %v, failed %v (%v); want run %s failed or not tried", rep.Adopted, rep.Failed, err, r.ID())
			}
			if _, err := c.Lookup("acme", r.ID()); err == nil {
				t.Error("the run is served after its adoption failed")
			}
			c.Close()
			rec, err := st.Get(context.Background(), r.ID())
			if err != nil || string(rec.State["counter"]) != "1" {
				t.Fatalf("after the failed adoption the store has %v %q; want the record with counter 1", err, rec.State["counter"])
			}
		})
	}
	// Adopted whole by the next start.
	adopted := map[string]string{}
	c3, st3 := durableController(t, dir, prov, adopted)
	defer st3.Close()
	defer c3.Close()
	if rep, _ := c3.Adopt(context.Background()); len(rep.Adopted) != 1 || adopted[r.ID()] != "1" {
		t.Fatalf("the next start adopted %v with state %q; want the run, counter 1", rep.Adopted, adopted[r.ID()])
	}
}
