package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

const token = "s3cret-token"

// provider is a scripted sandbox.Provider: containers maps conversation ids
// to refs; a ref "stopped" opens with ErrGone.
type provider struct {
	scheme     string
	containers map[string]string
}

func (p *provider) Scheme() string { return p.scheme }

func (p *provider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	switch {
	case p.scheme == "host":
		return &sb{ref: "host"}, nil
	case ref == "stopped":
		return nil, fmt.Errorf("fake: container stopped is exited (exit code 0): %w", sandbox.ErrGone)
	}
	for _, r := range p.containers {
		if r == ref {
			return &sb{ref: p.scheme + "://" + ref}, nil
		}
	}
	return nil, fmt.Errorf("fake: no container %q: %w", ref, sandbox.ErrNotFound)
}

func (p *provider) Locate(ctx context.Context, o sandbox.Owner) (string, error) {
	if r, ok := p.containers[o.Conversation]; ok {
		return r, nil
	}
	return "", fmt.Errorf("fake: none for %q: %w", o.Conversation, sandbox.ErrNotFound)
}

type sb struct {
	ref  string
	gone atomic.Bool
}

func (s *sb) Ref() string { return s.ref }
func (s *sb) Start(context.Context, *sandbox.Cmd) (sandbox.Process, error) {
	return nil, sandbox.ErrUnsupported
}
func (s *sb) FS(ctx context.Context, root string) (sandbox.FS, error) { return rootFS{root: root}, nil }
func (s *sb) Dial(context.Context, string, string) (sandbox.Conn, error) {
	return nil, sandbox.ErrUnsupported
}
func (s *sb) Check(context.Context) error {
	if s.gone.Load() {
		return fmt.Errorf("fake: container %s was removed: %w", s.ref, sandbox.ErrGone)
	}
	return nil
}
func (s *sb) Close() error { return nil }

type rootFS struct {
	sandbox.FS
	root string
}

func (f rootFS) Root() string { return f.root }

// blockStarted receives once when the block tool runs,
// and ctxSeen receives the error of its context when it ends.
var (
	blockStarted = make(chan struct{}, 1)
	ctxSeen      = make(chan error, 1)
)

func binder(ctx context.Context, r *tools.Registry, env *controller.Env) error {
	type in struct {
		Path string `json:"path"`
	}
	tools.Register(r, tools.Tool{Name: "read", Description: "read a file", Level: tools.LevelRead},
		func(ctx context.Context, a in) (*tools.Result, error) {
			if a.Path == "missing" {
				return tools.Errorf("read: %s does not exist; list the directory first", a.Path), nil
			}
			return tools.Textf("contents of %s", a.Path), nil
		})
	tools.Register(r, tools.Tool{Name: "write", Description: "write a file", Level: tools.LevelWrite},
		func(ctx context.Context, a in) (*tools.Result, error) { return tools.Text("wrote " + a.Path), nil })
	tools.Register(r, tools.Tool{Name: "block", Description: "wait for the context", Level: tools.LevelRead},
		func(ctx context.Context, a struct{}) (*tools.Result, error) {
			blockStarted <- struct{}{}
			<-ctx.Done()
			ctxSeen <- ctx.Err()
			return nil, ctx.Err()
		})
	tools.Register(r, tools.Tool{Name: "kill", Description: "the container goes away", Level: tools.LevelRead},
		func(ctx context.Context, a struct{}) (*tools.Result, error) {
			env.Sandbox.(*sb).gone.Store(true)
			return nil, fmt.Errorf("fake: exec failed: %w", sandbox.ErrGone)
		})
	return nil
}

type rig struct {
	t   *testing.T
	srv *httptest.Server
	c   *controller.Controller
}

func newRig(t *testing.T, opts httpapi.Options, noFallback bool) *rig {
	t.Helper()
	return newRigWith(t, controller.Config{NoHostFallback: noFallback}, opts)
}

// newRigWith is newRig with more of the controller's configuration.
func newRigWith(t *testing.T, cfg controller.Config, opts httpapi.Options) *rig {
	t.Helper()
	return newRigServer(t, cfg, opts, nil)
}

// newRigServer is newRigWith whose test server is set up by configure
// (when not nil) before it starts.
func newRigServer(t *testing.T, cfg controller.Config, opts httpapi.Options, configure func(*http.Server)) *rig {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Providers = []sandbox.Provider{
		&provider{scheme: "docker", containers: map[string]string{"c-42": "abc123"}},
		&provider{scheme: "host"},
	}
	cfg.Tools = []controller.Binder{binder}
	cfg.Registerer = reg
	cfg.AllowUnlabelled = true // the scripted provider's containers carry no labels
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Gatherer = reg
	srv := httptest.NewUnstartedServer(validated(t, httpapi.New(c, opts)))
	if configure != nil {
		configure(srv.Config)
	}
	srv.Start()
	t.Cleanup(func() { srv.Close(); c.Close() })
	return &rig{t: t, srv: srv, c: c}
}

