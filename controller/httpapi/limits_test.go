package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// served is berth's handler behind the real http.Server and listener cap
// berth serve uses, with short limits.
type served struct {
	t    *testing.T
	addr string
	srv  *http.Server
	c    *controller.Controller
}

// slowStep is how long opening a run of conversation "slow" takes, and
// closing it.
const slowStep = 2 * time.Second

// sleepBinder adds sleep, a read-level tool that sleeps for ms. A run of
// conversation "slow" takes slowStep to open and slowStep to close.
func sleepBinder(ctx context.Context, r *tools.Registry, env *controller.Env) error {
	if env.Spec.ConversationID == "slow" {
		time.Sleep(slowStep)
		env.OnClose(func() error { time.Sleep(slowStep); return nil })
	}
	type in struct {
		MS int `json:"ms"`
	}
	tools.Register(r, tools.Tool{Name: "sleep", Description: "sleep for ms milliseconds", Level: tools.LevelRead},
		func(ctx context.Context, a in) (*tools.Result, error) {
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
				return tools.Textf("slept %dms", a.MS), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	return nil
}

func newServed(t *testing.T, lim httpapi.Limits) *served {
	t.Helper()
	c, err := controller.New(controller.Config{
		Providers:  []sandbox.Provider{&provider{scheme: "host"}},
		Tools:      []controller.Binder{binder, sleepBinder},
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
	srv.Handler = validated(t, srv.Handler)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(httpapi.Listen(ln, lim.MaxConns)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		c.Close()
	})
	return &served{t: t, addr: ln.Addr().String(), srv: srv, c: c}
}

// get does an authenticated GET /v1/runs on a new connection.
func (s *served) get(timeout time.Duration) (int, error) {
	cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	defer cl.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/v1/runs", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// trickler is a hostile client: it sends head, then one byte of filler
// every interval until the server closes the connection or stop is
// called. closed receives how long after the start the server closed it.
type trickler struct {
	conn   net.Conn
	closed chan time.Duration
	stop   chan struct{}
	wg     sync.WaitGroup
}

func trickle(t *testing.T, addr, head, filler string, interval time.Duration) *trickler {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &trickler{conn: conn, closed: make(chan time.Duration, 1), stop: make(chan struct{})}
	start := time.Now()
	io.WriteString(conn, head) // the server may not read it yet: it is queued
	tr.wg.Go(func() {          // writer
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-tk.C:
				if _, err := io.WriteString(conn, filler); err != nil {
					return
				}
			}
		}
	})
	tr.wg.Go(func() { // reader: the server's answer, until it closes
		io.Copy(io.Discard, conn)
		tr.closed <- time.Since(start)
	})
	t.Cleanup(tr.close)
	return tr
}

func (tr *trickler) close() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.conn.Close()
	tr.wg.Wait()
}

// waitClosed fails unless the server closed the connection within d of
// its start.
func (tr *trickler) waitClosed(t *testing.T, what string, d time.Duration) {
	t.Helper()
	select {
	case took := <-tr.closed:
		if took > d {
			t.Errorf("%s: the server closed it after %v, more than %v", what, took.Round(time.Millisecond), d)
		}
	case <-time.After(d + 5*time.Second):
		t.Fatalf("%s: still open %v after its start", what, d+5*time.Second)
	}
}

// TestStalledConnections: hostile clients holding every connection slot
// are cut within the read deadlines, an authenticated call answers once
// they are, an unauthenticated POST whose body trickles in is answered
// and closed without waiting for the body, and idle keep-alives close.
func TestStalledConnections(t *testing.T) {
	const maxConns = 8
	lim := httpapi.Limits{
		ReadHeaderTimeout: time.Second,
		ReadTimeout:       3 * time.Second,
		IdleTimeout:       time.Second,
		MaxConns:          maxConns,
	}
	s := newServed(t, lim)
	slack := 2 * time.Second // a loaded 2-CPU machine

	// Every slot held by a client whose headers never end: the
	// authenticated GET waits in the accept queue until they are cut at
	// ReadHeaderTimeout, then answers.
	var stalled []*trickler
	for range maxConns {
		stalled = append(stalled, trickle(t, s.addr, "POST /v1/runs HTTP/1.1\r\nHost: berth\r\n", "X-Stall: 1\r\n", 100*time.Millisecond))
	}
	time.Sleep(100 * time.Millisecond) // let the server accept them
	start := time.Now()
	status, err := s.get(lim.ReadTimeout + slack)
	if err != nil || status != 200 {
		t.Fatalf("authenticated GET behind %d stalled connections: %d %v", maxConns, status, err)
	}
	if took := time.Since(start); took < lim.ReadHeaderTimeout/2 {
		t.Errorf("the GET answered after %v: the stalled connections did not hold the %d slots", took, maxConns)
	}
	for i, tr := range stalled {
		tr.waitClosed(t, fmt.Sprintf("stalled headers %d", i), lim.ReadHeaderTimeout+slack)
	}

	// Unauthenticated POSTs with a body that trickles in: 401 at once,
	// and the connection closes without the server waiting for the body
	// (before ReadTimeout). The body is under net/http's 256 KiB
	// post-handler drain, which it would otherwise wait for.
	var unauth []*trickler
	for range maxConns {
		unauth = append(unauth, trickle(t, s.addr, "POST /v1/runs HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", " ", 100*time.Millisecond))
	}
	for i, tr := range unauth {
		tr.waitClosed(t, fmt.Sprintf("unauthenticated trickling POST %d", i), lim.ReadTimeout-time.Second)
	}
	if status, err := s.get(slack); err != nil || status != 200 {
		t.Fatalf("authenticated GET after the unauthenticated POSTs: %d %v", status, err)
	}

	// An authenticated POST whose body trickles: cut at ReadTimeout.
	authed := trickle(t, s.addr, "POST /v1/runs HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer "+token+"\r\nContent-Length: 1000000\r\n\r\n{", " ", 100*time.Millisecond)
	authed.waitClosed(t, "authenticated trickling POST", lim.ReadTimeout+slack)

	// An idle keep-alive connection closes after IdleTimeout.
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: berth\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive GET: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	idleStart := time.Now()
	conn.SetReadDeadline(time.Now().Add(lim.IdleTimeout + slack + 5*time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive: %v, want the server to close it", err)
	}
	if took := time.Since(idleStart); took > lim.IdleTimeout+slack {
		t.Errorf("idle keep-alive closed after %v", took)
	}
}

// TestLongCallsAndStreamsOutliveShortDeadlines: a tool call runs past
// ReadTimeout and the short routes' write deadline and still answers; the
// event stream stays open past them and still delivers.
func TestLongCallsAndStreamsOutliveShortDeadlines(t *testing.T) {
	lim := httpapi.Limits{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second, MaxConns: 8}
	s := newServed(t, lim)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+s.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, body := do("POST", "/v1/runs", `{"sandbox":"host"}`)
	id := body[strings.Index(body, `"id":"`)+6:][:32]
	if status, body := do("POST", "/v1/runs/"+id+"/tools/sleep", `{"args":{"ms":2500}}`); status != 200 || !strings.Contains(body, "slept 2500ms") {
		t.Fatalf("a 2.5 s call behind 1 s deadlines: %d %s", status, body)
	}
	status, body := do("POST", "/v1/runs", `{"sandbox":"host","conversation_id":"slow"}`)
	if status != 201 {
		t.Fatalf("a run that takes %v to open, behind 1 s deadlines: %d %s", slowStep, status, body)
	}
	slow := body[strings.Index(body, `"id":"`)+6:][:32]
	if status, body := do("DELETE", "/v1/runs/"+slow, ""); status != 204 {
		t.Fatalf("a run that takes %v to close, behind 1 s deadlines: %d %s", slowStep, status, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.addr+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events: %v %v", resp, err)
	}
	defer resp.Body.Close()
	time.Sleep(2500 * time.Millisecond)
	run, err := s.c.Lookup(controller.AllTenants, id)
	if err != nil {
		t.Fatal(err)
	}
	run.Questions().Publish("test.late", map[string]string{"after": "2.5s"})
	got := make(chan string, 1)
	go func() { // ends when the response body is closed
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "event: test.late") {
				got <- sc.Text()
				return
			}
		}
		got <- "stream ended: " + fmt.Sprint(sc.Err())
	}()
	select {
	case line := <-got:
		if line != "event: test.late" {
			t.Fatalf("event stream after 2.5 s behind 1 s deadlines: %s", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event on a stream older than the deadlines")
	}
	cancel()
	http.DefaultClient.CloseIdleConnections()
}
