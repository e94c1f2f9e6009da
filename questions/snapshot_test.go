package questions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/sealed"
)

var which = Card{Kind: KindQuestion, Question: "Which database?", Context: "the schema depends on it", Options: []Option{{Label: "postgres"}, {Label: "sqlite"}}}

// asking opens card c on p in a goroutine, as a blocked ask_user call
// does, and returns its number once it is open. The call ends when the
// test does.
func asking(t *testing.T, p *Port, c Card, timeout time.Duration) int {
	t.Helper()
	before := len(p.Cards())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	go p.Ask(ctx, c)
	for {
		cards := p.Cards()
		if len(cards) > before {
			return cards[len(cards)-1].N
		}
		time.Sleep(time.Millisecond)
	}
}

// restored returns a port restored from p's snapshot; p closes.
func restored(t *testing.T, p *Port) *Port {
	t.Helper()
	data, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	q := New()
	if err := q.Restore(data); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// drain reads every event a subscriber has now.
func drain(t *testing.T, s *Subscription) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	var out []Event
	for {
		evs, err := s.Next(ctx)
		if err != nil {
			return out
		}
		out = append(out, evs...)
	}
}

func closedOf(t *testing.T, e Event) Closed {
	t.Helper()
	var cl Closed
	if e.Type != EventCardClosed {
		t.Fatalf("event %d is %s, want %s: %s", e.ID, e.Type, EventCardClosed, e.Data)
	}
	if err := json.Unmarshal(e.Data, &cl); err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestSnapshotRoundTrip: what a restored port shows: the open question
// card with its number, the permission card expired, the replay window
// from a Last-Event-ID, ids and numbers continuing above the old ones.
func TestSnapshotRoundTrip(t *testing.T) {
	p := New()
	sub := p.Subscribe(0)
	p.Publish("worker.update", map[string]int{"i": 1})
	q1 := asking(t, p, which, time.Hour)
	perm := asking(t, p, Card{Kind: KindPermission, Tool: "eval", Summary: "print(1)", Detail: "print(1)"}, time.Hour)
	other := asking(t, p, Card{Kind: KindQuestion, Question: "Go on?", AllowFreeText: true}, time.Hour)
	if err := p.Answer(other, Answer{Text: "yes"}, Operator); err != nil {
		t.Fatal(err)
	}
	old := drain(t, sub)
	sub.Close()
	lastOld := old[len(old)-1].ID

	q := restored(t, p)
	cards := q.Cards()
	if len(cards) != 1 || cards[0].N != q1 || !cards[0].Restored || cards[0].Question != which.Question {
		t.Fatalf("open cards after restore: %+v, want card %d restored", cards, q1)
	}

	// Resume from the second event: the rest of the old window, then the
	// restart, then the permission card's expiry.
	s := q.Subscribe(old[1].ID)
	defer s.Close()
	evs := drain(t, s)
	if len(evs) != len(old)-2+2 {
		t.Fatalf("resumed %d events, want %d: %+v", len(evs), len(old), evs)
	}
	for i, e := range old[2:] {
		if evs[i].ID != e.ID || evs[i].Type != e.Type || !bytes.Equal(evs[i].Data, e.Data) {
			t.Errorf("replayed event %d = %+v, want %+v", i, evs[i], e)
		}
	}
	rs := evs[len(old)-2]
	var r Restart
	if err := json.Unmarshal(rs.Data, &r); err != nil || rs.Type != EventRestored || rs.ID != lastOld+RestoreEventGap+1 || r.After != lastOld || r.Next != rs.ID || len(r.Open) != 1 || r.Open[0] != q1 {
		t.Errorf("restart event %d %s %s (%v)", rs.ID, rs.Type, rs.Data, err)
	}
	if cl := closedOf(t, evs[len(evs)-1]); cl.N != perm || cl.Outcome != Expired || !strings.Contains(cl.Note, "did not run") {
		t.Errorf("permission card closed as %+v", cl)
	}

	// New ids and numbers go on above the old ones.
	if err := q.Publish("worker.update", 2); err != nil {
		t.Fatal(err)
	}
	if e := drain(t, s); len(e) != 1 || e[0].ID != rs.ID+2 {
		t.Errorf("the next event: %+v, want id %d", e, rs.ID+2)
	}
	if n := asking(t, q, Card{Kind: KindQuestion, Question: "New?", AllowFreeText: true}, time.Hour); n != other+1+RestoreCardSkip {
		t.Errorf("the next card is %d, want %d", n, other+1+RestoreCardSkip)
	}
	// A number skipped at the restore is refused, saying why.
	if err := q.Answer(other+1, Answer{Text: "x"}, Operator); !errors.Is(err, ErrNoCard) || !strings.Contains(err.Error(), "not saved") {
		t.Errorf("answer to a skipped number: %v", err)
	}

	// The same port survives a second restart.
	q2 := restored(t, q)
	if c := q2.Cards(); len(c) != 2 || c[0].N != q1 || !c[1].Restored {
		t.Errorf("after a second restart: %+v", c)
	}
	s2 := q2.Subscribe(rs.ID)
	defer s2.Close()
	if e := drain(t, s2); len(e) < 2 || e[0].ID != rs.ID+1 || e[len(e)-1].Type != EventRestored || e[len(e)-1].ID <= rs.ID+2+RestoreEventGap {
		t.Errorf("after a second restart, from %d: %+v", rs.ID, e)
	}
}

// TestRestoredCardAnswer: the call that asked a restored card is gone; its
// answer is kept and given to the call that asks the same question, or
// taken by TakeUnclaimed; a call asking it while it is open waits on it.
func TestRestoredCardAnswer(t *testing.T) {
	tests := []struct {
		name string
		// answer before the retry; nil: the retry comes first
		answer *Answer
		retry  Card
		// want: the retry's answer ("" when it opens a new card)
		want      string
		unclaimed int // left for TakeUnclaimed after the retry
	}{
		{name: "answered, then retried", answer: &Answer{Choice: []string{"sqlite"}}, retry: which, want: "sqlite"},
		{name: "skipped, then retried", answer: &Answer{Skip: true}, retry: which, want: "skip"},
		{name: "retried while open, then answered", retry: which, want: "postgres"},
		{name: "answered, another question asked", answer: &Answer{Choice: []string{"sqlite"}},
			retry: Card{Kind: KindQuestion, Question: "Which database?", Options: which.Options}, unclaimed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			sub := p.Subscribe(0)
			n := asking(t, p, which, time.Hour)
			sub.Close()
			q := restored(t, p)
			events := q.Subscribe(0)
			defer events.Close()
			drain(t, events)
			if tt.answer != nil {
				if err := q.Answer(n, *tt.answer, Operator); err != nil {
					t.Fatal(err)
				}
				cl := closedOf(t, drain(t, events)[0])
				if cl.N != n || !strings.Contains(cl.Note, "the answer is kept") {
					t.Errorf("closed event %+v", cl)
				}
			}
			type asked struct {
				c   Card
				a   Answer
				err error
			}
			done := make(chan asked, 1)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			g := q.Generation()
			go func() {
				c, a, err := q.Ask(ctx, tt.retry)
				done <- asked{c, a, err}
			}()
			if tt.answer == nil {
				// The retry waits on the restored card: no new card.
				for q.Generation() == g {
					time.Sleep(time.Millisecond)
				}
				if c := q.Cards(); len(c) != 1 || c[0].N != n {
					t.Fatalf("the retry opened a card: %+v", c)
				}
				if err := q.Answer(n, Answer{Choice: []string{"postgres"}}, Operator); err != nil {
					t.Fatal(err)
				}
			}
			if tt.want == "" {
				for len(q.Cards()) == 0 {
					time.Sleep(time.Millisecond)
				}
				if c := q.Cards(); c[0].N == n || c[0].Restored {
					t.Errorf("another question got the restored card: %+v", c)
				}
				cancel()
				<-done
			} else {
				got := <-done
				answer := strings.Join(got.a.Choice, ",")
				if got.a.Skip {
					answer = "skip"
				}
				if got.err != nil || got.c.N != n || !got.c.Restored || answer != tt.want {
					t.Errorf("retry got card %d (restored %v) %q, %v; want card %d %q", got.c.N, got.c.Restored, answer, got.err, n, tt.want)
				}
			}
			if u := q.TakeUnclaimed(); len(u) != tt.unclaimed {
				t.Errorf("unclaimed %+v, want %d", u, tt.unclaimed)
			}
			if u := q.TakeUnclaimed(); len(u) != 0 {
				t.Errorf("taken twice: %+v", u)
			}
		})
	}
}