type response struct {
	status int
	header http.Header
	body   []byte
	close  bool // the server said Connection: close
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not JSON: %q", r.status, r.body)
	}
	return m
}

func (r response) errorCode(t *testing.T) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	if e == nil || e["message"] == "" {
		t.Fatalf("error response without code and message: %s", r.body)
	}
	return e["code"].(string)
}

func (rg *rig) do(method, path, tok, body string, hdr ...string) response {
	rg.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rg.srv.URL+path, rd)
	if err != nil {
		rg.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		rg.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b, close: resp.Close}
}

func (rg *rig) open(body string) string {
	rg.t.Helper()
	return rg.openAs(token, body)
}

// openAs opens a run with the bearer token tok and returns its id.
func (rg *rig) openAs(tok, body string) string {
	rg.t.Helper()
	r := rg.do("POST", "/v1/runs", tok, body)
	if r.status != http.StatusCreated {
		rg.t.Fatalf("POST /v1/runs: %d %s", r.status, r.body)
	}
	return r.json(rg.t)["id"].(string)
}

func TestOpenRun(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	r := rg.do("POST", "/v1/runs", token, `{"conversation_id":"c-42","workspace":"/workspace","sandbox":"auto","mode":"default","vibe":false}`)
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	m := r.json(t)
	if id, _ := m["id"].(string); len(id) != 32 {
		t.Errorf("id = %v, want 32 hex digits", m["id"])
	}
	want := map[string]string{"sandbox": "docker://abc123", "workspace": "/workspace", "conversation_id": "c-42", "mode": "default"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %q", k, m[k], v)
		}
	}
	if loc := r.header.Get("Location"); loc != "/v1/runs/"+m["id"].(string) {
		t.Errorf("Location = %q", loc)
	}
	if h := rg.do("POST", "/v1/runs", token, `{"conversation_id":"c-none","workspace":"/tmp"}`); h.json(t)["sandbox"] != "host" {
		t.Errorf("fallback run: %s", h.body)
	}
}

