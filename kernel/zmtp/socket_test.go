package zmtp

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// loopPeer is a DEALER peer on a loopback listener: every dial makes a
// new connection whose far end handshakes and then discards what it reads.
// (net.Pipe would not do: both ends write their greeting first.)
type loopPeer struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	dials int
}

func newLoopPeer(t *testing.T) *loopPeer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &loopPeer{l: l}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			far, err := l.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer far.Close()
				if _, err := Handshake(context.Background(), far, Dealer, Options{}); err != nil {
					return
				}
				io.Copy(io.Discard, far)
			}()
		}
	}()
	return p
}

func (p *loopPeer) dial(ctx context.Context) (net.Conn, error) {
	p.mu.Lock()
	p.dials++
	p.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.l.Addr().String())
}

func (p *loopPeer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dials
}

// TestDropsAndSendOnce: Drops counts a connection only when the socket
// forgets it (a stale one dropped again does not count), and SendOnce on
// a failed connection drops it and returns the error without dialing
// again; the next send dials anew.
func TestDropsAndSendOnce(t *testing.T) {
	peer := newLoopPeer(t)
	s := NewSocket(Dealer, Options{}, peer.dial, 10*time.Millisecond)
	defer peer.wg.Wait()
	defer peer.l.Close()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := [][]byte{[]byte("hello")}

	if err := s.SendOnce(ctx, msg); err != nil {
		t.Fatalf("send on a fresh socket: %v", err)
	}
	c1, err := s.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name      string
		do        func() error
		wantErr   bool
		wantDrops uint64
		wantDials int
	}{
		{"sent on the first connection", func() error { return nil }, false, 0, 1},
		{"drop the current connection", func() error { s.Drop(c1); return nil }, false, 1, 1},
		{"drop it again: stale, not counted", func() error { s.Drop(c1); return nil }, false, 1, 1},
		{"send dials a second connection", func() error { return s.SendOnce(ctx, msg) }, false, 1, 2},
		{"the second connection fails under the socket", func() error {
			c2, err := s.Conn(ctx)
			if err != nil {
				return err
			}
			if c2 == c1 {
				t.Error("the dropped connection was handed out again")
			}
			return c2.Close()
		}, false, 1, 2},
		{"send once on the failed connection: error, dropped, no redial", func() error { return s.SendOnce(ctx, msg) }, true, 2, 2},
		{"the next send dials a third", func() error { return s.SendOnce(ctx, msg) }, false, 2, 3},
	}
	for _, st := range steps {
		err := st.do()
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: err = %v, want error %t", st.name, err, st.wantErr)
		}
		if got := s.Drops(); got != st.wantDrops {
			t.Errorf("%s: Drops() = %d, want %d", st.name, got, st.wantDrops)
		}
		if got := peer.count(); got != st.wantDials {
			t.Errorf("%s: %d dials, want %d", st.name, got, st.wantDials)
		}
	}
}
