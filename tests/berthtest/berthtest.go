// Package berthtest builds berth and runs `berth serve` as a real process
// for the tests under tests/ that drive berth whole, over HTTP only
// (tests/security, tests/load, tests/agent): the way an operator starts
// it, with the flags and environment the test chooses, and a [Client] for
// its API.
package berthtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// buildTimeout bounds one go build (a cold cache compiles the C grammars).
	buildTimeout = 10 * time.Minute
	// startTimeout bounds how long berth serve takes to say where it listens.
	startTimeout = time.Minute
	// stopTimeout bounds berth's graceful shutdown on SIGTERM (its own
	// grace is 10 s) before the test kills it.
	stopTimeout = 20 * time.Second
	// pollEvery is how often Start looks for the address line.
	pollEvery = 50 * time.Millisecond
	// logTail is how much of berth's stderr Log returns.
	logTail = 16 << 10
	// dumpMax is how much of berth's goroutine dump Dump returns.
	dumpMax = 256 << 10
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Build builds berth and berth-shim side by side (berth finds the shim
// next to its executable) once per test binary, into a directory every
// user may read and execute, and returns berth's path. Remove removes it.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "berthtest-bin-")
		if buildErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg, cgo string }{
			{"berth", "berth.dev/berth/cmd/berth", "1"},                        // the bundled grammars are C
			{"berth-shim", "berth.dev/berth/sandbox/shim/cmd/berth-shim", "0"}, // static, for any container
		} {
			ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
			cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(buildDir, b.out), b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		// A --host-user must reach the binaries.
		buildErr = os.Chmod(buildDir, 0o755)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "berth")
}

// Remove removes what Build built; call it from TestMain after m.Run.
func Remove() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Options say how to start berth serve.
type Options struct {
	// Args follow `serve --addr 127.0.0.1:0`. Without a --state-dir among
	// them berth keeps its runs in memory (--state-dir=), so that stopping
	// it ends them.
	Args []string
	// Env is added to the test's environment (KEY=VALUE).
	Env []string
}

// Server is a running `berth serve` process.
type Server struct {
	// URL is where it listens: http://127.0.0.1:PORT.
	URL string

	cmd    *exec.Cmd
	log    string        // berth's stderr and stdout
	waited chan struct{} // closed when Wait returned
	werr   error         // Wait's error, after waited
	dumped bool          // stopped by Dump, on purpose
}

// Start runs `berth serve --addr 127.0.0.1:0` with o, built by Build, and
// returns once it says where it listens. The test's cleanup stops it
// (SIGTERM, then a kill after stopTimeout) and fails the test unless it
// exited cleanly.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Build(t)
	s := &Server{log: filepath.Join(t.TempDir(), "serve.log"), waited: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--addr", "127.0.0.1:0"}
	if !slices.ContainsFunc(o.Args, func(a string) bool { return strings.HasPrefix(a, "--state-dir") }) {
		// Runs in memory, as a test that closes berth expects; a test of
		// runs that outlive berth names its own state directory.
		args = append(args, "--state-dir=")
	}
	s.cmd = exec.Command(bin, append(args, o.Args...)...)
	// GOTRACEBACK=all: on SIGQUIT (Dump) berth prints every goroutine.
	s.cmd.Env = append(append(os.Environ(), "GOTRACEBACK=all"), o.Env...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	err = s.cmd.Start()
	logf.Close() // the child holds its own copy
	if err != nil {
		t.Fatalf("start berth serve: %v", err)
	}
	go func() { // owned by s: ends when the process exits, which Stop ensures
		s.werr = s.cmd.Wait()
		close(s.waited)
	}()
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("berth serve: %v\n%s", err, s.Log())
		}
	})
	const prefix = "berth: serving on "
	for deadline := time.Now().Add(startTimeout); ; {
		b, _ := os.ReadFile(s.log)
		for _, l := range strings.Split(string(b), "\n") {
			var rec struct{ Msg string }
			if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &rec) == nil {
				l = rec.Msg // --log-format json
			}
			if u, ok := strings.CutPrefix(l, prefix); ok {
				s.URL = strings.TrimSpace(u)
				return s
			}
		}
		select {
		case <-s.waited:
			t.Fatalf("berth serve %s exited at start: %v\n%s", strings.Join(o.Args, " "), s.werr, s.Log())
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			t.Fatalf("berth serve did not say where it listens within %s:\n%s", startTimeout, s.Log())
		}
	}
}

