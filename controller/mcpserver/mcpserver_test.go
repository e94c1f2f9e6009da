package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

// TestPermissionMessageShowsTheCallOnce: a 9,680-byte write is shown
// once, clipped and counted, not as its JSON headline and then again.
func TestPermissionMessageShowsTheCallOnce(t *testing.T) {
	content := strings.Repeat("line of the file\n", 9680/17)
	args, _ := json.Marshal(map[string]any{"path": "big.txt", "content": content})
	detail := "write big.txt:\n" + content
	p, err := ElicitParams(questions.Card{N: 3, Kind: questions.KindPermission, Tool: "write", Level: "write", Surface: "default",
		Summary: string(args[:200]), Detail: detail})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(p.Message, "line of the file"); n == 0 || n > MaxElicitCall/17+1 {
		t.Errorf("the content shows %d times its line; want it once, clipped", n)
	}
	if strings.Contains(p.Message, `"content"`) {
		t.Errorf("the message shows the raw JSON arguments as well as the call: %.300q", p.Message)
	}
	if len([]rune(p.Message)) > MaxElicitCall+300 || !strings.Contains(p.Message, "more characters of") {
		t.Errorf("message of %d characters, want the call clipped near %d and the cut counted: …%q", len([]rune(p.Message)), MaxElicitCall, p.Message[len(p.Message)-200:])
	}
	if !strings.HasPrefix(p.Message, "[card 3] May write run? (level write, surface default)") {
		t.Errorf("message starts %.80q", p.Message)
	}
	small, _ := ElicitParams(questions.Card{N: 4, Kind: questions.KindPermission, Tool: "eval", Level: "exec", Summary: `{"code":"1+1"}`})
	if !strings.HasSuffix(small.Message, `{"code":"1+1"}`) {
		t.Errorf("a card without detail shows its summary: %q", small.Message)
	}
}

// TestCardForms: each card becomes the form the issue names, and each
// reply the answer it means; every answer fits the card (questions.Check).
func TestCardForms(t *testing.T) {
	opts := []questions.Option{{Label: "red"}, {Label: "blue", Description: "the sea"}}
	for _, tc := range []struct {
		name     string
		card     questions.Card
		reply    *mcp.ElicitResult
		schema   string // the requested schema's properties, as JSON
		required []string
		want     questions.Answer
	}{
		{"options", questions.Card{Kind: questions.KindQuestion, Question: "Which?", Options: opts},
			&mcp.ElicitResult{Action: "accept", Content: map[string]any{"choice": "blue"}},
			`{"choice":{"oneOf":[{"const":"red","title":"red"},{"const":"blue","title":"blue — the sea"}],"title":"Choice","type":"string"}}`, []string{"choice"},
			questions.Answer{Choice: []string{"blue"}}},
		{"multi", questions.Card{Kind: questions.KindQuestion, Question: "Which?", Options: opts, MultiSelect: true},
			&mcp.ElicitResult{Action: "accept", Content: map[string]any{"choice": []any{"red", "blue"}}},
			`{"choice":{"items":{"anyOf":[{"const":"red","title":"red"},{"const":"blue","title":"blue — the sea"}]},"title":"Choices","type":"array"}}`, []string{"choice"},
			questions.Answer{Choice: []string{"red", "blue"}}},
		{"free text", questions.Card{Kind: questions.KindQuestion, Question: "Name?", AllowFreeText: true},
			&mcp.ElicitResult{Action: "accept", Content: map[string]any{"text": "berth"}},
			`{"text":{"description":"a typed answer","title":"Answer","type":"string"}}`, []string{"text"},
			questions.Answer{Text: "berth"}},
		{"options or text", questions.Card{Kind: questions.KindQuestion, Question: "Which?", Options: opts, AllowFreeText: true},
			&mcp.ElicitResult{Action: "accept", Content: map[string]any{"text": "green"}},
			`{"choice":{"oneOf":[{"const":"red","title":"red"},{"const":"blue","title":"blue — the sea"}],"title":"Choice","type":"string"},"text":{"description":"a typed answer","title":"Answer","type":"string"}}`, nil,
			questions.Answer{Text: "green"}},
		{"decline skips", questions.Card{Kind: questions.KindQuestion, Question: "Name?", AllowFreeText: true},
			&mcp.ElicitResult{Action: "decline"},
			`{"text":{"description":"a typed answer","title":"Answer","type":"string"}}`, []string{"text"},
			questions.Answer{Skip: true}},
		{"cancel skips", questions.Card{Kind: questions.KindQuestion, Question: "Which?", Options: opts},
			&mcp.ElicitResult{Action: "cancel"},
			`{"choice":{"oneOf":[{"const":"red","title":"red"},{"const":"blue","title":"blue — the sea"}],"title":"Choice","type":"string"}}`, []string{"choice"},
			questions.Answer{Skip: true}},
		{"permission approve", questions.Card{Kind: questions.KindPermission, Tool: "write", Level: "write"},
			&mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}},
			`{"decision":{"oneOf":[{"const":"approve","title":"Approve once"},{"const":"deny","title":"Deny"},{"const":"allow_run","title":"Allow every write call in this run"}],"title":"Decision","type":"string"}}`, []string{"decision"},
			questions.Answer{Decision: questions.Approve}},
		{"permission decline denies", questions.Card{Kind: questions.KindPermission, Tool: "write", Level: "write"},
			&mcp.ElicitResult{Action: "decline"},
			`{"decision":{"oneOf":[{"const":"approve","title":"Approve once"},{"const":"deny","title":"Deny"},{"const":"allow_run","title":"Allow every write call in this run"}],"title":"Decision","type":"string"}}`, []string{"decision"},
			questions.Answer{Decision: questions.Deny}},
		{"too large takes only deny", questions.Card{Kind: questions.KindPermission, Tool: "write", TooLarge: true},
			&mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "deny"}},
			`{"decision":{"oneOf":[{"const":"deny","title":"Deny"}],"title":"Decision","type":"string"}}`, []string{"decision"},
			questions.Answer{Decision: questions.Deny}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ElicitParams(tc.card)
			if err != nil {
				t.Fatal(err)
			}
			s := p.RequestedSchema.(map[string]any)
			if got, _ := json.Marshal(s["properties"]); string(got) != tc.schema {
				t.Errorf("properties:\n got %s\nwant %s", got, tc.schema)
			}
			req, _ := s["required"].([]string)
			if !reflect.DeepEqual(req, tc.required) {
				t.Errorf("required %v, want %v", req, tc.required)
			}
			a, err := AnswerOf(tc.card, tc.reply)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, tc.want) {
				t.Errorf("answer %+v, want %+v", a, tc.want)
			}
			if err := questions.Check(tc.card, a); err != nil {
				t.Errorf("the answer does not fit the card: %v", err)
			}
		})
	}
	if _, err := AnswerOf(questions.Card{Kind: questions.KindQuestion}, &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}); err == nil {
		t.Error("an empty accepted form was taken as an answer")
	}
}

