package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
)

// gatedProvider is provider whose container "slow" does not open until
// release is closed: an engine that takes its time answering a
// restarted berth.
type gatedProvider struct {
	*provider
	release chan struct{}
}

func (p gatedProvider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	if ref == "slow" {
		select {
		case <-p.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return p.provider.Open(ctx, ref)
}

// adoptingRig is a controller with a store in dir over prov, served by
// httptest, and its store.
func adoptingRig(t *testing.T, dir string, prov sandbox.Provider) (*rig, *runstore.Dir) {
	t.Helper()
	st, _, err := runstore.Open(dir, runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Config{Providers: []sandbox.Provider{prov}, Tools: []controller.Binder{binder},
		Registerer: prometheus.NewRegistry(), Store: st, AllowUnlabelled: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(validated(t, httpapi.New(c, httpapi.Options{Token: token})))
	t.Cleanup(func() { srv.Close(); c.Close(); st.Close() })
	return &rig{t: t, srv: srv, c: c}, st
}

// TestServesWhileAdopting: a restarted berth serves while it takes its
// stored runs over (issue 33, finding 5). While the engine has not
// answered for one run, /healthz and /readyz answer, another run is
// served, and the slow run answers 503 adopting with Retry-After; once
// the engine answers, the run is served. Before, Adopt ran to its end
// before berth served anything.
func TestServesWhileAdopting(t *testing.T) {
	dir := t.TempDir()
	prov := gatedProvider{&provider{scheme: "docker", containers: map[string]string{"c-slow": "slow", "c-fast": "fast"}}, make(chan struct{})}
	close(prov.release) // the first berth opens both at once
	first, st := adoptingRig(t, dir, prov)
	slow := first.open(`{"conversation_id":"c-slow","workspace":"/w"}`)
	fast := first.open(`{"conversation_id":"c-fast","workspace":"/w"}`)
	first.srv.Close()
	if err := first.c.Detach(); err != nil {
		t.Fatal(err)
	}
	st.Close() // the next berth takes the directory's lock
	prov.release = make(chan struct{})
	second, _ := adoptingRig(t, dir, prov)

	a, err := second.c.BeginAdopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The fast run is served while the slow one waits for its engine.
	deadline := time.Now().Add(time.Minute)
	for second.do("GET", "/v1/runs/"+fast, token, "").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the run whose container answers was not served while another run's engine was slow")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := second.do("GET", "/healthz", "", ""); r.status != http.StatusOK {
		t.Errorf("/healthz while adopting: %d %s", r.status, r.body)
	}
	if r := second.do("GET", "/readyz", "", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), "adopting 1") {
		t.Errorf("/readyz while adopting: %d %q; want 200 saying one run is being adopted", r.status, r.body)
	}
	r := second.do("POST", "/v1/runs/"+slow+"/tools/read", token, `{"args":{"path":"a"}}`)
	if r.status != http.StatusServiceUnavailable || r.errorCode(t) != "adopting" || r.header.Get("Retry-After") != "2" {
		t.Fatalf("a call of the run being adopted: %d %s (Retry-After %q); want 503 adopting, Retry-After 2", r.status, r.body, r.header.Get("Retry-After"))
	}
	if r := second.do("POST", "/v1/runs/"+fast+"/tools/read", token, `{"args":{"path":"a"}}`); r.status != http.StatusOK {
		t.Fatalf("a call of the adopted run while another is adopted: %d %s", r.status, r.body)
	}
	select {
	case <-a.Done():
		t.Fatal("the adoption said it was done while a run's engine had not answered")
	default:
	}

	close(prov.release) // the engine answers
	rep, err := a.Report(context.Background())
	if err != nil || len(rep.Adopted) != 2 {
		t.Fatalf("report %+v, %v; want both runs adopted", rep, err)
	}
	if r := second.do("POST", "/v1/runs/"+slow+"/tools/read", token, `{"args":{"path":"a"}}`); r.status != http.StatusOK {
		t.Fatalf("a call of the slow run once adopted: %d %s", r.status, r.body)
	}
	if r := second.do("GET", "/readyz", "", ""); r.status != http.StatusOK || string(r.body) != "ready" {
		t.Errorf("/readyz after the adoption: %d %q; want 200 ready", r.status, r.body)
	}
}
