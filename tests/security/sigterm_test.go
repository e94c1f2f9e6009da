package security

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGTERM is a handover, not a close (issue 33, finding 4): with a state
// directory the run is kept and the next berth adopts it, so a call in
// flight is not told "the cell could not be run", "the run is closed" or
// 404 unknown_run, and an event-stream follower is not told `closed`.
// The call answers 503 restarting saying the cell goes on in the kept
// kernel; the follower gets `restarting`; and after the restart the
// cell's work is there.

// sigtermCell is how long the cell berth is stopped under sleeps: well
// past the close grace (5 s), so the call is in flight when berth lets go
// of the run.
const sigtermCell = 20 * time.Second

// follow connects to run's event stream and returns a channel that gets
// the type of every event, closed when the stream ends; it returns once
// berth said it is connected.
func (s *server) follow(ctx context.Context, run string) <-chan string {
	s.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/runs/"+run+"/events", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("follow the events of %s: %v", run, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		s.t.Fatalf("follow the events of %s: %d", run, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), ": connected") {
		resp.Body.Close()
		s.t.Fatalf("the event stream of %s did not start with ': connected' (%q, %v)", run, sc.Text(), sc.Err())
	}
	types := make(chan string, 64)
	go func() { // ends with the stream (berth's exit or ctx)
		defer close(types)
		defer resp.Body.Close()
		for sc.Scan() {
			if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				types <- typ
			}
		}
	}()
	return types
}

func TestSigtermCallInFlight(t *testing.T) {
	state, ws := t.TempDir(), t.TempDir()
	args := []string{"--mode", "local", "--state-dir", state, "--host-placement", "explicit"}
	s1 := startServe(t, serveOpts{args: args, env: adoptEnv})
	run := s1.openKept("", fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	t.Cleanup(func() {
		for _, p := range residentsOf(run) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	events := s1.follow(ctx, run)

	started := filepath.Join(ws, "cell-started")
	code := fmt.Sprintf("import time, pathlib\npathlib.Path(%q).touch()\ntime.sleep(%d)\nx = 42\npathlib.Path('cell-done').touch()",
		started, int(sigtermCell.Seconds()))
	answered := make(chan reply, 1)
	go func() { // ends when berth answers or exits
		r, err := s1.requestOnce(ctx, "POST", "/v1/runs/"+run+"/tools/eval", "",
			fmt.Sprintf(`{"args":{"code":%q,"description":"a long cell berth is stopped under"}}`, code))
		if err != nil {
			r = reply{body: []byte("no answer: " + err.Error())}
		}
		answered <- r
	}()
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the long cell did not start\n%s", s1.log())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := s1.Stop(); err != nil {
		t.Fatalf("berth serve: %v\n%s", err, s1.log())
	}

	var r reply
	select {
	case r = <-answered:
	case <-ctx.Done():
		t.Fatalf("the call in flight was not answered before berth exited")
	}
	body := string(r.body)
	for _, lie := range []string{"could not be run", "run is closed", "unknown_run", "unknown run"} {
		if strings.Contains(body, lie) {
			t.Errorf("the call in flight at SIGTERM was told %q, which is not true (the run is kept): %s", lie, r)
		}
	}
	if r.status != http.StatusServiceUnavailable || r.code() != "restarting" || !strings.Contains(body, "kept kernel") {
		t.Errorf("the call in flight at SIGTERM answered %s; want 503 restarting saying the cell goes on in the kept kernel\n%s", r, s1.log())
	}

	var got []string
	for typ := range events {
		got = append(got, typ)
	}
	if len(got) == 0 || got[len(got)-1] != "restarting" || strings.Contains(strings.Join(got, " "), "closed") {
		t.Errorf("the follower's events at SIGTERM: %v; want the last one restarting and none closed", got)
	}

	// The cell ran to its end in the kept kernel: the next berth adopts
	// the run (once the busy kernel answers) and x is set.
	s2 := startServe(t, serveOpts{args: args, env: adoptEnv})
	t.Cleanup(func() { s2.do("DELETE", "/v1/runs/"+run, "", "") })
	res, r2 := s2.call("", run, "eval", `{"code":"print('x is', x)","description":"read what the cell set before the restart"}`)
	if r2.status != http.StatusOK || res.IsError || !strings.Contains(res.Text(), "x is 42") {
		t.Fatalf("after the restart, x: %s %s; want 42 (the cell ran to its end in the kept kernel)\n%s", r2, res.Text(), s2.log())
	}
	if _, err := os.Stat(filepath.Join(ws, "cell-done")); err != nil {
		t.Errorf("the cell's last line did not run: %v", err)
	}
}
