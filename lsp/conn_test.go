package lsp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"berth.dev/berth/framing"
	"berth.dev/berth/framing/framingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peer is the scripted fake server: a [framingtest.Peer] speaking
// JSON-RPC. Its helpers fail the test with t.Fatal, so they run on the test
// goroutine.
type peer struct {
	*framingtest.Peer[wireMsg]
	t    *testing.T
	next int
}

// newPair connects a Client to a peer. With read set, the peer reads
// everything the client writes; without it the client's writes block, as
// against a server that stopped reading.
func newPair(t *testing.T, opts ConnOptions, read bool) (*Client, *peer) {
	t.Helper()
	a, fp := framingtest.New[wireMsg](t, read)
	cl := NewClient(a, opts)
	t.Cleanup(func() { cl.Close() })
	return cl, &peer{Peer: fp, t: t, next: 1000}
}

// recv returns the next message from the client.
func (p *peer) recv() wireMsg {
	p.t.Helper()
	m, err := p.Recv()
	switch {
	case errors.Is(err, io.EOF):
		p.t.Fatal("peer: the client closed the stream")
	case err != nil:
		p.t.Fatalf("peer: nothing received: %v", err)
	}
	return m
}

// recvMethod skips messages until one with method arrives.
func (p *peer) recvMethod(method string) wireMsg {
	p.t.Helper()
	for {
		if m := p.recv(); m.Method == method {
			return m
		}
	}
}

func (p *peer) send(v any) {
	p.t.Helper()
	if err := p.Send(v); err != nil {
		p.t.Fatalf("peer: %v", err)
	}
}

func (p *peer) respond(id json.RawMessage, result any) {
	p.t.Helper()
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (p *peer) notify(method string, params any) {
	p.t.Helper()
	p.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// request sends a server→client request and returns the client's answer.
func (p *peer) request(method string, params any) wireMsg {
	p.t.Helper()
	p.next++
	id := json.RawMessage(fmt.Sprint(p.next))
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	for {
		m := p.recv()
		if m.Method == "" && string(m.ID) == string(id) {
			return m
		}
	}
}

// sync returns once the client has processed everything sent before it: the
// client handles incoming frames in order, so the answer to a request comes
// after every earlier notification took effect.
func (p *peer) sync() {
	p.t.Helper()
	p.request("workspace/workspaceFolders", nil)
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return b.String()
}

func TestCallOutOfOrder(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	ctx := context.Background()
	methods := []string{"a/one", "a/two", "a/three"}
	results := make([]string, len(methods))
	errs := make([]error, len(methods))
	var wg sync.WaitGroup
	for i, m := range methods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cl.Call(ctx, m, map[string]int{"n": i}, &results[i])
		}()
	}
	var got []wireMsg
	for range methods {
		got = append(got, p.recv())
	}
	for i := len(got) - 1; i >= 0; i-- { // answer in reverse order
		p.respond(got[i].ID, got[i].Method+" answered")
	}
	wg.Wait()
	for i, m := range methods {
		if errs[i] != nil || results[i] != m+" answered" {
			t.Errorf("call %s = %q, %v; want its own answer", m, results[i], errs[i])
		}
	}
}

