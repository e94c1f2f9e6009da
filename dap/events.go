package dap

import (
	"context"
	"slices"
	"sync"
	"unicode/utf8"

	godap "github.com/google/go-dap"
)

// State is what the adapter's events said about the debuggee, as of the
// last event. [Client.State] returns a copy.
type State struct {
	// Initialized is set by the initialized event: the adapter accepts
	// configuration (breakpoints, configurationDone).
	Initialized bool
	// Stopped is the last stopped event's body while the debuggee is
	// stopped; nil while it runs or before it first stops.
	Stopped *godap.StoppedEventBody
	// Stops counts stopped, exited and terminated events. Take it before
	// resuming and pass it to [Client.WaitStop] to wait for the next stop.
	Stops uint64
	// Process is the process event's body, when the adapter sent one.
	Process *godap.ProcessEventBody
	// Exited and ExitCode come from the exited event.
	Exited   bool
	ExitCode int
	// Terminated is set by the terminated event: the debug session is over.
	Terminated bool
	// Capabilities are the adapter's, from the initialize response and any
	// capabilities event.
	Capabilities godap.Capabilities
}

// Ended reports whether the debuggee exited or the session terminated.
func (s State) Ended() bool { return s.Exited || s.Terminated }

// OutputChunk is one output event's text as kept in the ring.
type OutputChunk struct {
	Category string // stdout, stderr, console or important
	Text     string
	// Offset is the position of Text's first byte in everything the
	// adapter sent, so a caller can tell which chunks it has already shown.
	Offset int64
}

// Subscription receives the events its filter accepts, in order, from its
// creation until [Subscription.Close] or the client's end. It queues up to
// MaxQueuedEvents for a slow reader.
type Subscription struct {
	c      *Client
	filter func(godap.EventMessage) bool
	notify chan struct{} // capacity 1: "the queue changed"

	mu      sync.Mutex // guards the fields below
	queue   []godap.EventMessage
	dropped int
	closed  bool
}

// events is the client's event side: the State, the subscribers and the
// output ring. handle is the one function that changes it from the wire.
type events struct {
	mu      sync.Mutex // guards the fields below; never held across I/O
	st      State
	changed chan struct{} // closed and replaced on every change of st
	ended   bool
	subs    []*Subscription
	out     ring
}

func (e *events) init(outputBytes int) {
	e.changed = make(chan struct{})
	e.out.limit = outputBytes
}

// updateLocked applies f to the state and wakes waiters.
func (e *events) updateLocked(f func(*State)) {
	f(&e.st)
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *events) setCapabilities(caps godap.Capabilities) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.updateLocked(func(s *State) { s.Capabilities = caps })
}

// resumed records that a resume request sent when the stop count was
// stops succeeded: the debuggee runs, unless it already stopped again (an
// adapter may send the next stopped event before the response).
func (e *events) resumed(stops uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.st.Stops == stops {
		e.updateLocked(func(s *State) { s.Stopped = nil })
	}
}

// handle records one event and hands it to the subscribers.
func (e *events) handle(m godap.EventMessage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch ev := m.(type) {
	case *godap.InitializedEvent:
		e.updateLocked(func(s *State) { s.Initialized = true })
	case *godap.StoppedEvent:
		body := ev.Body
		e.updateLocked(func(s *State) { s.Stopped = &body; s.Stops++ })
	case *godap.ContinuedEvent:
		e.updateLocked(func(s *State) { s.Stopped = nil })
	case *godap.ExitedEvent:
		e.updateLocked(func(s *State) { s.Stopped = nil; s.Exited = true; s.ExitCode = ev.Body.ExitCode; s.Stops++ })
	case *godap.TerminatedEvent:
		e.updateLocked(func(s *State) { s.Stopped = nil; s.Terminated = true; s.Stops++ })
	case *godap.ProcessEvent:
		body := ev.Body
		e.updateLocked(func(s *State) { s.Process = &body })
	case *godap.CapabilitiesEvent:
		caps := ev.Body.Capabilities
		e.updateLocked(func(s *State) { mergeCapabilities(&s.Capabilities, caps) })
	case *godap.OutputEvent:
		switch ev.Body.Category {
		case "", "console", "stdout", "stderr", "important":
			cat := ev.Body.Category
			if cat == "" {
				cat = "console"
			}
			e.out.add(cat, ev.Body.Output)
		}
	}
	for _, s := range e.subs {
		s.offer(m)
	}
}

// mergeCapabilities applies a capabilities event, which carries only the
// capabilities that changed; go-dap decodes it into the full struct, so
// only true flags can be merged.
func mergeCapabilities(dst *godap.Capabilities, src godap.Capabilities) {
	if src.SupportsCancelRequest {
		dst.SupportsCancelRequest = true
	}
	if src.SupportsConditionalBreakpoints {
		dst.SupportsConditionalBreakpoints = true
	}
	if src.SupportsHitConditionalBreakpoints {
		dst.SupportsHitConditionalBreakpoints = true
	}
	if src.SupportsLogPoints {
		dst.SupportsLogPoints = true
	}
	if src.SupportsTerminateRequest {
		dst.SupportsTerminateRequest = true
	}
}

