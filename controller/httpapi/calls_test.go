package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/tools/ask"
	"berth.dev/berth/tools/permission"
)

// connWatch records the connections the server closed, by the client's
// address: once a connection of a request is closed, the server has
// returned from the request's handler.
type connWatch struct {
	mu      sync.Mutex
	closed  map[string]bool
	changed chan struct{}
}

func newConnWatch() *connWatch {
	return &connWatch{closed: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (cw *connWatch) configure(s *http.Server) {
	s.ConnState = func(c net.Conn, st http.ConnState) {
		if st != http.StateClosed {
			return
		}
		cw.mu.Lock()
		cw.closed[c.RemoteAddr().String()] = true
		cw.mu.Unlock()
		select {
		case cw.changed <- struct{}{}:
		default:
		}
	}
}

func (cw *connWatch) waitClosed(t *testing.T, addr string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		cw.mu.Lock()
		ok := cw.closed[addr]
		cw.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-cw.changed:
		case <-deadline:
			t.Fatalf("the server did not close the connection from %s a minute after its client dropped it", addr)
		}
	}
}

// dropCall POSTs a tool call on a connection of its own, waits for
// started (the tool runs), then drops the connection, as a proxy's read
// timeout does, and returns once the server has closed its side: the
// request's handler has returned.
func dropCall(t *testing.T, base, path, tok, body string, hdr http.Header, cw *connWatch, started func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan string, 1)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		select {
		case addr <- i.Conn.LocalAddr().String():
		default:
		}
	}})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+path, strings.NewReader(body))
	req.Header = hdr.Clone()
	req.Header.Set("Authorization", "Bearer "+tok)
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	done := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d before the client went", resp.StatusCode)
		}
		done <- err
	}()
	started()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("dropped call: %v", err)
	}
	cw.waitClosed(t, <-addr)
}

// callOf returns the call id and status headers of an answer.
func callOf(t *testing.T, r response) (id, status string) {
	t.Helper()
	id, status = r.header.Get(httpapi.CallIDHeader), r.header.Get(httpapi.CallStatusHeader)
	if len(id) != 32 || status == "" {
		t.Fatalf("answer %d without %s and %s: %v %s", r.status, httpapi.CallIDHeader, httpapi.CallStatusHeader, r.header, r.body)
	}
	return id, status
}

// TestDroppedClientCallGoesOn: a client that goes away does not cancel
// its call; its retry with the same Idempotency-Key is the same call (202
// with its id under respond-async); DELETE cancels it, and the tool sees
// the cancellation then, not before.
func TestDroppedClientCallGoesOn(t *testing.T) {
	cw := newConnWatch()
	rg := newRigServer(t, controller.Config{}, httpapi.Options{Token: token}, cw.configure)
	id := rg.open(`{"sandbox":"host"}`)
	path := "/v1/runs/" + id + "/tools/block"
	key := http.Header{httpapi.IdempotencyKeyHeader: {"k-block"}}
	dropCall(t, rg.srv.URL, path, token, `{}`, key, cw, func() {
		select {
		case <-blockStarted:
		case <-time.After(time.Minute):
			t.Fatal("the block tool did not start")
		}
	})
	select {
	case err := <-ctxSeen:
		t.Fatalf("the tool's context ended (%v) when its client went: the call should go on", err)
	default:
	}

	r := rg.do("POST", path, token, `{}`, httpapi.IdempotencyKeyHeader, "k-block", "Prefer", "respond-async")
	call, status := callOf(t, r)
	loc := r.header.Get("Location")
	if r.status != http.StatusAccepted || status != httpapi.CallRunning || loc != "/v1/runs/"+id+"/calls/"+call || r.json(t)["call"] != call {
		t.Fatalf("retry under respond-async: %d %v %s, want 202 running with the call's Location", r.status, r.header, r.body)
	}
	if g := rg.do("GET", loc, token, ""); g.status != http.StatusAccepted || g.json(t)["status"] != httpapi.CallRunning || g.header.Get("Retry-After") == "" {
		t.Fatalf("GET %s: %d %v %s, want 202 running with Retry-After", loc, g.status, g.header, g.body)
	}
	if g := rg.do("GET", loc+"?wait=soon", token, ""); g.status != http.StatusBadRequest || g.errorCode(t) != "bad_request" {
		t.Errorf("GET ?wait=soon: %d %s, want 400", g.status, g.body)
	}

	d := rg.do("DELETE", loc, token, "")
	if d.status != http.StatusOK || d.json(t)["status"] != httpapi.CallCancelled {
		t.Fatalf("DELETE %s: %d %s, want 200 cancelled", loc, d.status, d.body)
	}
	if err := <-ctxSeen; !errors.Is(err, context.Canceled) {
		t.Errorf("the tool saw %v, want context.Canceled", err)
	}
	g := rg.do("GET", loc, token, "")
	if _, st := callOf(t, g); g.status != http.StatusConflict || g.errorCode(t) != "call_cancelled" || st != httpapi.CallCancelled {
		t.Errorf("GET a cancelled call: %d %s", g.status, g.body)
	}
	// The key names the cancelled call: the tool does not run again.
	if r := rg.do("POST", path, token, `{}`, httpapi.IdempotencyKeyHeader, "k-block"); r.status != http.StatusConflict || r.errorCode(t) != "call_cancelled" {
		t.Errorf("sync retry of a cancelled call: %d %s", r.status, r.body)
	}
	select {
	case <-blockStarted:
		t.Error("a retry with the same Idempotency-Key ran the tool again")
	default:
	}
}

