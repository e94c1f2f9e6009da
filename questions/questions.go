// Package questions is a run's question port: the numbered cards a run
// draws in the conversation — questions from ask_user and permission
// requests from the permission gate (docs/tools.md §9, ASK-1..3) — and the
// run's event stream that carries them.
//
// A [Port] numbers cards 1, 2, 3 … per run, whatever their kind. [Port.Ask]
// opens a card and blocks until [Port.Answer] answers it or its context
// ends; an answer that does not fit the card is refused and the card stays
// open. Every change is an [Event] in one stream with increasing ids; a
// [Subscription] reads it from any id still retained (at most [MaxEvents]),
// which is how the HTTP API resumes an SSE stream from Last-Event-ID.
// Other parts of a run (vibe workers, bridges) add their own event types
// with [Port.Publish].
//
// A port's state survives a berth restart through [Port.Snapshot] and
// [Port.Restore] (see there for what an answer to a card asked before the
// restart does).
//
// The port fails closed: with no subscriber connected, Ask fails at once
// with [ErrNoSubscriber] instead of waiting for nobody, and when the last
// subscriber leaves while cards are open and none returns within
// [ListenerGrace], those cards close as abandoned and their Ask calls fail
// with ErrNoSubscriber too.
package questions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// MaxEvents is how many events a port keeps for replay. A subscriber that
// falls further behind gets an [EventLost] event and continues with the
// oldest event still kept.
const MaxEvents = 1024

// MaxEventBytes bounds the data of the events a port keeps for replay, the
// same way: a permission card carries its whole call (up to 256 KiB of
// text, more as JSON), so 1024 of them must not all stay in memory.
const MaxEventBytes = 32 << 20

// MaxOpenCards caps the cards open at once on one port; Ask beyond it fails.
const MaxOpenCards = 256

// ListenerGrace is how long open cards wait for a subscriber after the
// last one left — long enough for an event stream to reconnect with
// Last-Event-ID — before they close as [Abandoned].
const ListenerGrace = 15 * time.Second

// Event types the port itself publishes.
const (
	// EventCardOpened carries the [Card].
	EventCardOpened = "card.opened"
	// EventCardClosed carries a [Closed]: answered, skipped, timed out,
	// cancelled, or closed with the run.
	EventCardClosed = "card.closed"
	// EventLost tells a subscriber that events were dropped before it read
	// them; data is {"after": id, "next": id}. Fetch GET …/cards for the
	// open cards.
	EventLost = "events.lost"
	// EventRestarting is the last event of a stream whose port was
	// detached ([Port.Detach]): berth is restarting and the run lives
	// on; follow it again on the next berth with Last-Event-ID. It is not
	// in the port's log (the HTTP API writes it when Next returns
	// [ErrRestarting]).
	EventRestarting = "restarting"
)

// Errors of the port. Test them with errors.Is.
var (
	// ErrNoSubscriber: nobody is connected to see the card (fail-closed).
	ErrNoSubscriber = errors.New("no one is connected to answer")
	// ErrNoCard: no open card has that number (it never existed, or it was
	// already answered, skipped, timed out or cancelled).
	ErrNoCard = errors.New("no open card")
	// ErrBadAnswer: the answer does not fit the card (HTTP 400); the card
	// stays open.
	ErrBadAnswer = errors.New("bad answer")
	// ErrClosed: the port closed with its run.
	ErrClosed = errors.New("question port closed")
	// ErrRestarting: the port was detached because berth is restarting
	// and hands the run over to the next berth ([Port.Detach]); it wraps
	// ErrClosed.
	ErrRestarting = fmt.Errorf("%w: berth is restarting and the next berth serves the run", ErrClosed)
	// ErrNotAllowed: the one answering may not answer a card of this kind
	// (a harness answering a permission card); the card stays open.
	ErrNotAllowed = errors.New("not allowed to answer this card")
)

// Rights is what the one answering a card may answer. [Port.Answer]
// checks it under the lock that finds the card, so a card that opens
// between a caller's look and its answer is judged as it is.
type Rights uint8

