// Package httpapi serves a [controller.Controller] over HTTP: the /v1
// routes, the operator console (controller/console), /healthz, /readyz,
// /metrics and the OpenAPI document. It holds no tool logic; every call
// goes through [controller.Run.Call], detached from its request (see Calls
// below).
//
// The route table, with the scopes that may use each route (harness,
// operator, metrics; see [Scope]), is written once, in docs/http.md ("HTTP
// API"); openapi.json describes every route and body, the tests of this
// package keep it equal to the mux, and tests/docs_test.go keeps the prose
// table equal to openapi.json.
//
// Every request is authenticated before its route or body is read: its
// bearer token against Credentials, and a token none matches by
// Options.Authenticator when set (a Kubernetes service-account token,
// kubeauth). [MetricsHandler] serves /metrics alone without a token, on a
// listener of its own (berth serve --metrics-addr). A run
// belongs to the tenant whose credential opened it: every route answers
// another tenant's run exactly as a missing one (404 unknown_run), and an
// operator credential of tenant AllTenants sees every run.
//
// A vibe worker's call adds "worker":"<id>","worker_token":"…" (from its
// vibe.spawn event) to the call's body: it then runs at most at the
// surface the worker was spawned from.
//
// The event stream is text/event-stream: each event has an "id:" (per run,
// increasing), an "event:" type (card.opened, card.closed, events.lost, or a
// type another part of the run publishes) and one "data:" line of JSON.
// Without Last-Event-ID it replays every event still kept
// (questions.MaxEvents), then follows live; a comment line is sent every
// KeepAlive. While a client is connected the run counts as having someone
// to ask: ask_user and permission cards are drawn instead of failing
// closed. The stream ends with an "event: closed" when the run closes.
//
// A card's answer is {"choice":[labels…],"text":"…"} or {"skip":true} for a
// question, {"decision":"approve"|"deny"|"allow_run"} for a permission
// request. An answer that does not fit is 400 bad_request and the card
// stays open; a card that is not open is 404 unknown_card.
//
// Calls: every tool call is a call with an id (Berth-Call-Id on each of
// its answers, with Berth-Call-Status). It runs detached from its request,
// bounded by its run's life and Limits.CallWriteTimeout: a client that
// goes away (a proxy's read timeout) does not cancel it. A POST with an
// Idempotency-Key is the same call as an earlier POST of the same tenant,
// run, tool and key: it answers the first call's answer (waiting for it,
// or 202 with its id under respond-async) and never runs the tool again;
// the same key with other arguments is 422 idempotency_mismatch. A call
// that answered 429 or 503 (retry after Retry-After) lets go of its key:
// the retry runs anew. A call of another run or tenant is 404
// unknown_call, as is an ended call after CallKeep or past MaxKeptCalls;
// there is no listing. An ended call answers a poll exactly as the sync
// call would have (200 the result, or its error); one cancelled by DELETE
// answers 409 call_cancelled. Calls live in this server's memory: a
// restarted berth, or another replica that took the run over, does not
// know them.
//
// A tool result with isError is still 200: it is data for the model. Call
// errors are 4xx/5xx with {"error":{"code","message"}}:
//
//	400 bad_request        malformed JSON body, bad arguments (*tools.InputError), bad run spec
//	401 unauthorized       missing or wrong bearer token (with WWW-Authenticate)
//	403 denied             the tool is above the surface's level (tools.ErrDenied), or a worker identity is wrong or above its spawned surface
//	403 missing_scope      the credential lacks the route's scope (a harness token on /metrics, an operator opening a run)
//	403 operator_required  a permission card answered without the operator scope: the operator must answer it (console)
//	403 placement_refused  the placement policy refuses the sandbox (controller.ErrPlacement)
//	403 forbidden_origin   a browser request from another origin (Origin header not this server's)
//	404 unknown_run        no open run of the caller's tenant has that id
//	404 run_expired        the tenant's run was closed after being idle (controller.ErrRunExpired): open a new run
//	404 unknown_tool       the run has no tool of that name
//	404 unknown_card       no open card has that number (answered, skipped, timed out or never opened)
//	404 no_questions       the run has no question port (berth opened it with NoQuestions)
//	404 sandbox_not_found  no container for the reference or conversation (sandbox.ErrNotFound)
//	404 no_workers         the run has no vibe workers (it was not opened with "vibe": true)
//	404 unknown_worker     the run has no worker of that id
//	404 unknown_call       the run has no call of that id: it ended more than CallKeep ago (or past MaxKeptCalls) and was forgotten, or never was
//	404 not_found          no such route
//	405 method_not_allowed
//	409 call_cancelled     the call was cancelled by DELETE before it ended: call the tool again with a new Idempotency-Key
//	409 bad_report         a worker report that does not fit: the worker is not running, already reported its end, or the status is unknown
//	410 sandbox_gone       the run's container stopped, restarted or was removed, or a restarted berth refused to adopt the run (sandbox.ErrGone; the message says why): open a new run
//	413 too_large          the body exceeds MaxBodyBytes
//	421 misdirected        Host is not a loopback name while serving without a token
//	422 idempotency_mismatch the Idempotency-Key was sent before with other arguments (or surface, or worker): send a new key
//	429 too_many           the tenant's cap of open runs or calls in flight (controller.ErrTooMany): close a run or wait; or of streams (Limits.MaxStreamsPerTenant) or MCP sessions: end a stream or DELETE a session; Retry-After TooManyRetry
//	499 cancelled          the call's context was cancelled otherwise (logged only; a client that goes away sees nothing, and its call goes on)
//	500 internal           anything else
//	503 shutting_down      the controller is closing
//	503 auth_unavailable   the bearer token matches no configured token and the Authenticator (TokenReview) could not verify it now: retry after Retry-After
//	503 busy               every connection slot is taken and SpareWaiters requests wait for one already: retry after Retry-After
//	503 sandbox_unavailable the run's container is paused or its engine does not answer (sandbox.ErrUnavailable), also when berth restarted meanwhile: the run is kept, retry after Retry-After
//	503 restarting         berth is shutting down and hands the run over to the next berth on its state directory (controller.ErrRestarting): the run and its kernels are kept; a call in flight is not answered by this berth (what it started goes on), retry after Retry-After
//	503 adopting           berth restarted a moment ago and is still taking the run over from its state directory (controller.ErrAdopting): the run is kept, retry after Retry-After
//	503 run_moving         the run is being handed between berth replicas, or its replica does not answer (controller.ErrMoving): the run is kept, retry after Retry-After
//	504 timeout            the call's deadline passed
//
// 401 and 403 refusals before the body is read close the connection
// without waiting for the body (see refuse); [NewServer] and [Listen] add
// read, header and idle deadlines and a connection cap.
//
// 410 was chosen for sandbox_gone because the condition is permanent for the
// run: berth never restarts a container, so the harness must open a new run.
package httpapi

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/console"
	"berth.dev/berth/controller/mcpserver"
	"berth.dev/berth/questions"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// MaxBodyBytes caps a request body.
