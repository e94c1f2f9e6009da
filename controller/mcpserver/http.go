package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/controller"
)

// IdleTimeout closes an MCP session over HTTP that received no request
// this long; a session that opened its run closes the run with it.
const IdleTimeout = time.Hour

// FirstIdleTimeout closes, sooner, an MCP session that sent nothing after
// its initialize but the notifications/initialized notification: it is
// not in use yet, and initializes alone must not hold memory for an hour.
const FirstIdleTimeout = 2 * time.Minute

// Session caps, used when [Caps] leaves them zero. Past one, an
// initialize is 429 too_many saying what to end.
const (
	// DefaultMaxSessionsPerTenant bounds one tenant's MCP sessions over
	// all its runs.
	DefaultMaxSessionsPerTenant = 128
	// MaxSessionsPerRun bounds the MCP sessions of one run.
	MaxSessionsPerRun = 16
)

// Caps bound the sessions of an [HTTP].
type Caps struct {
	// PerTenant is the most sessions of one tenant (Options.Tenant); 0
	// means DefaultMaxSessionsPerTenant, negative unlimited.
	PerTenant int
}

// SessionHeader is the Streamable HTTP session header.
const SessionHeader = "Mcp-Session-Id"

// postHeader carries, from [HTTP] to the call handler, the token of the
// POST a call arrived on, so that a client that drops the POST cancels
// its call. A client's own value is removed.
const postHeader = "X-Berth-Mcp-Post"

// HTTP serves MCP sessions over Streamable HTTP, each bound to one run.
// Its zero value is not usable; call [NewHTTP].
type HTTP struct {
	sdk *mcp.StreamableHTTPHandler
	// stateless serves the requests at StatelessVersion (stateless.go):
	// each is whole in itself, on a server made for it.
	stateless *mcp.StreamableHTTPHandler
	log       *slog.Logger

	caps Caps

	mu       sync.Mutex
	closed   bool
	sessions map[string]*session // by session id
	wg       sync.WaitGroup      // session watchers
	// posts counts the sessions' POSTs in flight, added to only under mu
	// while not closed: Close waits for them before it ends the sessions.
	posts sync.WaitGroup
	// tenants and runs count the sessions open or being opened, by
	// tenant and by run id; a key with none is absent.
	tenants map[string]int
	runs    map[string]int
	// keyed are the runs the run-opening endpoint opened for stateless
	// requests, by tenant and URL parameters (stateless.go).
	keyed map[keyedKey]*keyedRun
}

type session struct {
	run    *controller.Run
	tenant string
	srv    *mcp.Server
	h      *handler // srv's call handler, for the direct path
	// active counts the session's requests in flight, and idle ends the
	// session IdleTimeout (FirstIdleTimeout until inUse) after the last
	// one ended. berth keeps this, not
	// the SDK, because the direct path answers calls the SDK never sees.
	active atomic.Int32
	idle   *time.Timer
	// owned: the session opened the run and closes it when it ends.
	owned bool
	// inUse: the session sent a request besides initialize and
	// notifications/initialized; until then it expires after
	// FirstIdleTimeout.
	inUse atomic.Bool
}

type serverKey struct{}

// NewHTTP returns an empty session table with caps. Close it to end its
// sessions.
func NewHTTP(log *slog.Logger, caps Caps) *HTTP {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if caps.PerTenant == 0 {
		caps.PerTenant = DefaultMaxSessionsPerTenant
	}
	h := &HTTP{log: log, caps: caps, sessions: map[string]*session{}, tenants: map[string]int{}, runs: map[string]int{}, keyed: map[keyedKey]*keyedRun{}}
	server := func(r *http.Request) *mcp.Server {
		s, _ := r.Context().Value(serverKey{}).(*mcp.Server)
		return s
	}
	h.sdk = mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Logger: log})
	h.stateless = mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Logger: log, Stateless: true})
	return h
}

// use counts request r of s in flight until the returned function is
// called; the idle timer runs only while none is. r's body stays as it
// came.
func (s *session) use(r *http.Request) func() {
	s.active.Add(1)
	s.idle.Stop()
	if !s.inUse.Load() && !initializedOnly(r) {
		s.inUse.Store(true)
	}
	return func() {
		if s.active.Add(-1) == 0 {
			if s.inUse.Load() {
				s.idle.Reset(IdleTimeout)
			} else {
				s.idle.Reset(FirstIdleTimeout)
			}
		}
	}
}