func TestCallResults(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	ctx := context.Background()

	t.Run("error answer", func(t *testing.T) {
		errc := make(chan error, 1)
		go func() { errc <- cl.Call(ctx, "x/fails", nil, nil) }()
		m := p.recv()
		if m.Params != nil {
			t.Errorf("nil params were sent as %s; want them omitted", m.Params)
		}
		p.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": CodeInvalidParams, "message": "bad position"}})
		err := <-errc
		var re *ResponseError
		if !errors.As(err, &re) || re.Code != CodeInvalidParams || !strings.Contains(err.Error(), "x/fails") {
			t.Fatalf("err = %v; want a ResponseError %d naming the method", err, CodeInvalidParams)
		}
	})
	t.Run("raw and null", func(t *testing.T) {
		var raw json.RawMessage
		errc := make(chan error, 1)
		go func() { errc <- cl.Call(ctx, "x/raw", nil, &raw) }()
		p.respond(p.recv().ID, map[string]int{"k": 1})
		if err := <-errc; err != nil || compact(t, raw) != `{"k":1}` {
			t.Fatalf("raw = %s, %v", raw, err)
		}
		keep := "unchanged"
		go func() { errc <- cl.Call(ctx, "x/null", nil, &keep) }()
		p.respond(p.recv().ID, nil)
		if err := <-errc; err != nil || keep != "unchanged" {
			t.Fatalf("null answer: %q, %v", keep, err)
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		var n int
		errc := make(chan error, 1)
		go func() { errc <- cl.Call(ctx, "x/type", nil, &n) }()
		p.respond(p.recv().ID, "not a number")
		if err := <-errc; err == nil || !strings.Contains(err.Error(), "does not decode") {
			t.Fatalf("err = %v; want a decode error", err)
		}
	})
}

func TestCancelSendsCancelRequestAndDropsLateAnswer(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		var s string
		errc <- cl.Call(ctx, "textDocument/references", nil, &s)
	}()
	req := p.recv()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	c := p.recvMethod("$/cancelRequest")
	var params struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(c.Params, &params); err != nil || string(params.ID) != string(req.ID) {
		t.Fatalf("$/cancelRequest params %s; want id %s", c.Params, req.ID)
	}

	// The server answers anyway; the answer must reach nobody.
	p.respond(req.ID, "late")
	var s string
	go func() { errc <- cl.Call(context.Background(), "textDocument/hover", nil, &s) }()
	next := p.recv()
	if string(next.ID) == string(req.ID) {
		t.Fatalf("id %s reused", next.ID)
	}
	p.respond(next.ID, "fresh")
	if err := <-errc; err != nil || s != "fresh" {
		t.Fatalf("next call = %q, %v; want fresh", s, err)
	}
	if n := cl.LateResponses(); n != 1 {
		t.Fatalf("LateResponses = %d, want 1", n)
	}
}

func TestServerExitFailsPendingCalls(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	errc := make(chan error, 2)
	for range 2 {
		go func() { errc <- cl.Call(context.Background(), "workspace/symbol", nil, nil) }()
	}
	p.recv()
	p.recv()
	p.Conn.Close() // the server dies with two calls in flight
	for range 2 {
		err := <-errc
		if !errors.Is(err, ErrServerExited) || !strings.Contains(err.Error(), "exited") {
			t.Fatalf("err = %v; want ErrServerExited", err)
		}
	}
	<-cl.Done()
	if !errors.Is(cl.Err(), ErrServerExited) {
		t.Fatalf("Err = %v", cl.Err())
	}
	if err := cl.Call(context.Background(), "x", nil, nil); !errors.Is(err, ErrServerExited) {
		t.Fatalf("call after exit: %v", err)
	}
	if err := cl.Notify(context.Background(), "x", nil); !errors.Is(err, ErrServerExited) {
		t.Fatalf("notify after exit: %v", err)
	}
}

func TestFrameOverCapBreaksConnection(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	errc := make(chan error, 1)
	go func() { errc <- cl.Call(context.Background(), "x", nil, nil) }()
	p.recv()
	fmt.Fprintf(p.Conn, "Content-Length: %d\r\n\r\n", framing.MaxFrame+1)
	if err := <-errc; !errors.Is(err, framing.ErrFrameTooLarge) {
		t.Fatalf("err = %v; want ErrFrameTooLarge", err)
	}
	<-cl.Done()
	if !errors.Is(cl.Err(), framing.ErrFrameTooLarge) {
		t.Fatalf("Err = %v", cl.Err())
	}
}

func TestGarbageFrameIsSkipped(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	if err := p.WriteFrame([]byte("not json")); err != nil {
		t.Fatal(err)
	}
	p.sync()
	msgs := cl.Messages()
	if len(msgs) != 1 || msgs[0].Method != "protocol" || !strings.Contains(msgs[0].Message, "not JSON-RPC") {
		t.Fatalf("messages = %+v", msgs)
	}
}