const MaxBodyBytes = 8 << 20

// KeepAlive is how often an idle event stream sends a comment line, so
// proxies keep it open and a vanished client is noticed.
const KeepAlive = 15 * time.Second

// Options configure [New].
type Options struct {
	// Credentials are the bearer tokens /v1 and /metrics accept, each
	// with its tenant and scopes (see ParseTokens).
	Credentials []Credential
	// Token is the one-tenant shorthand of a local setup: one more
	// credential, of DefaultTenant, with every scope. With neither Token
	// nor Credentials there is no authentication (every request is
	// DefaultTenant with every scope); then LoopbackOnly should be set.
	Token string
	// CredentialSet, when set, holds the credentials instead of
	// Credentials and Token, and may be replaced while the server runs (a
	// tokens file rewritten: rotation without a restart).
	CredentialSet *CredentialSet
	// LoopbackOnly refuses requests whose Host header is not a loopback
	// name or address (DNS-rebinding defence when serving without a token).
	LoopbackOnly bool
	// Gatherer serves /metrics; nil serves no /metrics route.
	Gatherer prometheus.Gatherer
	// Logger logs requests that fail with 5xx and calls made as a vibe
	// worker; nil discards.
	Logger *slog.Logger
	// Limits are the server's deadlines and caps ([NewServer], [Listen]);
	// the handler uses the write deadlines.
	Limits Limits
	// Peer, with a controller of several replicas (controller.Config
	// Leases), forwards the requests of runs other replicas serve, signed
	// with the replicas' shared key; nil forwards nothing.
	Peer *Peer
	// Version is berth's version, the MCP endpoints' serverInfo.version.
	Version string
	// Authenticator, when set, verifies the bearer tokens that match no
	// credential of Credentials (Kubernetes service-account tokens).
	Authenticator Authenticator
	// Ready are the conditions /readyz checks beyond the server's own
	// shutdown (the run store, the container engines); see [ReadyCheck].
	Ready []ReadyCheck
	// Status is [mcpserver.Options].Status for the MCP sessions served.
	Status func() string
}