// notAMessageBody returns the Invalid Request answer to a POST whose body
// is JSON but not one JSON-RPC message (NotAMessage), which the SDK would
// call a parse error; it puts r's body back. A batch is left to the SDK,
// which accepts one from a client of a protocol version that had them.
func notAMessageBody(r *http.Request) []byte {
	if r.Method != http.MethodPost || r.Body == nil {
		return nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if t := bytes.TrimSpace(body); err != nil || !json.Valid(t) || t[0] == '[' {
		return nil
	}
	return NotAMessage(body)
}

// initializedOnly reports whether r is a POST of the
// notifications/initialized notification alone, which every client sends
// after initialize; it puts r's body back.
func initializedOnly(r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	var msg struct {
		Method string `json:"method"`
		ID     any    `json:"id"`
	}
	return json.Unmarshal(body, &msg) == nil && msg.ID == nil && msg.Method == "notifications/initialized"
}

// expire ends s, idle for IdleTimeout (FirstIdleTimeout before it was in
// use), unless a request came meanwhile.
func (s *session) expire() {
	if s.active.Load() > 0 {
		return
	}
	if ss := s.serverSession(); ss != nil {
		ss.Close() // its watcher forgets it and closes a run it opened
	}
}

// ServeRun serves an MCP request on run, which the caller looked up for
// the request's tenant. A session id that is not one of run's sessions is
// refused as unknown.
//
// A request at StatelessVersion (or later) is served without a session,
// whatever its headers say of one: the URL names the run.
func (h *HTTP) ServeRun(w http.ResponseWriter, r *http.Request, run *controller.Run, opts Options) {
	if Stateless(r) {
		h.serveStateless(w, r, func() (*mcp.Server, bool) {
			if h.directStateless(w, r, run, opts) {
				return nil, false
			}
			srv, _ := newServer(run, opts)
			return srv, true
		})
		return
	}
	sid := r.Header.Get(SessionHeader)
	if sid != "" {
		s := h.session(sid)
		if s == nil || s.run.ID() != run.ID() {
			unknownSession(w, sid)
			return
		}
		defer h.countPost(r)()
		defer s.use(r)()
		if !h.direct(w, r, s) {
			h.serve(w, r, s.srv)
		}
		return
	}
	if !h.reserve(w, opts.Tenant, run.ID()) {
		return
	}
	h.open(w, r, run, opts, false)
}

// ServeOpen serves the endpoint whose sessions open their own run: a
// request without a session id opens one with open (and a session that
// never initializes closes it at once); a request with one is served only
// when lookup (the caller's tenant lookup) still finds the session's run.
//
// A request at StatelessVersion (or later) has no session: its tools/list
// and tools/call are served by the run this endpoint opened for the same
// tenant and the same URL parameters (key), opened by the first such
// request (serveOpenStateless).
func (h *HTTP) ServeOpen(w http.ResponseWriter, r *http.Request, key string, open func() (*controller.Run, error), lookup func(id string) (*controller.Run, error), fail func(error), opts Options) {
	if Stateless(r) {
		h.serveOpenStateless(w, r, key, open, lookup, fail, opts)
		return
	}
	sid := r.Header.Get(SessionHeader)
	if sid != "" {
		s := h.session(sid)
		if s == nil || !s.owned {
			unknownSession(w, sid)
			return
		}
		if _, err := lookup(s.run.ID()); err != nil {
			unknownSession(w, sid)
			return
		}
		defer h.countPost(r)()
		defer s.use(r)()
		if !h.direct(w, r, s) {
			h.serve(w, r, s.srv)
		}
		return
	}
	if r.Method != http.MethodPost {
		writeRPCError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("mcp: %s without an %s header: open a session with an initialize POST first", r.Method, SessionHeader))
		return
	}
	// The tenant's cap first: a refused session opens no run.
	if !h.reserve(w, opts.Tenant, "") {
		return
	}
	run, err := open()
	if err != nil {
		h.unreserve(opts.Tenant, "")
		fail(err)
		return
	}
	h.mu.Lock()
	h.runs[run.ID()]++ // a run of its own: no other session counts on it
	h.mu.Unlock()
	h.open(w, r, run, opts, true)
}

// reserve counts a session being opened for tenant (and run id, unless
// empty), or answers 429 too_many at a cap and reports false. The count
// is given back by unreserve, which end calls for an opened session.
func (h *HTTP) reserve(w http.ResponseWriter, tenant, run string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		writeRPCError(w, http.StatusServiceUnavailable, "shutting_down", "mcp: berth is shutting down: open the session on the next berth")
		return false
	}
	if max := h.caps.PerTenant; max >= 0 && h.tenants[tenant] >= max {
		writeRPCError(w, http.StatusTooManyRequests, "too_many", fmt.Sprintf(
			"mcp: tenant %q has %d MCP sessions open, the most this berth allows (--max-mcp-sessions-per-tenant): end one with DELETE and its %s header, then initialize again; a session that only initialized ends after %s",
			tenant, h.tenants[tenant], SessionHeader, FirstIdleTimeout))
		return false
	}
	if run != "" && h.runs[run] >= MaxSessionsPerRun {
		writeRPCError(w, http.StatusTooManyRequests, "too_many", fmt.Sprintf(
			"mcp: run %s has %d MCP sessions open, the most one run may have: end one with DELETE and its %s header, or reuse an open session, then initialize again",
			run, h.runs[run], SessionHeader))
		return false
	}
	h.tenants[tenant]++
	if run != "" {
		h.runs[run]++
	}
	return true
}

