// Package mcp drives berth's MCP servers whole, with the go-sdk's own
// client: over Streamable HTTP against a real `berth serve` (per-run and
// run-opening endpoints, tenants, bad input, a client that drops mid-call)
// and over stdio against `berth mcp`. The runs are on the host, in a
// temporary workspace, with Debian's python3 (pylsp, ipykernel) for lsp and
// eval. The only fake is the human answering an elicitation.
package mcp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/tests/berthtest"
)

// callTimeout bounds one tool call of a test (a language server or a
// kernel starting on a loaded machine).
const callTimeout = 2 * time.Minute

func TestMain(m *testing.M) {
	code := m.Run()
	berthtest.Remove()
	os.Exit(code)
}

func newToken(t *testing.T) string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func tokenLine(tok, tenant, scopes string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:]) + " " + tenant + " " + scopes + "\n"
}

// workspace is a temporary workspace with a text file and a Python module.
func workspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	for name, content := range map[string]string{
		"a.txt": "hello from the workspace\n",
		"m.py":  "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n",
	} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// tenants is a berth serve (local mode: host runs) with harness tokens
// for tenants a and b.
type tenants struct {
	s    *berthtest.Server
	a, b string
}

func startServe(t *testing.T) *tenants {
	t.Helper()
	tn := &tenants{a: newToken(t), b: newToken(t)}
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(tokenLine(tn.a, "a", "harness")+tokenLine(tn.b, "b", "harness")), 0o600); err != nil {
		t.Fatal(err)
	}
	tn.s = berthtest.Start(t, berthtest.Options{Args: []string{"--tokens-file", file, "--mode", "local"}})
	return tn
}

// bearer adds a token to every request.
type bearer struct {
	tok  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.next.RoundTrip(r)
}

// human answers elicitations as the test says, and records them.
type human struct {
	asked  chan *mcp.ElicitParams
	answer func(*mcp.ElicitParams) *mcp.ElicitResult
}

func newHuman(answer func(*mcp.ElicitParams) *mcp.ElicitResult) *human {
	return &human{asked: make(chan *mcp.ElicitParams, 16), answer: answer}
}

func (h *human) handle(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	select {
	case h.asked <- req.Params:
	default:
	}
	return h.answer(req.Params), nil
}

// legacy connects at 2025-11-25, the newest protocol with sessions and
// server-to-client elicitation; the go-sdk client would otherwise speak
// 2026-07-28 (era_test.go drives that).
var legacy = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// connect opens an MCP session at endpoint with tok at 2025-11-25; h,
// when not nil, declares elicitation.
func connect(t *testing.T, endpoint, tok string, h *human) *mcp.ClientSession {
	t.Helper()
	return connectAt(t, endpoint, tok, h, legacy)
}

// connectAt is connect with the client's session options (its protocol
// version).
func connectAt(t *testing.T, endpoint, tok string, h *human, so *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if h != nil {
		opts.ElicitationHandler = h.handle
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: bearerClient(tok),
		MaxRetries: -1,
	}, so)
	if err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func bearerClient(tok string) *http.Client {
	return &http.Client{Transport: bearer{tok, http.DefaultTransport}}
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

// mustCall calls a tool and wants a result that is not an error.
func mustCall(t *testing.T, cs *mcp.ClientSession, name string, args any) string {
	t.Helper()
	res, err := call(t, cs, name, args)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	txt := text(res)
	if res.IsError {
		t.Fatalf("%s %v: error result: %s", name, args, txt)
	}
	return txt
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// rpcError wants err to be a JSON-RPC error whose data names code.
func rpcError(t *testing.T, what string, err error, code string) *jsonrpc.Error {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		t.Fatalf("%s: want a JSON-RPC error with data.code %s, got %v", what, code, err)
	}
	var data struct{ Code string }
	json.Unmarshal(je.Data, &data)
	if data.Code != code {
		t.Fatalf("%s: want data.code %s, got %d %q data %s", what, code, je.Code, je.Message, je.Data)
	}
	return je
}

// asRPC is the berth error code a JSON-RPC error carries, or "".
func asRPC(err error) string {
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		return ""
	}
	var data struct{ Code string }
	json.Unmarshal(je.Data, &data)
	return data.Code
}

func names(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}