// TestRestoredAnswerNeedsNoSubscriber: the kept answer is given to the
// retry even when nobody watches the events (nothing is asked).
func TestRestoredAnswerNeedsNoSubscriber(t *testing.T) {
	p := New()
	sub := p.Subscribe(0)
	n := asking(t, p, which, time.Hour)
	sub.Close()
	q := restored(t, p)
	if err := q.Answer(n, Answer{Choice: []string{"postgres"}}, Operator); err != nil {
		t.Fatal(err)
	}
	c, a, err := q.Ask(t.Context(), which)
	if err != nil || c.N != n || a.Choice[0] != "postgres" {
		t.Fatalf("retry: card %d %+v %v", c.N, a, err)
	}
	if _, _, err := q.Ask(t.Context(), which); !errors.Is(err, ErrNoSubscriber) {
		t.Errorf("a second ask of the same question: %v, want a new card (ErrNoSubscriber here)", err)
	}
}

// TestRestoredCardDeadline: a restored card no call waits on closes as
// timed out at its deadline, or at once when it passed during the restart.
func TestRestoredCardDeadline(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		down    time.Duration // berth down between snapshot and restore
		open    bool          // still open right after the restore
	}{
		{"deadline later", time.Hour, time.Minute, true},
		{"deadline passed while down", time.Minute, time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New()
				sub := p.Subscribe(0)
				ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
				defer cancel()
				go p.Ask(ctx, which)
				synctest.Wait()
				data, err := p.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				sub.Close()
				p.Close()
				time.Sleep(tt.down)
				q := New()
				defer q.Close()
				if err := q.Restore(data); err != nil {
					t.Fatal(err)
				}
				if got := len(q.Cards()) == 1; got != tt.open {
					t.Fatalf("open after restore: %v, want %v", got, tt.open)
				}
				time.Sleep(tt.timeout)
				synctest.Wait()
				if c := q.Cards(); len(c) != 0 {
					t.Errorf("still open after its deadline: %+v", c)
				}
				s := q.Subscribe(0)
				defer s.Close()
				evs, _ := s.Next(context.Background())
				if cl := closedOf(t, evs[len(evs)-1]); cl.Outcome != TimedOut || !strings.Contains(cl.Note, "before berth restarted") {
					t.Errorf("closed as %+v", cl)
				}
				if err := q.Answer(1, Answer{Choice: []string{"sqlite"}}, Operator); !errors.Is(err, ErrNoCard) {
					t.Errorf("answer after the deadline: %v", err)
				}
			})
		})
	}
}

