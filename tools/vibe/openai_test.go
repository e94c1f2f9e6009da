package vibe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/files"
)

const testKey = "sk-test-do-not-log"

// scriptedModel is an OpenAI-compatible chat-completions server whose
// answers come from a script: given the conversation so far, the next
// assistant message. It is the only fake in the round trip.
type scriptedModel struct {
	t      *testing.T
	script func(msgs []chatMessage) chatMessage

	mu       sync.Mutex
	requests []chatRequest
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
		http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	m.mu.Unlock()
	msg := m.script(req.Messages)
	msg.Role = "assistant"
	json.NewEncoder(w).Encode(map[string]any{
		"id":      "chatcmpl-1",
		"object":  "chat.completion",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}},
	})
}

func callOf(id, name string, args any) toolCall {
	b, _ := json.Marshal(args)
	var tc toolCall
	tc.ID, tc.Type = id, "function"
	tc.Function.Name, tc.Function.Arguments = name, string(b)
	return tc
}

// lastTool returns the content of the last tool message, or "".
func lastTool(msgs []chatMessage) (string, string) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "tool" && msgs[i].Content != nil {
			return msgs[i].ToolCallID, *msgs[i].Content
		}
	}
	return "", ""
}

func openAIFixture(t *testing.T, model *scriptedModel, key string, maxSteps int) *fixture {
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	return newFixture(t, func(f *fixture) Runner {
		ws, err := f.sb.FS(t.Context(), f.dir)
		if err != nil {
			t.Fatal(err)
		}
		return OpenAI(OpenAIOptions{
			BaseURL:  srv.URL + "/v1/",
			APIKey:   key,
			Models:   map[string]string{TierFast: "small-model", TierGood: "big-model"},
			MaxSteps: maxSteps,
			Tools: func() *tools.Registry {
				r := tools.NewRegistry()
				files.Register(r, ws)
				// Workers never see the vibe tools, even when the
				// sub-run's registry has them.
				Register(r, context.Background(), Options{Runner: RunnerFunc(func(context.Context, Job) (string, error) { return "", nil })})
				return r
			},
		})
	}, Options{})
}

func TestOpenAIRoundTrip(t *testing.T) {
	model := &scriptedModel{t: t}
	model.script = func(msgs []chatMessage) chatMessage {
		id, out := lastTool(msgs)
		switch id {
		case "":
			if !strings.Contains(*msgs[1].Content, "upper-case in.txt into out.txt") {
				t.Errorf("the first user message lacks the brief: %q", *msgs[1].Content)
			}
			return chatMessage{ToolCalls: []toolCall{callOf("c1", "read", map[string]any{"path": "in.txt"})}}
		case "c1":
			if !strings.Contains(out, "hello from in.txt") {
				t.Errorf("read result lacks the file: %q", out)
				return chatMessage{Content: ptr("giving up")}
			}
			return chatMessage{Content: ptr("read it; writing now"), ToolCalls: []toolCall{
				callOf("c2", "write", map[string]any{"path": "out.txt", "content": "HELLO FROM IN.TXT\n"}),
			}}
		case "c2":
			return chatMessage{Content: ptr("wrote out.txt with the upper-cased text")}
		}
		t.Errorf("unexpected conversation, last tool call %s: %s", id, out)
		return chatMessage{Content: ptr("confused")}
	}
	f := openAIFixture(t, model, testKey, 0)
	if err := os.WriteFile(filepath.Join(f.dir, "in.txt"), []byte("hello from in.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	f.ok("vibe_spawn", map[string]any{"brief": "upper-case in.txt into out.txt", "label": "upcase", "tier": "good"}, "spawned w1")
	f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "done", "wrote out.txt with the upper-cased text")

	got, err := os.ReadFile(filepath.Join(f.dir, "out.txt"))
	if err != nil || string(got) != "HELLO FROM IN.TXT\n" {
		t.Fatalf("out.txt = %q, %v; want the worker's write", got, err)
	}

	model.mu.Lock()
	defer model.mu.Unlock()
	if len(model.requests) != 3 {
		t.Fatalf("%d model calls, want 3", len(model.requests))
	}
	req := model.requests[2]
	if req.Model != "big-model" {
		t.Errorf("model = %q, want the good tier's big-model", req.Model)
	}
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Function.Name)
		if tl.Type != "function" || !json.Valid(tl.Function.Parameters) || !strings.Contains(string(tl.Function.Parameters), `"properties"`) {
			t.Errorf("tool %s: bad definition %+v", tl.Function.Name, tl)
		}
	}
	if s := strings.Join(names, " "); s != "apply_patch edit read write" {
		t.Errorf("tools offered: %q, want the files tools and no vibe_*", s)
	}
	// The conversation: system, user, assistant(read), tool, assistant(write), tool.
	var roles []string
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	if s := strings.Join(roles, " "); s != "system user assistant tool assistant tool" {
		t.Errorf("roles = %q", s)
	}
}

