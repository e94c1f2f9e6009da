package security

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// probeDeadline bounds a request that must answer while others hold the
// server; it detects a hang (the request waiting for a slot that never
// frees) and asserts nothing about speed.
const probeDeadline = 20 * time.Second

// getFrom sends GET path with tok ("" none) on a connection of its own from
// local (nil: any), within probeDeadline.
func (s *server) getFrom(local net.Addr, path, tok string) (reply, error) {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{LocalAddr: local}).DialContext}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), probeDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
	if err != nil {
		return reply{}, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return reply{}, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: b}, err
}

// mustAnswerGET fails the test unless GET path answers want.
func (s *server) mustAnswerGET(what, path, tok string, want int) {
	s.t.Helper()
	r, err := s.getFrom(nil, path, tok)
	if err != nil || r.status != want {
		s.t.Errorf("%s: want %d, got %v %v", what, want, r, err)
	}
}

// heldStream is one open event stream.
type heldStream struct {
	resp   *http.Response
	cancel context.CancelFunc
}

// holdStream opens GET /v1/runs/{run}/events with tok and returns it once
// berth answered; a refusal is returned as the reply with a nil stream.
func (s *server) holdStream(tok, run string) (*heldStream, reply, error) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/runs/"+run+"/events", nil)
	if err != nil {
		cancel()
		return nil, reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	// Each stream its own connection, as separate clients would hold.
	tr := &http.Transport{DisableKeepAlives: true}
	answered := time.AfterFunc(probeDeadline, cancel) // a hang detector, stopped below
	resp, err := tr.RoundTrip(req)
	answered.Stop()
	if err != nil {
		cancel()
		return nil, reply{}, fmt.Errorf("event stream: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, reply{status: resp.StatusCode, body: b}, nil
	}
	// Wait for the stream's first line: berth serves it.
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		resp.Body.Close()
		cancel()
		return nil, reply{}, fmt.Errorf("event stream's first line: %w", err)
	}
	return &heldStream{resp: resp, cancel: func() { cancel(); resp.Body.Close() }}, reply{status: 200}, nil
}

// TestOneTenantCannotHoldEveryConnection (issue 31, finding 5): tenant a
// opens event streams until berth refuses one; the refusal is 429
// too_many saying what to close, it comes at the per-tenant cap (well
// under --max-conns), and while a holds every stream it may, tenant b's
// GET /v1/runs, /healthz and /readyz answer, and b may open a stream of
// its own.
func TestOneTenantCannotHoldEveryConnection(t *testing.T) {
	const maxConns, perTenant = 96, 24
	tn := startTenants(t, "--mode", "local", "--max-conns", strconv.Itoa(maxConns), "--max-streams-per-tenant", strconv.Itoa(perTenant))
	s := tn.s
	spec := fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, t.TempDir())
	runA, runB := s.open(tn.a, spec), s.open(tn.b, spec)

	var held []*heldStream
	defer func() {
		for _, st := range held {
			st.cancel()
		}
	}()
	var refused reply
	for len(held) < maxConns {
		st, r, err := s.holdStream(tn.a, runA)
		if err != nil {
			t.Fatalf("tenant a's stream %d: %v (berth holds every connection for one tenant)\n%s", len(held)+1, err, s.log())
		}
		if st == nil {
			refused = r
			break
		}
		held = append(held, st)
	}
	if refused.status != http.StatusTooManyRequests || refused.code() != "too_many" || !strings.Contains(string(refused.body), "close a GET /v1/runs/{id}/events") {
		t.Fatalf("tenant a's stream %d: want 429 too_many saying which stream to close, got %s", len(held)+1, refused)
	}
	if len(held) != perTenant {
		t.Errorf("tenant a held %d streams, want the cap %d", len(held), perTenant)
	}

	// While a holds its streams, b is served and the probes answer.
	s.mustAnswerGET("tenant b's GET /v1/runs while a holds its streams", "/v1/runs", tn.b, http.StatusOK)
	s.mustAnswerGET("/healthz while a holds its streams", "/healthz", "", http.StatusOK)
	s.mustAnswerGET("/readyz while a holds its streams", "/readyz", "", http.StatusOK)
	stB, r, err := s.holdStream(tn.b, runB)
	if err != nil || stB == nil {
		t.Fatalf("tenant b's stream while a holds its own: %v %v", r, err)
	}
	stB.cancel()

	// Ending one of a's streams gives a its place back.
	held[0].cancel()
	held = held[1:]
	for end := time.Now().Add(probeDeadline); ; time.Sleep(100 * time.Millisecond) {
		st, r, err := s.holdStream(tn.a, runA)
		if err != nil {
			t.Fatal(err)
		}
		if st != nil {
			held = append(held, st)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("tenant a after closing a stream: still %s", r)
		}
	}
}

