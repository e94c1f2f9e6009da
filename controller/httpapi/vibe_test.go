package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/controller"
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
