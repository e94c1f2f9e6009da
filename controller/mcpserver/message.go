package mcpserver

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// NotAMessage checks b, a JSON value read from a client, against the shape
// of one JSON-RPC 2.0 message: an object with "jsonrpc":"2.0" that is a
// request or notification (a string "method", an optional string or
// number "id", object or array "params") or a response (a string or
// number "id" — null only for an error — and exactly one of "result" and
// "error"). It returns nil when b has that shape; otherwise the JSON-RPC
// error response to send (Invalid Request, carrying b's id when it has a
// usable one), so the client learns what was wrong and the connection
// lives on. The SDK ends a stdio connection on such a line, which would
// close the run and its kernels.
func NotAMessage(b []byte) []byte {
	b = bytes.TrimSpace(b)
	var id any
	why := func() string {
		if len(b) > 0 && b[0] == '[' {
			return "a batch (a JSON array) is not accepted: MCP has had no batches since 2025-06-18; send one JSON-RPC message per line"
		}
		var m map[string]json.RawMessage
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &m) != nil {
			return "a JSON-RPC message is one JSON object"
		}
		rawID, hasID := m["id"]
		if hasID {
			var v any
			d := json.NewDecoder(bytes.NewReader(rawID))
			d.UseNumber()
			if d.Decode(&v) == nil {
				switch v.(type) {
				case string, json.Number:
					id = v
				}
			}
		}
		if v, ok := m["jsonrpc"]; !ok || string(bytes.TrimSpace(v)) != `"2.0"` {
			return `the message does not carry "jsonrpc":"2.0"`
		}
		if hasID && id == nil && string(bytes.TrimSpace(rawID)) != "null" {
			return `"id" must be a string or a number`
		}
		if raw, ok := m["method"]; ok {
			var method string
			if json.Unmarshal(raw, &method) != nil || method == "" {
				return `"method" must be a non-empty string`
			}
			if hasID && id == nil {
				return `a request's "id" must be a string or a number, not null`
			}
			if p, ok := m["params"]; ok {
				if t := bytes.TrimSpace(p); len(t) == 0 || (t[0] != '{' && t[0] != '[') {
					return `"params" must be an object`
				}
			}
			return ""
		}
		_, res := m["result"]
		_, fail := m["error"]
		switch {
		case !res && !fail:
			return `the message is neither a request (no "method") nor a response (no "result" or "error")`
		case res && fail:
			return `a response carries "result" or "error", not both`
		case !hasID:
			return `a response must carry the "id" of the request it answers`
		case id == nil && !fail:
			return `a result's "id" must be the request's string or number id`
		}
		return ""
	}()
	if why == "" {
		return nil
	}
	out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "mcp: invalid request: " + why}})
	return out
}