const (
	// MayAnswerQuestions: question cards (ask_user), which a harness answers.
	MayAnswerQuestions Rights = 1 << iota
	// MayAnswerPermissions: permission cards, which only an operator
	// answers — never the credential whose call drew the card.
	MayAnswerPermissions
	// Operator may answer every card.
	Operator = MayAnswerQuestions | MayAnswerPermissions
)

// allows reports whether r may answer a card of kind k.
func (r Rights) allows(k Kind) bool {
	if k == KindQuestion {
		return r&MayAnswerQuestions != 0
	}
	return r&MayAnswerPermissions != 0
}

// Kind is what a card asks.
type Kind string

const (
	KindQuestion   Kind = "question"   // ask_user
	KindPermission Kind = "permission" // the permission gate: may a tool run?
)

// Option is one choice of a question card.
type Option struct {
	Label       string `json:"label" jsonschema:"the choice as shown; answers name it exactly"`
	Description string `json:"description,omitempty" jsonschema:"what choosing it means"`
}

// Decision answers a permission card.
type Decision string

const (
	Approve  Decision = "approve"   // run this call
	Deny     Decision = "deny"      // refuse this call
	AllowRun Decision = "allow_run" // run it, and allow this tool for the rest of the run
)

// Card is one numbered card. Question cards use Question … MultiSelect;
// permission cards use Tool … TooLarge.
type Card struct {
	N      int       `json:"n"`
	Kind   Kind      `json:"kind"`
	Opened time.Time `json:"opened"`
	// Deadline is when the card times out, if it does.
	Deadline time.Time `json:"deadline,omitzero"`

	Question      string   `json:"question,omitempty"`
	Context       string   `json:"context,omitempty"`
	Options       []Option `json:"options,omitempty"`
	AllowFreeText bool     `json:"allow_free_text,omitempty"`
	MultiSelect   bool     `json:"multi_select,omitempty"`

	Tool    string `json:"tool,omitempty"`
	Level   string `json:"level,omitempty"`
	Surface string `json:"surface,omitempty"`
	// Summary is a short headline of the call's arguments.
	Summary string `json:"summary,omitempty"`
	// Detail is the whole call as an operator reads it (the cell's code,
	// the patch, the file's content …), written by the gate. It is the
	// caller's text, so a page shows it as text, never as markup.
	Detail string `json:"detail,omitempty"`
	// TooLarge says the call was too large to show whole in Detail, so the
	// card takes only a deny ([Check]).
	TooLarge bool `json:"too_large,omitempty"`

	// Restored says the card was asked before berth restarted: the call
	// that asked it ended with the old berth process (see [Port.Restore]).
	Restored bool `json:"restored,omitempty"`
}

// Answer answers a card: Choice, Text or Skip for a question, Decision for
// a permission request.
type Answer struct {
	Choice   []string `json:"choice,omitempty"`
	Text     string   `json:"text,omitempty"`
	Skip     bool     `json:"skip,omitempty"`
	Decision Decision `json:"decision,omitempty"`
	// By says who answered, for the audit trail: set by berth from the
	// answerer's credential (a value a client sends is replaced).
	By string `json:"by,omitempty"`
}

// Outcome is how a card closed.
type Outcome string

const (
	Answered  Outcome = "answered"
	Skipped   Outcome = "skipped"
	TimedOut  Outcome = "timeout"
	Cancelled Outcome = "cancelled" // the waiting call went away
	RunClosed Outcome = "closed"    // the port closed with its run
	Abandoned Outcome = "abandoned" // every subscriber left and none came back within ListenerGrace
	// Expired: the card was open when berth restarted and the call it
	// guarded ended with the old berth process (permission cards).
	Expired Outcome = "expired"
)

// Closed is the data of an [EventCardClosed] event.
type Closed struct {
	N       int     `json:"n"`
	Kind    Kind    `json:"kind"`
	Outcome Outcome `json:"outcome"`
	Answer  *Answer `json:"answer,omitempty"`
	// Note says more when the card was asked before berth restarted.
	Note string `json:"note,omitempty"`
}

