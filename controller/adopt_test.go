package controller

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Adoption re-applies today's policy (issue 31, finding 8): a record is a
// claim, not a fact.

// residents counts the resident supervisors of residenceProvider's
// sandboxes: started, reattached, closed.
type residents struct {
	started, adopted, closed atomic.Int32
}

// residenceProvider is fakeProvider whose sandboxes hold fake resident
// supervisors.
type residenceProvider struct {
	*fakeProvider
	res *residents
}

func (p residenceProvider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	sb, err := p.fakeProvider.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	return residenceSandbox{sb.(*fakeSandbox), p.res}, nil
}

type residenceSandbox struct {
	*fakeSandbox
	res *residents
}

func (s residenceSandbox) Resident(ctx context.Context, spec sandbox.ResidentSpec) (sandbox.Resident, error) {
	if spec.Adopt {
		s.res.adopted.Add(1)
	} else {
		s.res.started.Add(1)
	}
	return &fakeResident{dir: spec.Dir, res: s.res}, nil
}

type fakeResident struct {
	dir string
	res *residents
}

func (r *fakeResident) Dir() string { return r.dir }
func (r *fakeResident) Start(context.Context, string, *sandbox.Cmd) (sandbox.Process, error) {
	return nil, errors.ErrUnsupported
}
func (r *fakeResident) Attach(context.Context, string, *sandbox.Cmd) (sandbox.Process, error) {
	return nil, errors.ErrUnsupported
}
func (r *fakeResident) Processes(context.Context) ([]sandbox.ResidentProcess, error) {
	return nil, nil
}
func (r *fakeResident) Detach() error { return nil }
func (r *fakeResident) Close() error  { r.res.closed.Add(1); return nil }

// residentTools starts each new run's resident supervisor, as eval does
// on its first cell.
func residentTools(ctx context.Context, r *tools.Registry, env *Env) error {
	if env.Adopted("resident") == nil {
		if _, err := env.Resident(ctx); err != nil {
			return err
		}
	}
	return nil
}

// policyController is a controller over provs with cfg's policy and a
// store in dir.
func policyController(t *testing.T, dir string, cfg Config, provs ...sandbox.Provider) *Controller {
	t.Helper()
	st, _, err := runstore.Open(dir, runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Providers, cfg.Store = provs, st
	cfg.Tools = []Binder{residentTools}
	cfg.Registerer = prometheus.NewRegistry()
	cfg.NoQuestions = true
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		st.Close()
	})
	return c
}

// restart detaches c and closes its store, as berth's SIGTERM does.
func restart(t *testing.T, c *Controller) {
	t.Helper()
	if err := c.Detach(); err != nil {
		t.Fatal(err)
	}
	c.cfg.Store.Close()
}

// mustRefuse checks that run id was refused for a reason naming why: not
// adopted, reported, answered as gone saying why, out of the store.
func mustRefuse(t *testing.T, c *Controller, rep AdoptReport, id, tenant, why string) {
	t.Helper()
	if len(rep.Adopted) != 0 {
		t.Errorf("adopted %v; want none", rep.Adopted)
	}
	if got := rep.Refused[id]; !strings.Contains(got, why) {
		t.Errorf("report: refused %q for %s (report %+v); want a refusal saying %q", got, id, rep, why)
	}
	_, err := c.Lookup(tenant, id)
	if !errors.Is(err, ErrAdoptRefused) || !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), why) {
		t.Errorf("the refused run answers %v; want ErrAdoptRefused and sandbox.ErrGone saying %q", err, why)
	}
	if _, err := c.cfg.Store.Get(context.Background(), id); !errors.Is(err, runstore.ErrNotFound) {
		t.Errorf("the refused run is still in the store: %v", err)
	}
}

func hostProvider() residenceProvider {
	return residenceProvider{&fakeProvider{scheme: HostScheme}, &residents{}}
}