// useTools lists and calls read, ast_grep, lsp and eval, and answers an
// ask_user by elicitation (h picks "blue").
func useTools(t *testing.T, cs *mcp.ClientSession, h *human) {
	t.Helper()
	list := names(t, cs)
	for _, want := range []string{"read", "ast_grep", "lsp", "eval", "write", "ask_user"} {
		if !slices.Contains(list, want) {
			t.Errorf("tools/list lacks %s: %v", want, list)
		}
	}
	if got := mustCall(t, cs, "read", map[string]any{"path": "a.txt"}); !strings.Contains(got, "hello from the workspace") {
		t.Errorf("read a.txt: %q", got)
	}
	if got := mustCall(t, cs, "ast_grep", map[string]any{"pattern": "add($A, $B)", "language": "python"}); !strings.Contains(got, "m.py:5") {
		t.Errorf("ast_grep add($A, $B): want m.py:5, got %q", got)
	}
	if got := mustCall(t, cs, "lsp", map[string]any{"action": "hover", "file": "m.py", "line": 5, "symbol": "add"}); !strings.Contains(got, "add") {
		t.Errorf("lsp hover add: %q", got)
	}
	if got := mustCall(t, cs, "eval", map[string]any{"code": "6 * 7", "description": "multiply six by seven in the kernel"}); !strings.Contains(got, "42") {
		t.Errorf("eval 6 * 7: %q", got)
	}
	got := mustCall(t, cs, "ask_user", map[string]any{"question": "Which colour?", "options": []map[string]string{{"label": "red"}, {"label": "blue"}}})
	if !strings.Contains(got, "blue") {
		t.Errorf("ask_user answered blue by elicitation: result %q", got)
	}
	select {
	case p := <-h.asked:
		if !strings.Contains(p.Message, "Which colour?") {
			t.Errorf("elicitation message %q lacks the question", p.Message)
		}
	default:
		t.Errorf("ask_user was answered without an elicitation")
	}
}

func pickBlue(p *mcp.ElicitParams) *mcp.ElicitResult {
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"choice": "blue"}}
}