type server struct {
	c      *controller.Controller
	opts   Options
	limits Limits
	creds  *CredentialSet
	log    *slog.Logger
	mcp    *mcpserver.HTTP
	peers  *http.Transport // forwarding to other replicas (Options.Peer)
	calls  *callStore      // the tool calls running and the ended ones kept
	// streams counts each tenant's event and MCP streams (fair.go).
	streams streams
	// draining is set when the server's shutdown begins (/readyz).
	draining atomic.Bool
	// ready runs Options.Ready for /readyz.
	ready *readiness
}

// New returns the HTTP handler for c.
func New(c *controller.Controller, opts Options) http.Handler {
	h, _ := build(c, opts)
	return h
}

// build returns the handler and the function that ends its MCP sessions.
func build(c *controller.Controller, opts Options) (http.Handler, func()) {
	s := &server{c: c, opts: opts, limits: opts.Limits.withDefaults(), log: opts.Logger, peers: newPeerTransport(), calls: newCallStore(), ready: newReadiness(opts.Ready)}
	s.streams = streams{max: s.limits.MaxStreamsPerTenant, open: map[string]int{}}
	s.creds = opts.CredentialSet
	if s.creds == nil {
		creds := slices.Clone(opts.Credentials)
		if opts.Token != "" {
			creds = append(creds, TokenCredential(opts.Token, DefaultTenant, Scopes...))
		}
		s.creds = NewCredentialSet(creds)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	const h, op = ScopeHarness, ScopeOperator
	v1 := http.NewServeMux()
	v1.HandleFunc("POST /v1/runs", need(s.openRun, h))
	v1.HandleFunc("GET /v1/runs", need(s.listRuns, h, op))
	v1.HandleFunc("GET /v1/runs/{id}", need(s.owned(s.getRun), h, op))
	v1.HandleFunc("DELETE /v1/runs/{id}", need(s.owned(s.closeRun), h))
	v1.HandleFunc("GET /v1/runs/{id}/tools", need(s.owned(s.listTools), h, op))
	v1.HandleFunc("POST /v1/runs/{id}/tools/{name}", need(s.owned(s.callTool), h))
	v1.HandleFunc("GET /v1/runs/{id}/calls/{call}", need(s.owned(s.getCall), h, op))
	v1.HandleFunc("DELETE /v1/runs/{id}/calls/{call}", need(s.owned(s.cancelCall), h))
	v1.HandleFunc("GET /v1/runs/{id}/events", need(s.stream(s.owned(s.events), false), h, op))
	v1.HandleFunc("GET /v1/runs/{id}/cards", need(s.owned(s.listCards), h, op))
	v1.HandleFunc("GET /v1/runs/{id}/resources", need(s.owned(s.listResources), h, op))
	v1.HandleFunc("POST /v1/runs/{id}/cards/{n}", need(s.owned(s.answerCard), h, op))
	v1.HandleFunc("GET /v1/runs/{id}/workers", need(s.owned(s.listWorkers), h, op))
	v1.HandleFunc("POST /v1/runs/{id}/workers/{worker}", need(s.owned(s.reportWorker), h))

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI) // public: see OpenAPIPath
	mux.HandleFunc("GET /livez", healthz)
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("/v1/", s.authn(methodJSON(v1)))
	// MCP's own transport answers its errors (not the JSON of methodJSON).
	s.mcp = mcpserver.NewHTTP(s.log, mcpserver.Caps{PerTenant: s.limits.MaxMCPSessionsPerTenant})
	mux.Handle("/v1/runs/{id}/mcp", s.authn(need(s.stream(s.owned(s.runMCP), true), h)))
	mux.Handle("/v1/mcp", s.authn(need(s.stream(s.openMCP, true), h)))
	mux.Handle("GET "+console.Path, console.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(console.Path, http.StatusFound))
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", s.authn(need(promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}).ServeHTTP, ScopeMetrics)))
	}
	return s.guard(mux), func() { s.draining.Store(true); s.mcp.Close(); s.peers.CloseIdleConnections() }
}

