package security

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stalled is how many unauthenticated connections trickle their body.
const stalled = 40

// TestStalledClientsAreCut: connections with no token that send a POST's
// headers and then trickle its body one byte at a time — as many as berth
// accepts at once — are closed by berth within its read deadline, and an
// authenticated call still answers meanwhile or right after.
func TestStalledClientsAreCut(t *testing.T) {
	const readTimeout = 2 * time.Second
	tok := newToken(t)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "local", "--read-timeout", readTimeout.String(), "--max-conns", strconv.Itoa(stalled)},
		env:  []string{"BERTH_TOKEN=" + tok},
	})
	addr := strings.TrimPrefix(s.url, "http://")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	cut := make(chan time.Duration, stalled)
	for range stalled {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer conn.Close()
			begin := time.Now()
			fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", addr)
			// Trickle a byte every 200 ms until berth closes the
			// connection or the test ends.
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					cut <- time.Since(begin)
					return
				}
				conn.SetReadDeadline(time.Now().Add(time.Millisecond))
				var b [512]byte
				if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					cut <- time.Since(begin)
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	// An authenticated call answers (it may wait for a slot).
	if r := s.do("GET", "/v1/runs", tok, ""); r.status != http.StatusOK {
		t.Errorf("an authenticated call among stalled clients: %s", r)
	}
	deadline := time.After(readTimeout + 30*time.Second)
	for i := range stalled {
		select {
		case d := <-cut:
			if d > readTimeout+10*time.Second {
				t.Errorf("a stalled connection was cut only after %v (read timeout %v)", d, readTimeout)
			}
		case <-deadline:
			t.Fatalf("%d of %d stalled connections still open %v after the read timeout", stalled-i, stalled, 30*time.Second)
		}
	}
	if r := s.do("GET", "/v1/runs", tok, ""); r.status != http.StatusOK {
		t.Errorf("an authenticated call after the stalled clients: %s", r)
	}
}

// TestRunCapAndIdleExpiry: a tenant's runs beyond the cap are refused
// with 429 saying what to close; a run left idle past the expiry answers
// 404 run_expired, and the kernel it had started is gone.
func TestRunCapAndIdleExpiry(t *testing.T) {
	tok := newToken(t)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "local", "--max-runs-per-tenant", "2", "--run-idle-expiry", "3s"},
		env:  []string{"BERTH_TOKEN=" + tok},
	})
	spec := fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, t.TempDir())
	first := s.open(tok, spec)
	s.open(tok, spec)
	r := s.do("POST", "/v1/runs", tok, spec)
	if r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "close") {
		t.Errorf("a third run over a cap of 2: want 429 saying what to close, got %s", r)
	}
	s.do("DELETE", "/v1/runs/"+first, tok, "")
	run := s.open(tok, spec)

	res, r := s.call(tok, run, "eval", `{"code":"import os; print('pid', os.getpid())","description":"start a kernel and print its process id"}`)
	m := regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(res.Text())
	if r.status != 200 || m == nil {
		t.Fatalf("eval: %s / %s", r, res.Text())
	}
	pid, _ := strconv.Atoi(m[1])
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("the kernel (pid %d) is not running after its cell", pid)
	}
	var expired reply
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if expired = s.do("GET", "/v1/runs/"+run, tok, ""); expired.status != http.StatusOK {
			break
		}
	}
	if expired.status != http.StatusNotFound || expired.code() != "run_expired" {
		t.Fatalf("an idle run after its expiry: want 404 run_expired, got %s", expired)
	}
	if _, r := s.call(tok, run, "read", `{"path":"."}`); r.code() != "run_expired" {
		t.Errorf("a call to an expired run: want run_expired, got %s", r)
	}
	for end := time.Now().Add(15 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the expired run's kernel (pid %d) still runs", pid)
		}
	}
}

// forkBomb forks children that sleep until it has forked forkBombMax or
// fork fails, and says which.
const forkBomb = `import os, time
n, err = 0, None
for i in range(%d):
    try:
        pid = os.fork()
    except OSError as e:
        err = e
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    n += 1
print("forked", n, "then", err)
`

const forkBombMax = 3000

// TestForkBombStopsAtItsLimit: a cell that forks without end stops at the
// run's process limit, berth keeps serving (another run answers, the same
// run answers), and closing the run leaves none of the children.
func TestForkBombStopsAtItsLimit(t *testing.T) {
	tok := newToken(t)
	s := startServe(t, serveOpts{args: []string{"--mode", "local", "--host-pids-max", "128"}, env: []string{"BERTH_TOKEN=" + tok}})
	ws := t.TempDir()
	run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	res, r := s.call(tok, run, "eval", fmt.Sprintf(`{"code":%q,"description":"fork children until the system says no"}`, fmt.Sprintf(forkBomb, forkBombMax)))
	t.Logf("fork bomb: %s", res.Text())
	m := regexp.MustCompile(`forked (\d+) then (.*)`).FindStringSubmatch(res.Text())
	if r.status != 200 || m == nil {
		t.Fatalf("the fork bomb cell: %s / %s", r, res.Text())
	}
	if n, _ := strconv.Atoi(m[1]); n >= forkBombMax || m[2] == "None" {
		t.Errorf("the cell forked %d children without hitting a limit", n)
	}
	other := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, t.TempDir()))
	if res, r := s.call(tok, other, "eval", `{"code":"print(6*7)","description":"check that a neighbouring run still works"}`); r.status != 200 || !strings.Contains(res.Text(), "42") {
		t.Errorf("another run during the fork bomb: %s / %s", r, res.Text())
	}
	if r := s.do("DELETE", "/v1/runs/"+run, tok, ""); r.status != http.StatusNoContent {
		t.Errorf("close the fork bomb's run: %s", r)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left := sleepersOf(t, ws)
		if left == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d of the fork bomb's children outlived their run", left)
		}
	}
}

// sleepersOf counts processes whose working directory is dir.
func sleepersOf(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dir {
			n++
		}
	}
	return n
}