// Event is one entry of a run's event stream.
type Event struct {
	ID   uint64          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// Port is one run's question port and event stream. It is safe for
// concurrent use; the zero value is not usable, call [New].
type Port struct {
	mu     sync.Mutex
	closed bool
	// detached is set with closed by Detach: subscribers are told
	// ErrRestarting, not ErrClosed.
	detached bool
	nextN    int
	open     map[int]*waiter
	log      []Event // the last events, oldest first: at most MaxEvents, and MaxEventBytes of data but for the newest
	logSize  int     // bytes of data in log
	lastID   uint64
	// dropped is the highest event id no longer kept (0: none dropped).
	// Ids are increasing but not contiguous across a restore.
	dropped uint64
	changed chan struct{} // closed and replaced on every event
	subs    int
	// orphaned runs abandon when the last subscriber left with cards open;
	// a new subscriber or Close stops it.
	orphaned *time.Timer
	// gen counts changes Snapshot reflects (Generation).
	gen uint64
	// unclaimed are answers to restored cards that no call has taken yet,
	// oldest first, at most MaxUnclaimed.
	unclaimed []Unclaimed
	// lostFrom ≤ n < lostTo are the card numbers skipped at the last
	// restore (RestoreCardSkip).
	lostFrom, lostTo int
}

type waiter struct {
	card Card
	ans  chan Answer   // buffered 1; sent under mu when answered
	gone chan struct{} // closed under mu when the card is abandoned
	// restored: the card came from a snapshot and its call ended with the
	// old berth process; adopted: a call asking the same question waits
	// on it now (see Port.Ask). expire closes a restored card that no
	// call adopted at its deadline.
	restored, adopted bool
	expire            *time.Timer
}

// stopExpire stops w's restore deadline timer. p.mu must be held.
func (w *waiter) stopExpire() {
	if w.expire != nil {
		w.expire.Stop()
		w.expire = nil
	}
}

// New returns an open port with no cards and no subscribers.
func New() *Port {
	return &Port{nextN: 1, open: map[int]*waiter{}, changed: make(chan struct{})}
}

// Connected reports whether anyone is subscribed.
func (p *Port) Connected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.subs > 0 && !p.closed
}

// Publish adds an event of type typ with data marshalled as JSON. Other
// parts of a run use it for their own event types (for example
// "worker.done"). It fails only when data cannot be marshalled or the
// port is closed.
func (p *Port) Publish(typ string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("questions: event %s: %w", typ, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("questions: event %s: %w", typ, ErrClosed)
	}
	p.publishLocked(typ, b)
	return nil
}

func (p *Port) publishLocked(typ string, data json.RawMessage) {
	p.lastID++
	p.gen++
	p.log = append(p.log, Event{ID: p.lastID, Type: typ, Data: data})
	p.logSize += len(data)
	drop := 0
	for len(p.log)-drop > 1 && (len(p.log)-drop > MaxEvents || p.logSize > MaxEventBytes) {
		p.logSize -= len(p.log[drop].Data)
		drop++
	}
	if drop > 0 {
		p.dropped = p.log[drop-1].ID
		n := copy(p.log, p.log[drop:])
		clear(p.log[n:])
		p.log = p.log[:n]
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain types are marshalled here
	}
	return b
}

// Cards returns the open cards, lowest number first.
func (p *Port) Cards() []Card {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Card, 0, len(p.open))
	for n := 1; n < p.nextN && len(out) < len(p.open); n++ {
		if w, ok := p.open[n]; ok {
			out = append(out, w.card)
		}
	}
	return out
}

