package ask_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/ask"
)

// TestAsk drives ask_user through a registry and a port: the answer text,
// ASK-1 for skip and timeout, fail-closed without a subscriber.
func TestAsk(t *testing.T) {
	port := questions.New()
	defer port.Close()
	reg := tools.NewRegistry()
	ask.Register(reg, port, ask.Options{Timeout: 200 * time.Millisecond})
	ctx := t.Context()
	args := json.RawMessage(`{"question":"Which?","options":[{"label":"a"},{"label":"b"}],"allow_free_text":true}`)

	res, err := reg.Call(ctx, tools.SurfacePlan, "ask_user", args)
	if err != nil || !res.IsError || !strings.Contains(res.AllText(), "no one is connected") {
		t.Fatalf("no subscriber: %v %+v", err, res)
	}
	sub := port.Subscribe(0)
	defer sub.Close()

	tests := []struct {
		name    string
		answer  *questions.Answer // nil: let it time out
		want    string
		isError bool
	}{
		{"choice and text", &questions.Answer{Choice: []string{"b"}, Text: "because"}, "Chose: \"b\"\nWrote: because", false},
		{"skip", &questions.Answer{Skip: true}, "do not ask this question again", false},
		{"timeout", nil, "timed out", true},
	}
	for _, tt := range tests {
		done := make(chan *tools.Result, 1)
		go func() {
			res, _ := reg.Call(ctx, tools.SurfaceDefault, "ask_user", args)
			done <- res
		}()
		if tt.answer != nil {
			var cards []questions.Card
			for len(cards) == 0 {
				sub.Next(ctx)
				cards = port.Cards()
			}
			if err := port.Answer(cards[0].N, *tt.answer); err != nil {
				t.Fatal(err)
			}
		}
		res := <-done
		if res.IsError != tt.isError || !strings.Contains(res.AllText(), tt.want) {
			t.Errorf("%s: %+v", tt.name, res)
		}
	}

	_, err = reg.Call(ctx, tools.SurfaceDefault, "ask_user", json.RawMessage(`{"question":"?","options":[{"label":"x"},{"label":"x"}]}`))
	var in *tools.InputError
	if !errors.As(err, &in) {
		t.Errorf("duplicate labels: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() {
		for len(port.Cards()) == 0 {
			sub.Next(ctx)
		}
		cancel()
	}()
	if _, err := reg.Call(cctx, tools.SurfaceDefault, "ask_user", args); !errors.Is(err, context.Canceled) || len(port.Cards()) != 0 {
		t.Errorf("cancel: %v, cards %v", err, port.Cards())
	}
}

// TestAskAbandoned: a card opened while someone watched fails closed once
// everyone left, long before the question's own timeout, and says so.
func TestAskAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		port := questions.New()
		defer port.Close()
		reg := tools.NewRegistry()
		ask.Register(reg, port, ask.Options{Timeout: time.Hour})
		sub := port.Subscribe(0)
		done := make(chan *tools.Result, 1)
		go func() {
			res, _ := reg.Call(context.Background(), tools.SurfaceDefault, "ask_user", json.RawMessage(`{"question":"Which?","allow_free_text":true}`))
			done <- res
		}()
		synctest.Wait()
		begin := time.Now()
		sub.Close()
		res := <-done
		if !res.IsError || !strings.Contains(res.AllText(), "card 1 closed unanswered") || !strings.Contains(res.AllText(), "do not ask this question again") {
			t.Errorf("abandoned card: %+v", res)
		}
		if waited := time.Since(begin); waited != questions.ListenerGrace {
			t.Errorf("failed after %v, want %v", waited, questions.ListenerGrace)
		}
	})
}