func (h *HTTP) unreserve(tenant, run string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tenants[tenant]--; h.tenants[tenant] <= 0 {
		delete(h.tenants, tenant)
	}
	if run == "" {
		return
	}
	if h.runs[run]--; h.runs[run] <= 0 {
		delete(h.runs, run)
	}
}

// open starts a session on run with the initialize POST r.
func (h *HTTP) open(w http.ResponseWriter, r *http.Request, run *controller.Run, opts Options, owned bool) {
	s := &session{run: run, tenant: opts.Tenant, owned: owned}
	s.idle = time.AfterFunc(FirstIdleTimeout, s.expire)
	var sid string
	opts.sessionID = func() string {
		sid = rand.Text()
		h.mu.Lock()
		h.sessions[sid] = s
		h.mu.Unlock()
		return sid
	}
	s.srv, s.h = newServer(run, opts)
	h.serve(w, r, s.srv)

	// The SDK connected a session (or refused the request); watch it.
	var ss *mcp.ServerSession
	for x := range s.srv.Sessions() {
		ss = x
	}
	h.mu.Lock()
	closed := h.closed
	if ss != nil && !closed {
		h.wg.Add(1)
	}
	h.mu.Unlock()
	if ss == nil || closed {
		if ss != nil {
			ss.Close()
		}
		h.end(sid, s)
		return
	}
	go func() {
		defer h.wg.Done()
		ss.Wait()
		h.end(sid, s)
	}()
}

// end forgets a session, gives back its place under the caps and closes
// the run it opened, unless berth shuts down (Close began).
func (h *HTTP) end(sid string, s *session) {
	s.idle.Stop()
	if sid != "" {
		h.mu.Lock()
		delete(h.sessions, sid)
		h.mu.Unlock()
	}
	h.unreserve(s.tenant, s.run.ID())
	h.mu.Lock()
	shutdown := h.closed
	h.mu.Unlock()
	// At berth's shutdown the controller decides what becomes of the
	// run (Close, or Detach: kept for the next berth, which closes it
	// soon since its session cannot come back), not this session's end.
	if s.owned && !shutdown {
		if err := s.run.Close(); err != nil {
			h.log.Warn("mcp: run of an ended session closed with errors", "run", s.run.ID(), "err", err)
		}
	}
}

// EndRunSession ends session sid when it is one of run id's: the caller
// found that run closed or expired, so the session has nothing left to
// serve.
func (h *HTTP) EndRunSession(id, sid string) {
	s := h.session(sid)
	if s == nil || s.run.ID() != id {
		return
	}
	for ss := range s.srv.Sessions() {
		ss.Close()
	}
}

func (h *HTTP) session(sid string) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[sid]
}

// serve hands r to the SDK's session handler with srv as its server.
func (h *HTTP) serve(w http.ResponseWriter, r *http.Request, srv *mcp.Server) {
	h.serveWith(h.sdk, w, r, srv)
}

// serveWith hands r to sdk with srv as its server. A POST's calls are
// cancelled when its client goes away before they answer.
func (h *HTTP) serveWith(sdk *mcp.StreamableHTTPHandler, w http.ResponseWriter, r *http.Request, srv *mcp.Server) {
	r.Header.Del(postHeader)
	ctx := context.WithValue(r.Context(), serverKey{}, srv)
	var p *post
	if r.Method == http.MethodPost {
		p = newPost()
		r.Header.Set(postHeader, p.token)
		defer p.forget()
	}
	if r.Method == http.MethodGet {
		// The standalone stream lives as long as the session.
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Time{})
		rc.SetWriteDeadline(time.Time{})
	}
	if reply := notAMessageBody(r); reply != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(reply)
		return
	}
	pw := &plainErrors{ResponseWriter: w}
	sdk.ServeHTTP(pw, r.WithContext(ctx))
	pw.finish()
	if p != nil && r.Context().Err() != nil {
		p.cancelAll()
	}
}

// plainErrors turns the SDK's plain-text refusals (a body that is not
// JSON, an unknown method, a bad header) into JSON-RPC error responses
// with the same status, so that every client reads an error it can parse.
type plainErrors struct {
	http.ResponseWriter
	status int
	body   []byte // the plain text, while rewriting
	wrote  bool
}