// Ask opens card c (its N and Opened are set by the port) and waits for an
// answer. ctx bounds the wait: when it ends the card closes as timed out
// (ctx's deadline passed) or cancelled, and Ask returns ctx's error. With
// no subscriber connected Ask fails at once with ErrNoSubscriber; a
// question card with invalid options fails with ErrBadAnswer.
//
// A question asked before berth restarted (a restored card, [Card.Restored])
// is not asked twice: when c asks the same question (same question,
// context, options and flags) as a restored card answered since the
// restore, Ask returns that card and its answer at once, subscriber or not;
// when it asks the same question as a restored card still open, Ask waits
// on that card (same number) instead of opening a new one.
func (p *Port) Ask(ctx context.Context, c Card) (Card, Answer, error) {
	if c.Kind == KindQuestion {
		if err := CheckOptions(c.Options); err != nil {
			return c, Answer{}, err
		}
	}
	if dl, ok := ctx.Deadline(); ok && c.Deadline.IsZero() {
		c.Deadline = dl
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return c, Answer{}, fmt.Errorf("questions: %w: the run is closing", ErrClosed)
	}
	if u, ok := p.claimLocked(c); ok {
		p.mu.Unlock()
		return u.Card, u.Answer, nil
	}
	if p.subs == 0 {
		p.mu.Unlock()
		return c, Answer{}, fmt.Errorf("questions: %w: nobody is subscribed to the run's events (GET /v1/runs/{id}/events), so no one would see the card", ErrNoSubscriber)
	}
	w := p.adoptLocked(c)
	if w == nil {
		if len(p.open) >= MaxOpenCards {
			p.mu.Unlock()
			return c, Answer{}, fmt.Errorf("questions: %d cards are already open: wait for answers before asking more", MaxOpenCards)
		}
		c.N = p.nextN
		p.nextN++
		c.Opened = time.Now()
		w = &waiter{card: c, ans: make(chan Answer, 1), gone: make(chan struct{})}
		p.open[c.N] = w
		p.publishLocked(EventCardOpened, mustJSON(c))
	}
	c = w.card
	p.mu.Unlock()

	select {
	case a := <-w.ans:
		return c, a, nil
	case <-w.gone:
		return c, Answer{}, fmt.Errorf("questions: card %d %s: %w: everyone watching the run's events left and no one came back within %v", c.N, Abandoned, ErrNoSubscriber, ListenerGrace)
	case <-ctx.Done():
	}
	p.mu.Lock()
	if _, still := p.open[c.N]; still {
		delete(p.open, c.N)
		out := Cancelled
		switch {
		case p.closed:
			out = RunClosed
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			out = TimedOut
		}
		if !p.closed {
			p.publishLocked(EventCardClosed, mustJSON(Closed{N: c.N, Kind: c.Kind, Outcome: out}))
		}
		p.mu.Unlock()
		return c, Answer{}, fmt.Errorf("questions: card %d %s: %w", c.N, out, ctx.Err())
	}
	p.mu.Unlock()
	return c, <-w.ans, nil // answered while ctx ended: the answer wins
}

// Answer answers open card n on behalf of one holding rights. It fails
// with ErrNoCard when no card n is open, with ErrNotAllowed when rights do
// not cover the card's kind, and with ErrBadAnswer when a does not fit the
// card; the card then stays open. The rights are checked under the same
// lock that finds the card.
func (p *Port) Answer(n int, a Answer, rights Rights) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("questions: card %d: %w", n, ErrClosed)
	}
	w, ok := p.open[n]
	if !ok {
		if p.lostFrom <= n && n < p.lostTo {
			return fmt.Errorf("questions: card %d: %w: berth restarted, and card %d, if it was asked just before the restart, was not saved and is gone; list the open cards with GET /v1/runs/{id}/cards", n, ErrNoCard, n)
		}
		return fmt.Errorf("questions: card %d: %w: it was never opened, or was already answered, skipped, timed out or cancelled; list the open cards with GET /v1/runs/{id}/cards", n, ErrNoCard)
	}
	if !rights.allows(w.card.Kind) {
		return fmt.Errorf("questions: card %d is a %s card: %w", n, w.card.Kind, ErrNotAllowed)
	}
	if err := Check(w.card, a); err != nil {
		return fmt.Errorf("questions: card %d: %w", n, err)
	}
	delete(p.open, n)
	out := Answered
	if a.Skip {
		out = Skipped
	}
	cl := Closed{N: n, Kind: w.card.Kind, Outcome: out, Answer: &a}
	if w.restored && !w.adopted {
		// The call that asked it ended with the old berth process: keep
		// the answer for the call that asks again, or the next one.
		w.stopExpire()
		p.unclaimed = append(p.unclaimed, Unclaimed{Card: w.card, Answer: a})
		if len(p.unclaimed) > MaxUnclaimed {
			p.unclaimed = slices.Delete(p.unclaimed, 0, len(p.unclaimed)-MaxUnclaimed)
		}
		cl.Note = fmt.Sprintf("card %d was asked before berth restarted and the call that asked it ended with the old berth process; the answer is kept: a retry of the same question gets it as its answer, and the next ask_user call reports it", n)
	} else {
		w.ans <- a
	}
	p.publishLocked(EventCardClosed, mustJSON(cl))
	return nil
}

