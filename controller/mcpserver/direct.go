package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/controller"
)

// The direct path: a POST that carries one tools/call of an initialized
// session, whose answer needs nothing of the session's stream — no
// progress token, no card this client is to answer as elicitation — is
// answered by berth itself, as an application/json response (which
// Streamable HTTP allows for any request), instead of going through the
// SDK's session machinery: its per-message goroutines, channels and event
// stream made a trivial call over MCP cost twice one over /v1 (tests/mcp
// BenchmarkTrivialCall). Everything else — initialize, tools/list, calls
// with a progress token or that may elicit, batches, notifications, a
// request the SDK would refuse (a wrong header, no session) — goes to the
// SDK exactly as before. The call itself is the same: handler.call's run
// call, result and error mapping.

// directRequest is what the direct path reads of a POST's body.
type directRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// direct answers r when it is a call the direct path may answer, and says
// whether it did; when it did not, r's body is as it came.
func (h *HTTP) direct(w http.ResponseWriter, r *http.Request, s *session) bool {
	if r.Method != http.MethodPost || !directHeaders(r, "") {
		return false
	}
	ss := s.serverSession()
	if ss == nil || ss.InitializeParams() == nil {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body)) // the SDK reads it when this path does not answer
	if err != nil {
		return false
	}
	var req directRequest
	if err := json.Unmarshal(body, &req); err != nil || req.JSONRPC != "2.0" || req.Method != "tools/call" ||
		req.Params == nil || req.Params.Meta != nil || !plainID(req.ID) {
		return false
	}
	name := req.Params.Name
	if canElicit(ss) && (name == "ask_user" || s.h.opts.ClientIsOperator) {
		return false
	}
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	id := string(req.ID)
	ctx, cancel := context.WithCancel(r.Context()) // a client that drops the POST cancels the call
	defer cancel()
	defer s.h.trackDirect(id, cancel)()
	res, err := s.h.run.Call(ctx, s.h.opts.Surface, name, args)
	out := map[string]any{"jsonrpc": "2.0", "id": req.ID}
	switch {
	case err == nil:
		out["result"] = Result(res)
	default:
		if r := s.h.inputErrorResult(name, err); r != nil {
			out["result"] = r
		} else {
			out["error"] = s.h.callError(name, err)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID,
			"error": &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "mcp: encoding the result: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return true
}

// directHeaders reports whether r's headers are those the SDK accepts
// for a call: a JSON body, both response types accepted, and a protocol
// version header naming version, or when version is empty one of the
// versions with sessions this server negotiates.
func directHeaders(r *http.Request, version string) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	// The SDK's DNS rebinding protection: a request that came to a
	// loopback address naming another host is the SDK's to refuse.
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && loopback(la.String()) && !loopback(r.Host) {
		return false
	}
	var jsonOK, streamOK bool
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			switch strings.TrimSpace(mt) {
			case "application/json":
				jsonOK = true
			case "text/event-stream":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	v := r.Header.Get("Mcp-Protocol-Version")
	if version != "" {
		return jsonOK && streamOK && v == version
	}
	return jsonOK && streamOK && v < StatelessVersion && slices.Contains(ProtocolVersions, v)
}

// loopback reports whether addr (a host, or host:port) is a loopback
// address or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// plainID reports whether id is a JSON-RPC request id: a string or a
// number.
func plainID(id json.RawMessage) bool {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return false
	}
	switch id[0] {
	case '"':
		var s string
		return json.Unmarshal(id, &s) == nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		return json.Unmarshal(id, &n) == nil
	}
	return false
}

// trackDirect registers the cancel of a direct call with JSON-RPC id (as
// encoded), for notifications/cancelled; the returned function forgets it.
func (h *handler) trackDirect(id string, cancel context.CancelFunc) func() {
	id = canonicalID(id)
	h.directMu.Lock()
	if h.direct == nil {
		h.direct = map[string]context.CancelFunc{}
	}
	h.direct[id] = cancel
	h.directMu.Unlock()
	return func() {
		h.directMu.Lock()
		delete(h.direct, id)
		h.directMu.Unlock()
	}
}

