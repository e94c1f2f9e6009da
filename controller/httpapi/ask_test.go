package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools/ask"
	"berth.dev/berth/tools/permission"
)

// askRig is a controller on the real host sandbox with the file tools,
// eval and ask_user, in hosted mode, served over real HTTP.
type askRig struct {
	*rig
	dir string
}

func newAskRig(t *testing.T, cfg controller.Config) *askRig {
	t.Helper()
	return newAskRigWith(t, cfg, httpapi.Options{Token: token})
}

// newAskRigWith is newAskRig with the server's options.
func newAskRigWith(t *testing.T, cfg controller.Config, opts httpapi.Options) *askRig {
	t.Helper()
	return newAskRigServer(t, cfg, opts, nil)
}

// newAskRigServer is newAskRigWith whose test server is set up by
// configure (when not nil) before it starts.
func newAskRigServer(t *testing.T, cfg controller.Config, opts httpapi.Options, configure func(*http.Server)) *askRig {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH=/usr/bin:/bin") // Debian's python3, with ipykernel
	cfg.Providers = []sandbox.Provider{&host.Provider{Options: host.Options{Env: env}}}
	if cfg.Tools == nil {
		cfg.Tools = []controller.Binder{controller.FileTools, controller.EvalTools, controller.AskToolsWith(ask.Options{Timeout: time.Minute})}
	}
	if cfg.Mode == "" {
		cfg.Mode = permission.ModeHosted
	}
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(validated(t, httpapi.New(c, opts)))
	if configure != nil {
		configure(srv.Config)
	}
	srv.Start()
	t.Cleanup(func() { c.Close(); srv.Close() })
	return &askRig{rig: &rig{t: t, srv: srv, c: c}, dir: t.TempDir()}
}

func (rg *askRig) openHost() string {
	return rg.open(`{"sandbox":"host","workspace":"` + rg.dir + `"}`)
}

type sseEvent struct {
	id, typ string
	data    map[string]any
}

// events is an SSE client of one run.
type events struct {
	t      *testing.T
	c      chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
}

// subscribe connects to the run's event stream; it returns once the
// server has answered, so the run counts as connected.
func (rg *askRig) subscribe(id, lastEventID string) *events {
	rg.t.Helper()
	return rg.subscribeAs(token, id, lastEventID)
}

// subscribeAs is subscribe with the bearer token tok.
func (rg *askRig) subscribeAs(tok, id, lastEventID string) *events {
	rg.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", rg.srv.URL+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		rg.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		rg.t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	e := &events{t: rg.t, c: make(chan sseEvent, 256), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		defer close(e.c)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.typ != "" {
					e.c <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				json.Unmarshal([]byte(line[6:]), &cur.data)
			}
		}
	}()
	rg.t.Cleanup(e.close)
	return e
}

func (e *events) close() { e.cancel(); <-e.done }

// next returns the next event of type typ, skipping others.
func (e *events) next(typ string) sseEvent {
	e.t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-e.c:
			if !ok {
				e.t.Fatalf("event stream ended while waiting for %s", typ)
			}
			if ev.typ == typ {
				return ev
			}
		case <-timeout:
			e.t.Fatalf("no %s event within a minute", typ)
		}
	}
}

type callResult struct {
	status  int
	text    string
	isError bool
	body    string
}

// call calls a tool in the background; the result arrives on the channel.
func (rg *askRig) call(id, tool, args string) <-chan callResult {
	return rg.callAs(token, id, tool, `{"args":`+args+`}`)
}

// callAs calls a tool with the bearer token tok and the whole request
// body, in the background.
func (rg *askRig) callAs(tok, id, tool, body string) <-chan callResult {
	out := make(chan callResult, 1)
	go func() {
		req, _ := http.NewRequest("POST", rg.srv.URL+"/v1/runs/"+id+"/tools/"+tool, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- callResult{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		var res struct {
			Content []struct{ Text string }
			IsError bool
		}
		var raw json.RawMessage
		json.NewDecoder(resp.Body).Decode(&raw)
		json.Unmarshal(raw, &res)
		var texts []string
		for _, c := range res.Content {
			texts = append(texts, c.Text)
		}
		out <- callResult{status: resp.StatusCode, text: strings.Join(texts, "\n"), isError: res.IsError, body: string(raw)}
	}()
	return out
}

func wait(t *testing.T, c <-chan callResult) callResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(2 * time.Minute):
		t.Fatal("tool call did not return")
	}
	return callResult{}
}

