package containerd

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
)

// TestWaitSurvivesOutage cuts berth's connection to containerd for a few
// seconds while a program runs: the program is still waited for, and its
// exit code is its own, whether it ends after the outage or during it.
// Before, the lost wait ended the program's stream at the cut (Wait then
// failed with "the stream was closed before the program ended", and berth
// started a second kernel beside the first).
func TestWaitSurvivesOutage(t *testing.T) {
	need(t)
	id := startContainer(t, "outage-"+randomID())
	tests := []struct {
		name   string
		script string
		code   int
		// during: the program ends during the outage, so Wait may return
		// then (the agent reported the exit over the FIFOs).
		during bool
	}{
		{"ends after", "echo ready; sleep 8; echo done; exit 7", 7, false},
		{"ends during", "echo ready; sleep 1; echo done; exit 5", 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proxy := sandboxtest.NewSocketProxy(t, DefaultAddress())
			p := newProvider(t, WithAddress(proxy.Path))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := p.Open(ctx, "containerd://"+testNamespace+"/"+id)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()

			out := &markBuffer{mark: "ready", seen: make(chan struct{})}
			proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", tt.script}, Stdout: out})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-out.seen:
			case <-ctx.Done():
				t.Fatal("the program never wrote ready")
			}
			waited := make(chan struct{})
			var st sandbox.ExitStatus
			var werr error
			go func() { st, werr = proc.Wait(); close(waited) }()

			proxy.Cut()
			select {
			case <-waited:
				if !tt.during {
					t.Fatalf("Wait returned during the outage: %v, %v", st, werr)
				}
			case <-time.After(4 * time.Second):
			}
			if err := proxy.Restore(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-waited:
			case <-ctx.Done():
				t.Fatal("Wait did not return after containerd answered again")
			}
			if werr != nil || st.Code != tt.code {
				t.Fatalf("Wait = %v, %v; want the program's own exit code %d", st, werr, tt.code)
			}
			if !strings.Contains(out.String(), "done") {
				t.Errorf("stdout %q lost what the program wrote after the cut", out.String())
			}
			// The sandbox answers again, and runs programs.
			r, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}})
			if err != nil {
				t.Fatalf("Start after the outage: %v", err)
			}
			if st, err := r.Wait(); err != nil || !st.Success() {
				t.Fatalf("a program after the outage: %v, %v", st, err)
			}
		})
	}
}

// markBuffer collects output and reports when mark was written.
type markBuffer struct {
	mu   sync.Mutex
	b    strings.Builder
	mark string
	seen chan struct{}
	once sync.Once
}

func (m *markBuffer) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.b.Write(p)
	if strings.Contains(m.b.String(), m.mark) {
		m.once.Do(func() { close(m.seen) })
	}
	return len(p), nil
}

func (m *markBuffer) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.b.String()
}

// TestCheckHonoursContext: while containerd hangs (its socket accepts
// and never answers), Check returns when its context ends, and once
// containerd answers again so does Check.
func TestCheckHonoursContext(t *testing.T) {
	need(t)
	id := startContainer(t, "hang-"+randomID())
	proxy := sandboxtest.NewSocketProxy(t, DefaultAddress())
	p := newProvider(t, WithAddress(proxy.Path))
	sb, err := p.Open(context.Background(), "containerd://"+testNamespace+"/"+id)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := proxy.Hang(); err != nil {
		t.Fatal(err)
	}
	const within = 500 * time.Millisecond
	for range 2 { // the cut connection, then a new one that hangs
		ctx, cancel := context.WithTimeout(context.Background(), within)
		start := time.Now()
		err := sb.Check(ctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatal("Check succeeded against a hung containerd")
		}
		if took > within+5*time.Second {
			t.Fatalf("Check took %v with a %v context: %v", took, within, err)
		}
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := sb.Check(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Check after containerd answers again: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