// TestHealthWhileEveryConnectionIsTaken: with every one of --max-conns
// held by event streams (two tenants, each at its cap), /healthz and
// /readyz still answer, on berth's spare connections.
func TestHealthWhileEveryConnectionIsTaken(t *testing.T) {
	const maxConns = 16
	tn := startTenants(t, "--mode", "local", "--max-conns", strconv.Itoa(maxConns), "--max-streams-per-tenant", strconv.Itoa(maxConns/2))
	s := tn.s
	spec := fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, t.TempDir())
	runs := map[string]string{tn.a: s.open(tn.a, spec), tn.b: s.open(tn.b, spec)}
	http.DefaultClient.CloseIdleConnections() // the streams are to hold every slot
	var held []*heldStream
	defer func() {
		for _, st := range held {
			st.cancel()
		}
	}()
	for tok, run := range runs {
		for range maxConns / 2 {
			st, r, err := s.holdStream(tok, run)
			if err != nil || st == nil {
				t.Fatalf("stream %d: %v %v", len(held)+1, r, err)
			}
			held = append(held, st)
		}
	}
	for range 3 { // more probes than one: each closes its spare connection
		s.mustAnswerGET("/healthz with every connection held", "/healthz", "", http.StatusOK)
		s.mustAnswerGET("/readyz with every connection held", "/readyz", "", http.StatusOK)
	}
}

// idleAttackers is how many idle sockets one address opens; each opens
// again reopenAfter after berth closed it.
const (
	idleAttackers = 512
	reopenAfter   = 500 * time.Millisecond
)

// TestIdleSocketsDoNotBlockHealth (issue 31, finding 5): one address
// keeps idleAttackers connections open that never send a byte, opening a
// new one whenever berth closes one, more than --max-conns. Meanwhile
// /healthz answers, and tenant b's GET /v1/runs, both from another
// address. (Before, the probes waited in the accept queue behind every
// idle socket, each served its 10 s first-request deadline in turn.)
func TestIdleSocketsDoNotBlockHealth(t *testing.T) {
	tn := startTenants(t, "--mode", "local", "--max-conns", "64")
	s := tn.s
	addr := strings.TrimPrefix(s.url, "http://")
	attacker := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	if c, err := (&net.Dialer{LocalAddr: attacker}).Dial("tcp", addr); err != nil {
		t.Skipf("cannot dial from %s: %v", attacker.IP, err)
	} else {
		c.Close()
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var connected, reopened atomic.Int64
	defer func() { cancel(); wg.Wait() }()
	d := &net.Dialer{LocalAddr: attacker}
	for range idleAttackers {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
						time.Sleep(50 * time.Millisecond) // out of ports or backlog: try again
					}
					continue
				}
				connected.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				io.Copy(io.Discard, c) // until berth (or the test's end) closes it
				stop()
				c.Close()
				reopened.Add(1)
				select { // not a busy loop: the attack holds sockets, it does not churn them
				case <-ctx.Done():
				case <-time.After(reopenAfter):
				}
			}
		})
	}
	// Every socket connected: berth's slots and its accept queue are full.
	for end := time.Now().Add(probeDeadline); connected.Load() < idleAttackers && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	defer func() {
		t.Logf("idle sockets connected %d times, closed by berth %d times", connected.Load(), reopened.Load())
	}()

	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	for i := range 3 {
		if r, err := s.getFrom(local, "/healthz", ""); err != nil || r.status != http.StatusOK {
			t.Errorf("/healthz %d among %d idle sockets: %v %v", i, idleAttackers, r, err)
		}
		if r, err := s.getFrom(local, "/v1/runs", tn.b); err != nil || r.status != http.StatusOK {
			t.Errorf("tenant b's GET /v1/runs %d among %d idle sockets: %v %v", i, idleAttackers, r, err)
		}
	}
}

// mcpInit is an initialize request.
const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fairshare","version":"1"}}}`

// fairMCPPost sends one MCP POST (sid "" for none) and returns the reply and
// the session id berth gave.
func fairMCPPost(cl *http.Client, url, tok, sid, body string) (reply, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return reply{}, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return reply{}, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: b}, resp.Header.Get("Mcp-Session-Id"), err
}

