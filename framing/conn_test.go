package framing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"berth.dev/berth/framing"
	"berth.dev/berth/framing/framingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errClosed = errors.New("test: closed")
	errExited = errors.New("test: peer exited")
)

// newConn starts a Conn over a pipe to a framingtest peer; Handle hands
// every incoming frame to the returned channel.
func newConn(t *testing.T, read bool) (*framing.Conn, *framingtest.Peer[string], <-chan []byte) {
	t.Helper()
	a, p := framingtest.New[string](t, read)
	in := make(chan []byte, 16)
	c := framing.NewConn(a, framing.ConnOptions{
		Handle: func(body []byte) { in <- body },
		Closed: errClosed,
		Exited: errExited,
		Broken: func(op string, err error) error { return fmt.Errorf("test: %s the peer failed: %w", op, err) },
	})
	c.Start()
	t.Cleanup(func() { c.Close() })
	return c, p, in
}

func TestConnSendsInOrderAndHandles(t *testing.T) {
	c, p, in := newConn(t, true)
	ctx := t.Context()
	for i := range 3 {
		if err := c.Send(ctx, fmt.Appendf(nil, "%q", fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	q, err := c.Queue(ctx, []byte(`"last"`))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v, want the frame written", err)
	}
	for _, want := range []string{"m0", "m1", "m2", "last"} {
		if got, err := p.Recv(); err != nil || got != want {
			t.Fatalf("peer got %q, %v; want %q", got, err, want)
		}
	}
	if err := p.Send("hello"); err != nil {
		t.Fatal(err)
	}
	if got := <-in; string(got) != `"hello"` {
		t.Fatalf("Handle got %s", got)
	}
}

func TestConnEnds(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		c, p, _ := newConn(t, true)
		stopped := make(chan error, 1)
		c.Go(func(ctx context.Context) { <-ctx.Done(); stopped <- ctx.Err() })
		if err := c.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		select {
		case err := <-stopped: // Close waited for it
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Go's context ended with %v", err)
			}
		default:
			t.Fatal("Close returned before the goroutine of Go stopped")
		}
		if !errors.Is(c.Err(), errClosed) {
			t.Fatalf("Err = %v, want Closed", c.Err())
		}
		q, err := c.Queue(t.Context(), []byte("{}")) // may be queued, never written
		if err == nil {
			err = q.Wait(t.Context())
		}
		if !errors.Is(err, errClosed) {
			t.Fatalf("a write after Close = %v, want Closed", err)
		}
		if err := p.Drain(); err != nil {
			t.Fatalf("the stream stayed open after Close: %v", err)
		}
	})
	t.Run("peer exits", func(t *testing.T) {
		c, p, _ := newConn(t, true)
		p.Conn.Close()
		<-c.Done()
		if err := c.Err(); !errors.Is(err, errExited) || !strings.Contains(err.Error(), "EOF") {
			t.Fatalf("Err = %v, want Exited with the cause", err)
		}
	})
	t.Run("broken framing", func(t *testing.T) {
		c, p, _ := newConn(t, true)
		fmt.Fprintf(p.Conn, "Content-Length: %d\r\n\r\n", framing.MaxFrame+1)
		<-c.Done()
		if err := c.Err(); !errors.Is(err, framing.ErrFrameTooLarge) || !strings.Contains(err.Error(), "test: reading from the peer failed") {
			t.Fatalf("Err = %v, want Broken reading", err)
		}
	})
	t.Run("stuck peer", func(t *testing.T) {
		c, p, _ := newConn(t, false) // never reads beyond one byte
		if err := c.Send(t.Context(), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Conn.Read(make([]byte, 1)); err != nil { // the writer now holds that frame
			t.Fatal(err)
		}
		for c.TrySend([]byte("{}")) { // fill the outbox
		}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if err := c.Send(ctx, []byte("{}")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Send to a full outbox = %v, want the caller's deadline", err)
		}
		if c.Err() != nil {
			t.Fatalf("a stuck peer ended the connection: %v", c.Err())
		}
	})
}

func TestPendingAwait(t *testing.T) {
	c, p, _ := newConn(t, true)
	var pending framing.Pending[int, string]

	answer := pending.Add(1)
	if ch, ok := pending.Take(1); !ok {
		t.Fatal("Take found nobody waiting for 1")
	} else {
		ch <- "one"
	}
	if m, gaveUp, err := pending.Await(t.Context(), c, 1, answer); m != "one" || gaveUp || err != nil {
		t.Fatalf("Await = %q, %v, %v", m, gaveUp, err)
	}

	answer = pending.Add(2)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, gaveUp, err := pending.Await(ctx, c, 2, answer); !gaveUp || !errors.Is(err, context.Canceled) {
		t.Fatalf("Await after ctx ended = %v, %v; want gaveUp", gaveUp, err)
	}
	if _, ok := pending.Take(2); ok {
		t.Fatal("a request given up on is still waiting")
	}

	answer = pending.Add(3)
	late := pending.Add(4)
	ch, _ := pending.Take(3)
	ch <- "three" // arrived before the end: still delivered
	p.Conn.Close()
	<-c.Done()
	if m, _, err := pending.Await(t.Context(), c, 3, answer); m != "three" || err != nil {
		t.Fatalf("Await of an answer that came before the end = %q, %v", m, err)
	}
	if _, gaveUp, err := pending.Await(t.Context(), c, 4, late); gaveUp || !errors.Is(err, errExited) {
		t.Fatalf("Await after the end = %v, %v; want the connection's error", gaveUp, err)
	}
	if _, ok := pending.Take(4); ok {
		t.Fatal("a request whose connection ended is still waiting")
	}
}
