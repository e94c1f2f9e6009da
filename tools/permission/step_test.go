package permission

import (
	"context"
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

// TestApproveStep drives tools.ApproveStep from inside a read-level tool
// called through a registry with the gate installed, as the controller
// does: allowed, asked and approved, asked and denied, allowed for the
// run, no approver, a plan surface, a policy deny, and no gate at all.
func TestApproveStep(t *testing.T) {
	step := tools.Step{Tool: "check", Level: tools.LevelExec, Command: "cd /w && /usr/bin/cargo check --all-targets", Why: "cargo check runs the crate's build scripts"}
	newReg := func(g *Gate) (*tools.Registry, *int) {
		reg := tools.NewRegistry()
		ran := new(int)
		tools.Register(reg, tools.Tool{Name: "check", Description: "c", Level: tools.LevelRead}, func(ctx context.Context, _ struct{}) (*tools.Result, error) {
			if err := tools.ApproveStep(ctx, step); err != nil {
				return tools.Errorf("%v", err), nil
			}
			*ran++
			return tools.Text("ran"), nil
		})
		if g != nil {
			reg.Use(g.Wrap)
		}
		return reg, ran
	}
	call := func(t *testing.T, reg *tools.Registry, s tools.Surface) *tools.Result {
		t.Helper()
		res, err := reg.Call(t.Context(), s, "check", nil)
		if err != nil {
			t.Fatalf("call error %v; want a result", err)
		}
		return res
	}
	refusedWith := func(t *testing.T, res *tools.Result, ran int, want ...string) {
		t.Helper()
		text := res.Content[0].Text
		if !res.IsError || ran != 0 {
			t.Fatalf("result %q (ran %d); want a refusal and no run", text, ran)
		}
		for _, w := range append(want, step.Command) {
			if !strings.Contains(text, w) {
				t.Errorf("refusal %q does not say %q", text, w)
			}
		}
	}

	t.Run("local policy allows", func(t *testing.T) {
		reg, ran := newReg(New(DefaultPolicy(ModeLocal), nil, Options{}))
		if res := call(t, reg, tools.SurfaceDefault); res.IsError || *ran != 1 {
			t.Fatalf("%+v ran %d; want it run", res, *ran)
		}
	})
	t.Run("plan surface refuses before any policy", func(t *testing.T) {
		reg, ran := newReg(New(DefaultPolicy(ModeLocal), nil, Options{}))
		refusedWith(t, call(t, reg, tools.SurfacePlan), *ran, "plan surface", "cannot run project code", step.Why)
	})
	t.Run("readonly surface refuses", func(t *testing.T) {
		reg, ran := newReg(New(DefaultPolicy(ModeLocal), nil, Options{}))
		refusedWith(t, call(t, reg, tools.SurfaceReadonly), *ran, "readonly surface")
	})
	t.Run("no gate: fail closed", func(t *testing.T) {
		reg, ran := newReg(nil)
		refusedWith(t, call(t, reg, tools.SurfaceDefault), *ran, "no permission gate")
		if err := tools.ApproveStep(t.Context(), step); !errors.Is(err, tools.ErrStepRefused) {
			t.Errorf("ApproveStep outside any call: %v; want ErrStepRefused", err)
		}
	})
	t.Run("policy deny", func(t *testing.T) {
		reg, ran := newReg(New(Policy{Rules: []Rule{{Level: tools.LevelExec, Action: Deny}, {Action: Allow}}}, nil, Options{}))
		refusedWith(t, call(t, reg, tools.SurfaceDefault), *ran, "policy forbids exec-level steps")
	})
	t.Run("hosted, no approver", func(t *testing.T) {
		reg, ran := newReg(New(DefaultPolicy(ModeHosted), nil, Options{}))
		refusedWith(t, call(t, reg, tools.SurfaceDefault), *ran, "no approver")
	})
	t.Run("hosted, nobody connected", func(t *testing.T) {
		port := questions.New()
		defer port.Close()
		reg, ran := newReg(New(DefaultPolicy(ModeHosted), port, Options{}))
		refusedWith(t, call(t, reg, tools.SurfaceDefault), *ran, "no approver is connected")
	})
	t.Run("hosted, asked", func(t *testing.T) {
		port := questions.New()
		defer port.Close()
		reg, ran := newReg(New(DefaultPolicy(ModeHosted), port, Options{}))
		sub := port.Subscribe(0)
		defer sub.Close()
		ctx := t.Context()
		for i, d := range []questions.Decision{questions.Approve, questions.Deny, questions.AllowRun} {
			done := make(chan *tools.Result, 1)
			go func() {
				res, _ := reg.Call(ctx, tools.SurfaceDefault, "check", nil)
				done <- res
			}()
			var cards []questions.Card
			for len(cards) == 0 {
				sub.Next(ctx)
				cards = port.Cards()
			}
			c := cards[0]
			if c.N != i+1 || c.Kind != questions.KindPermission || c.Tool != "check" || c.Level != "exec" || c.Surface != "default" {
				t.Fatalf("card %+v", c)
			}
			if !strings.Contains(c.Summary, step.Command) || !strings.Contains(c.Summary, step.Why) {
				t.Fatalf("card summary %q does not show the command and why", c.Summary)
			}
			if err := port.Answer(c.N, questions.Answer{Decision: d}, questions.Operator); err != nil {
				t.Fatal(err)
			}
			res := <-done
			if res.IsError != (d == questions.Deny) {
				t.Errorf("%s: %+v", d, res)
			}
			if d == questions.Deny && !strings.Contains(res.Content[0].Text, "denied") {
				t.Errorf("deny: %q does not say the operator denied it", res.Content[0].Text)
			}
		}
		// Allowed for the run: the same command runs with no card.
		if res := call(t, reg, tools.SurfaceDefault); res.IsError || *ran != 3 {
			t.Errorf("after allow_run: %+v ran=%d; want a run without a card", res, *ran)
		}
		if n := len(port.Cards()); n != 0 {
			t.Errorf("%d cards open; want none", n)
		}
	})
}