// guard applies the checks every route shares: no foreign browser
// origins, the loopback Host check, the body cap, and the write deadline
// of short routes (tool calls and the event stream set their own).
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
			refuse(w, http.StatusForbidden, "forbidden_origin", fmt.Sprintf("httpapi: requests from pages of other origins (%s) are refused; call berth from the harness, or use the console berth serves at %s", o, console.Path))
			return
		}
		if s.opts.LoopbackOnly && !loopbackHost(r.Host) {
			refuse(w, http.StatusMisdirectedRequest, "misdirected", fmt.Sprintf("httpapi: host %q is not a loopback name; berth serves without a token only on localhost", r.Host))
			return
		}
		// An error means the connection is not a net/http one (a test's
		// recorder): there is no deadline to set.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether a browser's Origin header names this server
// as the request reached it: the console page berth serves calls the API
// from its own origin; any other page is refused. A DNS-rebound name still
// fails the token check (the token lives in the console origin's session
// storage) or, without a token, the loopback Host check.
func sameOrigin(origin string, r *http.Request) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return r.Host != "" && strings.EqualFold(origin, scheme+"://"+r.Host)
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// methodJSON turns the mux's plain-text 404 and 405 into JSON errors.
func methodJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&statusRewriter{ResponseWriter: w, r: r}, r)
	})
}

type statusRewriter struct {
	http.ResponseWriter
	r        *http.Request
	rewrote  bool
	wroteHdr bool
}