// TestCallIdempotencyAndTenants: a retry with the same key answers the
// first call's answer, byte for byte; another body with the key is 422;
// a call is only found on its run by its tenant; ended calls are
// forgotten past MaxKeptCalls.
func TestCallIdempotencyAndTenants(t *testing.T) {
	rg := newRigWith(t, controller.Config{}, httpapi.Options{Credentials: tenantCreds(t)})
	a := rg.openAs(tokA, `{"sandbox":"host"}`)
	path := "/v1/runs/" + a + "/tools/read"
	first := rg.do("POST", path, tokA, `{"args":{"path":"x.go"}}`, httpapi.IdempotencyKeyHeader, "k1")
	call, status := callOf(t, first)
	if first.status != 200 || status != httpapi.CallDone {
		t.Fatalf("first call: %d %s %s", first.status, status, first.body)
	}
	// The same call: the arguments as JSON values, whatever the spacing.
	again := rg.do("POST", path, tokA, `{ "args": { "path": "x.go" } }`, httpapi.IdempotencyKeyHeader, "k1")
	if id, _ := callOf(t, again); id != call || again.status != 200 || string(again.body) != string(first.body) {
		t.Errorf("retry: %s %d %s, want call %s's answer %s", id, again.status, again.body, call, first.body)
	}
	loc := "/v1/runs/" + a + "/calls/" + call
	if g := rg.do("GET", loc, tokA, ""); g.status != 200 || string(g.body) != string(first.body) {
		t.Errorf("GET %s: %d %s, want the sync answer %s", loc, g.status, g.body, first.body)
	}
	if r := rg.do("POST", path, tokA, `{"args":{"path":"y.go"}}`, httpapi.IdempotencyKeyHeader, "k1"); r.status != http.StatusUnprocessableEntity || r.errorCode(t) != "idempotency_mismatch" || !strings.Contains(string(r.body), call) {
		t.Errorf("the key with other arguments: %d %s, want 422 idempotency_mismatch naming the call", r.status, r.body)
	}
	if r := rg.do("POST", path, tokA, `{"args":{"path":"x.go"}}`, httpapi.IdempotencyKeyHeader, strings.Repeat("k", httpapi.MaxIdempotencyKey+1)); r.status != http.StatusBadRequest {
		t.Errorf("a key longer than MaxIdempotencyKey: %d %s, want 400", r.status, r.body)
	}
	if r := rg.do("POST", path, tokA, `{"args":{"path":"x.go"}}`); r.header.Get(httpapi.CallIDHeader) == call {
		t.Errorf("a call without a key is call %s again", call)
	}

	// Another tenant: 404 as for a call that never was.
	b := rg.openAs(tokB, `{"sandbox":"host"}`)
	if r := rg.do("GET", loc, tokB, ""); r.status != 404 {
		t.Errorf("tenant b GET a's call: %d %s", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs/"+b+"/calls/"+call, tokB, ""); r.status != 404 || r.errorCode(t) != "unknown_call" {
		t.Errorf("tenant b GET a's call on its own run: %d %s", r.status, r.body)
	}
	if r := rg.do("DELETE", "/v1/runs/"+b+"/calls/"+call, tokB, ""); r.status != 404 || r.errorCode(t) != "unknown_call" {
		t.Errorf("tenant b DELETE a's call on its own run: %d %s", r.status, r.body)
	}
	a2 := rg.openAs(tokA, `{"sandbox":"host"}`)
	if r := rg.do("GET", "/v1/runs/"+a2+"/calls/"+call, tokA, ""); r.status != 404 || r.errorCode(t) != "unknown_call" {
		t.Errorf("a's call on another of its runs: %d %s", r.status, r.body)
	}

	// respond-async, then a long poll.
	r := rg.do("POST", path, tokA, `{"args":{"path":"z.go"}}`, "Prefer", "respond-async")
	if r.status != http.StatusAccepted || r.header.Get("Location") == "" {
		t.Fatalf("respond-async: %d %v %s", r.status, r.header, r.body)
	}
	if g := rg.do("GET", r.header.Get("Location")+"?wait=30s", tokA, ""); g.status != 200 || !strings.Contains(string(g.body), "contents of z.go") {
		t.Errorf("long poll: %d %s", g.status, g.body)
	}

	// Ended calls are kept up to MaxKeptCalls: the oldest is forgotten.
	for range httpapi.MaxKeptCalls {
		if r := rg.do("POST", path, tokA, `{"args":{"path":"x.go"}}`); r.status != 200 {
			t.Fatalf("call: %d %s", r.status, r.body)
		}
	}
	g := rg.do("GET", loc, tokA, "")
	if g.status != 404 || g.errorCode(t) != "unknown_call" || !strings.Contains(string(g.body), "expired") {
		t.Errorf("GET the oldest call past MaxKeptCalls: %d %s, want 404 unknown_call saying it expired", g.status, g.body)
	}
}

// evalRig is a real host sandbox with eval on Debian's python3 (ipykernel),
// every level allowed.
func evalRig(t *testing.T, configure func(*http.Server)) *askRig {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	return newAskRigServer(t, controller.Config{Mode: permission.ModeLocal}, httpapi.Options{Token: token}, configure)
}

// slowCell is a cell that counts its runs in the kernel (variable name),
// appends a line to started when it begins, and waits for the file gate.
func slowCell(name, started, gate string) string {
	code := fmt.Sprintf(`import os, time
%[1]s = globals().get(%[1]q, 0) + 1
with open(%[2]q, "a") as f:
    f.write("run\n")
while not os.path.exists(%[3]q):
    time.sleep(0.05)
print(%[1]q, %[1]s)`, name, started, gate)
	b, _ := json.Marshal(map[string]any{"args": map[string]string{"code": code, "description": "count runs and wait for the gate file"}})
	return string(b)
}

// waitFile waits for path to exist.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a first kernel start included
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear: the cell did not start", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func evalText(t *testing.T, r response) string {
	t.Helper()
	var res struct {
		Content []struct{ Text string }
		IsError bool
	}
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 {
		t.Fatalf("eval: %d %s", r.status, r.body)
	}
	var b strings.Builder
	for _, c := range res.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// TestEvalOutlivesDroppedClient: an eval cell whose client goes away runs
// to its end; the retry with the same Idempotency-Key gets its output and
// the cell ran once. Then the same with respond-async and polling, and a
// cell cancelled by DELETE is interrupted.
func TestEvalOutlivesDroppedClient(t *testing.T) {
	cw := newConnWatch()
	rg := evalRig(t, cw.configure)
	id := rg.openHost()
	path := "/v1/runs/" + id + "/tools/eval"
	started, gate := filepath.Join(rg.dir, "started"), filepath.Join(rg.dir, "gate")
	body := slowCell("n_sync", started, gate)

	dropCall(t, rg.srv.URL, path, token, body, http.Header{httpapi.IdempotencyKeyHeader: {"cell-1"}}, cw, func() { waitFile(t, started) })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := rg.do("POST", path, token, body, httpapi.IdempotencyKeyHeader, "cell-1")
	if out := evalText(t, r); !strings.Contains(out, "n_sync 1") {
		t.Errorf("the retry's answer: %q, want the first run's output n_sync 1", out)
	}
	if b, _ := os.ReadFile(started); string(b) != "run\n" {
		t.Errorf("the cell started %d times, want once", strings.Count(string(b), "run"))
	}
	count := func(name string) string {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"args": map[string]string{"code": "print(" + name + ")", "description": "print how often the cell ran"}})
		return strings.TrimSpace(evalText(t, rg.do("POST", path, token, string(b))))
	}
	if n := count("n_sync"); n != "1" {
		t.Errorf("the kernel counted %s runs of the cell, want 1", n)
	}

	// respond-async: 202, poll until done; a retry is the same call.
	started2, gate2 := filepath.Join(rg.dir, "started2"), filepath.Join(rg.dir, "gate2")
	body = slowCell("n_async", started2, gate2)
	a := rg.do("POST", path, token, body, httpapi.IdempotencyKeyHeader, "cell-2", "Prefer", "respond-async")
	call, _ := callOf(t, a)
	loc := a.header.Get("Location")
	if a.status != http.StatusAccepted || loc == "" {
		t.Fatalf("respond-async: %d %v %s", a.status, a.header, a.body)
	}
	waitFile(t, started2)
	if again := rg.do("POST", path, token, body, httpapi.IdempotencyKeyHeader, "cell-2", "Prefer", "respond-async"); again.status != http.StatusAccepted || again.header.Get(httpapi.CallIDHeader) != call {
		t.Errorf("async retry: %d %v, want 202 for call %s", again.status, again.header, call)
	}
	if err := os.WriteFile(gate2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var done response
	for deadline := time.Now().Add(2 * time.Minute); ; {
		done = rg.do("GET", loc+"?wait=20", token, "")
		if done.status != http.StatusAccepted || time.Now().After(deadline) {
			break
		}
	}
	if out := evalText(t, done); !strings.Contains(out, "n_async 1") || done.header.Get(httpapi.CallStatusHeader) != httpapi.CallDone {
		t.Errorf("polled answer: %q %v", out, done.header)
	}
	if n := count("n_async"); n != "1" {
		t.Errorf("the kernel counted %s runs of the async cell, want 1", n)
	}

	// DELETE interrupts the cell.
	started3 := filepath.Join(rg.dir, "started3")
	c := rg.do("POST", path, token, slowCell("n_cancel", started3, filepath.Join(rg.dir, "never")), "Prefer", "respond-async")
	waitFile(t, started3)
	d := rg.do("DELETE", c.header.Get("Location"), token, "")
	if d.status != 200 || d.json(t)["status"] != httpapi.CallCancelled {
		t.Fatalf("DELETE: %d %s", d.status, d.body)
	}
	if n := count("n_cancel"); n != "1" {
		t.Errorf("after the cancel, n_cancel = %s", n)
	}
}