func TestServerRequests(t *testing.T) {
	var mu sync.Mutex
	var applied []ApplyWorkspaceEditParams
	opts := ConnOptions{
		Settings: map[string]any{
			"gopls": map[string]any{"staticcheck": true},
			"pylsp": map[string]any{"plugins": map[string]any{"pyflakes": map[string]any{"enabled": true}}},
		},
		WorkspaceFolders: []WorkspaceFolder{{URI: "file:///ws", Name: "ws"}},
	}
	withHandler := opts
	withHandler.ApplyEdit = func(ctx context.Context, p ApplyWorkspaceEditParams) ApplyWorkspaceEditResult {
		mu.Lock()
		applied = append(applied, p)
		mu.Unlock()
		return ApplyWorkspaceEditResult{Applied: true}
	}
	edit := map[string]any{"label": "rename", "edit": map[string]any{"changes": map[string]any{"file:///ws/a.go": []any{}}}}

	tests := []struct {
		name     string
		opts     ConnOptions
		method   string
		params   any
		want     string // compact JSON result, when wantCode is 0
		wantCode int
	}{
		{name: "configuration", opts: opts, method: "workspace/configuration",
			params: map[string]any{"items": []any{map[string]any{"section": "gopls"}, map[string]any{"section": "pylsp.plugins"}, map[string]any{"section": "missing"}, map[string]any{"scopeUri": "file:///ws"}}},
			want:   `[{"staticcheck":true},{"pyflakes":{"enabled":true}},null,{"gopls":{"staticcheck":true},"pylsp":{"plugins":{"pyflakes":{"enabled":true}}}}]`},
		{name: "configuration without settings", opts: ConnOptions{}, method: "workspace/configuration",
			params: map[string]any{"items": []any{map[string]any{"section": "gopls"}, map[string]any{}}}, want: `[null,null]`},
		{name: "configuration bad params", opts: opts, method: "workspace/configuration", params: "nope", wantCode: CodeInvalidParams},
		{name: "register", opts: opts, method: "client/registerCapability",
			params: map[string]any{"registrations": []any{
				map[string]any{"id": "w1", "method": "workspace/didChangeWatchedFiles", "registerOptions": map[string]any{"watchers": []any{map[string]any{"globPattern": "**/*.go"}}}},
				map[string]any{"id": "d1", "method": "textDocument/diagnostic"},
			}}, want: `null`},
		{name: "unregister", opts: opts, method: "client/unregisterCapability",
			params: map[string]any{"unregisterations": []any{map[string]any{"id": "d1", "method": "textDocument/diagnostic"}}}, want: `null`},
		{name: "progress create", opts: opts, method: "window/workDoneProgress/create", params: map[string]any{"token": "t1"}, want: `null`},
		{name: "show message request", opts: opts, method: "window/showMessageRequest",
			params: map[string]any{"type": 1, "message": "pick one", "actions": []any{map[string]any{"title": "A"}}}, want: `null`},
		{name: "apply edit refused", opts: opts, method: "workspace/applyEdit", params: edit,
			want: `{"applied":false,"failureReason":"this client does not apply edits the server initiates; make the change with the edit tools or lsp_rename"}`},
		{name: "apply edit handled", opts: withHandler, method: "workspace/applyEdit", params: edit, want: `{"applied":true}`},
		{name: "workspace folders", opts: opts, method: "workspace/workspaceFolders", want: `[{"uri":"file:///ws","name":"ws"}]`},
		{name: "no workspace folders", opts: ConnOptions{}, method: "workspace/workspaceFolders", want: `null`},
		{name: "diagnostic refresh", opts: opts, method: "workspace/diagnostic/refresh", want: `null`},
		{name: "unknown", opts: opts, method: "custom/thing", params: map[string]any{}, wantCode: CodeMethodNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl, p := newPair(t, tt.opts, true)
			if tt.method == "client/unregisterCapability" {
				p.request("client/registerCapability", map[string]any{"registrations": []any{
					map[string]any{"id": "w1", "method": "workspace/didChangeWatchedFiles"},
					map[string]any{"id": "d1", "method": "textDocument/diagnostic"}}})
			}
			m := p.request(tt.method, tt.params)
			if tt.wantCode != 0 {
				if m.Error == nil || m.Error.Code != tt.wantCode {
					t.Fatalf("answer %+v; want error code %d", m, tt.wantCode)
				}
				return
			}
			if m.Error != nil || m.Result == nil {
				t.Fatalf("answer error %v, result %s", m.Error, m.Result)
			}
			if got := compact(t, m.Result); got != tt.want {
				t.Fatalf("result %s\nwant   %s", got, tt.want)
			}
			switch tt.name {
			case "register":
				regs := cl.Registrations()
				if len(regs) != 2 || !cl.Registered("workspace/didChangeWatchedFiles") || !cl.Registered("textDocument/diagnostic") {
					t.Fatalf("registrations = %+v", regs)
				}
				if !strings.Contains(string(regs[1].RegisterOptions), "**/*.go") {
					t.Fatalf("register options not kept: %s", regs[1].RegisterOptions)
				}
			case "unregister":
				if cl.Registered("textDocument/diagnostic") || !cl.Registered("workspace/didChangeWatchedFiles") {
					t.Fatalf("registrations after unregister = %+v", cl.Registrations())
				}
			case "show message request":
				if msgs := cl.Messages(); len(msgs) != 1 || msgs[0].Message != "pick one" || msgs[0].Type != MessageError {
					t.Fatalf("messages = %+v", msgs)
				}
			case "apply edit handled":
				mu.Lock()
				defer mu.Unlock()
				if len(applied) != 1 || applied[0].Label != "rename" || len(applied[0].Edit.Changes) != 1 {
					t.Fatalf("handler got %+v", applied)
				}
			case "diagnostic refresh":
				if cl.DiagnosticRefreshes() != 1 {
					t.Fatal("refresh not counted")
				}
			}
		})
	}
}

