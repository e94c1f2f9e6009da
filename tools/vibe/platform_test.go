package vibe

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/tools"
)

// fakePlatform is a hosting platform with its own agent loop, in process:
// it receives berth's events on a channel and answers through
// Supervisor.Report from its own goroutine, as the HTTP API would.
type fakePlatform struct {
	events chan event
}

type event struct {
	typ  string
	data any
}

func (p *fakePlatform) Publish(typ string, data any) { p.events <- event{typ, data} }

// serve plays the platform until ctx ends: a brief containing "hang"
// never finishes; a spawn reports progress and then "done: <brief>"; a send
// fails with the last follow-up. Every event is forwarded to seen.
func (p *fakePlatform) serve(ctx context.Context, t *testing.T, sup func() *Supervisor, seen chan<- event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-p.events:
			seen <- ev
			switch d := ev.data.(type) {
			case SpawnEvent:
				if strings.Contains(d.Brief, "hang") {
					continue
				}
				if err := sup().Report(d.WorkerID, StatusRunning, "reading the brief"); err != nil {
					t.Errorf("progress report: %v", err)
				}
				if err := sup().Report(d.WorkerID, StatusDone, "done: "+d.Brief); err != nil {
					t.Errorf("final report: %v", err)
				}
			case SendEvent:
				if err := sup().Report(d.WorkerID, StatusFailed, "could not: "+d.Messages[len(d.Messages)-1]); err != nil {
					t.Errorf("failed report: %v", err)
				}
			}
		}
	}
}

func TestPlatform(t *testing.T) {
	p := &fakePlatform{events: make(chan event)}
	var mu sync.Mutex
	var notes []WorkerInfo
	f := newFixture(t, func(*fixture) Runner { return Platform(p) }, Options{Notify: func(w WorkerInfo) {
		mu.Lock()
		notes = append(notes, w)
		mu.Unlock()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan event, 16)
	var wg sync.WaitGroup
	wg.Go(func() { p.serve(ctx, t, func() *Supervisor { return f.sup }, seen) })
	t.Cleanup(func() {
		f.sup.Close() // publishes kills the platform must still receive
		cancel()
		wg.Wait()
	})
	next := func(want string) event {
		t.Helper()
		select {
		case ev := <-seen:
			if ev.typ != want {
				t.Fatalf("platform got %s %+v, want %s", ev.typ, ev.data, want)
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatalf("platform got no %s", want)
			return event{}
		}
	}

	f.ok("vibe_spawn", map[string]any{"brief": "port the tests", "label": "port", "tier": "good"}, "spawned w1")
	d1 := next(EventSpawn).data.(SpawnEvent)
	if len(d1.WorkerToken) < 26 {
		t.Errorf("spawn event's worker token %q is not a 128-bit secret", d1.WorkerToken)
	}
	if d1.WorkerToken = ""; d1 != (SpawnEvent{WorkerID: "w1", Label: "port", Tier: TierGood, Surface: "default", Brief: "port the tests"}) {
		t.Errorf("spawn event = %+v", d1)
	}
	f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "done", "done: port the tests")
	mu.Lock()
	var progressed bool
	for _, n := range notes {
		progressed = progressed || (n.ID == "w1" && n.Status == StatusRunning && n.Progress == "reading the brief")
	}
	mu.Unlock()
	if !progressed {
		t.Errorf("no notification carried the progress report: %+v", notes)
	}

	// A report for an ended or unknown worker is refused.
	if err := f.sup.Report("w1", StatusDone, "again"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("report on a done worker: %v, want ErrNotRunning", err)
	}
	if err := f.sup.Report("w7", StatusDone, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("report on an unknown worker: %v, want ErrNotFound", err)
	}

	// vibe_send publishes a send with the follow-up; the platform fails it.
	f.ok("vibe_send", map[string]any{"worker_id": "w1", "message": "use table tests"}, "attempt 2")
	d := next(EventSend).data.(SendEvent)
	if d.Attempt != 2 || len(d.Messages) != 1 || d.Messages[0] != "use table tests" || !strings.Contains(d.Prompt, "done: port the tests") {
		t.Errorf("send event = %+v", d)
	}
	f.fails("vibe_wait", map[string]any{"worker_id": "w1"}, "failed", "could not: use table tests")

	// vibe_kill publishes a kill and the worker ends at once.
	f.ok("vibe_spawn", map[string]any{"brief": "hang around", "label": "idle"}, "spawned w2")
	next(EventSpawn)
	if err := f.sup.Report("w2", "bogus", ""); err == nil {
		t.Errorf("a report with an unknown status was accepted")
	}
	f.ok("vibe_list", nil, "w2", "running")
	f.ok("vibe_kill", map[string]any{"worker_id": "w2"}, "killed w2")
	if d := next(EventKill).data.(KillEvent); d.WorkerID != "w2" {
		t.Errorf("kill event = %+v", d)
	}
	f.ok("vibe_list", nil, "w1", "failed", "w2", "killed")
}

// TestWorkerToken: each worker gets its own secret, published only in its
// spawn event; Authorize accepts it while the worker runs, at the surface
// the worker was spawned from, and refuses a wrong token, another
// worker's token, an unknown worker and an ended one.
func TestWorkerToken(t *testing.T) {
	p := &fakePlatform{events: make(chan event, 4)}
	f := newFixture(t, func(*fixture) Runner { return Platform(p) }, Options{})
	f.surface = tools.SurfacePlan
	f.ok("vibe_spawn", map[string]any{"brief": "hang: plan it", "label": "planner"}, "spawned w1")
	f.surface = tools.SurfaceDefault
	f.ok("vibe_spawn", map[string]any{"brief": "hang: do it", "label": "doer"}, "spawned w2")
	tokens := map[string]string{}
	for range 2 {
		ev := <-p.events
		d := ev.data.(SpawnEvent)
		tokens[d.WorkerID] = d.WorkerToken
	}
	if tokens["w1"] == "" || tokens["w1"] == tokens["w2"] {
		t.Fatalf("worker tokens %q: want two different secrets", tokens)
	}
	for _, w := range f.sup.Workers() {
		if b, _ := json.Marshal(w); strings.Contains(string(b), tokens[w.ID]) {
			t.Errorf("worker info shows the token: %s", b)
		}
	}
	if s, err := f.sup.Authorize("w1", tokens["w1"]); err != nil || s != tools.SurfacePlan {
		t.Errorf("w1 with its token: %q, %v; want plan", s, err)
	}
	if s, err := f.sup.Authorize("w2", tokens["w2"]); err != nil || s != tools.SurfaceDefault {
		t.Errorf("w2 with its token: %q, %v; want default", s, err)
	}
	for _, tt := range []struct {
		id, token string
		want      error
	}{
		{"w1", tokens["w2"], ErrWorkerToken},
		{"w1", "", ErrWorkerToken},
		{"w1", tokens["w1"] + "x", ErrWorkerToken},
		{"w9", tokens["w1"], ErrNotFound},
	} {
		if _, err := f.sup.Authorize(tt.id, tt.token); !errors.Is(err, tt.want) {
			t.Errorf("Authorize(%s, %q) = %v, want %v", tt.id, tt.token, err, tt.want)
		}
	}
	f.ok("vibe_kill", map[string]any{"worker_id": "w1"}, "killed w1")
	<-p.events // the kill
	if _, err := f.sup.Authorize("w1", tokens["w1"]); !errors.Is(err, ErrNotRunning) {
		t.Errorf("killed w1 with its token: %v, want ErrNotRunning", err)
	}
}
