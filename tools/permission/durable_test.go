package permission

import (
	"context"
	"strings"
	"testing"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

// TestAllowRunSurvivesRestore: an operator's "allow for this run" on one
// gate is, after Snapshot and Restore into the gate of a restarted berth,
// still in force — the call runs without a card, and with nobody to
// approve — while a tool it did not name still asks.
func TestAllowRunSurvivesRestore(t *testing.T) {
	policy := Policy{Rules: []Rule{{Level: tools.LevelWrite, Action: Ask}}}
	port := questions.New()
	defer port.Close()
	old := New(policy, port, Options{})
	g0 := old.Generation()
	sub := port.Subscribe(0)
	defer sub.Close()
	reg := tools.NewRegistry()
	tools.Register(reg, tools.Tool{Name: "write", Description: "w", Level: tools.LevelWrite}, func(ctx context.Context, _ struct{}) (*tools.Result, error) {
		return tools.Text("wrote"), nil
	})
	reg.Use(old.Wrap)
	done := make(chan *tools.Result, 1)
	go func() {
		res, _ := reg.Call(t.Context(), tools.SurfaceDefault, "write", nil)
		done <- res
	}()
	for len(port.Cards()) == 0 {
		sub.Next(t.Context())
	}
	if err := port.Answer(port.Cards()[0].N, questions.Answer{Decision: questions.AllowRun}, questions.Operator); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.IsError {
		t.Fatalf("allowed call: %+v", res)
	}
	if old.Generation() == g0 {
		t.Fatal("allow for this run did not change the generation")
	}
	data, err := old.Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	// The restarted berth: no approver at all.
	g := New(policy, nil, Options{})
	if err := g.Restore(data); err != nil {
		t.Fatal(err)
	}
	reg2 := tools.NewRegistry()
	for _, name := range []string{"write", "edit"} {
		tools.Register(reg2, tools.Tool{Name: name, Description: name, Level: tools.LevelWrite}, func(ctx context.Context, _ struct{}) (*tools.Result, error) {
			return tools.Text("ran"), nil
		})
	}
	reg2.Use(g.Wrap)
	if res, err := reg2.Call(t.Context(), tools.SurfaceDefault, "write", nil); err != nil || res.IsError {
		t.Fatalf("write, allowed for the run before the restart: %v %+v", err, res)
	}
	if res, err := reg2.Call(t.Context(), tools.SurfaceDefault, "edit", nil); err != nil || !res.IsError {
		t.Fatalf("edit, never allowed, ran without approval: %v %+v", err, res)
	}
	if err := New(policy, nil, Options{}).Restore([]byte("nope")); err == nil || !strings.Contains(err.Error(), "asked again") {
		t.Fatalf("garbage restored: %v", err)
	}
}
