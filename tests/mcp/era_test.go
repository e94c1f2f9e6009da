package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/tests/berthtest"
)

// The protocol eras every MCP endpoint speaks: 2026-07-28, stateless (no
// initialize, no session), and 2025-11-25 with sessions.
var eras = []string{"2026-07-28", "2025-11-25"}

// useEra checks that cs negotiated era and drives it: tools/list, read,
// and eval keeping the kernel's state across two calls.
func useEra(t *testing.T, cs *mcp.ClientSession, era string) {
	t.Helper()
	if got := cs.InitializeResult().ProtocolVersion; got != era {
		t.Fatalf("negotiated protocol %s, want %s", got, era)
	}
	if list := names(t, cs); !slices.Contains(list, "read") || !slices.Contains(list, "eval") || !slices.IsSorted(list) {
		t.Errorf("tools/list: want read and eval, in name order: %v", list)
	}
	if got := mustCall(t, cs, "read", map[string]any{"path": "a.txt"}); !strings.Contains(got, "hello from the workspace") {
		t.Errorf("read a.txt: %q", got)
	}
	mustCall(t, cs, "eval", map[string]any{"code": "x = 41", "description": "set x in the kernel"})
	if got := mustCall(t, cs, "eval", map[string]any{"code": "x + 1", "description": "read x back from the kernel"}); !strings.Contains(got, "42") {
		t.Errorf("eval x + 1 after x = 41 (the kernel keeps its state between calls): %q", got)
	}
}

// statelessPost sends one 2026-07-28 request (headers and _meta as the
// protocol has them) and returns the status, headers and the JSON-RPC
// message of the answer (from an event stream or a JSON body).
func statelessPost(t *testing.T, url, tok, method, name string, params map[string]any) (int, http.Header, map[string]any) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	caps := map[string]any{}
	if c, ok := params["caps"]; ok { // the client's capabilities
		caps = c.(map[string]any)
		delete(params, "caps")
	}
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": caps,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	var msg map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	var all strings.Builder
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
		if d, ok := strings.CutPrefix(line, "data:"); ok {
			var m map[string]any
			if json.Unmarshal([]byte(d), &m) == nil && m["id"] != nil {
				msg = m
			}
		}
	}
	if msg == nil && json.Unmarshal([]byte(all.String()), &msg) != nil {
		t.Fatalf("%s: status %d, no JSON-RPC answer in %q", method, resp.StatusCode, all.String())
	}
	return resp.StatusCode, resp.Header, msg
}