func TestErrors(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	strict := newRig(t, httpapi.Options{Token: token}, true)
	id := rg.open(`{"conversation_id":"c-42","workspace":"/workspace"}`)
	gone := rg.open(`{"sandbox":"docker://abc123","workspace":"/w"}`)
	call := "/v1/runs/" + id + "/tools/"
	big := `{"args":{"path":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}}`

	tests := []struct {
		name   string
		rg     *rig
		method string
		path   string
		tok    string
		body   string
		status int
		code   string
	}{
		{"missing token", rg, "GET", "/v1/runs", "", "", 401, "unauthorized"},
		{"wrong token", rg, "GET", "/v1/runs", "nope", "", 401, "unauthorized"},
		{"missing token on a call", rg, "POST", call + "read", "", `{"args":{"path":"a"}}`, 401, "unauthorized"},
		{"missing token on metrics", rg, "GET", "/metrics", "", "", 401, "unauthorized"},
		{"open malformed JSON", rg, "POST", "/v1/runs", token, `{"workspace":`, 400, "bad_request"},
		{"open empty body", rg, "POST", "/v1/runs", token, ``, 400, "bad_request"},
		{"open unknown field", rg, "POST", "/v1/runs", token, `{"workspce":"/w"}`, 400, "bad_request"},
		{"open bad sandbox ref", rg, "POST", "/v1/runs", token, `{"sandbox":"docker:x"}`, 400, "bad_request"},
		{"open unknown scheme", rg, "POST", "/v1/runs", token, `{"sandbox":"kube://a/b","workspace":"/w"}`, 400, "bad_request"},
		{"open bad mode", rg, "POST", "/v1/runs", token, `{"mode":"god"}`, 400, "bad_request"},
		{"open container without workspace", rg, "POST", "/v1/runs", token, `{"conversation_id":"c-42"}`, 400, "bad_request"},
		{"open missing container", rg, "POST", "/v1/runs", token, `{"sandbox":"docker://zzz","workspace":"/w"}`, 404, "sandbox_not_found"},
		{"open stopped container", rg, "POST", "/v1/runs", token, `{"sandbox":"docker://stopped","workspace":"/w"}`, 410, "sandbox_gone"},
		{"open without fallback", strict, "POST", "/v1/runs", token, `{"conversation_id":"c-none","workspace":"/w"}`, 404, "sandbox_not_found"},
		{"unknown run tools", rg, "GET", "/v1/runs/deadbeef/tools", token, "", 404, "unknown_run"},
		{"unknown run call", rg, "POST", "/v1/runs/deadbeef/tools/read", token, `{"args":{}}`, 404, "unknown_run"},
		{"unknown run get", rg, "GET", "/v1/runs/deadbeef", token, "", 404, "unknown_run"},
		{"unknown run delete", rg, "DELETE", "/v1/runs/deadbeef", token, "", 404, "unknown_run"},
		{"bad surface on list", rg, "GET", "/v1/runs/" + id + "/tools?surface=root", token, "", 400, "bad_request"},
		{"unknown tool", rg, "POST", call + "rm_rf", token, `{"args":{}}`, 404, "unknown_tool"},
		{"write denied on plan", rg, "POST", call + "write", token, `{"args":{"path":"a"},"surface":"plan"}`, 403, "denied"},
		{"write denied on readonly", rg, "POST", call + "write", token, `{"args":{"path":"a"},"surface":"readonly"}`, 403, "denied"},
		{"bad surface on call", rg, "POST", call + "read", token, `{"args":{"path":"a"},"surface":"root"}`, 400, "bad_request"},
		{"bad args", rg, "POST", call + "read", token, `{"args":{"path":7}}`, 400, "bad_request"},
		{"unknown arg", rg, "POST", call + "read", token, `{"args":{"file":"a"}}`, 400, "bad_request"},
		{"malformed call body", rg, "POST", call + "read", token, `{"args":{"path":"a"}`, 400, "bad_request"},
		{"trailing data", rg, "POST", call + "read", token, `{"args":{}} {}`, 400, "bad_request"},
		{"unknown body field", rg, "POST", call + "read", token, `{"arguments":{}}`, 400, "bad_request"},
		{"body too large", rg, "POST", call + "read", token, big, 413, "too_large"},
		{"sandbox gone", rg, "POST", "/v1/runs/" + gone + "/tools/kill", token, `{}`, 410, "sandbox_gone"},
		{"sandbox stays gone", rg, "POST", "/v1/runs/" + gone + "/tools/read", token, `{"args":{"path":"a"}}`, 410, "sandbox_gone"},
		{"no route", rg, "GET", "/v1/nothing", token, "", 404, "not_found"},
		{"wrong method", rg, "PUT", "/v1/runs/" + id, token, "", 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rg.do(tt.method, tt.path, tt.tok, tt.body)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if code := r.errorCode(t); code != tt.code {
				t.Errorf("code %q, want %q: %s", code, tt.code, r.body)
			}
			if tt.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if tt.status == 401 && !r.close {
				t.Error("401 keeps the connection: the server would wait for an unread body")
			}
		})
	}

	r := rg.do("POST", "/v1/runs/"+gone+"/tools/read", token, `{"args":{"path":"a"}}`)
	if msg := string(r.body); !strings.Contains(msg, "docker://abc123") {
		t.Errorf("sandbox_gone message does not name the container: %s", msg)
	}
}

func TestCallTool(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	id := rg.open(`{"conversation_id":"c-42","workspace":"/workspace"}`)
	tests := []struct {
		tool, body string
		text       string
		isError    bool
	}{
		{"read", `{"args":{"path":"main.go"}}`, "contents of main.go", false},
		{"read", `{"args":{"path":"main.go"},"surface":"plan"}`, "contents of main.go", false},
		{"read", `{"args":{"path":"missing"}}`, "read: missing does not exist; list the directory first", true},
		{"write", `{"args":{"path":"a.txt"},"surface":"default"}`, "wrote a.txt", false},
	}
	for _, tt := range tests {
		r := rg.do("POST", "/v1/runs/"+id+"/tools/"+tt.tool, token, tt.body)
		if r.status != http.StatusOK {
			t.Fatalf("%s %s: status %d: %s", tt.tool, tt.body, r.status, r.body)
		}
		var res struct {
			Content []struct{ Type, Text string }
			IsError bool
		}
		if err := json.Unmarshal(r.body, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Content) != 1 || res.Content[0].Type != "text" || res.Content[0].Text != tt.text || res.IsError != tt.isError {
			t.Errorf("%s %s: got %s", tt.tool, tt.body, r.body)
		}
	}
}