func (w *statusRewriter) WriteHeader(code int) {
	// Our handlers write JSON; only the mux itself writes plain text.
	plain := strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain")
	if !w.wroteHdr && plain && (code == http.StatusMethodNotAllowed || code == http.StatusNotFound) {
		w.rewrote = true
		w.wroteHdr = true
		// No handler read the body: refuse, not to wait for a trickle.
		if code == http.StatusNotFound {
			refuse(w.ResponseWriter, code, "not_found", fmt.Sprintf("httpapi: no route %s %s: the API is under /v1/runs", w.r.Method, w.r.URL.Path))
			return
		}
		refuse(w.ResponseWriter, code, "method_not_allowed",
			fmt.Sprintf("httpapi: %s is not allowed on %s (allowed: %s)", w.r.Method, w.r.URL.Path, w.Header().Get("Allow")))
		return
	}
	w.wroteHdr = true
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (Flush for SSE).
func (w *statusRewriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusRewriter) Write(p []byte) (int, error) {
	if w.rewrote {
		return len(p), nil // drop the mux's plain-text body
	}
	w.wroteHdr = true
	return w.ResponseWriter.Write(p)
}

// openRequest is the body of POST /v1/runs.
type openRequest struct {
	ConversationID string   `json:"conversation_id"`
	Workspace      string   `json:"workspace"`
	Sandbox        string   `json:"sandbox"`
	Mode           string   `json:"mode"`
	Vibe           bool     `json:"vibe"`
	Prewarm        []string `json:"prewarm"`
}

func (s *server) openRun(w http.ResponseWriter, r *http.Request) {
	// Placing a run may start processes in its sandbox: it has the
	// deadline of a call, not of a short route.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.CallWriteTimeout))
	var req openRequest
	if !decode(w, r, &req) {
		return
	}
	run, err := s.c.Open(r.Context(), controller.RunSpec{
		Tenant:         principalOf(r).Tenant,
		ConversationID: req.ConversationID,
		Workspace:      req.Workspace,
		Sandbox:        req.Sandbox,
		Mode:           tools.Surface(req.Mode),
		Vibe:           req.Vibe,
		Prewarm:        req.Prewarm,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/runs/"+run.ID())
	writeJSON(w, http.StatusCreated, run.Info())
}

func (s *server) listRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := s.c.ListStored(r.Context(), principalOf(r).Tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": runs})
}

func (s *server) getRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run.Info())
}

func (s *server) closeRun(w http.ResponseWriter, r *http.Request) {
	// Closing waits for the run's calls and stops everything it started,
	// which may take longer than a short route's deadline.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.CallWriteTimeout))
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := run.Close(); err != nil {
		// The run is gone either way; report what did not close cleanly.
		s.log.Warn("run closed with errors", "run", run.ID(), "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) listTools(w http.ResponseWriter, r *http.Request) {
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	surface := r.URL.Query().Get("surface") // empty: the run's mode
	if _, err := tools.ParseSurface(surface); err != nil {
		s.fail(w, r, err)
		return
	}
	list := run.Tools(tools.Surface(surface))
	if list == nil {
		list = []tools.Info{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": list})
}

// callRequest is the body of POST /v1/runs/{id}/tools/{name}. Worker and
// WorkerToken, when set, make it a vibe worker's call (the worker_id and
// worker_token of its vibe.spawn event).
type callRequest struct {
	Args        json.RawMessage `json:"args"`
	Surface     string          `json:"surface"`
	Worker      string          `json:"worker"`
	WorkerToken string          `json:"worker_token"`
}

func (s *server) callTool(w http.ResponseWriter, r *http.Request) {
	// A call may legitimately run long; its response still has a deadline.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.CallWriteTimeout))
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req callRequest
	if !decode(w, r, &req) {
		return
	}
	name := r.PathValue("name")
	surface := tools.Surface(req.Surface)
	if req.Worker != "" || req.WorkerToken != "" {
		if surface, err = workerSurface(run, req, name); err != nil {
			s.fail(w, r, err)
			return
		}
		s.log.Info("worker call", "run", run.ID(), "worker", req.Worker, "tool", name, "surface", surface)
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if len(key) > MaxIdempotencyKey {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("httpapi: %s is %d bytes long, more than %d: send a shorter key (a UUID)", IdempotencyKeyHeader, len(key), MaxIdempotencyKey))
		return
	}
	c, existing, err := s.startCall(r, run, name, surface, req, key)
	switch {
	case errors.Is(err, errKeyReused):
		writeError(w, http.StatusUnprocessableEntity, "idempotency_mismatch", fmt.Sprintf(
			"httpapi: %s %q was sent with other arguments before (call %s of %s on run %s): one key names one call; send a new key for a new call, or the first call's arguments to get its answer",
			IdempotencyKeyHeader, key, c.id, name, run.ID()))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	if existing {
		s.log.Info("tool call retried with its idempotency key", "run", run.ID(), "tool", name, "call", c.id)
	}
	if preferAsync(r) {
		_, _, st := s.calls.state(c)
		w.Header().Set("Preference-Applied", "respond-async")
		s.writeAccepted(w, c, st)
		return
	}
	// The call runs on when the client goes (a proxy's read timeout): its
	// retry with the same key, or GET .../calls/{call}, gets its answer.
	select {
	case <-c.done:
	case <-r.Context().Done():
		return
	}
	_, ans, _ := s.calls.state(c)
	ans.replay(w, c)
}

// workerSurface checks a call's worker identity and returns the surface
// it runs at: the one asked for, which may not exceed the surface the
// worker was spawned with, or that one.
func workerSurface(run *controller.Run, req callRequest, tool string) (tools.Surface, error) {
	if req.Worker == "" {
		return "", fmt.Errorf("httpapi: worker_token without worker: send the worker_id of the vibe.spawn event as \"worker\": %w", tools.ErrDenied)
	}
	sup := run.Workers()
	if sup == nil {
		return "", fmt.Errorf("httpapi: run %s has no vibe workers, so no call can be worker %s's: %w", run.ID(), req.Worker, tools.ErrDenied)
	}
	spawned, err := sup.Authorize(req.Worker, req.WorkerToken)
	if err != nil {
		return "", fmt.Errorf("httpapi: %s refused: %w: %w", tool, err, tools.ErrDenied)
	}
	asked, err := tools.ParseSurface(req.Surface)
	if err != nil {
		return "", err
	}
	if req.Surface == "" {
		return spawned, nil
	}
	if asked.MaxLevel() > spawned.MaxLevel() {
		return "", fmt.Errorf("httpapi: worker %s was spawned from the %s surface, so it may not call %s on the %s surface: call on %s: %w",
			req.Worker, spawned, tool, asked, spawned, tools.ErrDenied)
	}
	return asked, nil
}

// port returns the question port of the request's run.
func (s *server) port(w http.ResponseWriter, r *http.Request) (*questions.Port, bool) {
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	p := run.Questions()
	if p == nil {
		writeError(w, http.StatusNotFound, "no_questions", fmt.Sprintf("httpapi: run %s has no question port: it has no events and no cards", run.ID()))
		return nil, false
	}
	return p, true
}

// events serves the run's event stream as SSE until the run closes or the
// client goes away.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	p, ok := s.port(w, r)
	if !ok {
		return
	}
	var after uint64
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(h), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("httpapi: Last-Event-ID %q is not an event id: send the id of the last event received, or none to replay what is kept", h))
			return
		}
		after = n
	}
	sub := p.Subscribe(after)
	defer sub.Close()

	// The stream lives as long as the run: no read deadline, and a write
	// deadline renewed for every write, so a client that stops reading
	// is cut off after WriteTimeout.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	flush := func() error {
		rc.SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	io.WriteString(bw, ": connected\n\n")
	if flush() != nil {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(r.Context(), KeepAlive)
		evs, err := sub.Next(ctx)
		cancel()
		switch {
		case err == nil:
			for _, e := range evs {
				if e.ID != 0 {
					fmt.Fprintf(bw, "id: %d\n", e.ID)
				}
				fmt.Fprintf(bw, "event: %s\ndata: %s\n\n", e.Type, e.Data)
			}
		case errors.Is(err, questions.ErrRestarting):
			// berth restarts and the run lives on: the follower follows
			// it again on the next berth, from Last-Event-ID.
			fmt.Fprintf(bw, "event: %s\ndata: {\"retry_after\": %d}\n\n", questions.EventRestarting, controller.RestartingRetry)
			flush()
			return
		case errors.Is(err, questions.ErrClosed):
			io.WriteString(bw, "event: closed\ndata: {}\n\n")
			flush()
			return
		case r.Context().Err() != nil:
			return
		default: // idle for KeepAlive
			io.WriteString(bw, ": keepalive\n\n")
		}
		if flush() != nil {
			return
		}
	}
}

func (s *server) listCards(w http.ResponseWriter, r *http.Request) {
	p, ok := s.port(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cards": p.Cards()})
}

// listResources lists the run's live resources: language servers, kernels,
// the debug session, workers.
func (s *server) listResources(w http.ResponseWriter, r *http.Request) {
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"resources": run.Resources()})
}

func (s *server) answerCard(w http.ResponseWriter, r *http.Request) {
	p, ok := s.port(w, r)
	if !ok {
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("httpapi: card %q is not a card number: use the n of a card from the events or GET /v1/runs/{id}/cards", r.PathValue("n")))
		return
	}
	var a questions.Answer
	if !decode(w, r, &a) {
		return
	}
	// A permission card decides whether a tool call runs: only an
	// operator may answer it, never the credential that made the call.
	// The port checks that under the lock that finds the card (a card
	// that opens after a look here would otherwise be answered by whoever
	// posted); a decision from a credential that may answer no
	// permission card is refused before any card is looked up.
	rights := questions.MayAnswerQuestions
	if principalOf(r).Has(ScopeOperator) {
		rights = questions.Operator
	}
	if a.Decision != "" && rights != questions.Operator {
		s.operatorRequired(w, r, fmt.Sprintf("card %d: a decision answers a permission card", n))
		return
	}
	a.By = principalOf(r).Who() // whatever the body said
	if testHookBeforeAnswer != nil {
		testHookBeforeAnswer(n)
	}
	if err := p.Answer(n, a, rights); err != nil {
		if errors.Is(err, questions.ErrNotAllowed) {
			s.operatorRequired(w, r, fmt.Sprintf("card %d is a permission card", n))
			return
		}
		s.fail(w, r, err)
		return
	}
	out := questions.Answered
	if a.Skip {
		out = questions.Skipped
	}
	writeJSON(w, http.StatusOK, map[string]any{"n": n, "outcome": out})
}

