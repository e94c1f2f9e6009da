package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/controller"
)

// Stateless requests (protocol StatelessVersion, 2026-07-28). Such a
// request is whole in itself: no initialize came before it and no session
// id names it; its protocol version, the client's capabilities and its
// identity are in its _meta (and the version in the Mcp-Protocol-Version
// header). berth serves each on a server made for the request, through
// the SDK's stateless Streamable HTTP handler, which checks the headers
// (Mcp-Method, Mcp-Name, the version against _meta), answers
// server/discover and sets every result's resultType. Nothing of the
// client outlives the request: on /v1/runs/{id}/mcp the URL names the run
// (the caller looked it up for the request's tenant, so another tenant's
// run answers like a missing one), and on /v1/mcp the tenant and the URL's
// parameters do (serveOpenStateless). Elicitation is not sent to such a
// client (the protocol has no server-to-client request): ask_user and
// permission cards fail closed for it, as for a client without
// elicitation, and stay on the run's event stream for the operator.

// Stateless reports whether r is a request of the stateless protocol: its
// Mcp-Protocol-Version header names StatelessVersion or later, or it is a
// POST of one request whose _meta names a protocol version or whose
// method is server/discover. r's body stays as it came.
func Stateless(r *http.Request) bool {
	if v := r.Header.Get("Mcp-Protocol-Version"); v >= StatelessVersion && v < "3" {
		return true
	}
	method, meta := peek(r)
	return method == "server/discover" || meta
}

// peek reads the method of r's body, when it is one JSON-RPC request, and
// whether its params' _meta names a protocol version; it puts the body
// back.
func peek(r *http.Request) (method string, metaVersion bool) {
	if r.Method != http.MethodPost || r.Body == nil {
		return "", false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return "", false
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return "", false
	}
	_, ok := msg.Params.Meta["io.modelcontextprotocol/protocolVersion"]
	return msg.Method, ok
}

// serveStateless serves the stateless request r on the server server
// makes, unless berth shuts down.
func (h *HTTP) serveStateless(w http.ResponseWriter, r *http.Request, server func() (*mcp.Server, bool)) {
	done := h.countPost(r)
	defer done()
	if h.isClosed() {
		writeRPCError(w, http.StatusServiceUnavailable, "shutting_down", "mcp: berth is shutting down: send the request again; another berth answers it")
		return
	}
	srv, ok := server()
	if !ok {
		return
	}
	h.serveWith(h.stateless, w, r, srv)
}

func (h *HTTP) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// keyedKey names a run the run-opening endpoint opened for stateless
// requests: the tenant and the URL's parameters, as the caller encodes
// them.
type keyedKey struct{ tenant, params string }

// keyedRun is a run opened, or being opened, for a keyedKey.
type keyedRun struct {
	ready chan struct{} // closed once id or err is set
	id    string
	err   error
}

// serveOpenStateless serves a stateless request of the run-opening
// endpoint. server/discover and the other methods that need no run are
// answered without one. tools/list and tools/call go to the run of key
// (the URL's parameters) for opts.Tenant: the one an earlier request
// opened while lookup still finds it, else a new one opened with open.
// Its id is in each result's _meta (MetaRun). A stateless client never
// says it has left, so the run ends by the controller's idle expiry (or
// DELETE /v1/runs/{id}); a tenant has at most its session cap
// (Caps.PerTenant) of such runs.
func (h *HTTP) serveOpenStateless(w http.ResponseWriter, r *http.Request, key string, open func() (*controller.Run, error), lookup func(id string) (*controller.Run, error), fail func(error), opts Options) {
	h.serveStateless(w, r, func() (*mcp.Server, bool) {
		if method, _ := peek(r); method != "tools/list" && method != "tools/call" {
			return newBareServer(opts, "berth: the tools of one conversation's sandbox. On this endpoint (/v1/mcp) tools/list and tools/call are served by a run opened from the URL's parameters for your credential, and reused by every later request with the same URL; the run's id is in each result's _meta \""+MetaRun+"\" (/v1/runs/{id}/mcp serves it too)."), true
		}
		run, err := h.keyedRun(w, r, keyedKey{opts.Tenant, key}, open, lookup)
		if err != nil {
			fail(err)
			return nil, false
		}
		if run == nil {
			return nil, false // refused at the cap
		}
		opts.announceRun = true
		if h.directStateless(w, r, run, opts) {
			return nil, false
		}
		srv, _ := newServer(run, opts)
		return srv, true
	})
}

// keyedRun is the run of k: the one opened for it while lookup finds it,
// else one opened now with open. Concurrent first requests of k open one
// run. At the tenant's cap it answers 429 and returns nil, nil.
func (h *HTTP) keyedRun(w http.ResponseWriter, r *http.Request, k keyedKey, open func() (*controller.Run, error), lookup func(id string) (*controller.Run, error)) (*controller.Run, error) {
	for {
		h.mu.Lock()
		e := h.keyed[k]
		if e == nil {
			if !h.keyedRoomLocked(k.tenant, lookup) {
				h.mu.Unlock()
				writeRPCError(w, http.StatusTooManyRequests, "too_many", fmt.Sprintf(
					"mcp: tenant %q has %d runs opened by /v1/mcp for stateless requests, the most this berth allows (--max-mcp-sessions-per-tenant): close one with DELETE /v1/runs/{id} (its id is in the _meta %q of its results), or use /v1/runs/{id}/mcp",
					k.tenant, h.caps.PerTenant, MetaRun))
				return nil, nil
			}
			e = &keyedRun{ready: make(chan struct{})}
			h.keyed[k] = e
			h.mu.Unlock()
			run, err := open()
			h.mu.Lock()
			if err != nil {
				e.err = err
				delete(h.keyed, k)
			} else {
				e.id = run.ID()
			}
			close(e.ready)
			h.mu.Unlock()
			return run, err
		}
		h.mu.Unlock()
		select {
		case <-e.ready:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		if e.err != nil {
			return nil, e.err
		}
		if run, err := lookup(e.id); err == nil {
			return run, nil
		}
		// Closed or expired: forget it, then open another.
		h.mu.Lock()
		if h.keyed[k] == e {
			delete(h.keyed, k)
		}
		h.mu.Unlock()
	}
}

// keyedRoomLocked reports whether tenant may have one more keyed run,
// first forgetting its entries whose run lookup no longer finds. h.mu is
// held.
func (h *HTTP) keyedRoomLocked(tenant string, lookup func(id string) (*controller.Run, error)) bool {
	max := h.caps.PerTenant
	if max < 0 {
		return true
	}
	n := 0
	for k, e := range h.keyed {
		if k.tenant != tenant {
			continue
		}
		select {
		case <-e.ready:
			if _, err := lookup(e.id); err != nil {
				delete(h.keyed, k)
				continue
			}
		default:
		}
		n++
	}
	return n < max
}
