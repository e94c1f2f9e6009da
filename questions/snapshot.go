package questions

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"berth.dev/berth/sealed"
)

// Caps and gaps of a port's snapshot.
const (
	// MaxSnapshotEventBytes bounds the event data a snapshot keeps: the
	// newest events whose data fits, at most MaxEvents of them. A
	// subscriber that resumes from an older id after a restore gets an
	// [EventLost] event.
	MaxSnapshotEventBytes = 8 << 20
	// MaxUnclaimed bounds the answers to restored cards kept until a call
	// takes them; the oldest go first.
	MaxUnclaimed = MaxOpenCards
	// RestoreEventGap is how far event ids jump at a restore, so that no
	// id the old berth process sent after its last snapshot is used again
	// for another event.
	RestoreEventGap = 1 << 20
	// RestoreCardSkip is how far card numbers jump at a restore, for the
	// same reason: a card asked after the last snapshot must never share
	// its number with a new one, or an answer meant for it would answer
	// another question.
	RestoreCardSkip = 100
)

// EventRestored is the first event after a restore: berth restarted.
// Its data is a [Restart].
const EventRestored = "events.restored"

// Restart is the data of an [EventRestored] event.
type Restart struct {
	// After is the last event id the snapshot held: events the old berth
	// process sent after it (ids After+1 to Next-1) may be lost.
	After uint64 `json:"after"`
	// Next is this event's id: ids continue from here.
	Next uint64 `json:"next"`
	// Open are the question cards still open, asked before the restart.
	Open []int `json:"open"`
	// LostCards are the card numbers skipped (from, to exclusive): a card
	// asked just before the restart and not saved had one of them.
	LostCards [2]int `json:"lost_cards"`
	Note      string `json:"note"`
}

// Unclaimed is an answer to a card asked before berth restarted, given
// after the restore, that no call has taken yet ([Port.TakeUnclaimed]).
type Unclaimed struct {
	Card   Card   `json:"card"`
	Answer Answer `json:"answer"`
}

// snapshotFormat names the snapshot's encoding; Restore refuses others.
const snapshotFormat = "berth.questions.v1"

// portState is what a snapshot holds.
type portState struct {
	NextN     int         `json:"next_n"`
	LastID    uint64      `json:"last_id"`
	Dropped   uint64      `json:"dropped"`
	Events    []Event     `json:"events"`
	Cards     []Card      `json:"cards"`
	Unclaimed []Unclaimed `json:"unclaimed"`
}

// Generation counts the changes of the port's state that [Port.Snapshot]
// reflects: it changes exactly when the snapshot would. Subscribing,
// reading and a refused answer do not change it.
func (p *Port) Generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// Snapshot returns the port's state for [Port.Restore] on a port of a
// restarted berth: the card numbering, the open cards (a permission card
// without its Detail: it expires at the restore), the answers to restored
// cards not yet taken, the event ids and the newest events as a replay
// window (at most MaxEvents and MaxSnapshotEventBytes of data). It holds
// nothing the port does not hold: event data is the run's (a vibe spawn
// event carries its worker's token), so store it as the run's secrets.
// It fails only on a closed port.
func (p *Port) Snapshot() ([]byte, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("questions: snapshot: %w: the run is closed, there is nothing to keep", ErrClosed)
	}
	st := portState{NextN: p.nextN, LastID: p.lastID, Dropped: p.dropped, Cards: []Card{}, Unclaimed: slices.Clone(p.unclaimed)}
	keep, size := len(p.log), 0
	for keep > 0 && len(p.log[keep-1].Data)+size <= MaxSnapshotEventBytes {
		size += len(p.log[keep-1].Data)
		keep--
	}
	st.Events = slices.Clone(p.log[keep:])
	if keep > 0 {
		st.Dropped = p.log[keep-1].ID
	}
	for n := 1; n < p.nextN && len(st.Cards) < len(p.open); n++ {
		if w, ok := p.open[n]; ok {
			c := w.card
			if c.Kind == KindPermission {
				c.Detail = ""
			}
			st.Cards = append(st.Cards, c)
		}
	}
	p.mu.Unlock()
	b, err := sealed.Marshal(snapshotFormat, st)
	if err != nil {
		return nil, fmt.Errorf("questions: snapshot: %w", err)
	}
	return b, nil
}