// end wakes every waiter and subscriber once the client has ended.
func (e *events) end() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended = true
	close(e.changed)
	e.changed = make(chan struct{})
	for _, s := range e.subs {
		s.wake()
	}
}

// State returns a copy of what the events said so far.
func (c *Client) State() State {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	st := c.ev.st
	if st.Stopped != nil {
		b := *st.Stopped
		st.Stopped = &b
	}
	return st
}

// Capabilities returns the adapter's capabilities (zero before initialize).
func (c *Client) Capabilities() godap.Capabilities {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	return c.ev.st.Capabilities
}

// WaitFor waits until cond holds for the state and returns that state. It
// returns the state and an error when ctx ends or the client ends first
// (cond is checked once more after the end, so events read before the
// stream closed still count).
func (c *Client) WaitFor(ctx context.Context, cond func(State) bool) (State, error) {
	for {
		c.ev.mu.Lock()
		st, changed, ended := c.ev.st, c.ev.changed, c.ev.ended
		c.ev.mu.Unlock()
		if cond(st) {
			return c.State(), nil
		}
		if ended {
			return st, c.Err()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// WaitStop waits for a stopped, exited or terminated event after the one
// counted by stops (take [State.Stops] before resuming), and returns the
// state then: Stopped set for a stop, [State.Ended] for the end.
func (c *Client) WaitStop(ctx context.Context, stops uint64) (State, error) {
	return c.WaitFor(ctx, func(s State) bool { return s.Stops > stops })
}

// Output returns the output kept in the ring, oldest first, and how many
// bytes were dropped from its front to stay within [Options.OutputBytes].
// Telemetry output is not kept.
func (c *Client) Output() (chunks []OutputChunk, dropped int64) {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	return slices.Clone(c.ev.out.chunks), c.ev.out.dropped
}

// Subscribe returns a subscription to the events filter accepts (all
// events when filter is nil). filter runs on the reader goroutine under a
// lock: it must be quick and must not call the client.
func (c *Client) Subscribe(filter func(godap.EventMessage) bool) *Subscription {
	s := &Subscription{c: c, filter: filter, notify: make(chan struct{}, 1)}
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	c.ev.subs = append(c.ev.subs, s)
	return s
}

// EventNamed returns a filter accepting the events with these names.
func EventNamed(names ...string) func(godap.EventMessage) bool {
	return func(m godap.EventMessage) bool { return slices.Contains(names, m.GetEvent().Event) }
}

// offer queues m if the filter accepts it. Called with events.mu held.
func (s *Subscription) offer(m godap.EventMessage) {
	if s.filter != nil && !s.filter(m) {
		return
	}
	s.mu.Lock()
	if !s.closed {
		if len(s.queue) >= MaxQueuedEvents {
			s.queue = s.queue[1:]
			s.dropped++
		}
		s.queue = append(s.queue, m)
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns the next event. Once the client has ended and the queue is
// empty it returns the client's error; after Close it returns [ErrClosed].
func (s *Subscription) Next(ctx context.Context) (godap.EventMessage, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		if len(s.queue) > 0 {
			m := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return m, nil
		}
		s.mu.Unlock()

		select {
		case <-s.notify:
		case <-s.c.frames.Done():
			// Events read before the end are already queued (the reader
			// queues under the lock before it can see the end).
			s.mu.Lock()
			empty := len(s.queue) == 0 && !s.closed
			s.mu.Unlock()
			if empty {
				return nil, s.c.frames.Err()
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Dropped returns how many events were dropped because the queue was full.
func (s *Subscription) Dropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close ends the subscription; it is safe to call more than once.
func (s *Subscription) Close() {
	ev := &s.c.ev
	ev.mu.Lock()
	ev.subs = slices.DeleteFunc(ev.subs, func(x *Subscription) bool { return x == s })
	ev.mu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.queue = nil
	s.mu.Unlock()
	s.wake()
}

// ring keeps the newest output within limit bytes.
type ring struct {
	limit   int
	size    int
	next    int64 // offset of the next byte
	dropped int64
	chunks  []OutputChunk
}

func (r *ring) add(category, text string) {
	if text == "" {
		return
	}
	if len(text) > r.limit { // keep the tail of an oversized chunk
		cut := len(text) - r.limit
		r.dropped += int64(cut)
		r.next += int64(cut)
		text = text[cut:]
	}
	r.chunks = append(r.chunks, OutputChunk{Category: category, Text: text, Offset: r.next})
	r.next += int64(len(text))
	r.size += len(text)
	for r.size > r.limit {
		first := &r.chunks[0]
		over := r.size - r.limit
		for over < len(first.Text) && !utf8.RuneStart(first.Text[over]) {
			over++ // never split a character
		}
		if over >= len(first.Text) {
			over = len(first.Text)
			r.chunks = r.chunks[1:]
		} else {
			first.Text = first.Text[over:]
			first.Offset += int64(over)
		}
		r.size -= over
		r.dropped += int64(over)
	}
}