// TestErasHTTPRun: /v1/runs/{id}/mcp serves a 2026-07-28 client (go-sdk,
// stateless) and a 2025-11-25 one (session) on the same run; a 2026-07-28
// request carries no session and gets resultType and a valid cache hint
// on tools/list; another tenant's run answers like a missing one in both
// eras.
func TestErasHTTPRun(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	run, err := api.OpenRun(context.Background(), map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := tn.s.URL + "/v1/runs/" + run.ID + "/mcp"
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			useEra(t, connectAt(t, endpoint, tn.a, nil, &mcp.ClientSessionOptions{ProtocolVersion: era}), era)
		})
	}

	t.Run("wire", func(t *testing.T) {
		st, hdr, msg := statelessPost(t, endpoint, tn.a, "tools/list", "", nil)
		res, _ := msg["result"].(map[string]any)
		if st != http.StatusOK || res == nil {
			t.Fatalf("tools/list at 2026-07-28: %d %v", st, msg)
		}
		if sid := hdr.Get("Mcp-Session-Id"); sid != "" {
			t.Errorf("a stateless request got a session id %q", sid)
		}
		if res["resultType"] != "complete" || res["cacheScope"] != "private" {
			t.Errorf("tools/list: resultType %v cacheScope %v, want complete and private", res["resultType"], res["cacheScope"])
		}
		if ttl, _ := res["ttlMs"].(float64); ttl <= 0 {
			t.Errorf("tools/list: ttlMs %v, want a positive time", res["ttlMs"])
		}
		st, _, msg = statelessPost(t, endpoint, tn.a, "server/discover", "", nil)
		res, _ = msg["result"].(map[string]any)
		if st != http.StatusOK || res == nil {
			t.Errorf("server/discover: %d %v", st, msg)
		}
		if vs, _ := res["supportedVersions"].([]any); !slices.Contains(vs, any("2026-07-28")) || !slices.Contains(vs, any("2025-11-25")) {
			t.Errorf("server/discover lists %v: want 2026-07-28 and 2025-11-25", res["supportedVersions"])
		}
		st, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "read", map[string]any{"name": "read", "arguments": map[string]any{"path": "a.txt"}})
		if res, _ := msg["result"].(map[string]any); st != http.StatusOK || res == nil || res["resultType"] != "complete" || !strings.Contains(fmt.Sprint(res["content"]), "hello") {
			t.Errorf("tools/call read at 2026-07-28: %d %v", st, msg)
		}
	})

	t.Run("headers", func(t *testing.T) {
		// Mcp-Name must name the tool the body calls.
		st, _, msg := statelessPost(t, endpoint, tn.a, "tools/call", "write", map[string]any{"name": "read", "arguments": map[string]any{"path": "a.txt"}})
		if e, _ := msg["error"].(map[string]any); st != http.StatusBadRequest || e == nil {
			t.Errorf("tools/call read with Mcp-Name: write: want a 400 error, got %d %v", st, msg)
		}
		// An unknown tool is -32602 naming it, as with a session.
		_, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "no_such_tool", map[string]any{"name": "no_such_tool", "arguments": map[string]any{}})
		if e, _ := msg["error"].(map[string]any); e == nil || e["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(e["data"]), "unknown_tool") {
			t.Errorf("an unknown tool at 2026-07-28: want -32602 unknown_tool, got %v", msg)
		}
		// Arguments the tool refuses are an isError result.
		_, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "read", map[string]any{"name": "read", "arguments": map[string]any{"path": 3}})
		if res, _ := msg["result"].(map[string]any); res == nil || res["isError"] != true || res["resultType"] != "complete" {
			t.Errorf("read with a bad path at 2026-07-28: want an isError result, got %v", msg)
		}
	})

	t.Run("another tenant", func(t *testing.T) {
		const missing = "0123456789abcdef0123456789abcdef"
		st, _, foreign := statelessPost(t, endpoint, tn.b, "tools/call", "read", map[string]any{"name": "read", "arguments": map[string]any{"path": "a.txt"}})
		if st != http.StatusNotFound || !strings.Contains(fmt.Sprint(foreign), "unknown_run") {
			t.Fatalf("tenant b calling read on a's run at 2026-07-28: want 404 unknown_run, got %d %v", st, foreign)
		}
		_, _, absent := statelessPost(t, tn.s.URL+"/v1/runs/"+missing+"/mcp", tn.b, "tools/call", "read", map[string]any{"name": "read", "arguments": map[string]any{"path": "a.txt"}})
		if f, a := strings.ReplaceAll(fmt.Sprint(foreign), run.ID, "ID"), strings.ReplaceAll(fmt.Sprint(absent), missing, "ID"); f != a {
			t.Errorf("a foreign run answers unlike a missing one:\n%s\n%s", f, a)
		}
		for _, era := range eras {
			c := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: bearerClient(tn.b), MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: era})
			if err == nil {
				_, err = cs.ListTools(ctx, nil)
				cs.Close()
			}
			cancel()
			if err == nil {
				t.Errorf("tenant b listed the tools of a's run at %s", era)
			}
		}
	})
}

// TestErasHTTPOpensRun: /v1/mcp serves a 2026-07-28 client by the run
// it opens for the tenant and the URL's parameters, reused by every later
// request of that URL (so eval keeps its state) and named in each result's
// _meta; another tenant at the same URL gets a run of its own.
func TestErasHTTPOpensRun(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	ctx := context.Background()
	runs := func(tok string) []string {
		var list struct{ Runs []struct{ ID string } }
		c := &berthtest.Client{URL: tn.s.URL, Token: tok}
		st, b, err := c.Do(ctx, "GET", "/v1/runs", nil)
		if err != nil || st != 200 || json.Unmarshal(b, &list) != nil {
			t.Fatalf("list runs: %d %v %s", st, err, b)
		}
		var ids []string
		for _, r := range list.Runs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	endpoint := fmt.Sprintf("%s/v1/mcp?sandbox=host&workspace=%s", tn.s.URL, ws)
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			before := len(runs(tn.a))
			cs := connectAt(t, endpoint, tn.a, nil, &mcp.ClientSessionOptions{ProtocolVersion: era})
			useEra(t, cs, era)
			if n := len(runs(tn.a)); n != before+1 {
				t.Errorf("tenant a has %d runs, want %d: one run for the client", n, before+1)
			}
		})
	}

	st, _, msg := statelessPost(t, endpoint, tn.a, "tools/list", "", nil)
	res, _ := msg["result"].(map[string]any)
	meta, _ := res["_meta"].(map[string]any)
	id, _ := meta["dev.berth/run"].(string)
	if st != http.StatusOK || id == "" || !slices.Contains(runs(tn.a), id) {
		t.Fatalf("tools/list at 2026-07-28 on /v1/mcp: want the run's id in _meta, got %d %v (runs %v)", st, msg, runs(tn.a))
	}
	// The run named is the one that kept x: /v1/runs/{id}/mcp serves it too.
	cs := connectAt(t, tn.s.URL+"/v1/runs/"+id+"/mcp", tn.a, nil, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if got := mustCall(t, cs, "eval", map[string]any{"code": "x", "description": "read x back from the kernel"}); !strings.Contains(got, "41") {
		t.Errorf("the run named in _meta does not hold the client's x: %q", got)
	}

	// Tenant b at the same URL: a run of its own, without a's x.
	b := connectAt(t, endpoint, tn.b, nil, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	res2, err := call(t, b, "eval", map[string]any{"code": "x", "description": "read x back from the kernel"})
	if err != nil || !res2.IsError && !strings.Contains(text(res2), "NameError") {
		t.Errorf("tenant b's eval of x at a's URL: want a NameError in a run of b's own, got %v %q", err, text(res2))
	}
	if bs := runs(tn.b); len(bs) != 1 || slices.Contains(runs(tn.a), bs[0]) {
		t.Errorf("tenant b's runs %v: want one of its own", bs)
	}
}

// TestErasStdio: berth mcp speaks both eras on stdio.
func TestErasStdio(t *testing.T) {
	bin := berthtest.Build(t)
	ws := workspace(t)
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			cmd := exec.Command(bin, "mcp", "--sandbox", "host", "--workspace", ws)
			cmd.Stderr = os.Stderr
			c := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: era})
			if err != nil {
				t.Fatalf("berth mcp at %s: %v", era, err)
			}
			defer cs.Close()
			useEra(t, cs, era)
		})
	}
}

