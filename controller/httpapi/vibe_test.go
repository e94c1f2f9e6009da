package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/tools/permission"
)

// TestVibePlatformRunner: a run opened with vibe gets the vibe_* tools;
// a spawn is published on the event stream, the platform reports the
// result over the API, and vibe_wait returns it. A run without vibe has no
// vibe tools.
func TestVibePlatformRunner(t *testing.T) {
	rg := newAskRig(t, controller.Config{Mode: permission.ModeLocal, Tools: []controller.Binder{controller.FileTools, controller.VibeTools(controller.VibeConfig{})}})
	plain := rg.openHost()
	if r := rg.do("GET", "/v1/runs/"+plain+"/tools", token, ""); strings.Contains(string(r.body), "vibe_spawn") {
		t.Fatalf("a run without vibe lists vibe tools: %s", r.body)
	}
	id := rg.open(`{"sandbox":"host","workspace":"` + rg.dir + `","vibe":true}`)
	if r := rg.do("GET", "/v1/runs/"+id+"/tools", token, ""); !strings.Contains(string(r.body), "vibe_spawn") {
		t.Fatalf("a vibe run lacks vibe_spawn: %s", r.body)
	}
	ev := rg.subscribe(id, "")
	spawn := wait(t, rg.call(id, "vibe_spawn", `{"brief":"count the Go files","label":"counter"}`))
	if spawn.status != 200 || spawn.isError {
		t.Fatalf("spawn: %+v", spawn)
	}
	e := ev.next("vibe.spawn")
	wid, _ := e.data["worker_id"].(string)
	if wid == "" {
		t.Fatalf("spawn event without worker_id: %v", e.data)
	}
	if r := rg.do("GET", "/v1/runs/"+id+"/resources", token, ""); r.status != 200 || !strings.Contains(string(r.body), `"kind":"worker"`) || !strings.Contains(string(r.body), "counter") {
		t.Fatalf("resources: %d %s", r.status, r.body)
	}
	list := wait(t, rg.call(id, "vibe_list", `{}`))
	if !strings.Contains(list.text, "running") {
		t.Fatalf("list: %s", list.text)
	}
	waiting := rg.call(id, "vibe_wait", `{"worker_id":"`+wid+`","timeout_seconds":60}`)
	if r := rg.do("POST", "/v1/runs/"+id+"/workers/"+wid, token, `{"status":"done","result":"42 Go files"}`); r.status != 200 {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	if got := wait(t, waiting); got.isError || !strings.Contains(got.text, "42 Go files") {
		t.Fatalf("wait: %+v", got)
	}
	if r := rg.do("POST", "/v1/runs/"+id+"/workers/nope", token, `{"status":"done"}`); r.status != 404 {
		t.Fatalf("report for an unknown worker: %d %s", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs/"+id+"/workers", token, ""); r.status != 200 || !strings.Contains(string(r.body), "counter") {
		t.Fatalf("workers: %d %s", r.status, r.body)
	}
}

// chatModel is an OpenAI-compatible chat-completions server scripted for
// one task: write out.txt, then report what the write answered. It is the
// only fake: berth's agent loop, the tools and the gate are real.
func chatModel(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		last := req.Messages[len(req.Messages)-1]
		var msg map[string]any
		if last.Role == "tool" {
			msg = map[string]any{"role": "assistant", "content": "write answered: " + *last.Content}
		} else {
			args, _ := json.Marshal(map[string]any{"path": "out.txt", "content": "from the worker\n"})
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": "c1", "type": "function", "function": map[string]any{"name": "write", "arguments": string(args)}}}}
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}}})
	}))
}