// fairMCPDelete ends session sid.
func fairMCPDelete(cl *http.Client, url, tok, sid string) (int, error) {
	req, _ := http.NewRequest("DELETE", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// vmRSSKB is VmRSS of process pid, in KiB.
func vmRSSKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// mcpFlood is how many initialize POSTs TestMCPSessionsAreCapped sends
// past the caps.
const mcpFlood = 20000

// TestMCPSessionsAreCapped (issue 31, finding 6): a run takes at most
// its cap of MCP sessions and a tenant at most its own; the next
// initialize is 429 too_many saying what to end, and so are mcpFlood
// more. berth's resident memory after the sessions end is within 20 MB
// of what it was before them.
func TestMCPSessionsAreCapped(t *testing.T) {
	const perRun, perTenant = 16, 24 // perRun is mcpserver.MaxSessionsPerRun
	tn := startTenants(t, "--mode", "local", "--max-mcp-sessions-per-tenant", strconv.Itoa(perTenant))
	s := tn.s
	spec := fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, t.TempDir())
	run1, run2 := s.open(tn.a, spec), s.open(tn.a, spec)
	url1, url2 := s.url+"/v1/runs/"+run1+"/mcp", s.url+"/v1/runs/"+run2+"/mcp"
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer cl.CloseIdleConnections()

	var sessions []struct{ url, sid string }
	open := func(url string) (reply, error) {
		r, sid, err := fairMCPPost(cl, url, tn.a, "", mcpInit)
		if err == nil && r.status == http.StatusOK && sid != "" {
			sessions = append(sessions, struct{ url, sid string }{url, sid})
		}
		return r, err
	}
	// Warm up (one session made and ended), then the baseline.
	if r, err := open(url1); err != nil || r.status != http.StatusOK {
		t.Fatalf("initialize: %v %v", r, err)
	}
	if code, err := fairMCPDelete(cl, url1, tn.a, sessions[0].sid); err != nil || code != http.StatusNoContent {
		t.Fatalf("DELETE the first session: %d %v", code, err)
	}
	sessions = nil
	base := vmRSSKB(t, s.Pid())

	for i := range perRun {
		if r, err := open(url1); err != nil || r.status != http.StatusOK {
			t.Fatalf("initialize %d on run 1: %v %v", i+1, r, err)
		}
	}
	r, err := open(url1)
	if err != nil || r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "too_many") || !strings.Contains(string(r.body), "DELETE") {
		t.Fatalf("initialize %d on one run: want 429 too_many saying to DELETE a session, got %v %v", perRun+1, r, err)
	}
	for i := range perTenant - perRun {
		if r, err := open(url2); err != nil || r.status != http.StatusOK {
			t.Fatalf("initialize %d on run 2: %v %v", i+1, r, err)
		}
	}
	r, err = open(url2)
	if err != nil || r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), `tenant \"a\"`) {
		t.Fatalf("initialize %d of tenant a: want 429 too_many naming the tenant's cap, got %v %v", perTenant+1, r, err)
	}
	// Tenant b is not held by a's sessions.
	runB := s.open(tn.b, spec)
	if r, sid, err := fairMCPPost(cl, s.url+"/v1/runs/"+runB+"/mcp", tn.b, "", mcpInit); err != nil || r.status != http.StatusOK {
		t.Fatalf("tenant b's initialize while a is at its cap: %v %v", r, err)
	} else {
		fairMCPDelete(cl, s.url+"/v1/runs/"+runB+"/mcp", tn.b, sid)
	}

	// The flood: every one refused.
	var wg sync.WaitGroup
	var refused, other atomic.Int64
	var firstOther atomic.Value
	work := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for range work {
				r, _, err := fairMCPPost(cl, url2, tn.a, "", mcpInit)
				if err == nil && r.status == http.StatusTooManyRequests {
					refused.Add(1)
					continue
				}
				other.Add(1)
				firstOther.CompareAndSwap(nil, fmt.Sprint(r, err))
			}
		})
	}
	begin := time.Now()
	for range mcpFlood {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	t.Logf("%d initializes in %v; RSS %d KiB before the sessions, %d KiB now", mcpFlood, time.Since(begin).Round(time.Millisecond), base, vmRSSKB(t, s.Pid()))
	if n := other.Load(); n > 0 {
		t.Errorf("%d of %d initializes past the cap were not 429 (the first: %v)", n, mcpFlood, firstOther.Load())
	}

	for _, ss := range sessions {
		if code, err := fairMCPDelete(cl, ss.url, tn.a, ss.sid); err != nil || code != http.StatusNoContent {
			t.Errorf("DELETE session: %d %v", code, err)
		}
	}
	// A deleted session gives its place back.
	if r, err := open(url1); err != nil || r.status != http.StatusOK {
		t.Errorf("initialize after the sessions were deleted: %v %v", r, err)
	}

	// The Go runtime gives freed memory back to the system gradually:
	// wait for it, within a bound.
	const slackKB = 20 << 10
	var now int
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		if now = vmRSSKB(t, s.Pid()); now <= base+slackKB || time.Now().After(end) {
			break
		}
	}
	if now > base+slackKB {
		t.Errorf("berth's RSS is %d KiB after the sessions ended, %d KiB more than before them (bound %d KiB)", now, now-base, slackKB)
	}
}