func formatInt(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestAskUser(t *testing.T) {
	rg := newAskRig(t, controller.Config{})
	id := rg.openHost()
	ev := rg.subscribe(id, "")

	type post struct {
		body   string
		status int
	}
	tests := []struct {
		name    string
		args    string
		posts   []post // the last one closes the card
		want    []string
		isError bool
	}{
		{"answer", `{"question":"Which database?","context":"the schema depends on it","options":[{"label":"postgres","description":"the default"},{"label":"sqlite"}]}`,
			[]post{{`{"choice":["sqlite"]}`, 200}}, []string{`Chose: "sqlite"`}, false},
		{"multi-select", `{"question":"Which targets?","options":[{"label":"linux"},{"label":"mac"},{"label":"windows"}],"multi_select":true}`,
			[]post{{`{"choice":["linux","windows"]}`, 200}}, []string{`Chose: "linux", "windows"`}, false},
		{"free text", `{"question":"What should the flag be called?","allow_free_text":true}`,
			[]post{{`{"text":"--dry-run"}`, 200}}, []string{"Wrote: --dry-run"}, false},
		{"skip", `{"question":"Keep the old API?","options":[{"label":"yes"},{"label":"no"}]}`,
			[]post{{`{"skip":true}`, 200}}, []string{"skipped", "assumption", "do not ask this question again"}, false},
		{"invalid answers leave the card open", `{"question":"Pick one","options":[{"label":"a"},{"label":"b"}]}`,
			[]post{
				{`{"choice":["c"]}`, 400},              // not an option
				{`{"choice":["a","b"]}`, 400},          // not multi-select
				{`{"text":"neither"}`, 400},            // no free text
				{`{"decision":"approve"}`, 400},        // not a permission card
				{`{"choice":["a"],"extra":true}`, 400}, // unknown field
				{`{"choice":["b"]}`, 200},
			}, []string{`Chose: "b"`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := rg.call(id, "ask_user", tt.args)
			opened := ev.next("card.opened")
			if opened.data["kind"] != "question" {
				t.Fatalf("card: %+v", opened.data)
			}
			n := formatInt(int(opened.data["n"].(float64)))
			if r := rg.do("GET", "/v1/runs/"+id+"/cards", token, ""); !strings.Contains(string(r.body), `"n":`+n) {
				t.Errorf("open cards lack card %s: %s", n, r.body)
			}
			for _, p := range tt.posts {
				r := rg.do("POST", "/v1/runs/"+id+"/cards/"+n, token, p.body)
				if r.status != p.status {
					t.Fatalf("answer %s: %d %s, want %d", p.body, r.status, r.body, p.status)
				}
				if p.status == 400 && (r.errorCode(t) != "bad_request" || !strings.Contains(string(r.body), "card") && !strings.Contains(p.body, "extra")) {
					t.Errorf("answer %s: %s", p.body, r.body)
				}
			}
			res := wait(t, done)
			if res.status != 200 || res.isError != tt.isError {
				t.Fatalf("result %d isError=%v: %s", res.status, res.isError, res.body)
			}
			for _, w := range tt.want {
				if !strings.Contains(res.text, w) {
					t.Errorf("result lacks %q: %s", w, res.text)
				}
			}
			closed := ev.next("card.closed")
			if closed.data["n"].(float64) != opened.data["n"].(float64) {
				t.Errorf("closed %v, opened %v", closed.data, opened.data)
			}
			if r := rg.do("POST", "/v1/runs/"+id+"/cards/"+n, token, `{"skip":true}`); r.status != 404 || r.errorCode(t) != "unknown_card" {
				t.Errorf("answer to a closed card: %d %s", r.status, r.body)
			}
		})
	}

	// Invalid options are refused before a card is drawn.
	for _, args := range []string{
		`{"question":"?","options":[{"label":"a"},{"label":"a"}]}`,
		`{"question":"?","options":[{"label":""}]}`,
		`{"question":"?"}`,
		`{"question":"","allow_free_text":true}`,
	} {
		if r := wait(t, rg.call(id, "ask_user", args)); r.status != 400 || !strings.Contains(r.body, "bad_request") {
			t.Errorf("%s: %d %s", args, r.status, r.body)
		}
	}

	// Resume: replaying after the first event skips it.
	again := rg.subscribe(id, "1")
	if e := again.next("card.closed"); e.id != "2" {
		t.Errorf("replay after Last-Event-ID 1 starts with id %s", e.id)
	}
}

func TestAskUserTimeoutAndNoSubscriber(t *testing.T) {
	rg := newAskRig(t, controller.Config{Tools: []controller.Binder{controller.AskToolsWith(ask.Options{Timeout: 300 * time.Millisecond})}})
	id := rg.openHost()
	args := `{"question":"Ship it?","options":[{"label":"yes"},{"label":"no"}]}`

	// No subscriber: fails at once (fail-closed).
	start := time.Now()
	r := wait(t, rg.call(id, "ask_user", args))
	if r.status != 200 || !r.isError || !strings.Contains(r.text, "no one is connected") || !strings.Contains(r.text, "do not ask this question again") {
		t.Fatalf("no subscriber: %+v", r)
	}
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Errorf("no subscriber took %v: it should fail at once", d)
	}

	// Timeout: an error carrying the same instruction; the card closes.
	ev := rg.subscribe(id, "")
	r = wait(t, rg.call(id, "ask_user", args))
	if r.status != 200 || !r.isError || !strings.Contains(r.text, "timed out") || !strings.Contains(r.text, "do not ask this question again") {
		t.Fatalf("timeout: %+v", r)
	}
	ev.next("card.opened")
	if c := ev.next("card.closed"); c.data["outcome"] != "timeout" {
		t.Errorf("closed: %+v", c.data)
	}
	if r := rg.do("GET", "/v1/runs/"+id+"/cards", token, ""); string(r.body) != "{\"cards\":[]}\n" {
		t.Errorf("cards after timeout: %s", r.body)
	}

	// Closing the run ends the stream.
	rg.do("DELETE", "/v1/runs/"+id, token, "")
	ev.next("closed")
}

