package kernel

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// systemPython is Debian's python, which has python3-ipykernel; the python3
// first on PATH may be a build without it.
const systemPython = "/usr/bin/python3"

// needIPyKernel skips unless Debian's ipykernel is installed (apt-get
// install python3-ipykernel); under CI=true it fails instead.
func needIPyKernel(t *testing.T) {
	t.Helper()
	if err := exec.Command(systemPython, "-c", "import ipykernel").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ipykernel is not importable by %s (%v); install python3-ipykernel", systemPython, err)
		}
		t.Skipf("ipykernel is not importable by %s (%v); install python3-ipykernel to run real-kernel tests", systemPython, err)
	}
}

type testKernel struct {
	info ConnectionInfo
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error         // Wait's result, set before done closes
}

// startKernel runs ipykernel on 127.0.0.1 with a fresh connection file. The
// process is killed and reaped at cleanup.
func startKernel(t *testing.T) *testKernel {
	t.Helper()
	needIPyKernel(t)
	dir := t.TempDir()
	info, err := NewConnectionInfo(ConnectionConfig{KernelName: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	file, err := info.MarshalFile()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "conn.json")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(systemPython, "-m", "ipykernel_launcher", "-f", path)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHON") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+dir, "IPYTHONDIR="+filepath.Join(dir, "ipython"), "JUPYTER_RUNTIME_DIR="+dir,
		"MPLCONFIGDIR="+dir, "PYDEVD_DISABLE_FILE_VALIDATION=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &testKernel{info: info, cmd: cmd, done: make(chan struct{})}
	go func() {
		k.err = cmd.Wait()
		close(k.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-k.done
		if t.Failed() {
			t.Logf("kernel output:\n%s", out.String())
		}
	})
	return k
}

// countingDialer is a plain net.Dialer used as the caller-supplied Dial.
type countingDialer struct {
	n    atomic.Int64
	wrap func(network, address string, c net.Conn) net.Conn
}

func (d *countingDialer) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.n.Add(1)
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, address)
	if err != nil || d.wrap == nil {
		return c, err
	}
	return d.wrap(network, address, c), nil
}