// cancelDirect cancels the direct call with JSON-RPC id (as encoded), if
// one is in flight.
func (h *handler) cancelDirect(id string) {
	id = canonicalID(id)
	h.directMu.Lock()
	cancel := h.direct[id]
	h.directMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// canonicalID makes a number id and the same number decoded and encoded
// again (9, 9.0) one key.
func canonicalID(id string) string {
	var v any
	if json.Unmarshal([]byte(id), &v) != nil {
		return id
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// serverSession is the SDK's session of s, once it connected.
func (s *session) serverSession() *mcp.ServerSession {
	for ss := range s.srv.Sessions() {
		return ss
	}
	return nil
}

// directStateless is the direct path of a stateless request (protocol
// StatelessVersion) on run: one plain tools/call — no progress token, no
// requestState, no card this client is to answer through a round trip —
// whose headers and _meta are what the SDK's stateless handler accepts
// (Mcp-Method and Mcp-Name naming the call, the version header equal to
// _meta's, the client's capabilities given) is answered by berth as
// application/json, with resultType and serverInfo as the SDK would set
// them, without a server and an ephemeral session made for it. It reports
// whether it answered; when it did not, r's body is as it came and the SDK
// serves r.
func (h *HTTP) directStateless(w http.ResponseWriter, r *http.Request, run *controller.Run, opts Options) bool {
	if r.Method != http.MethodPost || !directHeaders(r, StatelessVersion) || r.Header.Get("Mcp-Method") != "tools/call" {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	var req directRequest
	if err := json.Unmarshal(body, &req); err != nil || req.JSONRPC != "2.0" || req.Method != "tools/call" ||
		req.Params == nil || !plainID(req.ID) || req.Params.Name == "" || r.Header.Get("Mcp-Name") != req.Params.Name {
		return false
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(req.Params.Meta, &meta) != nil {
		return false
	}
	var version string
	var caps struct {
		Elicitation json.RawMessage `json:"elicitation"`
	}
	if json.Unmarshal(meta["io.modelcontextprotocol/protocolVersion"], &version) != nil || version != r.Header.Get("Mcp-Protocol-Version") ||
		json.Unmarshal(meta["io.modelcontextprotocol/clientCapabilities"], &caps) != nil || meta["progressToken"] != nil {
		return false
	}
	for k := range meta { // anything else the SDK reads (a log level, …) goes to it
		switch k {
		case "io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities", "io.modelcontextprotocol/clientInfo":
		default:
			return false
		}
	}
	opts = opts.withDefaults()
	name := req.Params.Name
	if caps.Elicitation != nil && string(caps.Elicitation) != "null" && (name == "ask_user" || opts.ClientIsOperator) {
		return false
	}
	var retry struct {
		Params struct {
			RequestState   json.RawMessage `json:"requestState"`
			InputResponses json.RawMessage `json:"inputResponses"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &retry) != nil || retry.Params.RequestState != nil || retry.Params.InputResponses != nil {
		return false
	}
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	hd := &handler{run: run, opts: opts}
	ctx, cancel := context.WithCancel(r.Context()) // a client that drops the POST cancels the call
	defer cancel()
	tres, cerr := run.Call(ctx, opts.Surface, name, args)
	res, err := hd.finish(name, tres, cerr)
	out := map[string]any{"jsonrpc": "2.0", "id": req.ID}
	if err != nil {
		out["error"] = err
	} else {
		res.Meta = mcp.Meta{"io.modelcontextprotocol/serverInfo": &mcp.Implementation{Name: ServerName, Version: opts.Version}}
		if opts.announceRun {
			res.Meta[MetaRun] = run.ID()
		}
		out["result"] = withResultType(res, "complete")
	}
	b, err := json.Marshal(out)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID,
			"error": &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "mcp: encoding the result: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return true
}
