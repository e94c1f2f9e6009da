package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
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
	for range perAddr + 1 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	closedWithin(t, silent[0], 30*time.Second) // the oldest gave its place to the newest
	if resp := roundTrip(t, authed, br, get); resp.StatusCode != 200 {
		t.Errorf("the authenticated connection after %d silent ones: %s", perAddr+1, resp.Status)
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