// TestSnapshotReplayWindowBounded: a snapshot keeps at most
// MaxSnapshotEventBytes of event data; a subscriber resuming from before
// what it kept is told events were lost.
func TestSnapshotReplayWindowBounded(t *testing.T) {
	p := New()
	big := strings.Repeat("x", 1<<20)
	for range MaxSnapshotEventBytes>>20 + 4 {
		p.Publish("big", big)
	}
	data, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > MaxSnapshotEventBytes+64<<10 {
		t.Errorf("snapshot is %d bytes, want at most about %d", len(data), MaxSnapshotEventBytes)
	}
	q := New()
	defer q.Close()
	if err := q.Restore(data); err != nil {
		t.Fatal(err)
	}
	s := q.Subscribe(2)
	defer s.Close()
	evs := drain(t, s)
	if evs[0].Type != EventLost || evs[1].Type != "big" || evs[len(evs)-1].Type != EventRestored {
		t.Fatalf("resumed from 2: %s, %s … %s", evs[0].Type, evs[1].Type, evs[len(evs)-1].Type)
	}
	if kept := len(evs) - 2; kept > MaxSnapshotEventBytes>>20 || kept == 0 {
		t.Errorf("kept %d events of 1 MiB", kept)
	}
}

// reseal seals a state with a right checksum, for tests of what Restore
// checks beyond it.
func reseal(t *testing.T, st portState) []byte {
	out, err := sealed.Marshal(snapshotFormat, st)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestoreRefusesBadData: garbage, a cut or damaged snapshot, a foreign
// format, a state out of range, or a port in use are refused with an
// error, and the port is left empty and usable.
func TestRestoreRefusesBadData(t *testing.T) {
	p := New()
	sub := p.Subscribe(0)
	asking(t, p, which, time.Hour)
	good, err := p.Snapshot()
	sub.Close()
	p.Close()
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Replace(good, []byte("database"), []byte("Database"), 1)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not readable"},
		{"garbage", []byte("\x00\x01garbage"), "not readable"},
		{"cut", good[:len(good)/2], "not readable"},
		{"damaged", damaged, "damaged"},
		{"other format", bytes.Replace(good, []byte(snapshotFormat), []byte("berth.questions.v9"), 1), "format"},
		{"card out of range", reseal(t, portState{NextN: 2, Cards: []Card{{N: 5, Kind: KindQuestion}}}), "card 5"},
		{"events out of order", reseal(t, portState{NextN: 1, LastID: 5, Events: []Event{{ID: 3, Type: "a", Data: json.RawMessage("1")}, {ID: 2, Type: "b", Data: json.RawMessage("1")}}}), "out of order"},
		{"no card number", reseal(t, portState{NextN: 0}), "next card number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New()
			defer q.Close()
			err := q.Restore(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore = %v, want an error saying %q", err, tt.want)
			}
			usable(t, q)
		})
	}
	t.Run("port in use", func(t *testing.T) {
		q := New()
		defer q.Close()
		q.Publish("x", 1)
		if err := q.Restore(good); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("Restore on a used port = %v", err)
		}
		if len(q.Cards()) != 0 {
			t.Errorf("a refused restore left cards: %+v", q.Cards())
		}
	})
}