// TestAskUserOutlivesItsCaller: a question whose caller goes away stays
// open (its answer is kept for the caller's retry); cancelling the call
// closes the card as cancelled.
func TestAskUserOutlivesItsCaller(t *testing.T) {
	cw := newConnWatch()
	rg := newAskRigServer(t, controller.Config{Tools: []controller.Binder{controller.AskToolsWith(ask.Options{Timeout: time.Hour})}}, httpapi.Options{Token: token}, cw.configure)
	id := rg.openHost()
	ev := rg.subscribe(id, "")
	body := `{"args":{"question":"Ship it?","options":[{"label":"yes"},{"label":"no"}]}}`
	path := "/v1/runs/" + id + "/tools/ask_user"
	dropCall(t, rg.srv.URL, path, token, body, http.Header{httpapi.IdempotencyKeyHeader: {"ask-1"}}, cw, func() { ev.next("card.opened") })
	if r := rg.do("GET", "/v1/runs/"+id+"/cards", token, ""); !strings.Contains(string(r.body), "Ship it?") {
		t.Fatalf("the card after its caller went: %s, want it open", r.body)
	}
	a := rg.do("POST", path, token, body, httpapi.IdempotencyKeyHeader, "ask-1", "Prefer", "respond-async")
	if a.status != http.StatusAccepted {
		t.Fatalf("retry under respond-async: %d %s", a.status, a.body)
	}
	if d := rg.do("DELETE", a.header.Get("Location"), token, ""); d.status != 200 || d.json(t)["status"] != httpapi.CallCancelled {
		t.Errorf("DELETE the call: %d %s", d.status, d.body)
	}
	if c := ev.next("card.closed"); c.data["outcome"] != "cancelled" {
		t.Errorf("closed after cancel: %+v", c.data)
	}
}

