package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/tests/berthtest"
)

// TestDirectCall: a session's plain tools/call is answered by berth
// itself as application/json (the direct path of controller/mcpserver),
// with the same result and error shapes as through the SDK, which still
// serves a call with a progress token (an event stream) and whatever the
// direct path does not take: another tenant's token, a call before
// initialize, a batch, a wrong protocol version header.
func TestDirectCall(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	ctx := context.Background()
	run, err := api.OpenRun(ctx, map[string]any{"sandbox": "host", "workspace": ws})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.Do(ctx, "POST", "/v1/runs/"+run.ID+"/tools/write", map[string]any{"args": map[string]any{"path": "a.txt", "content": "hello direct\n"}}); err != nil {
		t.Fatal(err)
	}
	url := tn.s.URL + "/v1/runs/" + run.ID + "/mcp"
	sid := session(t, url, tn.a)

	type reply struct {
		ID     any `json:"id"`
		Result *struct {
			Content []struct{ Text string }
			IsError bool `json:"isError"`
		}
		Error *struct {
			Code int
			Data struct{ Code string }
		}
	}
	decode := func(t *testing.T, ctype, body string) reply {
		t.Helper()
		if strings.HasPrefix(ctype, "text/event-stream") {
			for _, l := range strings.Split(body, "\n") {
				if d, ok := strings.CutPrefix(l, "data: "); ok {
					body = d
				}
			}
		}
		var r reply
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%s reply %q: %v", ctype, body, err)
		}
		return r
	}
	for _, tc := range []struct {
		name, body, ctype, want, code string
	}{
		{"a plain call", `{"jsonrpc":"2.0","id":"r-1","method":"tools/call","params":{"name":"read","arguments":{"path":"a.txt"}}}`, "application/json", "hello direct", ""},
		{"an unknown tool", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"nope","arguments":{}}}`, "application/json", "", "unknown_tool"},
		{"bad arguments", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read","arguments":{"path":3}}}`, "application/json", "bad arguments for read", ""},
		{"with a progress token", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{"path":"a.txt"},"_meta":{"progressToken":"p"}}}`, "text/event-stream", "hello direct", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, hdr, body, err := post(t, ctx, url, tn.a, sid, tc.body)
			if err != nil || st != http.StatusOK {
				t.Fatalf("%d %v %s", st, err, body)
			}
			if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
				t.Fatalf("Content-Type %q, want %s: %s", ct, tc.ctype, body)
			}
			r := decode(t, hdr.Get("Content-Type"), body)
			switch {
			case tc.code != "":
				if r.Error == nil || r.Error.Data.Code != tc.code {
					t.Fatalf("want error %s: %s", tc.code, body)
				}
			case r.Result == nil || len(r.Result.Content) == 0 || !strings.Contains(r.Result.Content[0].Text, tc.want) ||
				r.Result.IsError != (tc.name == "bad arguments"): // an input error is a result the model sees (SEP-1303)
				t.Fatalf("want %q: %s", tc.want, body)
			}
			var in struct{ ID any }
			json.Unmarshal([]byte(tc.body), &in)
			if r.ID != in.ID {
				t.Errorf("reply id %v, want %v", r.ID, in.ID)
			}
		})
	}
	// Another tenant's token on this session: refused before any call.
	if st, _, body, _ := post(t, ctx, url, tn.b, sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{"path":"a.txt"}}}`); st != http.StatusNotFound || strings.Contains(body, "hello direct") {
		t.Errorf("tenant b calling on a's session: %d %s; want 404", st, body)
	}
	// A version header this server does not speak: the SDK's refusal.
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read","arguments":{"path":"a.txt"}}}`))
	req.Header.Set("Authorization", "Bearer "+tn.a)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "1999-01-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an unsupported protocol version header: %d, want 400", resp.StatusCode)
	}
}