// TestHTTPRun drives /v1/runs/{id}/mcp: tools, elicitation, the plan
// surface refusing write by name, an unknown tool, and a skip by decline.
func TestHTTPRun(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	ctx := context.Background()
	run, err := api.OpenRun(ctx, map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := tn.s.URL + "/v1/runs/" + run.ID + "/mcp"

	h := newHuman(pickBlue)
	cs := connect(t, endpoint, tn.a, h)
	useTools(t, cs, h)

	_, err = call(t, cs, "no_such_tool", map[string]any{})
	if je := rpcError(t, "unknown tool", err, "unknown_tool"); je.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("unknown tool: JSON-RPC code %d, want %d", je.Code, jsonrpc.CodeInvalidParams)
	}

	// Every hint is explicit: ast_edit only stages, the file and code
	// tools stay in the workspace, eval's code may reach anything.
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	hints := map[string][3]bool{} // destructive, idempotent, open world
	for _, tool := range lt.Tools {
		if a := tool.Annotations; a != nil && a.DestructiveHint != nil && a.OpenWorldHint != nil {
			hints[tool.Name] = [3]bool{*a.DestructiveHint, a.IdempotentHint, *a.OpenWorldHint}
		}
	}
	for name, want := range map[string][3]bool{"ast_edit": {false, false, false}, "read": {false, true, false}, "ast_grep": {false, true, false},
		"edit": {true, false, false}, "lsp_rename": {true, false, false}, "eval": {true, false, true}, "ask_user": {false, true, true}} {
		if got, ok := hints[name]; !ok || got != want {
			t.Errorf("%s: hints (destructive, idempotent, open world) %v (listed with all set: %v), want %v", name, got, ok, want)
		}
	}

	// Arguments that fail the schema are a result the model sees, with
	// isError, not a protocol error (SEP-1303); the same for a bad enum.
	for _, bad := range []map[string]any{{"path": 3}, {}, {"path": "a.txt", "offset": "x"}} {
		res, err := call(t, cs, "read", bad)
		if err != nil || !res.IsError || !strings.Contains(text(res), "read") {
			t.Errorf("read %v: want an isError result naming the tool, got %v %v", bad, err, res)
		}
	}

	plan := connect(t, endpoint+"?surface=plan", tn.a, nil)
	if list := names(t, plan); slices.Contains(list, "write") || !slices.Contains(list, "read") {
		t.Errorf("plan surface lists %v: want read and no write", list)
	}
	_, err = call(t, plan, "write", map[string]any{"path": "b.txt", "content": "x"})
	je := rpcError(t, "write on the plan surface", err, "denied")
	if !strings.Contains(je.Message, "write") {
		t.Errorf("the refusal does not name write: %q", je.Message)
	}
	if _, err := os.Stat(filepath.Join(ws, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("plan session wrote b.txt (stat: %v)", err)
	}

	// Without elicitation, ask_user fails closed as on /v1 with nobody
	// on the event stream.
	res, err := call(t, plan, "ask_user", map[string]any{"question": "Anyone?", "allow_free_text": true})
	if err != nil || !res.IsError || !strings.Contains(text(res), "no one is connected") {
		t.Errorf("ask_user without elicitation: want the fail-closed error result, got %v %v", err, res)
	}

	decline := newHuman(func(*mcp.ElicitParams) *mcp.ElicitResult { return &mcp.ElicitResult{Action: "decline"} })
	cs2 := connect(t, endpoint, tn.a, decline)
	res, err = call(t, cs2, "ask_user", map[string]any{"question": "Skip me?", "allow_free_text": true})
	if err != nil || res.IsError || !strings.Contains(text(res), "skipped") {
		t.Errorf("ask_user declined: want a skip, got %v %q", err, text(res))
	}
}

// post sends one raw JSON-RPC body to an MCP endpoint.
func post(t testing.TB, ctx context.Context, url, tok, session, body string) (int, http.Header, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), err
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// session initializes a raw session and returns its id.
func session(t testing.TB, url, tok string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	st, hdr, body, err := post(t, ctx, url, tok, "", initialize)
	if err != nil || st != http.StatusOK || hdr.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize %s: %d %v %s", url, st, err, body)
	}
	sid := hdr.Get("Mcp-Session-Id")
	if st, _, body, err := post(t, ctx, url, tok, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || st/100 != 2 {
		t.Fatalf("initialized: %d %v %s", st, err, body)
	}
	return sid
}

// TestHTTPBadInput: another tenant's run answers as a missing one; a
// session id of another run, a malformed message and an unknown method get
// clear errors; a client that drops a POST mid-call cancels the call.
func TestHTTPBadInput(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	ctx := context.Background()
	run1, err := api.OpenRun(ctx, map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	run2, err := api.OpenRun(ctx, map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	url1 := tn.s.URL + "/v1/runs/" + run1.ID + "/mcp"
	url2 := tn.s.URL + "/v1/runs/" + run2.ID + "/mcp"

	t.Run("another tenant", func(t *testing.T) {
		const missing = "0123456789abcdef0123456789abcdef"
		st, _, foreign, err := post(t, ctx, url1, tn.b, "", initialize)
		if err != nil || st != http.StatusNotFound || !strings.Contains(foreign, "unknown_run") {
			t.Fatalf("tenant b initializing on a's run: want 404 unknown_run, got %d %v %s", st, err, foreign)
		}
		_, _, absent, _ := post(t, ctx, tn.s.URL+"/v1/runs/"+missing+"/mcp", tn.b, "", initialize)
		if strings.ReplaceAll(foreign, run1.ID, "ID") != strings.ReplaceAll(absent, missing, "ID") {
			t.Errorf("a foreign run answers unlike a missing one:\n%s\n%s", foreign, absent)
		}
		// A's session id does not open a's run to b either.
		sid := session(t, url1, tn.a)
		if st, _, body, _ := post(t, ctx, url1, tn.b, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); st != http.StatusNotFound {
			t.Errorf("tenant b with a's session id: want 404, got %d %s", st, body)
		}
	})

	sid := session(t, url1, tn.a)
	t.Run("session of another run", func(t *testing.T) {
		st, _, body, err := post(t, ctx, url2, tn.a, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		if err != nil || st != http.StatusNotFound || !strings.Contains(body, "unknown_session") {
			t.Errorf("run 1's session on run 2: want 404 unknown_session, got %d %v %s", st, err, body)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		st, _, body, err := post(t, ctx, url1, tn.a, sid, `{"jsonrpc":"2.0","id":2,"method":`)
		if err != nil || st != http.StatusBadRequest || !strings.Contains(body, "-32700") {
			t.Errorf("malformed JSON: want 400 with a parse error (-32700), got %d %v %s", st, err, body)
		}
	})
	t.Run("JSON that is no message", func(t *testing.T) {
		for _, b := range []string{`{}`, `42`, `null`, `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `{"jsonrpc":"1.0","id":5,"method":"ping"}`} {
			st, _, body, err := post(t, ctx, url1, tn.a, sid, b)
			if err != nil || st != http.StatusBadRequest || !strings.Contains(body, "-32600") || strings.Contains(body, "batch") {
				t.Errorf("%s: want 400 with an invalid request (-32600) that invites no batch, got %d %v %s", b, st, err, body)
			}
		}
		if st, _, body, err := post(t, ctx, url1, tn.a, sid, `{"jsonrpc":"2.0","id":6,"method":"tools/list"}`); err != nil || st != http.StatusOK || !strings.Contains(body, "eval") {
			t.Errorf("the session after those bodies: %d %v %s", st, err, body)
		}
	})
	t.Run("unknown method", func(t *testing.T) {
		st, _, body, err := post(t, ctx, url1, tn.a, sid, `{"jsonrpc":"2.0","id":3,"method":"no/such"}`)
		if err != nil || !strings.Contains(body, "-32601") {
			t.Errorf("unknown method: want -32601, got %d %v %s", st, err, body)
		}
	})
	t.Run("disconnect mid-call", func(t *testing.T) {
		// The kernel runs one cell at a time: a sleep that was not
		// cancelled would hold the next cell for a minute.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		started, finished := filepath.Join(ws, "started"), filepath.Join(ws, "finished")
		code := fmt.Sprintf("import time\nopen(%q, 'w').close()\ntime.sleep(90)\nopen(%q, 'w').close()", started, finished)
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": map[string]any{
			"name": "eval", "arguments": map[string]any{"code": code, "description": "sleep for ninety seconds in the kernel"}}})
		go func() {
			_, _, _, err := post(t, cctx, url1, tn.a, sid, string(body))
			done <- err
		}()
		waitFor(t, 90*time.Second, "the sleeping cell to start", func() bool {
			_, err := os.Stat(started)
			return err == nil
		})
		cancel()
		<-done
		start := time.Now()
		cs := connect(t, url1, tn.a, nil)
		got := mustCall(t, cs, "eval", map[string]any{"code": "'after' + 'drop'", "description": "join two strings after the dropped call"})
		if !strings.Contains(got, "afterdrop") {
			t.Errorf("eval after the drop: %q", got)
		}
		if d := time.Since(start); d > 60*time.Second {
			t.Errorf("the next cell waited %v: the dropped call's sleep was not cancelled", d)
		}
		if _, err := os.Stat(finished); !os.IsNotExist(err) {
			t.Errorf("the dropped call's cell ran to its end (stat: %v)", err)
		}
	})
}

// sleepCell is an eval call whose cell marks its start, sleeps 90 s and
// marks its end, in ws.
func sleepCell(ws, tag string) (args map[string]any, started, finished string) {
	started, finished = filepath.Join(ws, tag+".started"), filepath.Join(ws, tag+".finished")
	code := fmt.Sprintf("import time\nopen(%q, 'w').close()\ntime.sleep(90)\nopen(%q, 'w').close()", started, finished)
	return map[string]any{"code": code, "description": "sleep for ninety seconds in the kernel"}, started, finished
}

// TestHTTPCancelled: notifications/cancelled (the go-sdk client sends it
// when the call's context ends) cancels the call: the kernel is free for
// the next cell at once and the cancelled cell never reaches its end.
func TestHTTPCancelled(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	run, err := api.OpenRun(context.Background(), map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, tn.s.URL+"/v1/runs/"+run.ID+"/mcp", tn.a, nil)
	args, started, finished := sleepCell(ws, "cancel")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "eval", Arguments: args})
		done <- err
	}()
	waitFor(t, 90*time.Second, "the sleeping cell to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call returned %v", err)
	}
	start := time.Now()
	if got := mustCall(t, cs, "eval", map[string]any{"code": "'after' + 'cancel'", "description": "join two strings after the cancelled call"}); !strings.Contains(got, "aftercancel") {
		t.Errorf("eval after the cancel: %q", got)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("the next cell waited %v: the cancelled call's sleep went on", d)
	}
	if _, err := os.Stat(finished); !os.IsNotExist(err) {
		t.Errorf("the cancelled cell ran to its end (stat: %v)", err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHTTPOpensRun: /v1/mcp opens a run of the caller's tenant for the
// session and closes it when the session ends.
func TestHTTPOpensRun(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	ctx := context.Background()
	runs := func(tok string) int {
		var list struct{ Runs []json.RawMessage }
		c := &berthtest.Client{URL: tn.s.URL, Token: tok}
		st, b, err := c.Do(ctx, "GET", "/v1/runs", nil)
		if err != nil || st != 200 || json.Unmarshal(b, &list) != nil {
			t.Fatalf("list runs: %d %v %s", st, err, b)
		}
		return len(list.Runs)
	}
	h := newHuman(pickBlue)
	cs := connect(t, fmt.Sprintf("%s/v1/mcp?sandbox=host&workspace=%s", tn.s.URL, ws), tn.a, h)
	if n := runs(tn.a); n != 1 {
		t.Fatalf("tenant a has %d runs after the session opened, want 1", n)
	}
	if n := runs(tn.b); n != 0 {
		t.Errorf("tenant b sees %d runs", n)
	}
	useTools(t, cs, h)
	plan := connect(t, fmt.Sprintf("%s/v1/mcp?sandbox=host&workspace=%s&mode=plan", tn.s.URL, ws), tn.a, nil)
	_, err := call(t, plan, "write", map[string]any{"path": "b.txt", "content": "x"})
	rpcError(t, "write in a plan run", err, "denied")
	cs.Close()
	plan.Close()
	waitFor(t, time.Minute, "the sessions' runs to close", func() bool { return runs(tn.a) == 0 })
	_ = api
}

// TestStdio drives `berth mcp` over stdio: tools, elicitation, a plan run
// refusing write, and the process ending when the client leaves.
func TestStdio(t *testing.T) {
	bin := berthtest.Build(t)
	ws := workspace(t)
	start := func(h *human, args ...string) (*mcp.ClientSession, *exec.Cmd) {
		cmd := exec.Command(bin, append([]string{"mcp", "--sandbox", "host", "--workspace", ws}, args...)...)
		cmd.Stderr = os.Stderr
		opts := &mcp.ClientOptions{}
		if h != nil {
			opts.ElicitationHandler = h.handle
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, opts)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, legacy)
		if err != nil {
			t.Fatalf("berth mcp %v: %v", args, err)
		}
		return cs, cmd
	}
	h := newHuman(pickBlue)
	cs, cmd := start(h)
	useTools(t, cs, h)
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("berth mcp did not exit cleanly when the client left: %v", cmd.ProcessState)
	}

	plan, _ := start(nil, "--mode", "plan")
	defer plan.Close()
	if list := names(t, plan); slices.Contains(list, "write") {
		t.Errorf("plan run lists write: %v", list)
	}
	_, err := call(t, plan, "write", map[string]any{"path": "b.txt", "content": "x"})
	rpcError(t, "write in a plan run over stdio", err, "denied")
}

// TestOperatorRule: a permission card reaches the MCP client only when it
// is the operator. Over HTTP (berth serve --mode hosted: write asks) the
// client's elicitation is never asked and the write fails closed; berth mcp
// --permissions hosted --client-is-operator asks the client, whose accept
// runs the write and whose decline refuses it.
func TestOperatorRule(t *testing.T) {
	ws := workspace(t)
	t.Run("http session is not the operator", func(t *testing.T) {
		tok := newToken(t)
		file := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(file, []byte(tokenLine(tok, "a", "harness")), 0o600); err != nil {
			t.Fatal(err)
		}
		s := berthtest.Start(t, berthtest.Options{Args: []string{"--tokens-file", file, "--mode", "hosted", "--host-placement", "explicit", "--host-root", ws}})
		h := newHuman(func(*mcp.ElicitParams) *mcp.ElicitResult {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}
		})
		for _, era := range eras { // a session, and a stateless client answered through a round trip
			cs := connectAt(t, fmt.Sprintf("%s/v1/mcp?sandbox=host&workspace=%s", s.URL, ws), tok, h, &mcp.ClientSessionOptions{ProtocolVersion: era})
			res, err := call(t, cs, "write", map[string]any{"path": "gated.txt", "content": "x"})
			if err != nil || !res.IsError {
				t.Errorf("%s: write in a hosted run without the operator: want a refusal result, got %v %v", era, err, res)
			} else if got := text(res); !strings.Contains(got, "no approver is connected") {
				t.Errorf("%s: write refused for another reason than nobody to approve it: %q", era, got)
			}
			select {
			case p := <-h.asked:
				t.Errorf("%s: the session whose call a permission card gates was asked to approve it: %q", era, p.Message)
			default:
			}
			if _, err := os.Stat(filepath.Join(ws, "gated.txt")); !os.IsNotExist(err) {
				t.Errorf("%s: gated.txt was written (stat: %v)", era, err)
			}
		}
	})
	t.Run("stdio client is the operator", func(t *testing.T) {
		bin := berthtest.Build(t)
		for _, tc := range []struct {
			era     string
			action  string
			written bool
		}{{"2025-11-25", "accept", true}, {"2025-11-25", "decline", false}, {"2026-07-28", "accept", true}, {"2026-07-28", "decline", false}} {
			h := newHuman(func(*mcp.ElicitParams) *mcp.ElicitResult {
				if tc.action == "accept" {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}
				}
				return &mcp.ElicitResult{Action: "decline"}
			})
			cmd := exec.Command(bin, "mcp", "--sandbox", "host", "--workspace", ws, "--permissions", "hosted", "--client-is-operator")
			cmd.Stderr = os.Stderr
			c := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: h.handle})
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: tc.era})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if got := cs.InitializeResult().ProtocolVersion; got != tc.era {
				t.Fatalf("negotiated %s, want %s", got, tc.era)
			}
			name := tc.era + "-" + tc.action + ".txt"
			res, err := call(t, cs, "write", map[string]any{"path": name, "content": "x"})
			cs.Close()
			if err != nil {
				t.Fatalf("%s: write: %v", tc.action, err)
			}
			_, serr := os.Stat(filepath.Join(ws, name))
			if written := serr == nil; written != tc.written || res.IsError == tc.written {
				t.Errorf("%s: written %v (isError %v, %q), want written %v", tc.action, written, res.IsError, text(res), tc.written)
			}
			select {
			case p := <-h.asked:
				if !strings.Contains(p.Message, "write") {
					t.Errorf("%s: the permission elicitation does not name write: %q", tc.action, p.Message)
				}
			default:
				t.Errorf("%s: the operator client was not asked", tc.action)
			}
		}
	})
}

// TestStdioContainer drives berth mcp against a --network none container
// of the Python test image: the tools work in the container, and when the
// client leaves nothing berth started runs in it any more.
func TestStdioContainer(t *testing.T) {
	image := os.Getenv("BERTH_TEST_IMAGE_PYTHON")
	if image == "" {
		t.Skip("BERTH_TEST_IMAGE_PYTHON is not set (tests/run sets it)")
	}
	docker := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	conv := "mcp-" + newToken(t)[:12]
	id := docker("run", "-d", "--network", "none", "--label", "berth.conversation="+conv, "--name", "berth-"+conv, image, "sleep", "infinity")
	t.Cleanup(func() {
		exec.Command("docker", "rm", "-f", id).Run()
	})
	docker("exec", id, "sh", "-c", `mkdir -p /workspace && printf 'hello from the workspace\n' > /workspace/a.txt && printf 'def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n' > /workspace/m.py`)
	// procs lists the container's processes but its sleep and the lister.
	procs := func() []string {
		out := docker("exec", id, "sh", "-c", `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); echo "${p#/proc/} $c"; done`)
		var left []string
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 2 || f[1] == "sleep" || f[1] == "sh" || f[1] == "tr" {
				continue
			}
			left = append(left, l)
		}
		return left
	}
	if p := procs(); len(p) != 0 {
		t.Fatalf("the fresh container already runs %v", p)
	}

	bin := berthtest.Build(t)
	cmd := exec.Command(bin, "mcp", "--sandbox", "docker://"+id, "--conversation", conv, "--workspace", "/workspace")
	cmd.Stderr = os.Stderr
	h := newHuman(pickBlue)
	c := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: h.handle})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, legacy)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	useTools(t, cs, h)
	if p := procs(); len(p) == 0 {
		t.Errorf("no process of berth's runs in the container after lsp and eval: the test cannot see what it checks")
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("berth mcp did not exit cleanly when the client left: %v", cmd.ProcessState)
	}
	waitFor(t, 30*time.Second, "berth's processes to leave the container", func() bool { return len(procs()) == 0 })
}

// tsResult is what testdata/client.mjs prints.
type tsResult struct {
	Elicited      []string
	Tools         []string
	OutputSchemas []string
	Results       map[string]struct {
		Text       string
		IsError    bool
		Structured bool
	}
	PlanTools []string
	PlanWrite struct {
		Code    int
		Message string
		Data    struct{ Code string }
		Result  string
	}
}

// runTS runs testdata/client.mjs with the TypeScript SDK tests/run
// installs (BERTH_MCP_SDK_DIR).
func runTS(t *testing.T, args ...string) tsResult {
	t.Helper()
	dir := os.Getenv("BERTH_MCP_SDK_DIR")
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("BERTH_MCP_SDK_DIR is not set: tests/run installs @modelcontextprotocol/sdk and sets it")
		}
		t.Skip("BERTH_MCP_SDK_DIR is not set (tests/run installs @modelcontextprotocol/sdk and sets it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"testdata/client.mjs"}, args...)...)
	cmd.Env = append(os.Environ(), "MCP_SDK_DIR="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs %s: %v\n%s\n%s", args[0], err, out, stderr.String())
	}
	var r tsResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("client.mjs printed %s: %v", out, err)
	}
	return r
}

func checkTS(t *testing.T, r tsResult) {
	t.Helper()
	for _, want := range []string{"read", "ast_grep", "lsp", "eval", "write", "ask_user"} {
		if !slices.Contains(r.Tools, want) {
			t.Errorf("tools/list lacks %s: %v", want, r.Tools)
		}
	}
	for name, want := range map[string]string{"read": "hello from the workspace", "ast_grep": "m.py:5", "lsp": "add", "eval": "42", "ask_user": "blue"} {
		got := r.Results[name]
		if got.IsError || !strings.Contains(got.Text, want) {
			t.Errorf("%s: want %q in a result that is not an error, got %+v", name, want, got)
		}
	}
	// ast_grep's structured result has a fixed shape: the client got its
	// output schema and checked the result against it.
	if !slices.Equal(r.OutputSchemas, []string{"ast_grep"}) || !r.Results["ast_grep"].Structured {
		t.Errorf("output schemas listed for %v, ast_grep's result structured: %v; want ast_grep's, checked", r.OutputSchemas, r.Results["ast_grep"].Structured)
	}
	if len(r.Elicited) != 1 || !strings.Contains(r.Elicited[0], "Which colour?") {
		t.Errorf("elicitations: %q, want the ask_user question once", r.Elicited)
	}
}

// TestTypeScriptClient: the TypeScript SDK's Streamable HTTP and stdio
// clients use berth: tools, elicitation, and a plan run refusing write.
func TestTypeScriptClient(t *testing.T) {
	ws := workspace(t)
	t.Run("http", func(t *testing.T) {
		tn := startServe(t)
		api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
		run, err := api.OpenRun(context.Background(), map[string]any{"sandbox": "host", "workspace": ws})
		if err != nil {
			t.Fatal(err)
		}
		endpoint := tn.s.URL + "/v1/runs/" + run.ID + "/mcp"
		r := runTS(t, "http", endpoint, tn.a, endpoint+"?surface=plan")
		checkTS(t, r)
		if slices.Contains(r.PlanTools, "write") {
			t.Errorf("plan surface lists write: %v", r.PlanTools)
		}
		if r.PlanWrite.Data.Code != "denied" || !strings.Contains(r.PlanWrite.Message, "write") {
			t.Errorf("write on the plan surface: want a JSON-RPC error naming write with data.code denied, got %+v", r.PlanWrite)
		}
	})
	t.Run("stdio", func(t *testing.T) {
		checkTS(t, runTS(t, "stdio", berthtest.Build(t), "mcp", "--sandbox", "host", "--workspace", ws))
	})
}

// TestCardsGoToTheirSession: two sessions on one run, both eliciting; a
// question card goes only to the session whose ask_user drew it, even
// while the other session waits on its own card.
func TestCardsGoToTheirSession(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	run, err := api.OpenRun(context.Background(), map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := tn.s.URL + "/v1/runs/" + run.ID + "/mcp"
	aDone := make(chan struct{})
	var mu sync.Mutex
	var seenA, seenB []string
	hA := newHuman(func(p *mcp.ElicitParams) *mcp.ElicitResult {
		mu.Lock()
		seenA = append(seenA, p.Message)
		mu.Unlock()
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"text": "from A"}}
	})
	hB := newHuman(func(p *mcp.ElicitParams) *mcp.ElicitResult {
		mu.Lock()
		seenB = append(seenB, p.Message)
		mu.Unlock()
		if strings.Contains(p.Message, "Question B") {
			select { // hold B's card open until A's call is over
			case <-aDone:
			case <-time.After(callTimeout):
			}
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"text": "from B"}}
	})
	a := connect(t, endpoint, tn.a, hA)
	b := connect(t, endpoint, tn.a, hB)
	bRes := make(chan string, 1)
	go func() {
		res, err := b.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_user", Arguments: map[string]any{"question": "Question B?", "allow_free_text": true}})
		if err != nil {
			bRes <- err.Error()
			return
		}
		bRes <- text(res)
	}()
	select {
	case <-hB.asked:
	case <-time.After(callTimeout):
		t.Fatal("B was not asked its question")
	}
	gotA := mustCall(t, a, "ask_user", map[string]any{"question": "Question A?", "allow_free_text": true})
	close(aDone)
	gotB := <-bRes
	if !strings.Contains(gotA, "from A") || !strings.Contains(gotB, "from B") {
		t.Errorf("answers crossed: A got %q, B got %q", gotA, gotB)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seenA) != 1 || len(seenB) != 1 {
		t.Errorf("each session should see only its own card: A saw %q, B saw %q", seenA, seenB)
	}
}

// TestProgress: a call with a progress token reports notifications/progress
// while it runs, with the run's resources (the kernel) in the message.
func TestProgress(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	for _, era := range eras { // in both, the notes come on the call's own stream
		t.Run(era, func(t *testing.T) { progressAt(t, tn, api, ws, era) })
	}
}

func progressAt(t *testing.T, tn *tenants, api *berthtest.Client, ws, era string) {
	run, err := api.OpenRun(context.Background(), map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	c := mcp.NewClient(&mcp.Implementation{Name: "berth-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, req.Params)
			mu.Unlock()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tn.s.URL + "/v1/runs/" + run.ID + "/mcp", HTTPClient: bearerClient(tn.a), MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ProtocolVersion; got != era {
		t.Fatalf("negotiated %s, want %s", got, era)
	}
	// The kernel starts, then the cell prints three lines over 4.5 s and
	// sleeps on: its notes come as they happen, the periodic ones between.
	params := &mcp.CallToolParams{Name: "eval", Arguments: map[string]any{
		"code":        "import time\nfor i in range(3):\n    print(f'step {i}', flush=True)\n    time.sleep(1.5)\ntime.sleep(2.5)\n'slept'",
		"description": "print three steps slowly in the kernel"}}
	params.SetProgressToken("p-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("eval: %v %v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	var msgs []string
	for i, p := range got {
		msgs = append(msgs, p.Message)
		if p.ProgressToken != "p-1" {
			t.Errorf("progress %d: token %v", i, p.ProgressToken)
		}
		if i > 0 && p.Progress <= got[i-1].Progress {
			t.Errorf("progress does not increase: %v after %v", p.Progress, got[i-1].Progress)
		}
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"eval: starting the python kernel", "eval: stdout: step 0", "eval: stdout: step 1", "eval: stdout: step 2", "eval running for"} {
		if !strings.Contains(all, want) {
			t.Errorf("no progress note %q among:\n%s", want, all)
		}
	}
	if i, j := strings.Index(all, "step 0"), strings.Index(all, "step 2"); i > j {
		t.Errorf("notes out of order:\n%s", all)
	}
	if !strings.Contains(all, "kernel") || !strings.Contains(all, "; ") {
		t.Errorf("the periodic note does not show the run's resources:\n%s", all)
	}
}
