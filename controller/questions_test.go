package controller

import (
	"context"
	"errors"
	"testing"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/permission"
)

// TestQuestionPortAndGateWiring: a run gets a question port and ask_user
// unless NoQuestions; the mode picks the gate's default policy; closing the
// run closes the port.
func TestQuestionPortAndGateWiring(t *testing.T) {
	tests := []struct {
		name        string
		cfg         func(*Config)
		hasAsk      bool
		writeResult string // "ok", "refused" (no approver)
	}{
		{"local default", func(c *Config) {}, true, "ok"},
		{"hosted", func(c *Config) { c.Mode = "hosted" }, true, "refused"},
		{"no questions, hosted", func(c *Config) { c.Mode = "hosted"; c.NoQuestions = true }, false, "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, func(c *Config) { c.Tools = []Binder{testTools, AskTools}; tt.cfg(c) })
			run, err := rg.c.Open(t.Context(), RunSpec{Sandbox: "host"})
			if err != nil {
				t.Fatal(err)
			}
			_, has := run.reg.Lookup("ask_user")
			if has != tt.hasAsk || (run.Questions() != nil) != tt.hasAsk {
				t.Errorf("ask_user registered %v, port %v; want %v", has, run.Questions() != nil, tt.hasAsk)
			}
			res, err := run.Call(t.Context(), tools.SurfaceDefault, "touch", []byte(`{"path":"a"}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := map[bool]string{false: "ok", true: "refused"}[res.IsError]; got != tt.writeResult {
				t.Errorf("touch: %s (%s), want %s", got, res.AllText(), tt.writeResult)
			}
			if p := run.Questions(); p != nil {
				sub := p.Subscribe(0)
				defer sub.Close()
				run.Close()
				for {
					evs, err := sub.Next(context.Background())
					if err != nil {
						if !errors.Is(err, questions.ErrClosed) {
							t.Errorf("after run close: %v", err)
						}
						break
					}
					for _, e := range evs { // the refusal's audit record came before
						if e.Type != permission.EventDecision {
							t.Errorf("event %s before the close", e.Type)
						}
					}
				}
			}
		})
	}
	if _, err := New(Config{Mode: "cloud"}); err == nil {
		t.Error("New accepted mode cloud")
	}
}