// usable checks that q is empty and works as New made it.
func usable(t *testing.T, q *Port) {
	t.Helper()
	if q.Generation() != 0 || len(q.Cards()) != 0 {
		t.Fatalf("not empty: generation %d, cards %+v", q.Generation(), q.Cards())
	}
	s := q.Subscribe(0)
	defer s.Close()
	if n := asking(t, q, which, time.Hour); n != 1 {
		t.Errorf("first card is %d, want 1", n)
	}
	if evs := drain(t, s); len(evs) != 1 || evs[0].ID != 1 {
		t.Errorf("events %+v, want one with id 1", evs)
	}
}

// TestGeneration: Generation changes exactly when the snapshot does.
func TestGeneration(t *testing.T) {
	p := New()
	defer p.Close()
	var sub *Subscription
	var n int
	steps := []struct {
		name   string
		do     func()
		change bool
	}{
		{"subscribe", func() { sub = p.Subscribe(0) }, false},
		{"publish", func() { p.Publish("x", 1) }, true},
		{"read", func() { drain(t, sub); p.Cards(); p.Connected() }, false},
		{"ask", func() { n = asking(t, p, which, time.Hour) }, true},
		{"bad answer", func() { p.Answer(n, Answer{Choice: []string{"mysql"}}, Operator) }, false},
		{"answer unknown card", func() { p.Answer(n+1, Answer{Skip: true}, Operator) }, false},
		{"take nothing", func() { p.TakeUnclaimed() }, false},
		{"answer", func() { p.Answer(n, Answer{Skip: true}, Operator) }, true},
		{"unsubscribe", func() { sub.Close() }, false},
	}
	snap := func() []byte {
		b, err := p.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, st := range steps {
		g, b := p.Generation(), snap()
		st.do()
		g2, b2 := p.Generation(), snap()
		if (g2 != g) != st.change || bytes.Equal(b, b2) == st.change {
			t.Errorf("%s: generation %d → %d, snapshot changed %v; want changed %v", st.name, g, g2, !bytes.Equal(b, b2), st.change)
		}
	}
}
