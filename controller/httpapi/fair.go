package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"berth.dev/berth/controller/mcpserver"
)

// streams counts each tenant's long-lived streams (event streams and MCP
// GET streams) against Limits.MaxStreamsPerTenant, apart from the
// connection cap, so that one tenant cannot hold every connection.
type streams struct {
	max int // negative: unlimited

	mu   sync.Mutex
	open map[string]int // by tenant; a tenant with none is absent
}

// take counts one more stream of tenant, or reports false at the cap.
// The returned function gives it back.
func (s *streams) take(tenant string) (func(), int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.open[tenant]
	if s.max >= 0 && n >= s.max {
		return nil, n, false
	}
	s.open[tenant] = n + 1
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[tenant]--; s.open[tenant] <= 0 {
				delete(s.open, tenant)
			}
		})
	}, n, true
}

// stream serves a GET of h as one of the tenant's streams: past the
// tenant's cap it is 429 too_many, saying what to end. Other methods are
// served as they are (an MCP POST's stream is bounded by its call).
// An MCP endpoint's refusal is a JSON-RPC error (mcp), like its other
// errors.
func (s *server) stream(h http.HandlerFunc, mcp bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			h(w, r)
			return
		}
		p := principalOf(r)
		release, n, ok := s.streams.take(p.Tenant)
		if !ok {
			msg := fmt.Sprintf("httpapi: tenant %q has %d streams open, the most this berth allows (--max-streams-per-tenant): end one first — close a GET /v1/runs/{id}/events stream, or an MCP session's GET stream (or DELETE the session) — then retry",
				p.Tenant, n)
			w.Header().Set("Retry-After", strconv.Itoa(TooManyRetry))
			if mcp {
				mcpserver.WriteError(w, http.StatusTooManyRequests, "too_many", msg)
			} else {
				writeError(w, http.StatusTooManyRequests, "too_many", msg)
			}
			return
		}
		defer release()
		h(w, r)
	}
}

// healthz answers 200 "ok" while the process serves HTTP at all: the
// liveness probe.
func healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok")
}

// readyz answers 200 "ready" while the server takes new work, and 503
// "shutting down" once its shutdown began (the readiness probe: a load
// balancer stops sending requests before the listener closes).
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "shutting down")
		return
	}
	if n := s.c.Adopting(); n > 0 {
		// Ready: the other runs are served, and these answer 503 adopting.
		fmt.Fprintf(w, "ready; adopting %d stored run(s)", n)
		return
	}
	io.WriteString(w, "ready")
}
