package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/controller/mcpserver"
	"berth.dev/berth/sandbox"
)

// newListened is newServed on [httpapi.ListenLimits], so that every
// connection limit of lim applies.
func newListened(t *testing.T, lim httpapi.Limits) string {
	t.Helper()
	c, err := controller.New(controller.Config{
		Providers:  []sandbox.Provider{&provider{scheme: "host"}},
		Tools:      []controller.Binder{binder},
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewServer(c, httpapi.Options{Token: token, Limits: lim}, context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(httpapi.ListenLimits(ln, lim)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		c.Close()
	})
	return ln.Addr().String()
}

// closedWithin reports how long conn stayed open, reading until the
// server closes it or max passes.
func closedWithin(t *testing.T, conn net.Conn, max time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	conn.SetReadDeadline(start.Add(max))
	_, err := io.Copy(io.Discard, conn)
	if isTimeout(err) {
		t.Fatalf("the server kept the connection open %v", max)
	}
	return time.Since(start)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// roundTrip sends raw on conn and reads one response, failing the test
// after a minute (a hang detector).
func roundTrip(t *testing.T, conn net.Conn, br *bufio.Reader, raw string) *http.Response {
	t.Helper()
	conn.SetDeadline(time.Now().Add(time.Minute))
	defer conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestFirstByteDeadline: a new connection that sends nothing is closed
// after FirstByteTimeout, well before ReadHeaderTimeout; one that sent its
// first byte has the rest of ReadHeaderTimeout for its headers.
func TestFirstByteDeadline(t *testing.T) {
	lim := httpapi.Limits{FirstByteTimeout: 500 * time.Millisecond, ReadHeaderTimeout: 20 * time.Second}
	addr := newListened(t, lim)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if took := closedWithin(t, idle, lim.ReadHeaderTimeout); took >= lim.ReadHeaderTimeout/2 {
		t.Errorf("a silent connection was closed after %v, not at its first-byte deadline %v", took, lim.FirstByteTimeout)
	}

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET /healthz HTTP/1.1\r\n")
	time.Sleep(2 * lim.FirstByteTimeout)
	if resp := roundTrip(t, slow, bufio.NewReader(slow), "Host: berth\r\n\r\n"); resp.StatusCode != 200 {
		t.Errorf("headers finished after the first-byte deadline: %s", resp.Status)
	}
}

// TestUnauthenticatedPerAddress: past MaxUnauthPerAddr silent connections
// of one address, the oldest is closed; an authenticated connection does
// not count and stays open.
func TestUnauthenticatedPerAddress(t *testing.T) {
	const perAddr = 3
	lim := httpapi.Limits{MaxUnauthPerAddr: perAddr, FirstByteTimeout: time.Minute, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute}
	addr := newListened(t, lim)

	authed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	br := bufio.NewReader(authed)
	get := fmt.Sprintf("GET /v1/runs HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\n\r\n", token)
	if resp := roundTrip(t, authed, br, get); resp.StatusCode != 200 {
		t.Fatalf("authenticated GET: %s", resp.Status)
	}

	var silent []net.Conn
	dial := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	for range perAddr {
		dial()
	}
	// Only a connection quiet for SilentGrace counts as a silent one: wait
	// that long (a lower bound, not a deadline), then one more arrives.
	time.Sleep(httpapi.SilentGrace + 200*time.Millisecond)
	dial()
	closedWithin(t, silent[0], 30*time.Second) // the oldest gave its place to the newest
	if resp := roundTrip(t, authed, br, get); resp.StatusCode != 200 {
		t.Errorf("the authenticated connection after %d silent ones: %s", perAddr+1, resp.Status)
	}
}

// TestBurstFromOneAddress: a harness that opens many connections at once
// from one address, each sending its request at once, is answered on
// every one: a connection whose request berth has not read yet is not an
// idle socket. Before SilentGrace, the per-address cap closed the oldest
// accepted connection whose bytes berth had not read yet (CI's load test:
// connection reset by peer on POST /v1/runs).
func TestBurstFromOneAddress(t *testing.T) {
	const perAddr = 2
	lim := httpapi.Limits{MaxUnauthPerAddr: perAddr, IdleTimeout: time.Minute}
	addr := newListened(t, lim)
	get := fmt.Sprintf("GET /v1/runs HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\n\r\n", token)
	const n = 40
	errs := make(chan error, n)
	for range n {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if _, err := c.Write([]byte(get)); err != nil {
				errs <- err
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %s", resp.Status)
				}
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("a request of the burst: %v", err)
		}
	}
}

// TestSpareConnectionsAnswerProbes: with MaxConns connections held,
// /healthz and /readyz answer on a spare connection, which then closes;
// another request waits for a slot and is answered once one frees.
func TestSpareConnectionsAnswerProbes(t *testing.T) {
	const maxConns = 2
	lim := httpapi.Limits{MaxConns: maxConns, IdleTimeout: time.Minute}
	addr := newListened(t, lim)
	get := fmt.Sprintf("GET /v1/runs HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\n\r\n", token)
	var held []net.Conn
	for range maxConns { // authenticated keep-alive connections hold the slots
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if resp := roundTrip(t, c, bufio.NewReader(c), get); resp.StatusCode != 200 {
			t.Fatalf("GET: %s", resp.Status)
		}
		held = append(held, c)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp := roundTrip(t, c, bufio.NewReader(c), "GET "+path+" HTTP/1.1\r\nHost: berth\r\n\r\n")
		if resp.StatusCode != 200 || !resp.Close {
			t.Errorf("%s with every slot held: %s (close %v), want 200 and the connection closed", path, resp.Status, resp.Close)
		}
	}
	waiting, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	io.WriteString(waiting, get)
	answered := make(chan *http.Response, 1)
	go func() { // ends when waiting is closed at the latest
		resp, err := http.ReadResponse(bufio.NewReader(waiting), nil)
		if err != nil {
			resp = nil
		}
		answered <- resp
	}()
	select {
	case resp := <-answered:
		t.Fatalf("a request answered while every slot was held: %v", resp)
	case <-time.After(500 * time.Millisecond):
	}
	held[0].Close()
	select {
	case resp := <-answered:
		if resp == nil || resp.StatusCode != 200 {
			t.Errorf("the waiting request once a slot freed: %v", resp)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting request was not answered after a slot freed")
	}
}

// mcpInitialize is an initialize request.
const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fair","version":"1"}}}`

// TestMCPSessionCaps: a run takes mcpserver.MaxSessionsPerRun sessions
// and a tenant MaxMCPSessionsPerTenant (also through /v1/mcp, where a
// refused session opens no run); the next initialize is 429 too_many
// saying to DELETE one. Deleting the sessions gives their places back
// and ends their goroutines.
func TestMCPSessionCaps(t *testing.T) {
	const perTenant = mcpserver.MaxSessionsPerRun + 4
	rg := newRig(t, httpapi.Options{Token: token, Limits: httpapi.Limits{MaxMCPSessionsPerTenant: perTenant}}, false)
	run1, run2 := rg.open(`{"sandbox":"host"}`), rg.open(`{"sandbox":"host"}`)
	hdr := []string{"Content-Type", "application/json", "Accept", "application/json, text/event-stream"}
	type sess struct{ path, sid string }
	var open []sess
	initialize := func(path string) response {
		t.Helper()
		r := rg.do("POST", path, token, mcpInitialize, hdr...)
		if r.status == http.StatusOK {
			open = append(open, sess{path, r.header.Get(mcpserver.SessionHeader)})
		}
		return r
	}
	refused := func(what string, r response, want string) {
		t.Helper()
		var body struct {
			Error struct {
				Message string
				Data    struct{ Code string }
			}
		}
		json.Unmarshal(r.body, &body)
		if r.status != http.StatusTooManyRequests || body.Error.Data.Code != "too_many" || !strings.Contains(body.Error.Message, want) {
			t.Errorf("%s: want 429 too_many saying %q, got %d %s", what, want, r.status, r.body)
		}
	}
	runtime.GC()
	before := runtime.NumGoroutine()

	for i := range mcpserver.MaxSessionsPerRun {
		if r := initialize("/v1/runs/" + run1 + "/mcp"); r.status != http.StatusOK {
			t.Fatalf("session %d of run 1: %d %s", i+1, r.status, r.body)
		}
	}
	refused("one session more than a run's cap", initialize("/v1/runs/"+run1+"/mcp"), "DELETE")
	for i := range perTenant - mcpserver.MaxSessionsPerRun {
		if r := initialize("/v1/runs/" + run2 + "/mcp"); r.status != http.StatusOK {
			t.Fatalf("session %d of run 2: %d %s", i+1, r.status, r.body)
		}
	}
	refused("one session more than the tenant's cap", initialize("/v1/runs/"+run2+"/mcp"), "tenant")
	t.Logf("goroutines: %d before the sessions, %d with %d open", before, runtime.NumGoroutine(), len(open))
	runs := len(rg.c.List())
	refused("a session that would open its own run", initialize("/v1/mcp?sandbox=host"), "tenant")
	if n := len(rg.c.List()); n != runs {
		t.Errorf("a refused /v1/mcp session opened a run: %d runs, were %d", n, runs)
	}

	for _, s := range open {
		if r := rg.do("DELETE", s.path, token, "", mcpserver.SessionHeader, s.sid, "Mcp-Protocol-Version", "2025-06-18"); r.status != http.StatusNoContent {
			t.Errorf("DELETE session: %d %s", r.status, r.body)
		}
	}
	if r := initialize("/v1/runs/" + run1 + "/mcp"); r.status != http.StatusOK {
		t.Errorf("a session after the others were deleted: %d %s", r.status, r.body)
	} else {
		rg.do("DELETE", "/v1/runs/"+run1+"/mcp", token, "", mcpserver.SessionHeader, open[len(open)-1].sid, "Mcp-Protocol-Version", "2025-06-18")
	}
	http.DefaultClient.CloseIdleConnections()
	var now int
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if now = runtime.NumGoroutine(); now <= before {
			break
		}
	}
	if now > before {
		t.Errorf("%d goroutines after every session ended, %d before them", now, before)
	}
}

// TestReadyz: /readyz answers 200 "ready" until the server's shutdown
// begins, then 503; /livez and /healthz still answer 200.
func TestReadyz(t *testing.T) {
	c, err := controller.New(controller.Config{
		Providers:  []sandbox.Provider{&provider{scheme: "host"}},
		Tools:      []controller.Binder{binder},
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httpapi.NewServer(c, httpapi.Options{Token: token}, context.Background())
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/readyz"); code != 200 || body != "ready" {
		t.Fatalf("/readyz while serving: %d %q", code, body)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var code int
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if code, _ = get("/readyz"); code == http.StatusServiceUnavailable {
			break
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after shutdown began: %d, want 503", code)
	}
	for _, p := range []string{"/livez", "/healthz"} {
		if code, body := get(p); code != 200 || body != "ok" {
			t.Errorf("%s after shutdown began: %d %q", p, code, body)
		}
	}
}