func TestProgressTracking(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	p.request("window/workDoneProgress/create", map[string]any{"token": 7})
	p.notify("$/progress", map[string]any{"token": 7, "value": map[string]any{"kind": "begin", "title": "Loading packages", "percentage": 0}})
	p.notify("$/progress", map[string]any{"token": 7, "value": map[string]any{"kind": "report", "message": "3/10", "percentage": 30}})
	p.notify("$/progress", map[string]any{"token": "partial", "value": []int{1, 2}}) // partial results: ignored
	p.sync()
	prog := cl.Progress()
	if !cl.Indexing() || len(prog) != 1 {
		t.Fatalf("Indexing = %v, progress = %+v; want one running", cl.Indexing(), prog)
	}
	if g := prog[0]; g.Token != "7" || g.Title != "Loading packages" || g.Message != "3/10" || g.Percentage == nil || *g.Percentage != 30 {
		t.Fatalf("progress = %+v", g)
	}
	idle := make(chan error, 1)
	go func() { idle <- cl.WaitIdle(context.Background()) }()
	p.notify("$/progress", map[string]any{"token": 7, "value": map[string]any{"kind": "end", "message": "done"}})
	if err := <-idle; err != nil {
		t.Fatal(err)
	}
	if cl.Indexing() || len(cl.Progress()) != 0 {
		t.Fatalf("still indexing after end: %+v", cl.Progress())
	}
}

func TestMessagesRingIsBounded(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	long := strings.Repeat("x", MaxMessageBytes*2)
	for i := range MaxMessages + 5 {
		method := "window/logMessage"
		if i%2 == 1 {
			method = "window/showMessage"
		}
		p.notify(method, map[string]any{"type": MessageLog, "message": fmt.Sprintf("m%d %s", i, long)})
	}
	p.sync()
	msgs := cl.Messages()
	if len(msgs) != MaxMessages {
		t.Fatalf("kept %d messages, want %d", len(msgs), MaxMessages)
	}
	if !strings.HasPrefix(msgs[0].Message, "m5 ") || !strings.HasPrefix(msgs[len(msgs)-1].Message, fmt.Sprintf("m%d ", MaxMessages+4)) {
		t.Fatalf("ring order: first %.10q last %.10q", msgs[0].Message, msgs[len(msgs)-1].Message)
	}
	if len(msgs[0].Message) > MaxMessageBytes+len("…") {
		t.Fatalf("message of %d bytes kept", len(msgs[0].Message))
	}
}

