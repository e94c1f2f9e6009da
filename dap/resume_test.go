package dap

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	godap "github.com/google/go-dap"
)

// holder plays the run's resident supervisor for a debug adapter: it owns
// the adapter's stdin and stdout, lends a stream to one client at a time,
// and keeps what the adapter writes while no client holds it, for the next.
type holder struct {
	stdin io.WriteCloser

	mu     sync.Mutex
	buf    []byte // adapter output not yet delivered
	eof    bool   // the adapter's stdout ended
	paused bool   // keep output instead of delivering it
	wake   chan struct{}
	pumped chan struct{} // closed when the adapter's stdout ended
}

func newHolder(stdin io.WriteCloser, stdout io.Reader) *holder {
	h := &holder{stdin: stdin, wake: make(chan struct{}, 1), pumped: make(chan struct{})}
	go func() { // owned by the adapter: ends with its stdout
		defer close(h.pumped)
		b := make([]byte, 32<<10)
		for {
			n, err := stdout.Read(b)
			h.mu.Lock()
			h.buf = append(h.buf, b[:n]...)
			if err != nil {
				h.eof = true
			}
			h.mu.Unlock()
			h.poke()
			if err != nil {
				return
			}
		}
	}()
	return h
}

func (h *holder) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// pause keeps the adapter's output from the current client from now on.
func (h *holder) pause() {
	h.mu.Lock()
	h.paused = true
	h.mu.Unlock()
}

// kept returns a copy of the output kept for the next client.
func (h *holder) kept() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return bytes.Clone(h.buf)
}