func connect(t *testing.T, k *testKernel, d *countingDialer) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Conn: k.info, Dial: d.Dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// run executes code and collects its events.
func run(t *testing.T, c *Client, code string, opts ExecuteOptions) (*ExecuteReply, []Event) {
	t.Helper()
	var events []Event
	opts.OnEvent = func(e Event) { events = append(events, e) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.Execute(ctx, code, opts)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return r, events
}

func streamText(events []Event, name string) string {
	var b strings.Builder
	for _, e := range events {
		if e.Type == EventStream && e.Name == name {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func TestRealKernel(t *testing.T) {
	k := startKernel(t)
	d := &countingDialer{}
	c := connect(t, k, d)
	if d.n.Load() < 5 {
		t.Errorf("caller-supplied Dial used %d times, want at least 5 (4 channels and the heartbeat)", d.n.Load())
	}
	if c.Info().LanguageInfo.Name != "python" || c.Info().ProtocolVersion == "" {
		t.Errorf("kernel info %+v", c.Info())
	}

	t.Run("execute_result", func(t *testing.T) {
		r, events := run(t, c, "1+1", ExecuteOptions{})
		if r.Status != "ok" || r.ExecutionCount < 1 {
			t.Errorf("reply %+v", r)
		}
		var got string
		for _, e := range events {
			if e.Type == EventExecuteResult {
				got, _ = e.TextData("text/plain")
				if e.ExecutionCount != r.ExecutionCount {
					t.Errorf("execute_result count %d, reply count %d", e.ExecutionCount, r.ExecutionCount)
				}
			}
		}
		if got != "2" {
			t.Errorf("execute_result text/plain = %q, want \"2\"; events %+v", got, events)
		}
	})

	t.Run("state persists", func(t *testing.T) {
		run(t, c, "x = 41", ExecuteOptions{})
		_, events := run(t, c, "print(x + 1)", ExecuteOptions{})
		if got := streamText(events, "stdout"); got != "42\n" {
			t.Errorf("stdout %q", got)
		}
	})

	t.Run("streams", func(t *testing.T) {
		_, events := run(t, c, "import sys\nprint('hello')\nprint('oops', file=sys.stderr)", ExecuteOptions{})
		if got := streamText(events, "stdout"); got != "hello\n" {
			t.Errorf("stdout %q", got)
		}
		if got := streamText(events, "stderr"); got != "oops\n" {
			t.Errorf("stderr %q", got)
		}
	})

	t.Run("error with traceback", func(t *testing.T) {
		r, events := run(t, c, "1/0", ExecuteOptions{})
		if r.Status != "error" || r.Error == nil || r.Error.Name != "ZeroDivisionError" {
			t.Fatalf("reply %+v", r)
		}
		var ev *ExecError
		for _, e := range events {
			if e.Type == EventError {
				ev = e.Error
			}
		}
		if ev == nil || ev.Name != "ZeroDivisionError" || len(ev.Traceback) == 0 || !strings.Contains(strings.Join(ev.Traceback, "\n"), "division by zero") {
			t.Errorf("error event %+v", ev)
		}
	})

	t.Run("display and clear_output", func(t *testing.T) {
		code := "from IPython.display import display, clear_output\nh = display('a', display_id=True)\nh.update('b')\nclear_output(wait=True)"
		_, events := run(t, c, code, ExecuteOptions{})
		var types []string
		for _, e := range events {
			types = append(types, e.Type)
		}
		want := []string{EventDisplayData, EventUpdateDisplayData, EventClearOutput}
		if strings.Join(types, ",") != strings.Join(want, ",") {
			t.Fatalf("event types %v, want %v", types, want)
		}
		if events[0].DisplayID == "" || events[0].DisplayID != events[1].DisplayID || !events[2].Wait {
			t.Errorf("display ids %q %q, wait %t", events[0].DisplayID, events[1].DisplayID, events[2].Wait)
		}
		if s, _ := events[1].TextData("text/plain"); s != "'b'" {
			t.Errorf("update text %q", s)
		}
	})

	t.Run("input", func(t *testing.T) {
		var prompts []string
		opts := ExecuteOptions{OnInput: func(ctx context.Context, req InputRequest) (string, error) {
			prompts = append(prompts, req.Prompt)
			select { // a slow answer, like a tool call; no timeout of the client's own
			case <-time.After(1500 * time.Millisecond):
			case <-ctx.Done():
				return "", ctx.Err()
			}
			return "berth-" + req.Prompt, nil
		}}
		_, events := run(t, c, "a = input('one')\nb = input('two')\nprint(a, b)", opts)
		if got := streamText(events, "stdout"); got != "berth-one berth-two\n" {
			t.Errorf("stdout %q", got)
		}
		if strings.Join(prompts, ",") != "one,two" {
			t.Errorf("prompts %q", prompts)
		}
	})

	t.Run("input without handler", func(t *testing.T) {
		r, _ := run(t, c, "input('x')", ExecuteOptions{})
		if r.Status != "error" || r.Error.Name != "StdinNotImplementedError" {
			t.Errorf("reply %+v", r)
		}
	})

	t.Run("bad signature dropped", func(t *testing.T) {
		// A second client whose dialer rewrites bytes on the IOPub stream:
		// the rewritten message must be dropped, never delivered.
		_, iopubAddr, _ := k.info.Endpoint(IOPub)
		td := &countingDialer{wrap: func(network, address string, conn net.Conn) net.Conn {
			if address != iopubAddr {
				return conn
			}
			return &tamperConn{Conn: conn, from: []byte("MARKER-AAAA"), to: []byte("MARKER-BBBB")}
		}}
		c2 := connect(t, k, td)
		_, events := run(t, c2, "print('MARKER-' + 'A'*4)", ExecuteOptions{})
		if got := streamText(events, "stdout"); got != "" {
			t.Errorf("tampered stream delivered: %q", got)
		}
		if c2.Stats().BadSignature < 1 {
			t.Errorf("stats %+v, want a bad signature counted", c2.Stats())
		}
		// Untampered output still flows.
		_, events = run(t, c2, "print('fine')", ExecuteOptions{})
		if got := streamText(events, "stdout"); got != "fine\n" {
			t.Errorf("stdout %q", got)
		}
		c2.Close()
	})

	t.Run("interrupt", func(t *testing.T) {
		started := make(chan struct{})
		var once sync.Once
		type result struct {
			r   *ExecuteReply
			err error
		}
		res := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := c.Execute(ctx, "import time\nprint('started', flush=True)\ntime.sleep(30)", ExecuteOptions{
				OnEvent: func(e Event) { once.Do(func() { close(started) }) },
			})
			res <- result{r, err}
		}()
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.Interrupt(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-res
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.r.Status != "error" || got.r.Error.Name != "KeyboardInterrupt" {
			t.Errorf("reply %+v", got.r)
		}
		r, _ := run(t, c, "1+1", ExecuteOptions{})
		if r.Status != "ok" {
			t.Errorf("after interrupt: %+v", r)
		}
	})

	t.Run("kernel_info", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		info, err := c.KernelInfo(ctx)
		if err != nil || info.LanguageInfo.Name != "python" {
			t.Errorf("KernelInfo = %+v, %v", info, err)
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx, false); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(c.Err(), ErrDead) {
			t.Errorf("Err after shutdown = %v", c.Err())
		}
		select {
		case <-k.done:
			if k.err != nil {
				t.Errorf("kernel exit: %v", k.err)
			}
		case <-ctx.Done():
			t.Fatal("kernel did not exit after shutdown_reply")
		}
		if _, err := c.Execute(ctx, "1", ExecuteOptions{}); !errors.Is(err, ErrDead) {
			t.Errorf("Execute after shutdown = %v, want ErrDead", err)
		}
	})
}

// tamperConn replaces from with to (same length) in what it reads, which
// keeps ZMTP framing intact but breaks the message's HMAC.
type tamperConn struct {
	net.Conn
	from, to []byte
}

func (c *tamperConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	copy(p[:n], bytes.ReplaceAll(p[:n], c.from, c.to))
	return n, err
}

func TestRealKernelKilled(t *testing.T) {
	k := startKernel(t)
	c := connect(t, k, &countingDialer{})
	started := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := c.Execute(context.Background(), "import time\nprint('started', flush=True)\ntime.sleep(60)", ExecuteOptions{
			OnEvent: func(Event) { once.Do(func() { close(started) }) },
		})
		errc <- err
	}()
	<-started
	if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Dead():
	case <-time.After(30 * time.Second):
		t.Fatal("heartbeat did not report the killed kernel dead")
	}
	if !errors.Is(c.Err(), ErrDead) {
		t.Errorf("Err = %v, want ErrDead", c.Err())
	}
	if err := <-errc; !errors.Is(err, ErrDead) || errors.Is(err, ErrNotTaken) {
		t.Errorf("pending Execute = %v, want ErrDead and not ErrNotTaken (the kernel had taken the cell)", err)
	}
	t.Logf("reported: %v", c.Err())
}

func TestConnectNothingListening(t *testing.T) {
	info, err := NewConnectionInfo(ConnectionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Conn: info})
	if err == nil {
		c.Close()
		t.Fatal("Connect succeeded with no kernel")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
}

func TestConnectRefusesUnsigned(t *testing.T) {
	info, _ := NewConnectionInfo(ConnectionConfig{})
	info.Key = ""
	if _, err := Connect(context.Background(), Config{Conn: info}); err == nil {
		t.Fatal("Connect accepted an empty key")
	}
}

// TestDialBacksOff: while every dial fails (the kernel's sandbox stopped
// or was removed), the client's sockets dial ever less often, instead of
// every DialRetry for as long as it waits.
func TestDialBacksOff(t *testing.T) {
	info, err := NewConnectionInfo(ConnectionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("the sandbox is gone")
	}
	const wait = 6 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if c, err := Connect(ctx, Config{Conn: info, Dial: dial}); err == nil {
		c.Close()
		t.Fatal("Connect succeeded with every dial failing")
	}
	// Without backoff Connect's first socket dials every DialRetry: 60
	// times in 6 s. With it: the fast tries (2 s, for a kernel that has
	// not bound its ports yet), then a few spaced ones.
	if n, flat := dials.Load(), int64(wait/DialRetry); n > flat/2 {
		t.Errorf("%d dials in %v, as many as without backoff (%d)", n, wait, flat)
	} else {
		t.Logf("%d dials in %v (without backoff: %d)", n, wait, flat)
	}
}

// slowClose is a connection whose Close waits while hold is set, as
// closing a stream through an engine that does not answer does.
type slowClose struct {
	net.Conn
	hold *atomic.Bool
}

func (c slowClose) Close() error {
	for i := 0; i < 40 && c.hold.Load(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	return c.Conn.Close()
}

// TestStuckTeardownIsNotSilence: the heartbeat's connection takes seconds
// to close (its stream's end waits on an engine that does not answer) while
// the kernel is stopped; by the time the close returns the kernel runs
// again. The loop did not watch the kernel while it was stuck, so that
// time does not count as the kernel's silence, and the kernel lives.
// (The old rule declared it dead at once: "no heartbeat reply for 1.005s".)
func TestStuckTeardownIsNotSilence(t *testing.T) {
	k := startKernel(t)
	const interval = 100 * time.Millisecond
	var hold atomic.Bool
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{
		Conn: k.info, HeartbeatInterval: interval, TimeToDead: 5 * interval,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, address)
			if err != nil {
				return nil, err
			}
			return slowClose{Conn: conn, hold: &hold}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hold.Store(true)
	if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The first missed beat closes its connection: that close waits
	// (up to 2 s); the kernel resumes before it returns.
	time.Sleep(time.Second)
	if err := k.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	hold.Store(false)
	time.Sleep(2 * time.Second)
	if err := c.Err(); err != nil {
		t.Fatalf("declared dead for the time its own teardown was stuck: %v", err)
	}
	if r, _ := run(t, c, "1+1", ExecuteOptions{}); r.Status != "ok" {
		t.Fatalf("after the kernel resumed: %+v", r)
	}
}

// TestSilenceAfterSuspensionCountsAnew: the sandbox was suspended (an
// engine that did not answer) and answers again at the very look that
// would otherwise end the kernel, while the heartbeat's connection is not
// made again yet (here: the kernel still stopped, for less than toDead).
// The kernel is not declared dead: its silence counts from the engine's
// return. (The old rule declared it dead at that look: tests/e2e's
// TestEngineOutage through containerd lost its kernel so once.)
func TestSilenceAfterSuspensionCountsAnew(t *testing.T) {
	k := startKernel(t)
	const interval = 100 * time.Millisecond
	var asked atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resumed := make(chan struct{})
	c, err := Connect(ctx, Config{
		Conn: k.info, HeartbeatInterval: interval, TimeToDead: 5 * interval,
		Suspended: func(ctx context.Context) bool {
			switch asked.Add(1) {
			case 1:
				return true // the engine is away
			case 2:
				// Back at this very look; the kernel answers a little later.
				go func() {
					time.Sleep(interval + interval/2)
					k.cmd.Process.Signal(syscall.SIGCONT)
					close(resumed)
				}()
			}
			return false
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-resumed:
	case <-c.Dead():
		k.cmd.Process.Signal(syscall.SIGCONT)
		t.Fatalf("declared dead at the look that found the engine back: %v", c.Err())
	case <-time.After(30 * time.Second):
		k.cmd.Process.Signal(syscall.SIGCONT)
		t.Fatalf("Suspended asked %d times in 30 s, want 2", asked.Load())
	}
	if r, _ := run(t, c, "1+1", ExecuteOptions{}); r.Status != "ok" {
		t.Fatalf("after the kernel resumed: %+v (dead: %v)", r, c.Err())
	}
	if err := c.Err(); err != nil {
		t.Fatalf("declared dead: %v", err)
	}
}

// TestSlowSuspendedAnswerIsWaitedFor: a kernel frozen while the place it
// runs in takes seconds to say it is suspended (a hung engine) is not
// declared dead: Suspended's answer is waited for up to SuspendedTimeout,
// not one heartbeat interval.
func TestSlowSuspendedAnswerIsWaitedFor(t *testing.T) {
	k := startKernel(t)
	const interval = 200 * time.Millisecond
	var asked atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{
		Conn: k.info, HeartbeatInterval: interval, TimeToDead: 3 * interval,
		Suspended: func(ctx context.Context) bool {
			asked.Add(1)
			select {
			case <-time.After(2 * time.Second): // slower than many intervals
				return true
			case <-ctx.Done():
				return false
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for asked.Load() < 2 && time.Now().Before(deadline) {
		select {
		case <-c.Dead():
			k.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("declared dead while Suspended was still answering: %v", c.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := k.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if asked.Load() < 2 {
		t.Fatalf("Suspended asked %d times in 15 s, want at least 2", asked.Load())
	}
	if err := c.Err(); err != nil {
		t.Fatalf("declared dead: %v", err)
	}
	if r, _ := run(t, c, "1+1", ExecuteOptions{}); r.Status != "ok" {
		t.Errorf("after the thaw: %+v", r)
	}
}

// TestKilledBetweenCellsNotTaken: a cell sent to a kernel killed after
// the previous cell fails with ErrNotTaken (and ErrDead): nothing about it
// came back, so it never ran. A cell the kernel was running when it died
// is not ErrNotTaken (TestRealKernelKilled).
func TestKilledBetweenCellsNotTaken(t *testing.T) {
	k := startKernel(t)
	c := connect(t, k, &countingDialer{})
	if r, _ := run(t, c, "x = 1", ExecuteOptions{}); r.Status != "ok" {
		t.Fatalf("first cell: %+v", r)
	}
	if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-k.done
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.Execute(ctx, "print(x)", ExecuteOptions{})
	if !errors.Is(err, ErrNotTaken) || !errors.Is(err, ErrDead) {
		t.Fatalf("Execute on a killed kernel = %v, want ErrNotTaken and ErrDead", err)
	}
	t.Logf("reported: %v", err)
}

// TestReconnectsAfterDroppedStreams: every stream the client dialed is
// cut (a sandbox's exec tunnel ending); the sockets redial through the
// caller's Dial and the next cells run.
func TestReconnectsAfterDroppedStreams(t *testing.T) {
	k := startKernel(t)
	var mu sync.Mutex
	var conns []net.Conn
	d := &countingDialer{wrap: func(_, _ string, c net.Conn) net.Conn {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c
	}}
	c := connect(t, k, d)
	run(t, c, "x = 5", ExecuteOptions{})
	for round := 0; round < 10; round++ {
		before := d.n.Load()
		mu.Lock()
		for _, conn := range conns {
			conn.Close()
		}
		conns = nil
		mu.Unlock()
		r, events := run(t, c, "print(x * 2)", ExecuteOptions{})
		if r.Status != "ok" || streamText(events, "stdout") != "10\n" {
			t.Fatalf("round %d: reply %+v, stdout %q", round, r, streamText(events, "stdout"))
		}
		if d.n.Load() == before {
			t.Errorf("round %d: nothing was redialed", round)
		}
	}
	if err := c.Err(); err != nil {
		t.Errorf("client dead after reconnecting: %v", err)
	}
}
