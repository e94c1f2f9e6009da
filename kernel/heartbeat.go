package kernel

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"berth.dev/berth/kernel/zmtp"
)

// hbSocket is one heartbeat REQ socket and the dial scope of its
// connection. It is thrown away after any missed beat, because a REQ
// socket whose reply was lost is stuck in lockstep.
// stuckBeat is how many heartbeat intervals one beat and the end of its
// connection may take before the loop counts itself as stuck, not the
// kernel as silent.
const stuckBeat = 3

type hbSocket struct {
	sock  *zmtp.Socket
	scope *dialScope
	once  sync.Once
}

func (h *hbSocket) close() {
	h.once.Do(func() {
		h.sock.Close()
		h.scope.close()
	})
}

// heartbeat pings every interval and reports the kernel dead when no echo
// has come back for toDead while the sandbox answered: silence while it is
// suspended does not count, and once it answers again the heartbeat gets a
// whole toDead to be heard again.
func (c *Client) heartbeat() {
	defer c.wg.Done()
	var hb *hbSocket
	defer func() {
		if hb != nil {
			hb.close()
		}
	}()
	last := time.Now()
	// away is set while the last look found the sandbox suspended (paused,
	// or its engine not answering).
	away := false
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
			network, address, err := c.conn.Endpoint(Heartbeat)
			if err != nil {
				c.markDead(fmt.Errorf("%w: heartbeat channel: %v", ErrDead, err))
				return
			}
			scope := newDialScope(c.dial)
			hb = &hbSocket{sock: zmtp.NewSocket(zmtp.Req, zmtp.Options{}, scope.dialer(network, address), DialRetry), scope: scope}
		}
		try := time.Now()
		err := c.beat(hb)
		if err == nil {
			last, away = time.Now(), false
			continue
		}
		hb.close()
		hb = nil
		if time.Since(try) > stuckBeat*c.interval {
			// Ending the connection took far longer than a beat: closing
			// a stream waited on an engine that did not answer. The loop
			// did not watch the kernel meanwhile, so that time is no
			// evidence of its silence.
			last = time.Now()
			continue
		}
		if c.ctx.Err() != nil {
			return
		}
		if silent := time.Since(last); silent >= c.toDead {
			if c.isSuspended() {
				// Paused or out of reach: not the kernel's silence.
				c.log.Debug("kernel: heartbeat silent while its sandbox is suspended", "silent", silent, "err", err)
				last = time.Now()
				away = true
				continue
			}
			if away {
				// The sandbox answers again: its silence counts from now,
				// for the heartbeat's connection, cut or held while it was
				// away, to be made again.
				last, away = time.Now(), false
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
	ctx, cancel := context.WithTimeout(c.ctx, c.interval)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		zc, err := hb.sock.Conn(ctx)
		if err != nil {
			done <- fmt.Errorf("dial: %w", err)
			return
		}
		if err := zc.Send(ctx, [][]byte{ping}); err != nil {
			done <- fmt.Errorf("send: %w", err)
			return
		}
		frames, err := zc.ReadMessage(maxPing)
		if err != nil {
			done <- fmt.Errorf("receive: %w", err)
			return
		}
		// A REQ reply starts with the empty delimiter frame.
		if len(frames) != 2 || len(frames[0]) != 0 || !bytes.Equal(frames[1], ping) {
			done <- fmt.Errorf("echo does not match the ping")
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		hb.close()
		<-done
		return fmt.Errorf("no echo within %s", c.interval)
	}
}

// maxPing bounds one heartbeat echo frame (a ping is a 36-byte id).
const maxPing = 256

// isSuspended asks Config.Suspended, bounded by SuspendedTimeout.
func (c *Client) isSuspended() bool {
	if c.suspended == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, SuspendedTimeout)
	defer cancel()
	return c.suspended(ctx)
}
