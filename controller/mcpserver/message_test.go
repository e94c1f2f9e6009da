package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"berth.dev/berth/tools"
)

func TestNotAMessage(t *testing.T) {
	for _, tc := range []struct {
		in     string
		id     any    // the id of the answer as JSON, when refused
		reason string // empty: a message
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, ""},
		{`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}`, nil, ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil, ""},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, nil, ""},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`, nil, ""},
		{`  {"jsonrpc" : "2.0", "id": 2.5, "method": "ping"}  `, nil, ""},
		{`[]`, nil, "batch"},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, nil, "batch"},
		{`{}`, nil, `"jsonrpc":"2.0"`},
		{`42`, nil, "one JSON object"},
		{`null`, nil, "one JSON object"},
		{`"x"`, nil, "one JSON object"},
		{`{"jsonrpc":"1.0","id":7,"method":"ping"}`, "7", `"jsonrpc":"2.0"`},
		{`{"jsonrpc":2.0,"id":7,"method":"ping"}`, "7", `"jsonrpc":"2.0"`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, nil, "string or a number"},
		{`{"jsonrpc":"2.0","id":[1],"method":"ping"}`, nil, "string or a number"},
		{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, nil, "string or a number"},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, nil, "not null"},
		{`{"jsonrpc":"2.0","id":"q","method":""}`, `"q"`, `"method"`},
		{`{"jsonrpc":"2.0","id":"q","method":["ping"]}`, `"q"`, `"method"`},
		{`{"jsonrpc":"2.0","id":3,"method":"ping","params":"x"}`, "3", `"params"`},
		{`{"jsonrpc":"2.0","id":3}`, "3", "neither a request"},
		{`{"jsonrpc":"2.0","id":3,"result":{},"error":{"code":1,"message":"x"}}`, "3", "not both"},
		{`{"jsonrpc":"2.0","result":{}}`, nil, `"id"`},
		{`{"jsonrpc":"2.0","id":null,"result":{}}`, nil, `"id"`},
	} {
		got := NotAMessage([]byte(tc.in))
		if tc.reason == "" {
			if got != nil {
				t.Errorf("%s: a message, refused: %s", tc.in, got)
			}
			continue
		}
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(got, &m); err != nil {
			t.Errorf("%s: the answer is not JSON: %v: %s", tc.in, err, got)
			continue
		}
		wantID := "null"
		if tc.id != nil {
			wantID = tc.id.(string)
		}
		if m.JSONRPC != "2.0" || m.Error.Code != -32600 || string(m.ID) != wantID || !strings.Contains(m.Error.Message, tc.reason) {
			t.Errorf("%s: got %s, want an invalid request (-32600) with id %s saying %q", tc.in, got, wantID, tc.reason)
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
