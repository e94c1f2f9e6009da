package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
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