// TestErasCards: a 2026-07-28 client that declares elicitation answers
// ask_user's card through a multi round-trip request: the go-sdk client
// (its retry middleware asking the human), and on the wire an
// InputRequiredResult whose requestState is taken once — a replay or an
// altered state is refused. Without elicitation the card fails closed.
func TestErasCards(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	run, err := api.OpenRun(context.Background(), map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := tn.s.URL + "/v1/runs/" + run.ID + "/mcp"

	h := newHuman(pickBlue)
	cs := connectAt(t, endpoint, tn.a, h, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if got := cs.InitializeResult().ProtocolVersion; got != "2026-07-28" {
		t.Fatalf("negotiated %s", got)
	}
	useTools(t, cs, h)

	ask := map[string]any{"name": "ask_user", "arguments": map[string]any{"question": "Which shape?", "options": []map[string]string{{"label": "round"}, {"label": "square"}}}}
	elicits := map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}
	with := func(extra map[string]any) map[string]any {
		p := map[string]any{"caps": elicits}
		for k, v := range ask {
			p[k] = v
		}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	st, _, msg := statelessPost(t, endpoint, tn.a, "tools/call", "ask_user", with(nil))
	res, _ := msg["result"].(map[string]any)
	state, _ := res["requestState"].(string)
	if st != http.StatusOK || res["resultType"] != "input_required" || state == "" || !strings.Contains(fmt.Sprint(res["inputRequests"]), "Which shape?") {
		t.Fatalf("ask_user from a stateless client that elicits: want an InputRequiredResult asking the question, got %d %v", st, msg)
	}
	answer := map[string]any{"card": map[string]any{"action": "accept", "content": map[string]any{"choice": "square"}}}
	st, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "ask_user", with(map[string]any{"requestState": state, "inputResponses": answer}))
	res, _ = msg["result"].(map[string]any)
	if st != http.StatusOK || res["resultType"] != "complete" || !strings.Contains(fmt.Sprint(res["content"]), "square") {
		t.Fatalf("the retry with the answer: want a complete result saying square, got %d %v", st, msg)
	}
	// Taken once: the same state again is refused.
	_, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "ask_user", with(map[string]any{"requestState": state, "inputResponses": answer}))
	if e, _ := msg["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "answered already") {
		t.Errorf("a replayed requestState: want it refused as answered already, got %v", msg)
	}
	// An altered state is refused.
	_, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "ask_user", with(nil))
	res, _ = msg["result"].(map[string]any)
	state, _ = res["requestState"].(string)
	altered := []byte(state)
	altered[len(altered)/2] ^= 1
	_, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "ask_user", with(map[string]any{"requestState": string(altered), "inputResponses": answer}))
	if e, _ := msg["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "requestState is refused") {
		t.Errorf("an altered requestState: want it refused, got %v", msg)
	}
	// The state given for one question does not answer another.
	other := with(map[string]any{"requestState": state, "inputResponses": answer})
	other["arguments"] = map[string]any{"question": "Which colour?", "options": []map[string]string{{"label": "red"}}}
	_, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "ask_user", other)
	if e, _ := msg["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "another call") {
		t.Errorf("a requestState of another call: want it refused, got %v", msg)
	}

	// Without elicitation, ask_user fails closed.
	_, _, msg = statelessPost(t, endpoint, tn.a, "tools/call", "ask_user", map[string]any{"name": "ask_user", "arguments": map[string]any{"question": "Anyone?", "allow_free_text": true}})
	if res, _ := msg["result"].(map[string]any); res == nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "no one is connected") {
		t.Errorf("ask_user from a stateless client without elicitation: want the fail-closed error result, got %v", msg)
	}
}
