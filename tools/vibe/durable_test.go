package vibe

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"berth.dev/berth/tools"
)

// recorder is a Publisher that keeps what it was given.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) Publish(typ string, data any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{typ, data})
}

func (r *recorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.typ)
	}
	return out
}

func callTool(t *testing.T, reg *tools.Registry, name string, args any) *tools.Result {
	t.Helper()
	b, _ := json.Marshal(args)
	res, err := reg.Call(context.Background(), tools.SurfaceDefault, name, b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// TestPlatformWorkerOutlivesBerth: a platform's worker running when berth
// lets go of the run is neither killed nor spawned again: the next berth's
// supervisor, restored from the snapshot, takes the platform's report,
// and the worker's token still authorizes its calls.
func TestPlatformWorkerOutlivesBerth(t *testing.T) {
	pub1 := &recorder{}
	reg1 := tools.NewRegistry()
	s1 := Register(reg1, context.Background(), Options{Runner: Platform(pub1)})
	callTool(t, reg1, "vibe_spawn", map[string]any{"brief": "port the parser", "label": "port"})
	gen := s1.Generation()
	snap, err := s1.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Detach(); err != nil {
		t.Fatal(err)
	}
	if got := pub1.types(); len(got) != 1 || got[0] != EventSpawn {
		t.Fatalf("events of the first berth: %v; want only the spawn (no kill on detach)", got)
	}
	if gen == 0 {
		t.Error("Generation did not change with a spawn")
	}
	token := pub1.events[0].data.(SpawnEvent).WorkerToken

	pub2 := &recorder{}
	reg2 := tools.NewRegistry()
	s2 := Register(reg2, context.Background(), Options{Runner: Platform(pub2)})
	defer s2.Close()
	lost, err := s2.Restore(snap)
	if err != nil || len(lost) != 0 {
		t.Fatalf("Restore = %v, %v", lost, err)
	}
	if st := s2.Workers(); len(st) != 1 || st[0].Status != StatusRunning || st[0].Attempt != 1 {
		t.Fatalf("restored table: %+v", st)
	}
	if _, err := s2.Authorize("w1", token); err != nil {
		t.Errorf("the worker's token after the restart: %v", err)
	}
	if err := s2.Report("w1", StatusDone, "ported"); err != nil {
		t.Fatal(err)
	}
	if got := callTool(t, reg2, "vibe_wait", map[string]any{"worker_id": "w1", "timeout_seconds": 10}).AllText(); !strings.Contains(got, "ported") || !strings.Contains(got, "done") {
		t.Fatalf("vibe_wait after the restart: %s", got)
	}
	if got := pub2.types(); len(got) != 0 {
		t.Errorf("the second berth published %v; want nothing (the platform already had the worker)", got)
	}
	if got := callTool(t, reg2, "vibe_spawn", map[string]any{"brief": "write docs", "label": "docs"}).AllText(); !strings.Contains(got, "w2") {
		t.Errorf("a spawn after the restart: %s; want id w2", got)
	}
}

// TestInBerthWorkerEndsWithBerth: a worker whose attempt ran in berth
// comes back failed, saying why and what to do; ended workers come back
// with their results.
func TestInBerthWorkerEndsWithBerth(t *testing.T) {
	release := make(chan struct{})
	runner := RunnerFunc(func(ctx context.Context, job Job) (string, error) {
		if strings.Contains(job.Brief, "quick") {
			return "quick result", nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "", ctx.Err()
	})
	reg1 := tools.NewRegistry()
	s1 := Register(reg1, context.Background(), Options{Runner: runner})
	callTool(t, reg1, "vibe_spawn", map[string]any{"brief": "quick task", "label": "quick"})
	callTool(t, reg1, "vibe_wait", map[string]any{"worker_id": "w1", "timeout_seconds": 10})
	callTool(t, reg1, "vibe_spawn", map[string]any{"brief": "long task", "label": "long"})
	snap, _ := s1.Snapshot()
	s1.Detach()
	close(release)

	reg2 := tools.NewRegistry()
	s2 := Register(reg2, context.Background(), Options{Runner: runner})
	defer s2.Close()
	lost, err := s2.Restore(snap)
	if err != nil || len(lost) != 1 || !strings.Contains(lost[0], "w2") {
		t.Fatalf("Restore = %q, %v; want w2 reported lost", lost, err)
	}
	got := callTool(t, reg2, "vibe_wait", map[string]any{"worker_id": "w2", "timeout_seconds": 5})
	if !got.IsError || !strings.Contains(got.AllText(), "berth restarted") || !strings.Contains(got.AllText(), "vibe_send") {
		t.Errorf("vibe_wait on the worker whose attempt ended with berth: %s", got.AllText())
	}
	if got := callTool(t, reg2, "vibe_wait", map[string]any{"worker_id": "w1", "timeout_seconds": 5}).AllText(); !strings.Contains(got, "quick result") {
		t.Errorf("the ended worker after the restart: %s", got)
	}
}