// TestResult: text, images and structuredContent keep their shape.
func TestResult(t *testing.T) {
	res := Result(&tools.Result{
		Content:           []tools.Content{{Type: "text", Text: "hi"}, {Type: "image", MimeType: "image/png", Data: []byte{1, 2}}},
		IsError:           true,
		StructuredContent: map[string]any{"n": 1},
	})
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"content":[{"type":"text","text":"hi"},{"type":"image","mimeType":"image/png","data":"AQI="}],"structuredContent":{"n":1},"isError":true}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// TestClassify: call errors keep the HTTP API's codes, wrapped or not.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", tools.ErrDenied), 403, "denied"},
		{fmt.Errorf("x: %w", tools.ErrUnknownTool), 404, "unknown_tool"},
		{&tools.InputError{Tool: "read", Msg: "bad"}, 400, "bad_request"},
		{errors.New("boom"), 500, "internal"},
	} {
		st, code := Classify(tc.err)
		if st != tc.status || code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.err, st, code, tc.status, tc.code)
		}
	}
	h := &handler{opts: Options{Classify: Classify}}
	err := h.callError("write", fmt.Errorf("refused: %w", tools.ErrDenied))
	if !strings.Contains(fmt.Sprint(err), "refused") {
		t.Errorf("the message is lost: %v", err)
	}
}

// TestDirectLeavesRebindingToSDK: a call that came to a loopback address
// naming another host is never answered by the direct paths, so the SDK's
// DNS rebinding protection refuses it.
func TestDirectLeavesRebindingToSDK(t *testing.T) {
	for _, c := range []struct {
		local, host string
		direct      bool
	}{
		{"127.0.0.1:7450", "127.0.0.1:7450", true},
		{"127.0.0.1:7450", "localhost:7450", true},
		{"[::1]:7450", "[::1]:7450", true},
		{"127.0.0.1:7450", "evil.example:7450", false},
		{"10.0.0.5:7450", "berth.example", true},
	} {
		r := httptest.NewRequest("POST", "http://"+c.host+"/v1/runs/x/mcp", nil)
		r.Host = c.host
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", StatelessVersion)
		addr, _ := net.ResolveTCPAddr("tcp", c.local)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, addr))
		if got := directHeaders(r, StatelessVersion); got != c.direct {
			t.Errorf("local %s, Host %s: direct %v, want %v", c.local, c.host, got, c.direct)
		}
	}
}

// TestAnnotations: every hint is set explicitly, so MCP's defaults
// (destructive, open world) never describe a tool that only stages or
// stays in the workspace.
func TestAnnotations(t *testing.T) {
	for _, tc := range []struct {
		in                                 tools.Info
		readOnly, destructive, idem, world bool
	}{
		{tools.Info{Name: "read", Level: tools.LevelRead, Hints: tools.Hints{Idempotent: true, Confined: true}}, true, false, true, false},
		{tools.Info{Name: "ask_user", Level: tools.LevelRead}, true, false, true, true},
		{tools.Info{Name: "ast_edit", Level: tools.LevelWrite, Hints: tools.Hints{Additive: true, Confined: true}}, false, false, false, false},
		{tools.Info{Name: "edit", Level: tools.LevelWrite, Hints: tools.Hints{Confined: true}}, false, true, false, false},
		{tools.Info{Name: "eval", Level: tools.LevelExec}, false, true, false, true},
	} {
		a := annotations(tc.in)
		if a.Title != tc.in.Name || a.ReadOnlyHint != tc.readOnly || a.DestructiveHint == nil || *a.DestructiveHint != tc.destructive ||
			a.IdempotentHint != tc.idem || a.OpenWorldHint == nil || *a.OpenWorldHint != tc.world {
			t.Errorf("%s: %+v, want readOnly %v destructive %v idempotent %v openWorld %v", tc.in.Name, a, tc.readOnly, tc.destructive, tc.idem, tc.world)
		}
	}
}
