package questions

import (
	"context"
	"errors"
	"testing"
)

// TestDetachTellsRestarting: a port detached because berth restarts
// (issue 33, finding 4) tells its subscribers ErrRestarting, not a plain
// ErrClosed, and does not close its open cards: they are kept in the
// run's record for the next berth, and no card.closed event says "closed
// with the run".
func TestDetachTellsRestarting(t *testing.T) {
	p := New()
	sub := p.Subscribe(0)
	defer sub.Close()
	ctx, cancel := context.WithCancel(t.Context())
	asked := make(chan error, 1)
	go func() { // ends when ctx is cancelled below
		_, _, err := p.Ask(ctx, Card{Kind: KindQuestion, Question: "which?", Options: []Option{{Label: "A"}, {Label: "B"}}})
		asked <- err
	}()
	if evs, err := sub.Next(t.Context()); err != nil || len(evs) != 1 || evs[0].Type != EventCardOpened {
		t.Fatalf("first events: %v %+v", err, evs)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	evs, err := sub.Next(t.Context())
	if !errors.Is(err, ErrRestarting) || !errors.Is(err, ErrClosed) || len(evs) != 0 {
		t.Fatalf("after Detach: %+v %v; want no event and ErrRestarting (an ErrClosed)", evs, err)
	}
	if cards := p.Cards(); len(cards) != 1 || cards[0].N != 1 {
		t.Fatalf("open cards after Detach: %+v; want card 1 still open", cards)
	}
	cancel() // the run's context ends as berth lets go of it
	<-asked
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	late := p.Subscribe(0)
	defer late.Close()
	for {
		_, err := late.Next(t.Context())
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrRestarting) {
			t.Fatalf("a subscriber after Detach and Close: %v; want ErrRestarting (Close after Detach changes nothing)", err)
		}
		break
	}
}