// TestVibeWorkerWriteGoesThroughTheGate: in hosted mode a worker's write
// draws a permission card like the model's own; approved it writes,
// without an approver it is refused.
func TestVibeWorkerWriteGoesThroughTheGate(t *testing.T) {
	model := chatModel(t)
	defer model.Close()
	cfg := controller.VibeConfig{Runner: "openai", BaseURL: model.URL + "/v1/", APIKey: "k", Models: map[string]string{"fast": "m", "good": "m"}}
	rg := newAskRig(t, controller.Config{Mode: permission.ModeHosted, Tools: []controller.Binder{controller.FileTools, controller.VibeTools(cfg)}})
	id := rg.open(`{"sandbox":"host","workspace":"` + rg.dir + `","vibe":true}`)
	out := filepath.Join(rg.dir, "out.txt")

	// Nobody connected: the worker's write is refused and nothing written.
	spawn := wait(t, rg.call(id, "vibe_spawn", `{"brief":"write out.txt","label":"w"}`))
	if spawn.isError {
		t.Fatalf("spawn: %+v", spawn)
	}
	got := wait(t, rg.call(id, "vibe_wait", `{"worker_id":"w1","timeout_seconds":60}`))
	if !strings.Contains(got.text, "write answered") || !strings.Contains(got.text, "write was not run: no approver") {
		t.Fatalf("worker without an approver: %s", got.text)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the worker wrote without approval")
	}

	// Connected: the write draws a permission card; approved, it runs.
	ev := rg.subscribe(id, "")
	wait(t, rg.call(id, "vibe_send", `{"worker_id":"w1","message":"try again"}`))
	card := ev.next("card.opened")
	if card.data["kind"] != "permission" || card.data["tool"] != "write" {
		t.Fatalf("card: %v", card.data)
	}
	n := int(card.data["n"].(float64))
	if r := rg.do("POST", "/v1/runs/"+id+"/cards/"+formatInt(n), token, `{"decision":"approve"}`); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	got = wait(t, rg.call(id, "vibe_wait", `{"worker_id":"w1","timeout_seconds":60}`))
	if b, err := os.ReadFile(out); err != nil || string(b) != "from the worker\n" {
		t.Fatalf("after approval out.txt = %q, %v (worker: %s)", b, err, got.text)
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestWorkerIdentity: a platform worker's calls carry its id and the
// secret token of its vibe.spawn event; with them a call runs at most at
// the surface the worker was spawned from, whatever surface it claims. A
// wrong token, a token without an id, an ended worker's token are 403.
func TestWorkerIdentity(t *testing.T) {
	var logs syncBuffer
	rg := newAskRigWith(t, controller.Config{Mode: permission.ModeLocal, Tools: []controller.Binder{controller.FileTools, controller.VibeTools(controller.VibeConfig{})}},
		httpapi.Options{Token: token, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	id := rg.open(`{"sandbox":"host","workspace":"` + rg.dir + `","vibe":true}`)
	ev := rg.subscribe(id, "")
	spawn := func(surface string) (wid, tok string) {
		t.Helper()
		if r := wait(t, rg.callAs(token, id, "vibe_spawn", `{"args":{"brief":"edit","label":"l"},"surface":"`+surface+`"}`)); r.status != 200 || r.isError {
			t.Fatalf("spawn: %+v", r)
		}
		e := ev.next("vibe.spawn")
		wid, _ = e.data["worker_id"].(string)
		tok, _ = e.data["worker_token"].(string)
		if wid == "" || tok == "" || e.data["surface"] != surface {
			t.Fatalf("spawn event: %v", e.data)
		}
		return wid, tok
	}
	planner, plannerTok := spawn("plan")
	doer, doerTok := spawn("default")
	as := func(worker, wtok, surface, tool, args string) callResult {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"args": json.RawMessage(args), "surface": surface, "worker": worker, "worker_token": wtok})
		return wait(t, rg.callAs(token, id, tool, string(b)))
	}
	write := `{"path":"w.txt","content":"x"}`
	tests := []struct {
		name, worker, wtok, surface, tool, args string
		status                                  int
	}{
		{"plan worker writes", planner, plannerTok, "", "write", write, 403},
		{"plan worker claims default", planner, plannerTok, "default", "write", write, 403},
		{"plan worker reads", planner, plannerTok, "", "read", `{"path":"."}`, 200},
		{"plan worker reads on readonly", planner, plannerTok, "readonly", "read", `{"path":"."}`, 200},
		{"wrong token", doer, plannerTok, "", "read", `{"path":"."}`, 403},
		{"no token", doer, "", "", "read", `{"path":"."}`, 403},
		{"token without worker", "", doerTok, "", "read", `{"path":"."}`, 403},
		{"unknown worker", "w9", doerTok, "", "read", `{"path":"."}`, 403},
		{"default worker writes", doer, doerTok, "", "write", write, 200},
	}
	for _, tt := range tests {
		r := as(tt.worker, tt.wtok, tt.surface, tt.tool, tt.args)
		if r.status != tt.status || tt.status == 403 && !strings.Contains(r.body, `"denied"`) {
			t.Errorf("%s: %d %s, want %d", tt.name, r.status, r.body, tt.status)
		}
	}
	if !strings.Contains(logs.String(), "worker call") || !strings.Contains(logs.String(), "worker="+doer) {
		t.Errorf("worker calls are not logged with the worker id:\n%s", logs.String())
	}
	if r := wait(t, rg.call(id, "vibe_kill", `{"worker_id":"`+doer+`"}`)); r.isError {
		t.Fatalf("kill: %+v", r)
	}
	if r := as(doer, doerTok, "", "read", `{"path":"."}`); r.status != 403 {
		t.Errorf("a killed worker's token: %d %s, want 403", r.status, r.body)
	}
	if r := rg.do("POST", "/v1/runs/"+rg.open(`{"sandbox":"host","workspace":"`+rg.dir+`"}`)+"/tools/read", token,
		`{"args":{"path":"."},"worker":"w1","worker_token":"`+plannerTok+`"}`); r.status != 403 {
		t.Errorf("a worker identity in a run without workers: %d %s", r.status, r.body)
	}
}