// Close closes the port: open cards close (their Ask calls return
// ErrClosed once their contexts end — the run cancels them), and
// subscribers' Next returns ErrClosed after the events they have not read.
// It is idempotent and returns nil, to be used as a run closer.
func (p *Port) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	for n, w := range p.open {
		w.stopExpire()
		p.publishLocked(EventCardClosed, mustJSON(Closed{N: n, Kind: w.card.Kind, Outcome: RunClosed}))
	}
	p.stopOrphanedLocked()
	p.closed = true
	p.gen++
	close(p.changed)
	p.changed = make(chan struct{})
	return nil
}

// Detach closes the port for a berth that restarts while the run lives
// on: the open cards are not closed (they are in the run's record, for
// the next berth), and subscribers' Next returns ErrRestarting after the
// events they have not read. It is idempotent, and a no-op after Close.
func (p *Port) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	for _, w := range p.open {
		w.stopExpire()
	}
	p.stopOrphanedLocked()
	p.closed = true
	p.detached = true
	p.gen++
	close(p.changed)
	p.changed = make(chan struct{})
	return nil
}

// Subscribe connects a subscriber that reads events after id after (0: every
// event still kept; an id the port has not issued yet: only new events). While it is open the port counts as connected, so
// Ask draws cards instead of failing. The caller must Close it.
func (p *Port) Subscribe(after uint64) *Subscription {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subs++
	p.stopOrphanedLocked()
	if after > p.lastID {
		after = p.lastID // an id this port never issued: follow from now
	}
	return &Subscription{p: p, after: after}
}

// Subscription reads a port's events in order. It is not safe for
// concurrent use by several goroutines.
type Subscription struct {
	p      *Port
	after  uint64
	closed sync.Once
}

// Next returns the events after the last one returned, waiting until there
// is one, ctx ends (ctx's error) or the port closes with nothing left to
// read (ErrClosed). When events the subscriber had not read were dropped,
// the first event returned is an [EventLost] event, with ID 0.
func (s *Subscription) Next(ctx context.Context) ([]Event, error) {
	for {
		s.p.mu.Lock()
		var out []Event
		log := s.p.log
		if s.after < s.p.dropped {
			if s.after > 0 { // a fresh subscriber lost nothing it had seen
				next := s.p.lastID + 1
				if len(log) > 0 {
					next = log[0].ID
				}
				out = append(out, Event{Type: EventLost, Data: mustJSON(map[string]uint64{"after": s.after, "next": next})})
			}
			s.after = s.p.dropped
		}
		// Ids increase but jump at a restore: find the first one after.
		if i := sort.Search(len(log), func(i int) bool { return log[i].ID > s.after }); i < len(log) {
			out = append(out, log[i:]...)
			s.after = log[len(log)-1].ID
		}
		closed, detached, changed := s.p.closed, s.p.detached, s.p.changed
		s.p.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if detached {
			return nil, ErrRestarting
		}
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close disconnects the subscriber. It is idempotent. When it was the last
// one and cards are open, they close as abandoned unless a subscriber
// connects within [ListenerGrace].
func (s *Subscription) Close() {
	s.closed.Do(func() {
		p := s.p
		p.mu.Lock()
		defer p.mu.Unlock()
		p.subs--
		if p.subs == 0 && !p.closed && len(p.open) > 0 && p.orphaned == nil {
			p.orphaned = time.AfterFunc(ListenerGrace, p.abandon)
		}
	})
}

func (p *Port) stopOrphanedLocked() {
	if p.orphaned != nil {
		p.orphaned.Stop()
		p.orphaned = nil
	}
}

// abandon closes every open card when still nobody is subscribed.
func (p *Port) abandon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.orphaned = nil
	if p.subs > 0 || p.closed {
		return
	}
	for n := 1; n < p.nextN && len(p.open) > 0; n++ {
		w, ok := p.open[n]
		if !ok {
			continue
		}
		delete(p.open, n)
		w.stopExpire()
		close(w.gone)
		p.publishLocked(EventCardClosed, mustJSON(Closed{N: n, Kind: w.card.Kind, Outcome: Abandoned}))
	}
}