func TestOpenAIErrors(t *testing.T) {
	t.Run("step cap", func(t *testing.T) {
		model := &scriptedModel{t: t, script: func(msgs []chatMessage) chatMessage {
			return chatMessage{Content: ptr("still looking"), ToolCalls: []toolCall{callOf(fmt.Sprint("c", len(msgs)), "read", map[string]any{"path": "."})}}
		}}
		f := openAIFixture(t, model, testKey, 3)
		f.ok("vibe_spawn", map[string]any{"brief": "look around", "label": "loop"})
		f.fails("vibe_wait", map[string]any{"worker_id": "w1"}, "failed", "3 model calls", "still looking")
	})
	t.Run("tool errors go to the model", func(t *testing.T) {
		model := &scriptedModel{t: t, script: func(msgs []chatMessage) chatMessage {
			switch id, _ := lastTool(msgs); id {
			case "":
				return chatMessage{ToolCalls: []toolCall{
					callOf("c1", "read", map[string]any{"path": "../etc/passwd"}),
					callOf("c2", "vibe_spawn", map[string]any{"brief": "x", "label": "y"}),
					callOf("c3", "nosuch", map[string]any{}),
				}}
			default:
				var outs []string
				for _, m := range msgs {
					if m.Role == "tool" {
						outs = append(outs, m.ToolCallID+": "+*m.Content)
					}
				}
				return chatMessage{Content: ptr(strings.Join(outs, "\n"))}
			}
		}}
		f := openAIFixture(t, model, testKey, 0)
		f.ok("vibe_spawn", map[string]any{"brief": "escape", "label": "bad"})
		f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "c1: error:", "c2: error: there is no tool \"vibe_spawn\"", "c3: error:", "unknown tool")
	})
	t.Run("bad key is not logged", func(t *testing.T) {
		model := &scriptedModel{t: t, script: func([]chatMessage) chatMessage { return chatMessage{Content: ptr("no")} }}
		const wrong = "sk-wrong-secret"
		f := openAIFixture(t, model, wrong, 0)
		f.ok("vibe_spawn", map[string]any{"brief": "x", "label": "y"})
		text := f.fails("vibe_wait", map[string]any{"worker_id": "w1"}, "401", "bad key")
		if strings.Contains(text, wrong) {
			t.Fatalf("the error shows the API key:\n%s", text)
		}
	})
}

// TestOpenAIPlanSurface: a worker spawned from plan mode is offered, and
// may call, only read-level tools (LVL-2 holds through vibe mode).
func TestOpenAIPlanSurface(t *testing.T) {
	model := &scriptedModel{t: t}
	model.script = func(msgs []chatMessage) chatMessage {
		if id, out := lastTool(msgs); id == "c1" {
			return chatMessage{Content: ptr("write said: " + out)}
		}
		return chatMessage{ToolCalls: []toolCall{callOf("c1", "write", map[string]any{"path": "x.txt", "content": "x"})}}
	}
	f := openAIFixture(t, model, testKey, 0)
	f.surface = tools.SurfacePlan
	f.ok("vibe_spawn", map[string]any{"brief": "try to write", "label": "plan"})
	f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "write said: error:", "denied")
	if _, err := os.Stat(filepath.Join(f.dir, "x.txt")); !os.IsNotExist(err) {
		t.Fatalf("a plan-mode worker wrote x.txt (stat: %v)", err)
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	var names []string
	for _, tl := range model.requests[0].Tools {
		names = append(names, tl.Function.Name)
	}
	if s := strings.Join(names, " "); s != "read" {
		t.Errorf("a plan-mode worker was offered %q, want only read", s)
	}
}
