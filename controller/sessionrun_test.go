package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
)

// A run an MCP session opened for itself (/v1/mcp) does not outlive its
// session across a restart for the 4-hour idle expiry (issue 33, finding
// 9): the session lives in berth's memory only, so the next berth closes
// the adopted run once unused for SessionRunExpiry. A run opened through
// /v1/runs keeps IdleExpiry.
func TestAdoptedSessionRunExpiresSoon(t *testing.T) {
	dir := t.TempDir()
	prov := &fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1", "c-2": "ctr2"}}
	c1, st1 := durableController(t, dir, prov, map[string]string{})
	ctx := context.Background()
	sess, err := c1.Open(ctx, RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme", Session: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c1.Open(ctx, RunSpec{ConversationID: "c-2", Workspace: "/w", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := st1.Get(ctx, sess.ID()); err != nil || !rec.Session {
		t.Fatalf("the session's run's record: session %v, %v; want it marked", rec.Session, err)
	}
	if err := c1.Detach(); err != nil {
		t.Fatal(err)
	}
	st1.Close()

	st2, _, err := runstore.Open(dir, runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	const short = 50 * time.Millisecond
	c2, err := New(Config{Providers: []sandbox.Provider{prov}, Tools: []Binder{counterTools(map[string]string{})},
		Registerer: prometheus.NewRegistry(), Store: st2, AllowUnlabelled: true, NoQuestions: true,
		SessionRunExpiry: short})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if rep, err := c2.Adopt(ctx); err != nil || len(rep.Adopted) != 2 {
		t.Fatalf("adopt: %+v %v; want both runs adopted", rep, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute) // generous: the janitor runs every few ms
	defer cancel()
	for {
		_, err := c2.Lookup("acme", sess.ID())
		if errors.Is(err, ErrRunExpired) {
			break
		}
		select {
		case <-wctx.Done():
			t.Fatalf("the adopted run of an MCP session still answers %v; want it expired after %s unused", err, short)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The run answers expired as soon as it is taken from the table; its
	// close, which deletes the record, follows.
	for {
		_, err := st2.Get(ctx, sess.ID())
		if errors.Is(err, runstore.ErrNotFound) {
			break
		}
		select {
		case <-wctx.Done():
			t.Fatalf("the expired session run is still in the store: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := c2.Lookup("acme", plain.ID()); err != nil {
		t.Errorf("the adopted run opened through /v1/runs: %v; want it served (it keeps IdleExpiry)", err)
	}
}
