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

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	cs := connect(t, fmt.Sprintf("%s/v1/mcp?sandbox=host&workspace=%s", s1.URL, ws), tok, nil)

	started, finished := filepath.Join(ws, "cell.started"), filepath.Join(ws, "cell.finished")
	// 20 s: past the close grace (5 s), so the call is in flight when
	// berth lets go of the run.
	code := fmt.Sprintf("import time\nopen(%q, 'w').close()\ntime.sleep(20)\nopen(%q, 'w').close()", started, finished)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { // ends when berth answers or exits
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "eval", Arguments: map[string]any{"code": code, "description": "a long cell berth is stopped under"}})
		done <- err
	}()
	waitFor(t, callTimeout, "the long cell to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if err := s1.Stop(); err != nil {
		t.Fatalf("berth serve: %v\n%s", err, s1.Log())
	}
	je := rpcError(t, "the call in flight at SIGTERM", <-done, "restarting")
	for _, lie := range []string{"could not be run", "run is closed", "unknown run"} {
		if strings.Contains(je.Message, lie) {
			t.Errorf("the call in flight at SIGTERM was told %q, which is not true: %s", lie, je.Message)
		}
	}
	if !strings.Contains(je.Message, "this MCP session ends") || !strings.Contains(je.Message, "initialize a new session") {
		t.Errorf("the call in flight at SIGTERM: %q; want it to say the session ends with berth and to initialize a new one", je.Message)
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
