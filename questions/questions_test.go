package questions

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestCheck(t *testing.T) {
	q := Card{N: 1, Kind: KindQuestion, Options: []Option{{Label: "A"}, {Label: "B"}}}
	multi := q
	multi.MultiSelect = true
	free := q
	free.AllowFreeText = true
	perm := Card{N: 2, Kind: KindPermission, Tool: "write"}
	huge := Card{N: 3, Kind: KindPermission, Tool: "eval", TooLarge: true}
	tests := []struct {
		name string
		card Card
		a    Answer
		ok   bool
	}{
		{"one choice", q, Answer{Choice: []string{"A"}}, true},
		{"skip", q, Answer{Skip: true}, true},
		{"skip with text", free, Answer{Skip: true, Text: "x"}, false},
		{"unknown choice", q, Answer{Choice: []string{"Z"}}, false},
		{"two choices, single select", q, Answer{Choice: []string{"A", "B"}}, false},
		{"two choices, multi select", multi, Answer{Choice: []string{"A", "B"}}, true},
		{"same choice twice", multi, Answer{Choice: []string{"A", "A"}}, false},
		{"text not allowed", q, Answer{Text: "hi"}, false},
		{"text allowed", free, Answer{Text: "hi"}, true},
		{"text and choice", free, Answer{Choice: []string{"B"}, Text: "because"}, true},
		{"empty", free, Answer{}, false},
		{"decision on a question", q, Answer{Decision: Approve}, false},
		{"approve", perm, Answer{Decision: Approve}, true},
		{"allow_run", perm, Answer{Decision: AllowRun}, true},
		{"deny", perm, Answer{Decision: Deny}, true},
		{"bad decision", perm, Answer{Decision: "maybe"}, false},
		{"choice on a permission", perm, Answer{Choice: []string{"A"}}, false},
		{"no decision", perm, Answer{}, false},
		{"approve a call too large to show", huge, Answer{Decision: Approve}, false},
		{"allow_run a call too large to show", huge, Answer{Decision: AllowRun}, false},
		{"deny a call too large to show", huge, Answer{Decision: Deny}, true},
	}
	for _, tt := range tests {
		err := Check(tt.card, tt.a)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadAnswer) {
			t.Errorf("%s: %v does not wrap ErrBadAnswer", tt.name, err)
		}
	}
}

func TestCheckOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		ok   bool
	}{
		{"none", nil, true},
		{"unique", []Option{{Label: "a"}, {Label: "b"}}, true},
		{"empty label", []Option{{Label: " "}}, false},
		{"duplicate", []Option{{Label: "a"}, {Label: "a"}}, false},
		{"too many", make([]Option, MaxOptions+1), false},
	}
	for _, tt := range tests {
		if err := CheckOptions(tt.opts); (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestAskAnswerAndEvents(t *testing.T) {
	p := New()
	ctx := t.Context()
	if _, _, err := p.Ask(ctx, Card{Kind: KindQuestion, Options: []Option{{Label: "A"}}}); !errors.Is(err, ErrNoSubscriber) {
		t.Fatalf("Ask without subscriber: %v, want ErrNoSubscriber", err)
	}
	sub := p.Subscribe(0)
	defer sub.Close()
	if !p.Connected() {
		t.Fatal("not connected with a subscriber")
	}

	type result struct {
		c   Card
		a   Answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, a, err := p.Ask(ctx, Card{Kind: KindQuestion, Question: "which?", Options: []Option{{Label: "A"}, {Label: "B"}}})
		done <- result{c, a, err}
	}()
	evs, err := sub.Next(ctx)
	if err != nil || len(evs) != 1 || evs[0].Type != EventCardOpened || evs[0].ID != 1 {
		t.Fatalf("first events: %v %+v", err, evs)
	}
	if cards := p.Cards(); len(cards) != 1 || cards[0].N != 1 || cards[0].Question != "which?" {
		t.Fatalf("Cards = %+v", cards)
	}
	if err := p.Answer(1, Answer{Choice: []string{"C"}}, Operator); !errors.Is(err, ErrBadAnswer) {
		t.Fatalf("bad answer: %v", err)
	}
	if err := p.Answer(2, Answer{Skip: true}, Operator); !errors.Is(err, ErrNoCard) {
		t.Fatalf("answer to card 2: %v", err)
	}
	if err := p.Answer(1, Answer{Choice: []string{"B"}}, Operator); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.c.N != 1 || r.a.Choice[0] != "B" {
		t.Fatalf("Ask = %+v", r)
	}
	if err := p.Answer(1, Answer{Skip: true}, Operator); !errors.Is(err, ErrNoCard) {
		t.Fatalf("second answer: %v", err)
	}
	evs, _ = sub.Next(ctx)
	var cl Closed
	json.Unmarshal(evs[0].Data, &cl)
	if evs[0].Type != EventCardClosed || cl.N != 1 || cl.Outcome != Answered {
		t.Fatalf("closed event: %+v", evs)
	}

	// A timeout closes the card with outcome timeout; numbering goes on.
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	c, _, err := p.Ask(tctx, Card{Kind: KindPermission, Tool: "write"})
	if !errors.Is(err, context.DeadlineExceeded) || c.N != 2 {
		t.Fatalf("timeout: card %d, %v", c.N, err)
	}
	evs, _ = sub.Next(ctx)
	json.Unmarshal(evs[len(evs)-1].Data, &cl)
	if cl.N != 2 || cl.Outcome != TimedOut {
		t.Fatalf("timeout event: %s", evs[len(evs)-1].Data)
	}

	// Replay from an id, then close: Next drains, then ErrClosed.
	again := p.Subscribe(2)
	defer again.Close()
	p.Close()
	evs, err = again.Next(ctx)
	if err != nil || len(evs) != 2 || evs[0].ID != 3 {
		t.Fatalf("replay after 2: %v %+v", err, evs)
	}
	if _, err := again.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestReplayIsBounded(t *testing.T) {
	p := New()
	for i := range MaxEvents + 10 {
		if err := p.Publish("worker.update", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	if len(p.log) != MaxEvents {
		t.Fatalf("log holds %d events, want %d", len(p.log), MaxEvents)
	}
	sub := p.Subscribe(3)
	defer sub.Close()
	evs, err := sub.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Type != EventLost || evs[1].ID != 11 || len(evs) != MaxEvents+1 {
		t.Fatalf("got %d events starting %+v %+v", len(evs), evs[0], evs[1])
	}
	fresh := p.Subscribe(0) // a fresh subscriber gets what is kept, without a loss marker
	defer fresh.Close()
	if evs, _ := fresh.Next(t.Context()); evs[0].ID != 11 {
		t.Fatalf("fresh subscriber starts at %+v", evs[0])
	}
}

// TestTooLargeCardTakesOnlyDeny: on a card whose call could not be shown
// whole, approve and allow_run are refused and leave the card open; deny
// closes it.
func TestTooLargeCardTakesOnlyDeny(t *testing.T) {
	p := New()
	defer p.Close()
	sub := p.Subscribe(0)
	defer sub.Close()
	type asked struct {
		a   Answer
		err error
	}
	done := make(chan asked, 1)
	go func() {
		_, a, err := p.Ask(t.Context(), Card{Kind: KindPermission, Tool: "eval", Detail: "this call is 300000 bytes and cannot be shown whole", TooLarge: true})
		done <- asked{a, err}
	}()
	for len(p.Cards()) == 0 {
		if _, err := sub.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []Decision{Approve, AllowRun} {
		if err := p.Answer(1, Answer{Decision: d}, Operator); !errors.Is(err, ErrBadAnswer) {
			t.Errorf("%s on a too-large card: %v, want ErrBadAnswer", d, err)
		}
	}
	if cards := p.Cards(); len(cards) != 1 || !cards[0].TooLarge {
		t.Fatalf("after the refused answers the card should stay open: %+v", cards)
	}
	if err := p.Answer(1, Answer{Decision: Deny}, Operator); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.a.Decision != Deny {
		t.Errorf("Ask returned %+v", r)
	}
}

// TestAnswerRights: who may answer is decided by the card found under the
// lock: question rights never answer a permission card (the card stays
// open and its call keeps waiting), and answer a question card; the
// operator answers both.
func TestAnswerRights(t *testing.T) {
	p := New()
	sub := p.Subscribe(0)
	defer sub.Close()
	type asked struct {
		a   Answer
		err error
	}
	perm, quest := make(chan asked, 1), make(chan asked, 1)
	go func() {
		_, a, err := p.Ask(t.Context(), Card{Kind: KindPermission, Tool: "write", Detail: "x"})
		perm <- asked{a, err}
	}()
	for len(p.Cards()) < 1 {
		if _, err := sub.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		_, a, err := p.Ask(t.Context(), Card{Kind: KindQuestion, Question: "ok?", AllowFreeText: true})
		quest <- asked{a, err}
	}()
	for len(p.Cards()) < 2 {
		if _, err := sub.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []Answer{{Decision: AllowRun}, {Decision: Deny}, {Skip: true}} {
		if err := p.Answer(1, a, MayAnswerQuestions); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("question rights answer %+v on a permission card: %v, want ErrNotAllowed", a, err)
		}
	}
	if err := p.Answer(2, Answer{Text: "yes"}, MayAnswerPermissions); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("permission rights alone answer a question card: %v, want ErrNotAllowed", err)
	}
	if len(p.Cards()) != 2 {
		t.Fatalf("refused answers closed a card: %+v", p.Cards())
	}
	if err := p.Answer(2, Answer{Text: "yes"}, MayAnswerQuestions); err != nil {
		t.Fatal(err)
	}
	if r := <-quest; r.err != nil || r.a.Text != "yes" {
		t.Errorf("question: %+v", r)
	}
	if err := p.Answer(1, Answer{Decision: Approve}, Operator); err != nil {
		t.Fatal(err)
	}
	if r := <-perm; r.err != nil || r.a.Decision != Approve {
		t.Errorf("permission: %+v", r)
	}
}

// TestReplayIsBoundedInBytes: big events (permission cards carry whole
// calls) are dropped from the replay log past MaxEventBytes, and a
// subscriber that fell behind is told.
func TestReplayIsBoundedInBytes(t *testing.T) {
	p := New()
	sub := p.Subscribe(0)
	defer sub.Close()
	if err := p.Publish("first", 1); err != nil {
		t.Fatal(err)
	}
	if evs, err := sub.Next(t.Context()); err != nil || len(evs) != 1 {
		t.Fatalf("first: %v %v", evs, err)
	}
	big := strings.Repeat("x", 1<<20)
	for range 2 * MaxEventBytes >> 20 {
		if err := p.Publish("big", big); err != nil {
			t.Fatal(err)
		}
	}
	if p.logSize > MaxEventBytes || len(p.log) == 0 {
		t.Fatalf("the log keeps %d bytes in %d events, want at most %d", p.logSize, len(p.log), MaxEventBytes)
	}
	evs, err := sub.Next(t.Context())
	if err != nil || evs[0].Type != EventLost || evs[len(evs)-1].ID != p.lastID {
		t.Fatalf("behind subscriber: %v, %d events, first %+v", err, len(evs), evs[0].Type)
	}
	// One event larger than the cap is still kept, alone.
	if err := p.Publish("huge", strings.Repeat("y", MaxEventBytes+1)); err != nil {
		t.Fatal(err)
	}
	if len(p.log) != 1 || p.log[0].ID != p.lastID {
		t.Fatalf("after a huge event the log has %d events", len(p.log))
	}
}

// TestAbandonedWhenListenersLeave: a card opened while someone watched
// fails closed once the last subscriber leaves and none comes back within
// ListenerGrace, instead of waiting out its whole timeout; a reconnect
// inside the grace keeps it open.
func TestAbandonedWhenListenersLeave(t *testing.T) {
	tests := []struct {
		name      string
		reconnect time.Duration // after the last subscriber left; 0: never
		abandoned bool
	}{
		{name: "nobody comes back", abandoned: true},
		{name: "a stream reconnects within the grace", reconnect: ListenerGrace / 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New()
				sub := p.Subscribe(0)
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				type asked struct {
					c   Card
					a   Answer
					err error
				}
				done := make(chan asked, 1)
				go func() {
					c, a, err := p.Ask(ctx, Card{Kind: KindQuestion, Question: "go on?", AllowFreeText: true})
					done <- asked{c, a, err}
				}()
				synctest.Wait()
				if len(p.Cards()) != 1 {
					t.Fatalf("open cards %v", p.Cards())
				}
				begin := time.Now()
				sub.Close()
				if tc.reconnect > 0 {
					time.Sleep(tc.reconnect)
					again := p.Subscribe(0)
					defer again.Close()
					time.Sleep(2 * ListenerGrace)
					if len(p.Cards()) != 1 {
						t.Fatalf("the card closed although a subscriber came back: %v", p.Cards())
					}
					if err := p.Answer(1, Answer{Text: "yes"}, Operator); err != nil {
						t.Fatal(err)
					}
					if got := <-done; got.err != nil || got.a.Text != "yes" {
						t.Fatalf("ask: %+v", got)
					}
					return
				}
				got := <-done
				if !errors.Is(got.err, ErrNoSubscriber) || !strings.Contains(got.err.Error(), "abandoned") {
					t.Fatalf("ask err = %v, want an abandoned card (ErrNoSubscriber)", got.err)
				}
				if waited := time.Since(begin); waited != ListenerGrace {
					t.Errorf("abandoned after %v, want %v", waited, ListenerGrace)
				}
				if err := p.Answer(1, Answer{Text: "late"}, Operator); !errors.Is(err, ErrNoCard) {
					t.Errorf("answering an abandoned card: %v, want ErrNoCard", err)
				}
				late := p.Subscribe(0)
				defer late.Close()
				evs, err := late.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				last := evs[len(evs)-1]
				var cl Closed
				if err := json.Unmarshal(last.Data, &cl); err != nil || last.Type != EventCardClosed || cl.Outcome != Abandoned || cl.N != 1 {
					t.Errorf("last event %s %s, want card 1 closed as abandoned", last.Type, last.Data)
				}
			})
		})
	}
}

// TestCloseStopsAbandonTimer: a port closed while its cards wait for a
// subscriber leaves no timer behind to fire on it.
func TestCloseStopsAbandonTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New()
		sub := p.Subscribe(0)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := p.Ask(ctx, Card{Kind: KindQuestion, Question: "q", AllowFreeText: true})
			done <- err
		}()
		synctest.Wait()
		sub.Close()
		p.Close()
		cancel()
		if err := <-done; errors.Is(err, ErrNoSubscriber) {
			t.Errorf("ask err = %v after Close, want the run's closing", err)
		}
		time.Sleep(2 * ListenerGrace)
		synctest.Wait()
	})
}
