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
			if err := port.Answer(cards[0].N, *tt.answer, questions.MayAnswerQuestions); err != nil {
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

// TestAskAfterRestart: a question asked before berth restarted is not lost
// when the operator answers it after the restart: a retry of the same
// call gets the answer of the same card, and an answer no retry takes is
// reported by the next ask_user result.
func TestAskAfterRestart(t *testing.T) {
	args := json.RawMessage(`{"question":"Which database?","options":[{"label":"postgres"},{"label":"sqlite"}]}`)
	other := json.RawMessage(`{"question":"Go on?","allow_free_text":true}`)
	tests := []struct {
		name   string
		before bool // answer card 1 before the next call (else while it waits)
		next   json.RawMessage
		want   []string
		n      int // the card the next call's own answer came from
	}{
		{"answered, then retried", true, args, []string{"Card 1 (asked before berth restarted) was answered.\nChose: \"sqlite\""}, 1},
		{"retried, then answered", false, args, []string{"Card 1 (asked before berth restarted) was answered.\nChose: \"sqlite\""}, 1},
		{"answered, another question asked", true, other, []string{
			"Card 102 was answered.\nWrote: yes", // 2 + questions.RestoreCardSkip
			"Answers to questions you asked before berth restarted, given after those ask_user calls had ended:\n- card 1, \"Which database?\":\n  Chose: \"sqlite\"",
		}, 2 + questions.RestoreCardSkip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The old berth: ask_user waits on card 1 when berth stops.
			old := questions.New()
			reg := tools.NewRegistry()
			ask.Register(reg, old, ask.Options{Timeout: time.Hour})
			sub := old.Subscribe(0)
			ctx, cancel := context.WithCancel(t.Context())
			go reg.Call(ctx, tools.SurfaceDefault, "ask_user", args)
			for len(old.Cards()) == 0 {
				sub.Next(ctx)
			}
			data, err := old.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			sub.Close()
			old.Close()

			// The new berth.
			port := questions.New()
			defer port.Close()
			if err := port.Restore(data); err != nil {
				t.Fatal(err)
			}
			reg = tools.NewRegistry()
			ask.Register(reg, port, ask.Options{Timeout: time.Minute})
			if tt.before {
				if err := port.Answer(1, questions.Answer{Choice: []string{"sqlite"}}, questions.MayAnswerQuestions); err != nil {
					t.Fatal(err)
				}
			}
			s := port.Subscribe(0)
			defer s.Close()
			g := port.Generation()
			done := make(chan *tools.Result, 1)
			go func() {
				res, err := reg.Call(t.Context(), tools.SurfaceDefault, "ask_user", tt.next)
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			if !tt.before {
				for port.Generation() == g { // the retry takes card 1
					time.Sleep(time.Millisecond)
				}
				if err := port.Answer(1, questions.Answer{Choice: []string{"sqlite"}}, questions.MayAnswerQuestions); err != nil {
					t.Fatal(err)
				}
			}
			if tt.n != 1 {
				for {
					if c := port.Cards(); len(c) > 0 {
						if err := port.Answer(c[0].N, questions.Answer{Text: "yes"}, questions.MayAnswerQuestions); err != nil {
							t.Fatal(err)
						}
						break
					}
					time.Sleep(time.Millisecond)
				}
			}
			res := <-done
			if res == nil || res.IsError {
				t.Fatalf("result %+v", res)
			}
			text := res.AllText()
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("result %q\nlacks %q", text, w)
				}
			}
			sc := res.StructuredContent.(map[string]any)
			if sc["card"] != tt.n {
				t.Errorf("structured card %v, want %d", sc["card"], tt.n)
			}
			if _, ok := sc["earlier_answers"]; ok != (tt.n != 1) {
				t.Errorf("earlier_answers %v", sc["earlier_answers"])
			}
		})
	}
}