func TestDiagnosticsVersionGating(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	ctx := context.Background()
	uri, err := FileURI("/ws/a@b/main.go")
	if err != nil {
		t.Fatal(err)
	}
	serverURI := "file:///ws/a@b/main.go" // gopls's spelling of the same file
	if uri == serverURI {
		t.Fatal("test needs two spellings")
	}
	if v, err := cl.DidOpen(ctx, uri, "go", "package a\n"); err != nil || v != 1 {
		t.Fatalf("DidOpen = %d, %v", v, err)
	}
	p.recvMethod("textDocument/didOpen")
	if v, err := cl.DidChange(ctx, uri, "package a\nvar x int = \"s\"\n"); err != nil || v != 2 {
		t.Fatalf("DidChange = %d, %v", v, err)
	}
	p.recvMethod("textDocument/didChange")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	diag := func(msg string) []any {
		return []any{map[string]any{"range": map[string]any{"start": map[string]int{"line": 1, "character": 12}, "end": map[string]int{"line": 1, "character": 15}}, "severity": 1, "message": msg}}
	}
	p.notify("textDocument/publishDiagnostics", map[string]any{"uri": serverURI, "version": 1, "diagnostics": []any{}})
	p.sync()
	if _, err := cl.WaitDiagnostics(cancelled, uri, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("version 1 satisfied a wait for version 2: err = %v", err)
	}
	if d, ok := cl.Diagnostics(uri); !ok || d.Version == nil || *d.Version != 1 {
		t.Fatalf("Diagnostics(%s) = %+v, %v; want the version 1 publish under either spelling", uri, d, ok)
	}

	got := make(chan DiagnosticSet, 1)
	go func() {
		d, err := cl.WaitDiagnostics(ctx, uri, 2)
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	p.notify("textDocument/publishDiagnostics", map[string]any{"uri": serverURI, "version": 2, "diagnostics": diag("cannot use \"s\"")})
	d := <-got
	if d.Version == nil || *d.Version != 2 || len(d.Diagnostics) != 1 || d.Diagnostics[0].Severity != SeverityError {
		t.Fatalf("got %+v", d)
	}

	// A server that omits versions: only a publish after the send counts.
	p.notify("textDocument/publishDiagnostics", map[string]any{"uri": serverURI, "diagnostics": diag("stale")})
	p.sync()
	if v, err := cl.DidChange(ctx, uri, "package a\n"); err != nil || v != 3 {
		t.Fatalf("DidChange = %d, %v", v, err)
	}
	if _, err := cl.WaitDiagnostics(cancelled, uri, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("an unversioned publish from before the change satisfied the wait: %v", err)
	}
	p.notify("textDocument/publishDiagnostics", map[string]any{"uri": serverURI, "diagnostics": []any{}})
	d, err = cl.WaitDiagnostics(ctx, uri, 3)
	if err != nil || len(d.Diagnostics) != 0 {
		t.Fatalf("unversioned fresh publish: %+v, %v", d, err)
	}

	// PublishedSince sees other files too.
	seq := cl.DiagnosticsSeq()
	p.notify("textDocument/publishDiagnostics", map[string]any{"uri": "file:///ws/caller.go", "version": 4, "diagnostics": diag("not enough arguments")})
	other, err := cl.WaitPublish(ctx, seq, func(DiagnosticSet) bool { return true })
	if err != nil || other.URI != "file:///ws/caller.go" {
		t.Fatalf("WaitPublish = %+v, %v", other, err)
	}
	if all := cl.PublishedSince(seq); len(all) != 1 || len(cl.AllDiagnostics()) != 2 {
		t.Fatalf("PublishedSince = %+v, all = %+v", all, cl.AllDiagnostics())
	}
}

func TestWaitDiagnosticsFailsWhenServerExits(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	errc := make(chan error, 1)
	go func() {
		_, err := cl.WaitDiagnostics(context.Background(), "file:///ws/a.go", 1)
		errc <- err
	}()
	p.Conn.Close()
	if err := <-errc; !errors.Is(err, ErrServerExited) {
		t.Fatalf("err = %v", err)
	}
}

// TestRequestTimeout: a server that never answers a request fails it with
// ErrNoAnswer after RequestTimeout, with $/cancelRequest sent, however long
// the caller would wait; initialize is not bounded by it.
func TestRequestTimeout(t *testing.T) {
	cl, p := newPair(t, ConnOptions{RequestTimeout: 50 * time.Millisecond}, true)
	errc := make(chan error, 1)
	go func() { errc <- cl.Call(context.Background(), "textDocument/hover", nil, nil) }()
	req := p.recv()
	if err := <-errc; !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "textDocument/hover") {
		t.Fatalf("err = %v; want ErrNoAnswer naming the method", err)
	}
	c := p.recvMethod("$/cancelRequest")
	var params struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(c.Params, &params); err != nil || string(params.ID) != string(req.ID) {
		t.Fatalf("$/cancelRequest params %s; want id %s", c.Params, req.ID)
	}
	go func() { errc <- cl.Call(context.Background(), "initialize", nil, nil) }()
	init := p.recv()
	time.Sleep(200 * time.Millisecond) // four timeouts: initialize must still be waiting
	select {
	case err := <-errc:
		t.Fatalf("initialize ended after the request timeout: %v", err)
	default:
	}
	p.respond(init.ID, map[string]any{})
	if err := <-errc; err != nil {
		t.Fatalf("initialize: %v", err)
	}
}