// TestRetryableAnswerFreesTheKey: a call refused with 429 (retry after
// Retry-After) does not hold its key: the retry it asks for runs.
func TestRetryableAnswerFreesTheKey(t *testing.T) {
	rg := newRigWith(t, controller.Config{MaxCallsPerTenant: 1}, httpapi.Options{Token: token})
	id := rg.open(`{"sandbox":"host"}`)
	b := rg.do("POST", "/v1/runs/"+id+"/tools/block", token, `{}`, "Prefer", "respond-async")
	if b.status != http.StatusAccepted {
		t.Fatalf("block: %d %s", b.status, b.body)
	}
	<-blockStarted
	path := "/v1/runs/" + id + "/tools/read"
	r := rg.do("POST", path, token, `{"args":{"path":"x.go"}}`, httpapi.IdempotencyKeyHeader, "k-429")
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("a call past the tenant's cap: %d %v %s, want 429 with Retry-After", r.status, r.header, r.body)
	}
	if d := rg.do("DELETE", b.header.Get("Location"), token, ""); d.status != 200 {
		t.Fatalf("DELETE block: %d %s", d.status, d.body)
	}
	<-ctxSeen
	r = rg.do("POST", path, token, `{"args":{"path":"x.go"}}`, httpapi.IdempotencyKeyHeader, "k-429")
	if r.status != 200 || !strings.Contains(string(r.body), "contents of x.go") {
		t.Errorf("the retry after 429 with the same key: %d %s, want the tool's result", r.status, r.body)
	}
}