func (p *plainErrors) WriteHeader(code int) {
	if !p.wrote && code >= 400 && strings.HasPrefix(p.Header().Get("Content-Type"), "text/plain") {
		p.status = code
		p.wrote = true
		return
	}
	p.wrote = true
	p.ResponseWriter.WriteHeader(code)
}

func (p *plainErrors) Write(b []byte) (int, error) {
	if !p.wrote {
		p.WriteHeader(http.StatusOK)
	}
	if p.status != 0 {
		if len(p.body) < maxPlainError {
			p.body = append(p.body, b...)
		}
		return len(b), nil
	}
	return p.ResponseWriter.Write(b)
}

// maxPlainError caps the refusal text kept.
const maxPlainError = 4 << 10

func (p *plainErrors) Unwrap() http.ResponseWriter { return p.ResponseWriter }

func (p *plainErrors) finish() {
	if p.status == 0 {
		return
	}
	msg := strings.TrimSpace(string(p.body))
	code := int64(jsonrpc.CodeInvalidRequest)
	switch {
	case strings.HasPrefix(msg, "malformed payload"):
		code = jsonrpc.CodeParseError
		msg += ": send one JSON-RPC message as a JSON body"
	case strings.Contains(msg, "not handled"):
		code = jsonrpc.CodeMethodNotFound
		msg += ": the methods served are those of MCP's tools feature (server/discover, initialize, ping, tools/list, tools/call, …)"
	}
	p.Header().Del("Content-Length")
	p.Header().Set("Content-Type", "application/json")
	p.Header().Del("X-Content-Type-Options")
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": &jsonrpc.Error{Code: code, Message: "mcp: " + msg}})
	p.ResponseWriter.WriteHeader(p.status)
	p.ResponseWriter.Write(body)
}

// Close ends every session (closing the runs they opened) and waits for
// them.
func (h *HTTP) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	// The calls in flight answer first (at berth's shutdown the controller
	// answers them: Close cancels them, Detach says berth restarts): ending
	// a session ends its standalone stream, and a client whose stream
	// ended loses the answers still to come.
	h.posts.Wait()
	h.mu.Lock()
	var srvs []*mcp.Server
	for _, s := range h.sessions {
		srvs = append(srvs, s.srv)
	}
	h.mu.Unlock()
	for _, srv := range srvs {
		for ss := range srv.Sessions() {
			ss.Close()
		}
	}
	h.wg.Wait()
	return nil
}

// countPost counts r, when it is a POST, until the returned function is
// called, unless Close began.
func (h *HTTP) countPost(r *http.Request) func() {
	if r.Method != http.MethodPost {
		return func() {}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return func() {}
	}
	h.posts.Add(1)
	return h.posts.Done
}

// WriteError answers a request refused before the SDK reads it (a cap,
// a bad header) as a JSON-RPC error without id, whose data carries
// berth's error code and the HTTP status.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	writeRPCError(w, status, code, msg)
}

func unknownSession(w http.ResponseWriter, sid string) {
	writeRPCError(w, http.StatusNotFound, "unknown_session",
		fmt.Sprintf("mcp: no session %.40q on this endpoint: it ended, belongs to another run, or never existed; open a new session with initialize", sid))
}

// writeRPCError answers a request berth refuses before the SDK reads it,
// as a JSON-RPC error response without id.
func writeRPCError(w http.ResponseWriter, status int, code, msg string) {
	data, _ := json.Marshal(ErrorData{Code: code, Status: status})
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: msg, Data: data}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// post is one POST's calls in flight.
type post struct {
	token   string
	mu      sync.Mutex
	cancels map[int]context.CancelFunc
	next    int
}

var posts sync.Map // token → *post

func newPost() *post {
	p := &post{token: rand.Text(), cancels: map[int]context.CancelFunc{}}
	posts.Store(p.token, p)
	return p
}

func (p *post) forget() { posts.Delete(p.token) }

// track adds a call's cancel; the returned function removes it.
func (p *post) track(cancel context.CancelFunc) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.next
	p.next++
	p.cancels[n] = cancel
	return func() {
		p.mu.Lock()
		delete(p.cancels, n)
		p.mu.Unlock()
	}
}

func (p *post) cancelAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cancels {
		c()
	}
}

// cancelOf finds the POST a call arrived on.
func cancelOf(req *mcp.CallToolRequest) (*post, bool) {
	if req.Extra == nil || req.Extra.Header == nil {
		return nil, false
	}
	tok := req.Extra.Header.Get(postHeader)
	if tok == "" {
		return nil, false
	}
	p, ok := posts.Load(tok)
	if !ok {
		return nil, false
	}
	return p.(*post), true
}