// Pid is berth serve's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop sends SIGTERM, waits for berth to close its runs and exit, and
// kills it after stopTimeout. It returns an error unless berth exited 0.
// Calling it again returns the first outcome.
func (s *Server) Stop() error {
	select {
	case <-s.waited:
		if s.dumped {
			return nil
		}
		return s.werr
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-s.waited:
		return s.werr
	case <-time.After(stopTimeout):
		s.cmd.Process.Kill()
		<-s.waited
		return fmt.Errorf("did not exit within %s of SIGTERM; killed", stopTimeout)
	}
}

// Kill ends berth with SIGKILL, as a crash or an OOM kill would, and
// waits for it; the cleanup's Stop then reports nothing.
func (s *Server) Kill() {
	s.dumped = true
	s.cmd.Process.Kill()
	<-s.waited
}

// Dump stops berth with SIGQUIT, which makes the Go runtime print every
// goroutine's stack, and returns that part of its stderr (at most
// dumpMax), for a failed leak check.
func (s *Server) Dump() string {
	s.dumped = true
	if err := s.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return fmt.Sprintf("(SIGQUIT: %v)", err)
	}
	select {
	case <-s.waited:
	case <-time.After(stopTimeout):
		s.cmd.Process.Kill()
		<-s.waited
		return fmt.Sprintf("(berth did not exit within %s of SIGQUIT; killed)", stopTimeout)
	}
	b, _ := os.ReadFile(s.log)
	if i := bytes.Index(b, []byte("SIGQUIT")); i >= 0 {
		b = b[i:]
	}
	if len(b) > dumpMax {
		b = append(b[:dumpMax:dumpMax], "\n… (cut)"...)
	}
	return string(b)
}

// Log returns the end of berth's stderr (at most logTail bytes).
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > logTail {
		b = b[len(b)-logTail:]
	}
	return string(b)
}

// Result is a tool result as the HTTP API returns it.
type Result struct {
	Content []struct {
		Type, Text string
	}
	IsError           bool
	StructuredContent json.RawMessage
}

// Text is the result's text blocks, joined by newlines.
func (r Result) Text() string {
	var s []string
	for _, c := range r.Content {
		if c.Type == "text" {
			s = append(s, c.Text)
		}
	}
	return strings.Join(s, "\n")
}

// Client speaks berth's HTTP API to one server with a bearer token.
type Client struct {
	// URL is the server's base URL (Server.URL).
	URL string
	// Token is sent as "Authorization: Bearer …" when not empty.
	Token string
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client
}

// Do sends one request with body (nil, or a value marshalled as JSON) and
// returns the status and the whole response body. ctx bounds it. A run
// that a restarted berth is still adopting (503 adopting) is asked again
// after its Retry-After, as a harness does, until ctx ends.
func (c *Client) Do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return 0, nil, err
		}
	}
	for {
		st, rb, retry, err := c.do(ctx, method, path, b, body != nil)
		if retry == 0 || err != nil {
			return st, rb, err
		}
		select {
		case <-time.After(retry):
		case <-ctx.Done():
			return st, rb, nil // the last answer: 503 adopting
		}
	}
}

// do sends one request; retry is the wait a 503 adopting asks for.
func (c *Client) do(ctx context.Context, method, path string, body []byte, hasBody bool) (int, []byte, time.Duration, error) {
	a, err := c.exchange(ctx, method, path, body, hasBody, nil)
	if err != nil {
		return a.Status, a.Body, 0, err
	}
	var e struct {
		Error struct{ Code string }
	}
	if a.Status == http.StatusServiceUnavailable && json.Unmarshal(a.Body, &e) == nil && e.Error.Code == "adopting" {
		retry := time.Second
		if n, err := strconv.Atoi(a.Header.Get("Retry-After")); err == nil && n > 0 {
			retry = time.Duration(n) * time.Second
		}
		return a.Status, a.Body, retry, nil
	}
	return a.Status, a.Body, 0, nil
}

// Answer is one whole HTTP answer.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// CallID is the answer's Berth-Call-Id: the call it is about.
func (a Answer) CallID() string { return a.Header.Get("Berth-Call-Id") }

// CallStatus is the answer's Berth-Call-Status: running, done, failed or
// cancelled.
func (a Answer) CallStatus() string { return a.Header.Get("Berth-Call-Status") }

