package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/tests/berthtest"
)

// TestSigtermMCPCallInFlight: SIGTERM on a berth with a state directory
// is a handover (issue 33, findings 4 and 9). A /v1/mcp call in flight is
// not told the cell "could not be run" or the run "is closed": it answers
// restarting, saying its session ends with berth and what to do; the
// cell runs to its end in the kept kernel, which the next berth adopts.
func TestSigtermMCPCallInFlight(t *testing.T) {
	state, ws := t.TempDir(), workspace(t)
	tok := newToken(t)
	opts := berthtest.Options{Args: []string{"--mode", "local", "--state-dir", state}, Env: []string{"BERTH_TOKEN=" + tok}}
	s1 := berthtest.Start(t, opts)
	// A raw session, not the SDK's client: the client fails a call in
	// flight as soon as its standalone stream ends, which may come before
	// it reads the call's own answer; what berth answers is the question.
	url := fmt.Sprintf("%s/v1/mcp?sandbox=host&workspace=%s", s1.URL, ws)
	sid := session(t, url, tok)

	started, finished := filepath.Join(ws, "cell.started"), filepath.Join(ws, "cell.finished")
	// 20 s: past the close grace (5 s), so the call is in flight when
	// berth lets go of the run.
	code := fmt.Sprintf("import time\nopen(%q, 'w').close()\ntime.sleep(20)\nopen(%q, 'w').close()", started, finished)
	call, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": map[string]any{
		"name": "eval", "arguments": map[string]any{"code": code, "description": "a long cell berth is stopped under"}}})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	type answer struct {
		status int
		body   string
		err    error
	}
	done := make(chan answer, 1)
	go func() { // ends when berth answers or exits
		st, _, body, err := post(t, ctx, url, tok, sid, string(call))
		done <- answer{st, body, err}
	}()
	waitFor(t, callTimeout, "the long cell to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if err := s1.Stop(); err != nil {
		t.Fatalf("berth serve: %v\n%s", err, s1.Log())
	}
	a := <-done
	// The answer is the JSON-RPC response, as JSON or as one SSE event.
	body := a.body
	if i := strings.Index(body, "data: "); i >= 0 {
		body = strings.TrimSpace(strings.SplitN(body[i+len("data: "):], "\n", 2)[0])
	}
	var resp struct {
		ID    int `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Code string `json:"code"`
			} `json:"data"`
		} `json:"error"`
	}
	if a.err != nil || json.Unmarshal([]byte(body), &resp) != nil || resp.Error == nil || resp.Error.Data.Code != "restarting" {
		t.Fatalf("the call in flight at SIGTERM: want a JSON-RPC error with data.code restarting, got %d %q %v", a.status, a.body, a.err)
	}
	for _, lie := range []string{"could not be run", "run is closed", "unknown run"} {
		if strings.Contains(resp.Error.Message, lie) {
			t.Errorf("the call in flight at SIGTERM was told %q, which is not true: %s", lie, resp.Error.Message)
		}
	}
	if !strings.Contains(resp.Error.Message, "this MCP session ends") || !strings.Contains(resp.Error.Message, "initialize a new session") {
		t.Errorf("the call in flight at SIGTERM: %q; want it to say the session ends with berth and to initialize a new one", resp.Error.Message)
	}

	// The next berth adopts the run; the cell runs to its end in the
	// kept kernel.
	s2 := berthtest.Start(t, opts)
	api := &berthtest.Client{URL: s2.URL, Token: tok}
	t.Cleanup(func() { // the session's run would be closed by s2 once unused; close it now
		cctx, ccancel := context.WithTimeout(context.Background(), callTimeout)
		defer ccancel()
		st, b, err := api.Do(cctx, "GET", "/v1/runs", nil)
		if err != nil || st != http.StatusOK {
			t.Logf("list runs: %d %s %v", st, b, err)
			return
		}
		var list struct{ Runs []struct{ ID string } }
		json.Unmarshal(b, &list)
		for _, r := range list.Runs {
			api.CloseRun(cctx, r.ID)
		}
	})
	waitFor(t, callTimeout, "the cell to run to its end in the kept kernel", func() bool {
		_, err := os.Stat(finished)
		return err == nil
	})
}
