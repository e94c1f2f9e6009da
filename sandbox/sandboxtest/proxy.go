package sandboxtest

import (
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// SocketProxy is a unix socket in front of an engine's socket (dockerd's,
// containerd's) that a test owns, to stage the engine's outages: Cut
// drops every connection and removes the socket, as while the engine
// restarts; Hang keeps accepting connections but never answers, as a hung
// engine; Restore forwards again.
type SocketProxy struct {
	// Path is the proxy's socket, for the backend to dial.
	Path     string
	upstream string

	mu    sync.Mutex
	ln    net.Listener
	hang  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept loop and the copies
}

// NewSocketProxy starts a proxy to the unix socket upstream; the test's
// cleanup stops it.
func NewSocketProxy(t *testing.T, upstream string) *SocketProxy {
	t.Helper()
	p := &SocketProxy{Path: filepath.Join(t.TempDir(), "engine.sock"), upstream: upstream, conns: make(map[net.Conn]struct{})}
	if err := p.listen(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Cut)
	return p
}

// Restore forwards again after Cut or Hang.
func (p *SocketProxy) Restore() error {
	p.Cut()
	return p.listen(false)
}

// Hang drops every connection and then accepts new ones without ever
// answering, until Restore or Cut.
func (p *SocketProxy) Hang() error {
	p.Cut()
	return p.listen(true)
}

func (p *SocketProxy) listen(hang bool) error {
	ln, err := net.Listen("unix", p.Path)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln, p.hang = ln, hang
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var up net.Conn
			if !hang {
				if up, err = net.Dial("unix", p.upstream); err != nil {
					c.Close()
					continue
				}
			}
			if !p.track(c, up) {
				return
			}
			if hang {
				continue // held open, unanswered, until Cut
			}
			for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
				p.wg.Go(func() {
					io.Copy(pair[0], pair[1])
					pair[0].Close()
					pair[1].Close()
				})
			}
		}
	})
	return nil
}

// track records a connection (and its upstream, when not nil); false once
// the proxy was cut.
func (p *SocketProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		c.Close()
		if up != nil {
			up.Close()
		}
		return false
	}
	p.conns[c] = struct{}{}
	if up != nil {
		p.conns[up] = struct{}{}
	}
	return true
}

// Cut closes the listener, which removes the socket, and every
// connection, and waits for the proxy's goroutines.
func (p *SocketProxy) Cut() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}