// waitKept waits until the kept output holds want.
func (h *holder) waitKept(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !bytes.Contains(h.kept(), []byte(want)) {
		if time.Now().After(deadline) {
			t.Fatalf("the adapter did not write %q while no client was attached; kept: %s", want, h.kept())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lend returns a stream to the adapter for one client, delivering the kept
// output first, minus its first skip bytes (as if a client that went away
// had read them). Closing the stream lets go of the adapter without
// closing its stdin: it runs on, and its output is kept.
func (h *holder) lend(skip int) io.ReadWriteCloser {
	pr, pw := io.Pipe()
	h.mu.Lock()
	h.buf = h.buf[min(skip, len(h.buf)):]
	h.paused = false
	h.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned by the loan: Close waits for it
		defer close(done)
		for {
			h.mu.Lock()
			chunk, eof := h.buf, h.eof
			if h.paused {
				chunk, eof = nil, false
			} else {
				h.buf = nil
			}
			h.mu.Unlock()
			if len(chunk) > 0 {
				n, err := pw.Write(chunk)
				if err != nil { // the client let go: keep what it did not take
					h.mu.Lock()
					h.buf = append(chunk[n:], h.buf...)
					h.mu.Unlock()
					return
				}
				continue
			}
			if eof {
				pw.Close()
				return
			}
			select {
			case <-h.wake:
			case <-stop:
				return
			}
		}
	}()
	return &loan{h: h, r: pr, stop: stop, done: done}
}

type loan struct {
	h    *holder
	r    *io.PipeReader
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func (l *loan) Read(p []byte) (int, error)  { return l.r.Read(p) }
func (l *loan) Write(p []byte) (int, error) { return l.h.stdin.Write(p) }
func (l *loan) Close() error {
	l.once.Do(func() {
		close(l.stop)
		l.r.Close()
		<-l.done
	})
	return nil
}

const resumeScript = `def work(n):
    total = n * 2
    return total
a = work(1)
print("between", a)
b = work(2)
print("done", b)
`

// debugpyAdapter starts Debian's debugpy adapter under a holder, or skips
// without debugpy (fails in CI).
func debugpyAdapter(t *testing.T) (h *holder, exited <-chan struct{}, stderr func() string) {
	t.Helper()
	if err := exec.Command(debianPython, "-c", "import debugpy").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s cannot import debugpy (%v); CI must install python3-debugpy", debianPython, err)
		}
		t.Skipf("%s cannot import debugpy (%v); install python3-debugpy", debianPython, err)
	}
	cmd := exec.Command(debianPython, "-m", "debugpy.adapter")
	cmd.Env = append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1")
	var errb syncBuffer
	cmd.Stderr = &errb
	cmd.WaitDelay = 5 * time.Second
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h = newHolder(in, out)
	done := make(chan struct{})
	go func() { // owned by the process
		<-h.pumped
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		in.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return h, done, errb.String
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// launchToFirstStop launches resumeScript with breakpoints on lines 4 and
// 6 over a first client and waits for the stop on line 4.
func launchToFirstStop(t *testing.T, ctx context.Context, h *holder, stderr func() string) (*Session, string) {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "main.py")
	if err := os.WriteFile(prog, []byte(resumeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewSession(NewClient(h.lend(0), Options{}), SessionOptions{AdapterID: "debugpy", ExceptionFilters: []string{"uncaught"}})
	t.Cleanup(func() { s.Client.Close() })
	if _, err := s.SetBreakpoints(ctx, prog, []Breakpoint{{Line: 4}, {Line: 6}}); err != nil {
		t.Fatal(err)
	}
	err := s.Launch(ctx, map[string]any{
		"program": prog, "cwd": dir, "console": "internalConsole", "justMyCode": true,
		"python": []string{debianPython}, "env": map[string]string{"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
	})
	if err != nil {
		t.Fatalf("launch: %v\nadapter stderr:\n%s", err, stderr())
	}
	st, err := s.WaitStop(ctx, 0)
	if err != nil || st.Stopped == nil {
		t.Fatalf("first stop = %+v, %v", st, err)
	}
	topFrame(t, ctx, s.Client, st.Stopped.ThreadId, 4, "<module>")
	return s, prog
}

// finish continues a resumed session to its end and checks the output and
// that the adapter exits after disconnect.
func finish(t *testing.T, ctx context.Context, h *holder, s *Session, exited <-chan struct{}, stderr func() string, wantOut string) {
	t.Helper()
	st := s.State()
	if err := s.Continue(ctx, st.Stopped.ThreadId); err != nil {
		t.Fatal(err)
	}
	if st, err := s.WaitFor(ctx, func(s State) bool { return s.Terminated }); err != nil {
		t.Fatalf("after the last continue: %+v, %v", st, err)
	}
	var out strings.Builder
	chunks, _ := s.Output()
	for _, c := range chunks {
		if c.Category == "stdout" {
			out.WriteString(c.Text)
		}
	}
	if !strings.Contains(out.String(), wantOut) {
		t.Errorf("stdout through the resumed client = %q, want it to hold %q", out.String(), wantOut)
	}
	if err := s.Close(ctx, true); err != nil {
		t.Errorf("close: %v", err)
	}
	h.stdin.Close() // as the resident does when the process is ended: debugpy's adapter exits at EOF
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Errorf("the adapter runs on 20 s after the resumed client disconnected\nstderr:\n%s", stderr())
	}
}

// TestResumeDebugpy stops debugpy at a breakpoint, lets go of the first
// client without disconnecting (the adapter's stdin stays open, as under a
// resident supervisor), and resumes the session on a new client over the
// same adapter: it is stopped on the same line, continues to the next
// breakpoint and to the end.
func TestResumeDebugpy(t *testing.T) {
	h, exited, stderr := debugpyAdapter(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	first, prog := launchToFirstStop(t, ctx, h, stderr)
	rs, err := first.ResumeState()
	if err != nil {
		t.Fatal(err)
	}
	first.Client.Close() // berth goes away: no disconnect, the adapter runs on

	var logs syncBuffer
	s, err := Resume(ctx, h.lend(0), Options{Logf: func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) }}, SessionOptions{AdapterID: "debugpy"}, rs)
	if err != nil {
		t.Fatalf("resume: %v\nadapter stderr:\n%s", err, stderr())
	}
	defer s.Client.Close()
	st := s.State()
	if st.Stopped == nil || st.Stopped.Reason != "breakpoint" || st.Stops != rs.Stops {
		t.Fatalf("resumed state = %+v, want stopped at the breakpoint, stop %d", st, rs.Stops)
	}
	tid := st.Stopped.ThreadId
	top := topFrame(t, ctx, s.Client, tid, 4, "<module>")
	if ev, err := s.Evaluate(ctx, "work(20)", top.Id, "repl"); err != nil || ev.Result != "40" {
		t.Errorf("evaluate work(20) after resume = %+v, %v; want 40", ev, err)
	}
	if bps := s.Breakpoints()[prog]; len(bps) != 2 || !bps[1].Verified {
		t.Errorf("resumed breakpoints = %+v", bps)
	}
	// Breakpoints still change on the resumed session: line 6 stays, and
	// line 2 (inside work) is added.
	if res, err := s.SetBreakpoints(ctx, prog, []Breakpoint{{Line: 2}, {Line: 6}}); err != nil || len(res) != 2 || !res[0].Verified {
		t.Errorf("setBreakpoints after resume = %+v, %v", res, err)
	}
	mark := s.State().Stops
	if err := s.Continue(ctx, tid); err != nil {
		t.Fatal(err)
	}
	if st, err := s.WaitStop(ctx, mark); err != nil || st.Stopped == nil {
		t.Fatalf("after continue: %+v, %v", st, err)
	}
	topFrame(t, ctx, s.Client, tid, 2, "work")
	mark = s.State().Stops
	if err := s.Continue(ctx, tid); err != nil {
		t.Fatal(err)
	}
	if st, err := s.WaitStop(ctx, mark); err != nil || st.Stopped == nil {
		t.Fatalf("after the second continue: %+v, %v", st, err)
	}
	topFrame(t, ctx, s.Client, tid, 6, "<module>")
	if _, err := s.SetBreakpoints(ctx, prog, []Breakpoint{{Line: 6}}); err != nil {
		t.Fatal(err)
	}
	if chunks, _ := s.Output(); len(chunks) == 0 || chunks[0].Offset < rs.OutputOffset {
		t.Errorf("resumed output = %+v, want it to go on from offset %d", chunks, rs.OutputOffset)
	}
	finish(t, ctx, h, s, exited, stderr, "done 4")
	if logs.String() != "" {
		t.Logf("tolerated: %s", logs.String())
	}
}

// TestResumeMidMessage lets go of the first client right after it sent
// continue, before it read anything more: the continue response, the
// program's output and the next stop are kept for the next client, which
// starts reading in the middle of the first of those messages (as after a
// client killed while reading it). It skips to the next message, takes the
// stop on line 6 from the kept output, and goes on.
func TestResumeMidMessage(t *testing.T) {
	h, exited, stderr := debugpyAdapter(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	first, _ := launchToFirstStop(t, ctx, h, stderr)
	rs, err := first.ResumeState()
	if err != nil {
		t.Fatal(err)
	}
	tid := rs.Stopped.ThreadId
	h.pause()
	if _, err := first.Send(ctx, &godap.ContinueRequest{Request: godap.Request{Command: "continue"}, Arguments: godap.ContinueArguments{ThreadId: tid}}); err != nil {
		t.Fatal(err)
	}
	h.waitKept(t, `"stopped"`)
	first.Client.Close()

	kept := h.kept()
	second := bytes.Index(kept[1:], []byte("Content-Length:")) + 1
	if second <= 0 {
		t.Fatalf("kept output has one message: %q", kept)
	}
	var logs syncBuffer
	s, err := Resume(ctx, h.lend(second/2), Options{Logf: func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) }}, SessionOptions{AdapterID: "debugpy"}, rs)
	if err != nil {
		t.Fatalf("resume: %v\nadapter stderr:\n%s", err, stderr())
	}
	defer s.Client.Close()
	if !strings.Contains(logs.String(), "skipped") {
		t.Errorf("the resumed client did not say it skipped part of a message; its log: %s", logs.String())
	}
	st := s.State()
	if st.Stopped == nil || st.Stops <= rs.Stops {
		t.Fatalf("resumed state = %+v, want the stop kept while no client was attached (after stop %d)", st, rs.Stops)
	}
	topFrame(t, ctx, s.Client, tid, 6, "<module>")
	var out strings.Builder
	chunks, _ := s.Output()
	for _, c := range chunks {
		out.WriteString(c.Text)
	}
	if !strings.Contains(out.String(), "between 2") {
		t.Errorf("output kept while no client was attached = %q, want it to hold \"between 2\"", out.String())
	}
	finish(t, ctx, h, s, exited, stderr, "done 4")
}

const spinScript = `import time
x = 1
while True:
    time.sleep(0.05)
`

// TestResumeDropsStaleStop resumes from a state taken at a stop, after the
// first client had resumed the debuggee and everything the adapter said
// since was lost with it: the stop is not confirmed (the thread runs), so
// the resumed session counts the debuggee as running, and pause stops it.
func TestResumeDropsStaleStop(t *testing.T) {
	h, exited, stderr := debugpyAdapter(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	prog := filepath.Join(dir, "spin.py")
	if err := os.WriteFile(prog, []byte(spinScript), 0o644); err != nil {
		t.Fatal(err)
	}
	first := NewSession(NewClient(h.lend(0), Options{}), SessionOptions{AdapterID: "debugpy"})
	defer first.Client.Close()
	if _, err := first.SetBreakpoints(ctx, prog, []Breakpoint{{Line: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := first.Launch(ctx, map[string]any{"program": prog, "cwd": dir, "console": "internalConsole",
		"python": []string{debianPython}, "env": map[string]string{"PYDEVD_DISABLE_FILE_VALIDATION": "1"}}); err != nil {
		t.Fatalf("launch: %v\nadapter stderr:\n%s", err, stderr())
	}
	st, err := first.WaitStop(ctx, 0)
	if err != nil || st.Stopped == nil {
		t.Fatalf("first stop = %+v, %v", st, err)
	}
	rs, err := first.ResumeState()
	if err != nil {
		t.Fatal(err)
	}
	h.pause()
	if _, err := first.Send(ctx, &godap.ContinueRequest{Request: godap.Request{Command: "continue"}, Arguments: godap.ContinueArguments{ThreadId: rs.Stopped.ThreadId}}); err != nil {
		t.Fatal(err)
	}
	h.waitKept(t, `"continue"`)
	first.Client.Close()

	s, err := Resume(ctx, h.lend(len(h.kept())), Options{}, SessionOptions{AdapterID: "debugpy"}, rs)
	if err != nil {
		t.Fatalf("resume: %v\nadapter stderr:\n%s", err, stderr())
	}
	defer s.Client.Close()
	if st := s.State(); st.Stopped != nil || st.Ended() {
		t.Fatalf("resumed state = %+v, want running: the stop it was taken at is over", st)
	}
	mark := s.State().Stops
	if err := s.Pause(ctx, rs.Stopped.ThreadId); err != nil {
		t.Fatal(err)
	}
	if st, err := s.WaitStop(ctx, mark); err != nil || st.Stopped == nil || st.Stopped.Reason != "pause" {
		t.Fatalf("after pause: %+v, %v", st, err)
	}
	frames, _, err := s.StackTrace(ctx, rs.Stopped.ThreadId, 0)
	if err != nil || len(frames) == 0 || frames[len(frames)-1].Line < 3 {
		t.Errorf("paused stack = %+v, %v; want the loop", frames, err)
	}
	if err := s.Close(ctx, true); err != nil {
		t.Errorf("close: %v", err)
	}
	h.stdin.Close()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Errorf("the adapter runs on 20 s after the resumed client disconnected\nstderr:\n%s", stderr())
	}
}