func TestListTools(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	id := rg.open(`{"sandbox":"host"}`)
	plan := rg.open(`{"sandbox":"host","mode":"plan"}`)
	tests := []struct {
		id, query string
		want      string
	}{
		{id, "", "block,kill,read,write"},
		{id, "?surface=default", "block,kill,read,write"},
		{id, "?surface=plan", "block,kill,read"},
		{id, "?surface=readonly", "block,kill,read"},
		{plan, "", "block,kill,read"},
	}
	for _, tt := range tests {
		r := rg.do("GET", "/v1/runs/"+tt.id+"/tools"+tt.query, token, "")
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		var list struct {
			Tools []struct {
				Name, Description, Level string
				InputSchema              map[string]any
			}
		}
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range list.Tools {
			names = append(names, tl.Name)
			if tl.Description == "" || tl.InputSchema["type"] != "object" {
				t.Errorf("tool %s lacks a description or an object schema: %+v", tl.Name, tl)
			}
			if tt.query == "?surface=plan" && tl.Level != "read" {
				t.Errorf("plan lists %s at level %s", tl.Name, tl.Level)
			}
		}
		if got := strings.Join(names, ","); got != tt.want {
			t.Errorf("tools%s = %s, want %s", tt.query, got, tt.want)
		}
	}
}

func TestRunLifecycle(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	a := rg.open(`{"sandbox":"host","conversation_id":"one"}`)
	b := rg.open(`{"sandbox":"host","conversation_id":"two"}`)
	r := rg.do("GET", "/v1/runs", token, "")
	var list struct{ Runs []controller.RunInfo }
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/runs: %d %s", r.status, r.body)
	}
	if len(list.Runs) != 2 || list.Runs[0].ID != a || list.Runs[1].ID != b {
		t.Fatalf("runs = %+v, want %s then %s", list.Runs, a, b)
	}
	if r := rg.do("GET", "/v1/runs/"+a, token, ""); r.status != 200 || r.json(t)["conversation_id"] != "one" {
		t.Errorf("GET run: %d %s", r.status, r.body)
	}
	if r := rg.do("DELETE", "/v1/runs/"+a, token, ""); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r := rg.do("DELETE", "/v1/runs/"+a, token, ""); r.status != 404 {
		t.Errorf("second DELETE: %d", r.status)
	}
	if r := rg.do("POST", "/v1/runs/"+a+"/tools/read", token, `{"args":{"path":"x"}}`); r.status != 404 || r.errorCode(t) != "unknown_run" {
		t.Errorf("call after DELETE: %d %s", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs", token, ""); !bytes.Contains(r.body, []byte(b)) || bytes.Contains(r.body, []byte(a)) {
		t.Errorf("list after DELETE: %s", r.body)
	}
	// Graceful shutdown: the controller closes; new runs are refused.
	rg.c.Close()
	if r := rg.do("POST", "/v1/runs", token, `{"sandbox":"host"}`); r.status != 503 || r.errorCode(t) != "shutting_down" {
		t.Errorf("open after Close: %d %s", r.status, r.body)
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	rg := newRig(t, httpapi.Options{Token: token}, false)
	if r := rg.do("GET", "/healthz", "", ""); r.status != 200 || string(r.body) != "ok" {
		t.Errorf("healthz: %d %q", r.status, r.body)
	}
	id := rg.open(`{"sandbox":"host"}`)
	rg.do("POST", "/v1/runs/"+id+"/tools/read", token, `{"args":{"path":"a"}}`)
	rg.do("POST", "/v1/runs/"+id+"/tools/write", token, `{"args":{"path":"a"},"surface":"plan"}`)
	r := rg.do("GET", "/metrics", token, "")
	if r.status != 200 {
		t.Fatalf("metrics: %d", r.status)
	}
	for _, want := range []string{
		"berth_runs_open 1",
		`berth_tool_calls_total{outcome="ok",tool="read"} 1`,
		`berth_tool_calls_total{outcome="denied",tool="write"} 1`,
		`berth_tool_call_duration_seconds_count{tool="read"} 1`,
	} {
		if !bytes.Contains(r.body, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestNoTokenLoopbackAndOrigin(t *testing.T) {
	rg := newRig(t, httpapi.Options{LoopbackOnly: true}, false)
	if r := rg.do("GET", "/v1/runs", "", ""); r.status != 200 {
		t.Errorf("no token configured, no token sent: %d %s", r.status, r.body)
	}
	for _, host := range []string{"localhost:7450", "127.0.0.1", "[::1]:80"} {
		if r := rg.do("GET", "/v1/runs", "", "", "Host", host); r.status != 200 {
			t.Errorf("Host %s: %d %s", host, r.status, r.body)
		}
	}
	if r := rg.do("GET", "/v1/runs", "", "", "Host", "evil.example:7450"); r.status != http.StatusMisdirectedRequest || r.errorCode(t) != "misdirected" {
		t.Errorf("rebinding Host: %d %s", r.status, r.body)
	}
	if r := rg.do("POST", "/v1/runs", "", `{"sandbox":"host"}`, "Origin", "https://evil.example"); r.status != 403 || r.errorCode(t) != "forbidden_origin" {
		t.Errorf("Origin: %d %s", r.status, r.body)
	}
}
