package permission

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

func TestDecide(t *testing.T) {
	read := tools.Tool{Name: "read", Level: tools.LevelRead}
	write := tools.Tool{Name: "write", Level: tools.LevelWrite}
	eval := tools.Tool{Name: "eval", Level: tools.LevelExec}
	custom := Policy{Rules: []Rule{
		{Surface: tools.SurfaceDefault, Tool: "eval", Action: Deny},
		{Level: tools.LevelWrite, Action: Allow},
	}}
	tests := []struct {
		name   string
		policy Policy
		s      tools.Surface
		t      tools.Tool
		want   Action
	}{
		{"local read", DefaultPolicy(ModeLocal), tools.SurfaceDefault, read, Allow},
		{"local write", DefaultPolicy(ModeLocal), tools.SurfaceDefault, write, Allow},
		{"local exec", DefaultPolicy(ModeLocal), tools.SurfaceDefault, eval, Allow},
		{"hosted read", DefaultPolicy(ModeHosted), tools.SurfacePlan, read, Allow},
		{"hosted write", DefaultPolicy(ModeHosted), tools.SurfaceDefault, write, Ask},
		{"hosted exec", DefaultPolicy(ModeHosted), tools.SurfaceDefault, eval, Ask},
		{"rule by surface and tool", custom, tools.SurfaceDefault, eval, Deny},
		{"rule by level", custom, tools.SurfaceDefault, write, Allow},
		{"no rule matches: ask", custom, tools.SurfaceDefault, read, Ask},
	}
	for _, tt := range tests {
		if got := tt.policy.Decide(tt.s, tt.t); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	if _, err := ParseMode("cloud"); err == nil {
		t.Error("ParseMode accepted cloud")
	}
}

func TestSummaryIsBounded(t *testing.T) {
	args, _ := json.Marshal(map[string]string{"path": "a.go", "content": strings.Repeat("é", 4*MaxSummaryBytes)})
	s := Summary(args)
	if len(s) > MaxSummaryBytes+40 || !strings.Contains(s, "bytes in all") || !strings.HasPrefix(s, `{"content":"é`) {
		t.Errorf("summary %d bytes: %.80s…", len(s), s)
	}
	if got := Summary(json.RawMessage(`{ "path" : "a" }`)); got != `{"path":"a"}` {
		t.Errorf("compact: %s", got)
	}
	// The headline hides nothing the detail would show escaped.
	if got := Summary(json.RawMessage("{\"path\":\"a\u3164\u2800\u202eb\"}")); got != `{"path":"a\u{3164}\u{2800}\u{202e}b"}` {
		t.Errorf("invisible characters in the summary: %q", got)
	}
	if got := StepSummary(tools.Step{Tool: "lsp", Command: "cargo\u3164check", Why: "x"}); !strings.Contains(got, `cargo\u{3164}check`) {
		t.Errorf("invisible characters in a step's summary: %q", got)
	}
}

// TestGate drives the middleware through a registry, as the controller
// installs it: no approver, approve, deny, allow_run, policy deny.
func TestGate(t *testing.T) {
	port := questions.New()
	defer port.Close()
	reg := tools.NewRegistry()
	ran := 0
	tools.Register(reg, tools.Tool{Name: "write", Description: "w", Level: tools.LevelWrite}, func(ctx context.Context, _ struct{}) (*tools.Result, error) {
		ran++
		return tools.Text("wrote"), nil
	})
	tools.Register(reg, tools.Tool{Name: "rm", Description: "r", Level: tools.LevelWrite}, func(ctx context.Context, _ struct{}) (*tools.Result, error) {
		return tools.Text("removed"), nil
	})
	g := New(Policy{Rules: []Rule{{Tool: "rm", Action: Deny}, {Level: tools.LevelWrite, Action: Ask}}}, port, Options{})
	reg.Use(g.Wrap)
	ctx := t.Context()

	if res, err := reg.Call(ctx, tools.SurfaceDefault, "write", nil); err != nil || !res.IsError || ran != 0 {
		t.Fatalf("no approver: %v %+v", err, res)
	}
	if _, err := reg.Call(ctx, tools.SurfaceDefault, "rm", nil); !errors.Is(err, tools.ErrDenied) {
		t.Fatalf("policy deny: %v", err)
	}

	sub := port.Subscribe(0)
	defer sub.Close()
	for i, d := range []questions.Decision{questions.Approve, questions.Deny, questions.AllowRun} {
		done := make(chan *tools.Result, 1)
		go func() {
			res, _ := reg.Call(ctx, tools.SurfaceDefault, "write", nil)
			done <- res
		}()
		var cards []questions.Card
		for len(cards) == 0 {
			sub.Next(ctx)
			cards = port.Cards()
		}
		if cards[0].N != i+1 || cards[0].Kind != questions.KindPermission || cards[0].Surface != "default" {
			t.Fatalf("card %+v", cards[0])
		}
		if err := port.Answer(cards[0].N, questions.Answer{Decision: d}, questions.Operator); err != nil {
			t.Fatal(err)
		}
		if res := <-done; res.IsError != (d == questions.Deny) {
			t.Errorf("%s: %+v", d, res)
		}
	}
	if res, err := reg.Call(ctx, tools.SurfaceDefault, "write", nil); err != nil || res.IsError || ran != 3 {
		t.Errorf("after allow_run: %v %+v ran=%d", err, res, ran)
	}
}