func TestPermissionGate(t *testing.T) {
	rg := newAskRig(t, controller.Config{})
	id := rg.openHost()
	write := func(name string) string { return `{"path":"` + name + `","content":"hello"}` }
	exists := func(name string) bool { _, err := os.Stat(filepath.Join(rg.dir, name)); return err == nil }

	// No approver connected: refused at once, nothing written.
	r := wait(t, rg.call(id, "write", write("none.txt")))
	if r.status != 200 || !r.isError || !strings.Contains(r.text, "no approver") || !strings.Contains(r.text, "Do not retry") || exists("none.txt") {
		t.Fatalf("no approver: %+v", r)
	}
	// read is allowed without asking.
	if r := wait(t, rg.call(id, "read", `{"path":"."}`)); r.status != 200 {
		t.Fatalf("read: %+v", r)
	}

	ev := rg.subscribe(id, "")
	tests := []struct {
		name, file, decision string
		written              bool
	}{
		{"approve", "a.txt", "approve", true},
		{"deny", "d.txt", "deny", false},
	}
	for _, tt := range tests {
		done := rg.call(id, "write", write(tt.file))
		card := ev.next("card.opened")
		if card.data["kind"] != "permission" || card.data["tool"] != "write" || card.data["level"] != "write" ||
			!strings.Contains(card.data["summary"].(string), tt.file) {
			t.Fatalf("%s: card %+v", tt.name, card.data)
		}
		n := formatInt(int(card.data["n"].(float64)))
		if a := rg.do("POST", "/v1/runs/"+id+"/cards/"+n, token, `{"choice":["yes"]}`); a.status != 400 {
			t.Errorf("%s: a question's answer to a permission card: %d %s", tt.name, a.status, a.body)
		}
		if a := rg.do("POST", "/v1/runs/"+id+"/cards/"+n, token, `{"decision":"`+tt.decision+`"}`); a.status != 200 {
			t.Fatalf("%s: decide: %d %s", tt.name, a.status, a.body)
		}
		r := wait(t, done)
		if r.status != 200 || r.isError == tt.written || exists(tt.file) != tt.written {
			t.Errorf("%s: %+v, written=%v", tt.name, r, exists(tt.file))
		}
		if !tt.written && (!strings.Contains(r.text, "denied") || !strings.Contains(r.text, "Do not retry")) {
			t.Errorf("%s: refusal text: %s", tt.name, r.text)
		}
	}

	// allow_run: this call and the rest of the run's write calls run.
	done := rg.call(id, "write", write("r1.txt"))
	n := formatInt(int(ev.next("card.opened").data["n"].(float64)))
	rg.do("POST", "/v1/runs/"+id+"/cards/"+n, token, `{"decision":"allow_run"}`)
	if r := wait(t, done); r.isError || !exists("r1.txt") {
		t.Fatalf("allow_run: %+v", r)
	}
	if r := wait(t, rg.call(id, "write", write("r2.txt"))); r.isError || !exists("r2.txt") {
		t.Fatalf("after allow_run: %+v", r)
	}

	// The client going away ends its stream: the run has no approver again.
	ev.close()
	run, err := rg.c.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); run.Questions().Connected(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run still counts a subscriber after the client went away")
		}
	}
}

