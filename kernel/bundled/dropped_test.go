package bundled

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/kernel"
)

// valve stops and restarts the reads of the connections it wraps: a
// client that stops reading its IOPub channel, as a slow or stalled one
// does, while the kernel keeps writing.
type valve struct {
	mu   sync.Mutex
	open chan struct{} // closed while reads flow
}

func newValve() *valve {
	v := &valve{open: make(chan struct{})}
	close(v.open)
	return v
}

func (v *valve) stop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.open:
		v.open = make(chan struct{})
	default:
	}
}

func (v *valve) start() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.open:
	default:
		close(v.open)
	}
}

func (v *valve) wait() {
	v.mu.Lock()
	ch := v.open
	v.mu.Unlock()
	<-ch
}

type valveConn struct {
	net.Conn
	v *valve
}

func (c *valveConn) Read(p []byte) (int, error) {
	c.v.wait()
	return c.Conn.Read(p)
}

// smallOutbuf makes a bundled kernel's buffer towards a client 1 MiB
// instead of MAX_OUTBUF's 64 MiB, so that a test fills it with 16 MiB of
// output instead of 100 (which, under -race on two CPUs, starves the
// heartbeat while the client catches up).
func smallOutbuf(t *testing.T, src string) string {
	const from, to = "MAX_OUTBUF = 1 << 26", "MAX_OUTBUF = 1 << 20"
	if strings.Count(src, from) != 1 {
		t.Fatalf("the kernel's source has no %q to change", from)
	}
	return strings.Replace(src, from, to, 1)
}

// TestDroppedOutputIsReported: a client that stops reading IOPub while a
// cell writes 16 MiB makes the bundled kernel drop what its buffer (made
// 1 MiB here) cannot hold. The cell's execute_reply says how many bytes
// were dropped, and what arrived plus what was dropped is exactly what the
// cell wrote — the status messages were never dropped, so the cell ends.
func TestDroppedOutputIsReported(t *testing.T) {
	const chunks, size = 256, 1 << 16
	cells := map[string]string{
		Python:     "import sys\nfor i in range(256):\n    _ = sys.stdout.write('z' * 65536)\n",
		JavaScript: "for (let i = 0; i < 256; i++) process.stdout.write('z'.repeat(65536));\nundefined",
	}
	for _, lang := range []string{Python, JavaScript} {
		t.Run(lang, func(t *testing.T) {
			var r runner
			if lang == Python {
				r = pythonRunners(t)[0]
			} else {
				r = nodeRunners(t)[0]
			}
			r.source = smallOutbuf
			k := start(t, r)
			_, iopubAddr, err := k.info.Endpoint(kernel.IOPub)
			if err != nil {
				t.Fatal(err)
			}
			v := newValve()
			c := connectWith(t, k, func(ctx context.Context, network, address string) (net.Conn, error) {
				var d net.Dialer
				conn, err := d.DialContext(ctx, network, address)
				if err != nil || address != iopubAddr {
					return conn, err
				}
				return &valveConn{Conn: conn, v: v}, nil
			})
			t.Cleanup(v.start) // before the client closes: no read stays blocked

			type executed struct {
				rep    *kernel.ExecuteReply
				stream int64
				err    error
			}
			done := make(chan executed, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*execTimeout)
			defer cancel()
			v.stop()
			go func() {
				var n int64
				rep, err := c.Execute(ctx, cells[lang], kernel.ExecuteOptions{OnEvent: func(e kernel.Event) {
					if e.Type == kernel.EventStream {
						n += int64(len(e.Text))
					}
				}})
				done <- executed{rep, n, err}
			}()
			for !strings.Contains(k.out.String(), "dropping messages") {
				select {
				case <-ctx.Done():
					v.start()
					t.Fatalf("the kernel never dropped output for a client that stopped reading:\n%s", k.out.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
			v.start()
			got := <-done
			if got.err != nil {
				t.Fatalf("execute: %v", got.err)
			}
			t.Logf("arrived %d bytes, the kernel reported %d dropped", got.stream, got.rep.OutputDropped)
			if got.rep.OutputDropped == 0 {
				t.Errorf("the reply does not say that output was dropped")
			}
			if sum := got.stream + got.rep.OutputDropped; sum != chunks*size {
				t.Errorf("arrived %d + dropped %d = %d bytes, want the %d the cell wrote", got.stream, got.rep.OutputDropped, sum, chunks*size)
			}
			// The kernel keeps serving, and a cell with no drop reports none.
			rep, ev := run(t, c, map[string]string{Python: "print('ok')", JavaScript: "console.log('ok')"}[lang], kernel.ExecuteOptions{})
			if rep.OutputDropped != 0 || !strings.Contains(streamText(ev, "stdout"), "ok") {
				t.Errorf("next cell: dropped %d, events %s", rep.OutputDropped, describe(ev))
			}
		})
	}
}