// testHookBeforeAnswer, when a test sets it, runs between reading an
// answer and handing it to the port: where a card may open under a
// caller's feet.
var testHookBeforeAnswer func(n int)

// operatorRequired answers 403 operator_required: what (the card) only an
// operator may answer.
func (s *server) operatorRequired(w http.ResponseWriter, r *http.Request, what string) {
	writeError(w, http.StatusForbidden, "operator_required", fmt.Sprintf(
		"httpapi: %s: the operator must answer it (in the console at %s, with an operator token); this credential (%s) may answer question cards only. Wait for the operator's decision; the tool call returns it",
		what, console.Path, principalOf(r)))
}

// decode reads a JSON body strictly: one object, no unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("extra data after the JSON object")
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large",
			fmt.Sprintf("httpapi: request body exceeds %d bytes: send smaller arguments (write large files in parts)", tooBig.Limit))
		return false
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("empty body")
	}
	writeError(w, http.StatusBadRequest, "bad_request", "httpapi: the request body is not the expected JSON object: "+err.Error())
	return false
}

// fail maps a controller or call error to a status and code.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := classify(err)
	switch code {
	case "run_moving":
		w.Header().Set("Retry-After", strconv.Itoa(controller.MovingRetry))
	case "adopting":
		w.Header().Set("Retry-After", strconv.Itoa(controller.AdoptingRetry))
	case "restarting":
		w.Header().Set("Retry-After", strconv.Itoa(controller.RestartingRetry))
	case "sandbox_unavailable":
		w.Header().Set("Retry-After", strconv.Itoa(int(controller.UnavailableCheckEvery/time.Second)))
	case "too_many":
		w.Header().Set("Retry-After", strconv.Itoa(TooManyRetry))
	}
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeError(w, status, code, err.Error())
}

