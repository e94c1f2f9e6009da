// Package framingtest is the scripted far end of a framed connection, for
// the tests of the protocols over [framing.Conn] (lsp, dap): a [Peer]
// plays the language server or debug adapter on the other side of a
// net.Pipe whose near side the client under test owns. The protocol's tests
// wrap it with their messages (respond, notify, expect, …).
package framingtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/framing"
)

// Timeout is a safety net so a broken test fails instead of hanging; no
// assertion depends on it.
const Timeout = 30 * time.Second

// ErrTimeout reports that nothing arrived from the client within [Timeout].
var ErrTimeout = errors.New("framingtest: nothing received from the client")

// Peer is a scripted server or adapter speaking frames of JSON. When it
// reads, a goroutine of its own decodes every frame the client writes into
// an M, so the client's writes never wait for the script. Its methods
// return errors rather than failing the test, so a script may run on any
// goroutine; the protocol's helpers choose t.Fatal or t.Error.
type Peer[M any] struct {
	// Conn is the peer's end of the pipe. Closing it is the server or
	// adapter exiting; bytes written to it raw bypass the framing.
	Conn net.Conn

	w  *framing.Writer
	in chan M
}

// New returns the client's end of a new pipe and the peer at the other
// end. With read set the peer reads everything the client writes; without
// it the client's writes block, as against a peer that stopped reading. A
// frame that is not JSON for M fails the test and stops the reading. At
// cleanup the peer closes its end and waits for its reader: register the
// client's Close after New, so that it runs first.
func New[M any](t testing.TB, read bool) (client net.Conn, p *Peer[M]) {
	t.Helper()
	a, b := net.Pipe()
	p = &Peer[M]{Conn: b, w: framing.NewWriter(b), in: make(chan M, 1024)}
	var wg sync.WaitGroup
	if read {
		wg.Go(func() {
			defer close(p.in)
			r := framing.NewReader(b)
			for {
				body, err := r.ReadFrame()
				if err != nil {
					return
				}
				var m M
				if err := json.Unmarshal(body, &m); err != nil {
					t.Errorf("framingtest: the client sent invalid JSON: %v: %s", err, body)
					return
				}
				p.in <- m
			}
		})
	}
	t.Cleanup(func() {
		b.Close()
		wg.Wait()
	})
	return a, p
}

// Recv returns the next message from the client, in the order written. It
// returns io.EOF once the client's stream has ended and every message
// before the end was received, and [ErrTimeout] when nothing comes.
func (p *Peer[M]) Recv() (M, error) {
	select {
	case m, ok := <-p.in:
		if !ok {
			return m, io.EOF
		}
		return m, nil
	case <-time.After(Timeout):
		var zero M
		return zero, ErrTimeout
	}
}

// Drain discards what the client writes until its stream ends; it returns
// [ErrTimeout] when the stream stays open.
func (p *Peer[M]) Drain() error {
	for {
		if _, err := p.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Send encodes v as JSON and writes it to the client as one frame.
func (p *Peer[M]) Send(v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("framingtest: encoding a message: %w", err)
	}
	return p.WriteFrame(body)
}

// WriteFrame writes body to the client as one frame, as it is.
func (p *Peer[M]) WriteFrame(body []byte) error {
	if err := p.w.WriteFrame(body); err != nil {
		return fmt.Errorf("framingtest: write: %w", err)
	}
	return nil
}

// Stdio joins the stdout and stdin of cmd, which is not started yet, into
// the stream a client owns, for tests against a real server or adapter.
// The stream's Close closes both pipes, which unblocks a pending Read.
func Stdio(cmd *exec.Cmd) (io.ReadWriteCloser, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	return stdio{ReadCloser: stdout, in: stdin}, nil
}

type stdio struct {
	io.ReadCloser                // the child's stdout
	in            io.WriteCloser // the child's stdin
}

func (s stdio) Write(p []byte) (int, error) { return s.in.Write(p) }

func (s stdio) Close() error {
	err := s.in.Close()
	s.ReadCloser.Close()
	return err
}