func TestPermissionPolicyDeny(t *testing.T) {
	policy := permission.Policy{Rules: []permission.Rule{
		{Tool: "write", Action: permission.Deny},
		{Action: permission.Allow},
	}}
	var logged bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &logged}, nil))
	rg := newAskRig(t, controller.Config{Permissions: &policy, Logger: log})
	id := rg.openHost()
	ev := rg.subscribe(id, "")
	args := `{"path":"x","content":"y"}`
	if r := wait(t, rg.call(id, "write", args)); r.status != 403 || !strings.Contains(r.body, "policy forbids write") {
		t.Errorf("policy deny: %+v", r)
	}
	// The audit: one record, on the events and in the log, naming the
	// rule and the call's digest.
	sum := sha256.Sum256([]byte(args))
	digest := hex.EncodeToString(sum[:])
	d := ev.next("permission.decided")
	if d.data["outcome"] != "denied" || d.data["rule"] != "tool=write: deny" || d.data["call_digest"] != digest || d.data["by"] != nil {
		t.Errorf("the decision's event: %v; want outcome denied by rule tool=write: deny, digest %s", d.data, digest)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if n := strings.Count(logged.String(), `"msg":"permission decision"`); n != 1 || !strings.Contains(logged.String(), `"call_digest":"`+digest+`"`) || !strings.Contains(logged.String(), `"rule":"tool=write: deny"`) {
		t.Errorf("%d log records of the decision, want 1 with the rule and digest:\n%s", n, logged.String())
	}
}

// lockedWriter serialises writes to a buffer a test reads.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestPermissionGateOnEvalBridge: eval's tool() bridge re-enters the
// registry, so a write from a cell draws its own permission card.
func TestPermissionGateOnEvalBridge(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	rg := newAskRig(t, controller.Config{})
	id := rg.openHost()
	ev := rg.subscribe(id, "")
	decide := func(want, decision string) {
		t.Helper()
		card := ev.next("card.opened")
		if card.data["tool"] != want || card.data["kind"] != "permission" {
			t.Fatalf("card %+v, want a permission card for %s", card.data, want)
		}
		n := formatInt(int(card.data["n"].(float64)))
		if a := rg.do("POST", "/v1/runs/"+id+"/cards/"+n, token, `{"decision":"`+decision+`"}`); a.status != 200 {
			t.Fatalf("decide: %d %s", a.status, a.body)
		}
	}
	cell := func(file string) string {
		code := "try:\n    print('result:', tool('write', {'path': '" + file + "', 'content': 'from eval'}))\nexcept ToolError as err:\n    print('raised:', err)"
		b, _ := json.Marshal(map[string]string{"code": code, "description": "write a file through the bridge"})
		return string(b)
	}

	done := rg.call(id, "eval", cell("bridged.txt"))
	decide("eval", "allow_run") // eval is exec: hosted mode asks
	decide("write", "approve")  // the bridged write asks too
	r := wait(t, done)
	if r.isError || !strings.Contains(r.text, "result:") {
		t.Fatalf("approved bridge: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(rg.dir, "bridged.txt")); err != nil || string(b) != "from eval" {
		t.Fatalf("bridged.txt: %q %v", b, err)
	}
	if r := rg.do("GET", "/v1/runs/"+id+"/resources", token, ""); r.status != 200 || !strings.Contains(string(r.body), `"kind":"kernel","name":"python","state":"running"`) {
		t.Errorf("resources after a cell: %d %s", r.status, r.body)
	}

	done = rg.call(id, "eval", cell("refused.txt"))
	decide("write", "deny") // eval is allowed for the run now; the write still asks
	r = wait(t, done)
	if !strings.Contains(r.text, "raised:") || !strings.Contains(r.text, "denied") {
		t.Fatalf("denied bridge: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(rg.dir, "refused.txt")); err == nil {
		t.Error("refused.txt was written")
	}
}