func classify(err error) (int, string) {
	var in *tools.InputError
	switch {
	case errors.Is(err, controller.ErrRestarting), errors.Is(err, questions.ErrRestarting):
		return http.StatusServiceUnavailable, "restarting"
	case errors.Is(err, controller.ErrUnknownRun):
		return http.StatusNotFound, "unknown_run"
	case errors.Is(err, controller.ErrRunExpired):
		return http.StatusNotFound, "run_expired"
	case errors.Is(err, controller.ErrTooMany):
		return http.StatusTooManyRequests, "too_many"
	case errors.Is(err, controller.ErrPlacement):
		return http.StatusForbidden, "placement_refused"
	case errors.Is(err, tools.ErrUnknownTool):
		return http.StatusNotFound, "unknown_tool"
	case errors.Is(err, questions.ErrNoCard):
		return http.StatusNotFound, "unknown_card"
	case errors.Is(err, questions.ErrClosed):
		return http.StatusNotFound, "unknown_run"
	case errors.Is(err, questions.ErrBadAnswer):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, tools.ErrDenied):
		return http.StatusForbidden, "denied"
	case errors.As(err, &in), errors.Is(err, controller.ErrBadSpec):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, sandbox.ErrUnavailable):
		return http.StatusServiceUnavailable, "sandbox_unavailable"
	case errors.Is(err, sandbox.ErrGone):
		return http.StatusGone, "sandbox_gone"
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound, "sandbox_not_found"
	case errors.Is(err, controller.ErrClosed):
		return http.StatusServiceUnavailable, "shutting_down"
	case errors.Is(err, controller.ErrMoving):
		return http.StatusServiceUnavailable, "run_moving"
	case errors.Is(err, controller.ErrAdopting):
		return http.StatusServiceUnavailable, "adopting"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	case errors.Is(err, context.Canceled):
		return 499, "cancelled"
	}
	return http.StatusInternalServerError, "internal"
}