// Restore loads a [Port.Snapshot] into a port fresh from [New], before
// anyone subscribes or asks. Data that is not a whole, undamaged snapshot
// is refused with an error and leaves the port as New made it.
//
// After a restore:
//   - Card numbers continue RestoreCardSkip above the snapshot's, and event
//     ids RestoreEventGap above its last one, so that no number or id the
//     old berth process gave out after its last snapshot is used again
//     (answering such a lost card fails with ErrNoCard saying so).
//   - The first new event is an [EventRestored] naming the open cards.
//     A subscriber resuming with Last-Event-ID gets the kept events after
//     it, then that event; one resuming from before the kept window gets
//     an [EventLost] event first.
//   - A permission card that was open closes at once as [Expired]: the call
//     it guarded ended with the old berth process and did not run; a retry
//     of the call draws a new card.
//   - A question card that was open stays open with its number, marked
//     Restored, and can be answered as before ([Port.Answer]); past its
//     deadline it closes as timed out. Since the ask_user call that asked
//     it ended with the old process, its answer is kept ([Unclaimed]): a
//     call asking the same question again gets it at once, without a new
//     card ([Port.Ask]); [Port.TakeUnclaimed] hands it to whatever reports
//     it otherwise. A call asking the same question while the card is
//     still open waits on that card.
func (p *Port) Restore(data []byte) error {
	st, err := decodeSnapshot(data)
	if err != nil {
		return fmt.Errorf("questions: restore: %w; the run's cards and events were not restored (the port starts empty)", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.subs > 0 || p.lastID > 0 || p.nextN != 1 || len(p.open) > 0 {
		return errors.New("questions: restore: the port is already in use: restore a snapshot into a new port, before anyone subscribes or asks")
	}
	p.nextN = st.NextN + RestoreCardSkip
	p.lostFrom, p.lostTo = st.NextN, p.nextN
	p.log = st.Events
	p.logSize = 0
	for _, e := range st.Events {
		p.logSize += len(e.Data)
	}
	p.dropped = st.Dropped
	p.lastID = st.LastID + RestoreEventGap
	p.unclaimed = st.Unclaimed

	now := time.Now()
	r := Restart{After: st.LastID, Next: p.lastID + 1, Open: []int{}, LostCards: [2]int{p.lostFrom, p.lostTo}}
	var closes []Closed
	for _, c := range st.Cards {
		c.Restored = true
		switch {
		case c.Kind == KindPermission:
			closes = append(closes, Closed{N: c.N, Kind: c.Kind, Outcome: Expired,
				Note: fmt.Sprintf("permission card %d was open when berth restarted: the %s call it guarded ended with the old berth process and did not run; a retry of the call draws a new card", c.N, c.Tool)})
		case !c.Deadline.IsZero() && !now.Before(c.Deadline):
			closes = append(closes, Closed{N: c.N, Kind: c.Kind, Outcome: TimedOut,
				Note: fmt.Sprintf("card %d was asked before berth restarted, and its deadline passed before the restore", c.N)})
		default:
			w := &waiter{card: c, ans: make(chan Answer, 1), gone: make(chan struct{}), restored: true}
			if !c.Deadline.IsZero() {
				w.expire = time.AfterFunc(c.Deadline.Sub(now), func() { p.expireRestored(w) })
			}
			p.open[c.N] = w
			r.Open = append(r.Open, c.N)
		}
	}
	r.Note = fmt.Sprintf("berth restarted: events the old berth process sent after id %d may be lost, and ids go on from %d. Cards %d to %d, if any were asked just before the restart, were not saved and are gone. The question cards still open (%v; GET /v1/runs/{id}/cards) can be answered as before; the ask_user calls that asked them ended, so their answers are kept for the next ask_user call.",
		st.LastID, r.Next, p.lostFrom, p.lostTo-1, r.Open)
	p.publishLocked(EventRestored, mustJSON(r))
	for _, cl := range closes {
		p.publishLocked(EventCardClosed, mustJSON(cl))
	}
	return nil
}

// expireRestored closes restored card w at its deadline, unless it was
// answered, closed or adopted by a call meanwhile.
func (p *Port) expireRestored(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.open[w.card.N] != w || w.adopted {
		return
	}
	w.expire = nil
	delete(p.open, w.card.N)
	p.publishLocked(EventCardClosed, mustJSON(Closed{N: w.card.N, Kind: w.card.Kind, Outcome: TimedOut,
		Note: fmt.Sprintf("card %d was asked before berth restarted and got no answer before its deadline", w.card.N)}))
}

// TakeUnclaimed returns the answers to cards asked before berth restarted
// that no call has taken yet, oldest first, and forgets them: whoever takes
// them reports them (ask_user does in its next result).
func (p *Port) TakeUnclaimed() []Unclaimed {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.unclaimed
	if len(out) > 0 {
		p.unclaimed = nil
		p.gen++
	}
	return out
}

// claimLocked takes the unclaimed answer to a restored question card that
// asks what c asks.
func (p *Port) claimLocked(c Card) (Unclaimed, bool) {
	if c.Kind != KindQuestion {
		return Unclaimed{}, false
	}
	for i, u := range p.unclaimed {
		if sameQuestion(u.Card, c) {
			p.unclaimed = slices.Delete(p.unclaimed, i, i+1)
			p.gen++
			return u, true
		}
	}
	return Unclaimed{}, false
}

// adoptLocked returns the open restored question card (lowest number
// first) that asks what c asks and no call waits on, now waited on by the
// caller with c's deadline; nil when there is none.
func (p *Port) adoptLocked(c Card) *waiter {
	if c.Kind != KindQuestion {
		return nil
	}
	var found *waiter
	for _, w := range p.open {
		if w.restored && !w.adopted && sameQuestion(w.card, c) && (found == nil || w.card.N < found.card.N) {
			found = w
		}
	}
	if found != nil {
		found.adopted = true
		found.stopExpire()
		found.card.Deadline = c.Deadline
		p.gen++
	}
	return found
}

// sameQuestion reports whether two question cards ask the same thing.
func sameQuestion(a, b Card) bool {
	return a.Kind == KindQuestion && b.Kind == KindQuestion &&
		a.Question == b.Question && a.Context == b.Context &&
		a.AllowFreeText == b.AllowFreeText && a.MultiSelect == b.MultiSelect &&
		slices.Equal(a.Options, b.Options)
}

// Bounds of a snapshot's numbers, far above any real run, so that the
// skips cannot overflow.
const (
	maxSnapshotCard = 1 << 40
	maxSnapshotID   = 1 << 60
)

// decodeSnapshot checks data and returns its state.
func decodeSnapshot(data []byte) (*portState, error) {
	var st portState
	if err := sealed.Unmarshal(data, snapshotFormat, &st); err != nil {
		return nil, err
	}
	switch {
	case st.NextN < 1 || st.NextN > maxSnapshotCard:
		return nil, fmt.Errorf("the snapshot's next card number %d is out of range", st.NextN)
	case st.LastID > maxSnapshotID || st.Dropped > st.LastID:
		return nil, fmt.Errorf("the snapshot's event ids (last %d, dropped %d) are out of range", st.LastID, st.Dropped)
	case len(st.Events) > MaxEvents:
		return nil, fmt.Errorf("the snapshot holds %d events, more than %d", len(st.Events), MaxEvents)
	case len(st.Cards) > MaxOpenCards:
		return nil, fmt.Errorf("the snapshot holds %d open cards, more than %d", len(st.Cards), MaxOpenCards)
	case len(st.Unclaimed) > MaxUnclaimed:
		return nil, fmt.Errorf("the snapshot holds %d unclaimed answers, more than %d", len(st.Unclaimed), MaxUnclaimed)
	}
	prev := st.Dropped
	for _, e := range st.Events {
		if e.ID <= prev || e.ID > st.LastID || e.Type == "" {
			return nil, fmt.Errorf("the snapshot's event %d (%q) is out of order or out of range", e.ID, e.Type)
		}
		prev = e.ID
	}
	seen := map[int]bool{}
	for _, c := range st.Cards {
		if c.N < 1 || c.N >= st.NextN || seen[c.N] || (c.Kind != KindQuestion && c.Kind != KindPermission) {
			return nil, fmt.Errorf("the snapshot's card %d (%q) is out of range, repeated or of an unknown kind", c.N, c.Kind)
		}
		seen[c.N] = true
	}
	for _, u := range st.Unclaimed {
		if u.Card.N < 1 || u.Card.N >= st.NextN || u.Card.Kind != KindQuestion {
			return nil, fmt.Errorf("the snapshot's unclaimed answer to card %d is out of range", u.Card.N)
		}
	}
	return &st, nil
}
