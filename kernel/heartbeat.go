package kernel

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// hbSocket is one heartbeat REQ socket and the dial scope of its
// connection. It is thrown away after any missed beat, because a REQ
// socket whose reply was lost is stuck in lockstep.
type hbSocket struct {
	sock   zmq4.Socket
	scope  *dialScope
	dialed bool
	once   sync.Once
}

func (h *hbSocket) close() {
	h.once.Do(func() {
		h.sock.Close()
		h.scope.close()
	})
}

// heartbeat pings every interval and reports the kernel dead when no echo
// has come back for toDead.
func (c *Client) heartbeat() {
	defer c.wg.Done()
	var hb *hbSocket
	defer func() {
		if hb != nil {
			hb.close()
		}
	}()
	last := time.Now()
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.dead:
			return
		case <-tick.C:
		}
		if hb == nil {
			hb = &hbSocket{
				sock:  zmq4.NewReq(c.ctx, c.zmqOptions(0)...),
				scope: newDialScope(c.dial),
			}
		}
		err := c.beat(hb)
		if err == nil {
			last = time.Now()
			continue
		}
		hb.close()
		hb = nil
		if c.ctx.Err() != nil {
			return
		}
		if silent := time.Since(last); silent >= c.toDead {
			if c.isSuspended() {
				// Paused or out of reach: not the kernel's silence.
				c.log.Debug("kernel: heartbeat silent while its sandbox is suspended", "silent", silent, "err", err)
				last = time.Now()
				continue
			}
			c.markDead(fmt.Errorf("%w: no heartbeat reply for %s (last error: %v); its state is lost, start a new kernel", ErrDead, silent.Round(time.Millisecond), err))
			return
		}
		c.log.Debug("kernel: heartbeat missed", "err", err)
	}
}

// beat sends one ping and waits at most one interval for its echo. On
// timeout it closes the socket to unblock the dial or receive.
func (c *Client) beat(hb *hbSocket) error {
	ping := []byte(newID())
	done := make(chan error, 1)
	go func() {
		if !hb.dialed {
			network, address, err := c.conn.Endpoint(Heartbeat)
			if err == nil {
				err = hb.sock.Dial(hb.scope.endpoint(network, address))
			}
			if err != nil {
				done <- fmt.Errorf("dial: %w", err)
				return
			}
			hb.dialed = true
		}
		if err := hb.sock.Send(zmq4.NewMsg(ping)); err != nil {
			done <- fmt.Errorf("send: %w", err)
			return
		}
		m, err := hb.sock.Recv()
		if err != nil {
			done <- fmt.Errorf("receive: %w", err)
			return
		}
		if len(m.Frames) == 0 || !bytes.Equal(m.Frames[0], ping) {
			done <- fmt.Errorf("echo does not match the ping")
			return
		}
		done <- nil
	}()
	ctx, cancel := context.WithTimeout(c.ctx, c.interval)
	defer cancel()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		hb.close()
		<-done
		return fmt.Errorf("no echo within %s", c.interval)
	}
}

// isSuspended asks Config.Suspended, bounded by one interval.
func (c *Client) isSuspended() bool {
	if c.suspended == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.interval)
	defer cancel()
	return c.suspended(ctx)
}
