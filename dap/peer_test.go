package dap

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"

	"berth.dev/berth/framing/framingtest"
)

// peer is the scripted adapter: a [framingtest.Peer] speaking DAP. Its
// methods may be called from one goroutine at a time (a test's script
// goroutine); failures are reported with t.Error, never t.Fatal, since they
// may run off the test goroutine.
type peer struct {
	*framingtest.Peer[msg]
	t   *testing.T
	mu  sync.Mutex
	seq int
}

// msg is any DAP message as the peer sees it.
type msg struct {
	Seq        int             `json:"seq"`
	Type       string          `json:"type"`
	Command    string          `json:"command,omitempty"`
	Event      string          `json:"event,omitempty"`
	RequestSeq int             `json:"request_seq,omitempty"`
	Success    bool            `json:"success"`
	Message    string          `json:"message,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
}

// newPair returns a client and the scripted adapter at the other end. The
// client is closed at cleanup.
func newPair(t *testing.T, opts Options) (*Client, *peer) {
	t.Helper()
	a, fp := framingtest.New[msg](t, true)
	c := NewClient(a, opts)
	t.Cleanup(func() { c.Close() })
	return c, &peer{Peer: fp, t: t}
}

// recv reads the next message from the client; ok is false when the
// stream ended.
func (p *peer) recv() (m msg, ok bool) {
	m, err := p.Recv()
	switch {
	case errors.Is(err, io.EOF):
		return msg{}, false
	case err != nil:
		p.t.Errorf("peer: %v", err)
		return msg{}, false
	}
	return m, true
}

// expect reads the next message and checks it is a request for command.
func (p *peer) expect(command string) msg {
	m, ok := p.recv()
	if !ok {
		p.t.Errorf("peer: stream ended while waiting for %s", command)
		return m
	}
	if m.Type != "request" || m.Command != command {
		p.t.Errorf("peer: got %s %q, want request %q", m.Type, m.Command, command)
	}
	return m
}

func (p *peer) send(v map[string]any) {
	p.mu.Lock()
	p.seq++
	v["seq"] = p.seq
	p.mu.Unlock()
	if err := p.Send(v); err != nil {
		p.t.Errorf("peer: %v", err)
	}
}

func (p *peer) respond(req msg, body any) {
	m := map[string]any{"type": "response", "request_seq": req.Seq, "success": true, "command": req.Command}
	if body != nil {
		m["body"] = body
	}
	p.send(m)
}

func (p *peer) fail(req msg, message string, errBody any) {
	m := map[string]any{"type": "response", "request_seq": req.Seq, "success": false, "command": req.Command, "message": message}
	if errBody != nil {
		m["body"] = map[string]any{"error": errBody}
	}
	p.send(m)
}

func (p *peer) event(name string, body any) {
	m := map[string]any{"type": "event", "event": name}
	if body != nil {
		m["body"] = body
	}
	p.send(m)
}

// script runs f as the adapter on its own goroutine and returns a wait
// function for the test to call before it ends.
func (p *peer) script(f func()) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return func() { <-done }
}