// errorBody is the JSON shape of every error response.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// workers returns the run's vibe worker supervisor, answering 404 when the
// run has none.
func (s *server) workers(w http.ResponseWriter, r *http.Request) (controller.Workers, bool) {
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	sup := run.Workers()
	if sup == nil {
		writeError(w, http.StatusNotFound, "no_workers", fmt.Sprintf("httpapi: run %s has no vibe workers: open it with \"vibe\": true", run.ID()))
		return nil, false
	}
	return sup, true
}

// listWorkers lists the run's vibe workers.
func (s *server) listWorkers(w http.ResponseWriter, r *http.Request) {
	sup, ok := s.workers(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": sup.Workers()})
}

// reportWorker takes a hosting platform's report about a worker it runs
// for berth's platform runner: {"status": "running"|"done"|"failed",
// "result": "..."}.
func (s *server) reportWorker(w http.ResponseWriter, r *http.Request) {
	sup, ok := s.workers(w, r)
	if !ok {
		return
	}
	var rep struct {
		Status string `json:"status"`
		Result string `json:"result"`
	}
	if !decode(w, r, &rep) {
		return
	}
	switch err := sup.Report(r.PathValue("worker"), rep.Status, rep.Result); {
	case errors.Is(err, controller.ErrUnknownWorker):
		writeError(w, http.StatusNotFound, "unknown_worker", err.Error())
	case err != nil:
		writeError(w, http.StatusConflict, "bad_report", err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]any{"worker": r.PathValue("worker"), "status": rep.Status})
	}
}

// runMCP serves an open run as an MCP server at the URL's surface.
func (s *server) runMCP(w http.ResponseWriter, r *http.Request) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.CallWriteTimeout))
	run, err := s.lookup(r)
	if err != nil {
		// The run closed under a session (not merely another tenant's):
		// the session ends too.
		if sid := r.Header.Get(mcpserver.SessionHeader); sid != "" {
			if _, gerr := s.c.Get(r.PathValue("id")); gerr != nil {
				s.mcp.EndRunSession(r.PathValue("id"), sid)
			}
		}
		s.fail(w, r, err)
		return
	}
	surface, err := tools.ParseSurface(r.URL.Query().Get("surface"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.URL.Query().Get("surface") == "" {
		surface = ""
	}
	s.mcp.ServeRun(w, r, run, mcpserver.Options{Surface: surface, Classify: classify, Logger: s.log, Tenant: principalOf(r).Tenant, Principal: principalID(r), Version: s.opts.Version, Status: s.opts.Status})
}

// principalID names r's credential (its token's hash) for the MCP
// server, which binds a card's requestState to it.
func principalID(r *http.Request) string {
	p := principalOf(r)
	return hex.EncodeToString(p.Hash[:])
}

// splitList splits a comma-separated query value; empty is none.
func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// openMCP serves MCP sessions that each open a run of the caller's tenant
// from the URL's parameters and close it when the session ends.
func (s *server) openMCP(w http.ResponseWriter, r *http.Request) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.CallWriteTimeout))
	q := r.URL.Query()
	tenant := principalOf(r).Tenant
	open := func() (*controller.Run, error) {
		return s.c.Open(r.Context(), controller.RunSpec{
			Tenant:         tenant,
			ConversationID: q.Get("conversation_id"),
			Workspace:      q.Get("workspace"),
			Sandbox:        q.Get("sandbox"),
			Mode:           tools.Surface(q.Get("mode")),
			Prewarm:        splitList(q.Get("prewarm")),
			Session:        true,
		})
	}
	lookup := func(id string) (*controller.Run, error) { return s.c.Lookup(tenant, id) }
	// The run's parameters name the run of stateless (2026-07-28) requests.
	key := url.Values{}
	for _, p := range []string{"conversation_id", "workspace", "sandbox", "mode", "prewarm"} {
		if v, ok := q[p]; ok {
			key[p] = v
		}
	}
	s.mcp.ServeOpen(w, r, key.Encode(), open, lookup, func(err error) { s.fail(w, r, err) }, mcpserver.Options{Classify: classify, Logger: s.log, Tenant: tenant, Principal: principalID(r), Version: s.opts.Version, Status: s.opts.Status})
}