// Result decodes a 200 answer's tool result.
func (a Answer) Result() (Result, error) {
	var res Result
	if a.Status != http.StatusOK {
		return res, fmt.Errorf("call %s: %d %s", a.CallID(), a.Status, a.Body)
	}
	if err := json.Unmarshal(a.Body, &res); err != nil {
		return res, fmt.Errorf("call %s: %v: %s", a.CallID(), err, a.Body)
	}
	return res, nil
}

// exchange sends one request with the headers hdr and returns the answer.
func (c *Client) exchange(ctx context.Context, method, path string, body []byte, hasBody bool, hdr http.Header) (Answer, error) {
	var r io.Reader
	if hasBody {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, r)
	if err != nil {
		return Answer{}, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if err != nil {
		return a, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	return a, nil
}

// CallOptions are the headers of a tool call.
type CallOptions struct {
	// IdempotencyKey names the call: a retry with the same key (and
	// arguments) gets the first call's answer; the tool runs once.
	IdempotencyKey string
	// Async asks Prefer: respond-async: berth answers 202 with the call's
	// Location at once.
	Async bool
}

// CallWith calls tool on the default surface of run with o and returns
// the answer as it came: 200 and the result, 202 under Async, an error
// status, or whatever a proxy in between answered.
func (c *Client) CallWith(ctx context.Context, run, tool string, args any, o CallOptions) (Answer, error) {
	b, err := json.Marshal(map[string]any{"args": args, "surface": "default"})
	if err != nil {
		return Answer{}, err
	}
	hdr := http.Header{}
	if o.IdempotencyKey != "" {
		hdr.Set("Idempotency-Key", o.IdempotencyKey)
	}
	if o.Async {
		hdr.Set("Prefer", "respond-async")
	}
	return c.exchange(ctx, "POST", "/v1/runs/"+run+"/tools/"+tool, b, true, hdr)
}

// PollCall asks for call of run (GET /v1/runs/{id}/calls/{call}), waiting
// up to wait (whole seconds; 0: none) for it to end: 202 while it runs,
// then the answer the call had.
func (c *Client) PollCall(ctx context.Context, run, call string, wait time.Duration) (Answer, error) {
	path := "/v1/runs/" + run + "/calls/" + call
	if wait > 0 {
		path += "?wait=" + strconv.Itoa(int(wait/time.Second))
	}
	return c.exchange(ctx, "GET", path, nil, false, nil)
}

// CancelCall cancels call of run (DELETE /v1/runs/{id}/calls/{call}) and
// returns its final status.
func (c *Client) CancelCall(ctx context.Context, run, call string) (Answer, error) {
	return c.exchange(ctx, "DELETE", "/v1/runs/"+run+"/calls/"+call, nil, false, nil)
}

// RunInfo is what opening a run returns (the fields tests read).
type RunInfo struct {
	ID, Sandbox, Workspace string
}

// OpenRun opens a run with spec (POST /v1/runs) and wants 201.
func (c *Client) OpenRun(ctx context.Context, spec map[string]any) (RunInfo, error) {
	var info RunInfo
	st, b, err := c.Do(ctx, "POST", "/v1/runs", spec)
	if err != nil {
		return info, err
	}
	if st != http.StatusCreated {
		return info, fmt.Errorf("open run %v: %d %s", spec, st, b)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("open run: %v: %s", err, b)
	}
	return info, nil
}

// CloseRun closes run id (DELETE /v1/runs/{id}) and wants 204.
func (c *Client) CloseRun(ctx context.Context, id string) error {
	st, b, err := c.Do(ctx, "DELETE", "/v1/runs/"+id, nil)
	if err != nil {
		return err
	}
	if st != http.StatusNoContent {
		return fmt.Errorf("close run %s: %d %s", id, st, b)
	}
	return nil
}

// Call calls tool on the default surface of run and wants a 200; the
// result may be an error result (IsError), which the caller checks.
func (c *Client) Call(ctx context.Context, run, tool string, args any) (Result, error) {
	var res Result
	st, b, err := c.Do(ctx, "POST", "/v1/runs/"+run+"/tools/"+tool, map[string]any{"args": args, "surface": "default"})
	if err != nil {
		return res, err
	}
	if st != http.StatusOK {
		return res, fmt.Errorf("%s %v: %d %s", tool, args, st, b)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("%s: %v: %s", tool, err, b)
	}
	return res, nil
}