// TestAdoptHostPolicy: a host run is adopted only when this berth would
// place it on the host now, and its resident supervisor is ended when
// it is not.
func TestAdoptHostPolicy(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	cases := []struct {
		name   string
		before Config
		spec   RunSpec
		after  Config
		why    string // "" adopts
	}{
		{"placement off", Config{HostPlacement: HostFallback}, RunSpec{Sandbox: "host", Workspace: ws}, Config{HostPlacement: HostOff}, "host placement is off"},
		{"explicit kept", Config{HostPlacement: HostFallback}, RunSpec{Sandbox: "host", Workspace: ws}, Config{HostPlacement: HostExplicit}, ""},
		{"fallback under explicit", Config{HostPlacement: HostFallback}, RunSpec{ConversationID: "c-1", Workspace: ws}, Config{HostPlacement: HostExplicit}, "auto's fallback"},
		{"host user changed", Config{}, RunSpec{Sandbox: "host", Workspace: ws}, Config{HostUser: "65534"}, "as berth's own user, and this berth runs host processes as uid 65534"},
		{"host root", Config{HostRoots: []string{ws}}, RunSpec{Sandbox: "host", Workspace: ws}, Config{HostRoots: []string{t.TempDir()}}, "not under a host root"},
		{"tenant unknown", Config{}, RunSpec{Sandbox: "host", Workspace: ws, Tenant: "acme"}, Config{KnownTenants: []string{"other"}}, `tenant "acme" is not one this berth's credentials name`},
		{"tenant known", Config{}, RunSpec{Sandbox: "host", Workspace: ws, Tenant: "acme"}, Config{KnownTenants: []string{"acme"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			prov := hostProvider()
			c1 := policyController(t, dir, tc.before, prov)
			r, err := c1.Open(ctx, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if prov.res.started.Load() != 1 {
				t.Fatalf("the run started %d resident supervisors; want 1", prov.res.started.Load())
			}
			restart(t, c1)

			c2 := policyController(t, dir, tc.after, prov)
			rep, err := c2.Adopt(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tc.why == "" {
				if len(rep.Adopted) != 1 || prov.res.closed.Load() != 0 {
					t.Fatalf("report %+v, residents closed %d; want the run adopted", rep, prov.res.closed.Load())
				}
				return
			}
			mustRefuse(t, c2, rep, r.ID(), tc.spec.Tenant, tc.why)
			if prov.res.closed.Load() != 1 {
				t.Errorf("the refused run's resident supervisor was closed %d times; want 1", prov.res.closed.Load())
			}
		})
	}
}

// TestAdoptContainerLabels: a container run is adopted only while its
// container is the one labelled with its conversation, as an explicit
// reference must be when a run is opened.
func TestAdoptContainerLabels(t *testing.T) {
	ctx := context.Background()
	for _, relabel := range []bool{false, true} {
		dir := t.TempDir()
		prov := residenceProvider{&fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}, &residents{}}
		c1 := policyController(t, dir, Config{}, prov)
		r, err := c1.Open(ctx, RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		restart(t, c1)
		if relabel {
			// ctr1 is there, but the conversation's container is ctr2 now.
			prov.containers = map[string]string{"c-1": "ctr2", "c-other": "ctr1"}
		}
		c2 := policyController(t, dir, Config{}, prov)
		rep, err := c2.Adopt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !relabel {
			if len(rep.Adopted) != 1 {
				t.Fatalf("report %+v; want the run in its labelled container adopted", rep)
			}
			continue
		}
		mustRefuse(t, c2, rep, r.ID(), "acme", "does not carry the label")
		if prov.res.closed.Load() != 1 {
			t.Errorf("the refused run's resident supervisor was closed %d times; want 1", prov.res.closed.Load())
		}
	}
}

// TestAdoptForgedRecord: a record changed in the store's file (its
// tenant and sandbox) is not adopted and not acted on: the sandbox it
// names now is not opened, and the tenant it names learns nothing. The
// store's sealed index still names the run's own tenant, sandbox and
// resident supervisor: that resident is ended, and that tenant and an
// operator are told why. The record is kept aside, out of the store.
func TestAdoptForgedRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	prov := residenceProvider{&fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1", "c-2": "victim"}}, &residents{}}
	c1 := policyController(t, dir, Config{}, prov)
	r, err := c1.Open(ctx, RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	restart(t, c1)

	db, err := bolt.Open(filepath.Join(dir, runstore.DBFile), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("runs"))
		var rec map[string]any
		if err := json.Unmarshal(b.Get([]byte(r.ID())), &rec); err != nil {
			return err
		}
		rec["tenant"], rec["sandbox"], rec["conversation_id"] = "mallory", "docker://victim", "c-2"
		v, _ := json.Marshal(rec)
		return b.Put([]byte(r.ID()), v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	opened := len(prov.opened)
	c2 := policyController(t, dir, Config{}, prov)
	rep, err := c2.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted) != 0 || !strings.Contains(rep.Refused[r.ID()], "integrity") {
		t.Fatalf("report %+v; want the forged run refused for its integrity check", rep)
	}
	for _, sb := range prov.opened[opened:] {
		if sb.ref != "docker://ctr1" {
			t.Errorf("berth opened %s, named by the forged record", sb.ref)
		}
	}
	if prov.res.closed.Load() != 1 {
		t.Errorf("the run's own resident supervisor was closed %d times; want once", prov.res.closed.Load())
	}
	if _, err := c2.Lookup("mallory", r.ID()); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("tenant mallory, named by the forged record, looks the run up: %v; want ErrUnknownRun", err)
	}
	for _, tenant := range []string{"acme", AllTenants} {
		if _, err := c2.Lookup(tenant, r.ID()); !errors.Is(err, ErrAdoptRefused) || !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "integrity") {
			t.Errorf("tenant %q looks the forged run up: %v; want ErrAdoptRefused and sandbox.ErrGone saying why", tenant, err)
		}
	}
	if _, err := c2.cfg.Store.Get(ctx, r.ID()); !errors.Is(err, runstore.ErrNotFound) {
		t.Errorf("the forged record is still in the store: %v", err)
	}
	if kept, _ := filepath.Glob(filepath.Join(dir, runstore.DamagedDir, r.ID()+".*")); len(kept) != 1 {
		t.Errorf("the forged record was not kept aside in %s: %v", runstore.DamagedDir, kept)
	}
}
