package lsp

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Caps on what a server can make the client keep. A flooding or confused
// server costs bounded memory.
const (
	// MaxDiagnosticFiles is how many documents' diagnostics are kept; the
	// oldest publish is forgotten first.
	MaxDiagnosticFiles = 4096
	// MaxProgressTokens is how many work-done progress tokens are tracked.
	MaxProgressTokens = 256
	// MaxMessages is the size of the ring of recent log and show messages.
	MaxMessages = 200
	// MaxMessageBytes caps the text kept of one message.
	MaxMessageBytes = 4096
	// MaxRegistrations is how many dynamic registrations are kept.
	MaxRegistrations = 1024
)

// DiagnosticSet is the latest publishDiagnostics for one document.
type DiagnosticSet struct {
	URI         string       // as the server spelled it
	Version     *int32       // nil when the server did not say
	Diagnostics []Diagnostic // empty: the document is clean
	Seq         uint64       // arrival order on this connection, from 1
	Received    time.Time
}

// ProgressState is one running work-done progress (begun, not yet ended).
type ProgressState struct {
	Token       string // the token's JSON text
	Title       string
	Message     string
	Percentage  *uint32
	Cancellable bool
	Begun       time.Time
	Updated     time.Time
}

// LogMessage is a message the server sent for the user or the log.
type LogMessage struct {
	Time    time.Time
	Method  string // window/logMessage, window/showMessage, window/showMessageRequest, or "protocol" for our own notes
	Type    MessageType
	Message string
}

type sentMark struct {
	version int32
	seq     uint64
}

// state is everything the server pushed. It is changed only by the reader
// goroutine; waiters block on changed, which is closed and replaced on every
// change.
type state struct {
	mu        sync.Mutex
	changed   chan struct{}
	seq       uint64
	diags     map[string]*DiagnosticSet // canonical URI
	sent      map[string]sentMark       // canonical URI → last version sent
	progress  map[string]*ProgressState // active tokens
	created   map[string]bool           // tokens created, not yet begun
	messages  []LogMessage              // ring
	msgNext   int
	regs      map[string]Registration
	late      uint64
	refreshes uint64
	begun     uint64 // work-done progress begun, ever
}

func (s *state) init() {
	s.changed = make(chan struct{})
	s.diags = make(map[string]*DiagnosticSet)
	s.sent = make(map[string]sentMark)
	s.progress = make(map[string]*ProgressState)
	s.created = make(map[string]bool)
	s.regs = make(map[string]Registration)
}

// wake releases every waiter; they re-check their condition.
func (s *state) wake() {
	s.mu.Lock()
	s.wakeLocked()
	s.mu.Unlock()
}

func (s *state) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *state) publish(p PublishDiagnosticsParams) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := canonicalURI(p.URI)
	if _, ok := s.diags[key]; !ok && len(s.diags) >= MaxDiagnosticFiles {
		oldest := ""
		for k, d := range s.diags {
			if oldest == "" || d.Seq < s.diags[oldest].Seq {
				oldest = k
			}
		}
		delete(s.diags, oldest)
	}
	s.seq++
	s.diags[key] = &DiagnosticSet{URI: p.URI, Version: p.Version, Diagnostics: p.Diagnostics, Seq: s.seq, Received: time.Now()}
	s.wakeLocked()
}

func (s *state) noteSent(uri string, version int32) {
	s.mu.Lock()
	s.sent[canonicalURI(uri)] = sentMark{version: version, seq: s.seq}
	s.mu.Unlock()
}

func (s *state) progressValue(token string, v WorkDoneProgress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	switch v.Kind {
	case "begin":
		delete(s.created, token)
		s.begun++
		if len(s.progress) >= MaxProgressTokens {
			return
		}
		s.progress[token] = &ProgressState{Token: token, Title: clipText(v.Title, MaxMessageBytes), Message: clipText(v.Message, MaxMessageBytes),
			Percentage: v.Percentage, Cancellable: v.Cancellable, Begun: now, Updated: now}
	case "report":
		p, ok := s.progress[token]
		if !ok {
			return
		}
		if v.Message != "" {
			p.Message = clipText(v.Message, MaxMessageBytes)
		}
		if v.Percentage != nil {
			p.Percentage = v.Percentage
		}
		p.Updated = now
	case "end":
		delete(s.progress, token)
		delete(s.created, token)
	default:
		return
	}
	s.wakeLocked()
}

func (s *state) createToken(token string) {
	s.mu.Lock()
	if len(s.created) < MaxProgressTokens {
		s.created[token] = true
	}
	s.mu.Unlock()
}

func (s *state) log(method string, t MessageType, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := LogMessage{Time: time.Now(), Method: method, Type: t, Message: clipText(msg, MaxMessageBytes)}
	if len(s.messages) < MaxMessages {
		s.messages = append(s.messages, m)
	} else {
		s.messages[s.msgNext] = m
	}
	s.msgNext = (s.msgNext + 1) % MaxMessages
	s.wakeLocked()
}

func (s *state) logProtocol(msg string) { s.log("protocol", MessageWarning, msg) }

func (s *state) noteLate() {
	s.mu.Lock()
	s.late++
	s.mu.Unlock()
}

func (s *state) register(regs []Registration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.regs)+len(regs) > MaxRegistrations {
		return fmt.Errorf("more than %d registrations", MaxRegistrations)
	}
	for _, r := range regs {
		s.regs[r.ID] = r
	}
	s.wakeLocked()
	return nil
}

func (s *state) unregister(regs []Registration) {
	s.mu.Lock()
	for _, r := range regs {
		delete(s.regs, r.ID)
	}
	s.wakeLocked()
	s.mu.Unlock()
}

func (s *state) refresh() {
	s.mu.Lock()
	s.refreshes++
	s.wakeLocked()
	s.mu.Unlock()
}

// Diagnostics returns the latest diagnostics published for uri (compared
// after decoding, so any percent-encoding matches).
func (c *Conn) Diagnostics(uri string) (DiagnosticSet, bool) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	d, ok := c.st.diags[canonicalURI(uri)]
	if !ok {
		return DiagnosticSet{}, false
	}
	return *d, true
}

// AllDiagnostics returns the latest diagnostics of every document, sorted by
// URI.
func (c *Conn) AllDiagnostics() []DiagnosticSet {
	return c.PublishedSince(0)
}

// DiagnosticsSeq returns the Seq of the latest publish (0 before any). Pass
// it to [Conn.PublishedSince] or [Conn.WaitPublish] to see only what
// arrives afterwards.
func (c *Conn) DiagnosticsSeq() uint64 {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.seq
}

// PublishedSince returns, sorted by URI, the latest diagnostics of every
// document published after Seq after.
func (c *Conn) PublishedSince(after uint64) []DiagnosticSet {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	var out []DiagnosticSet
	for _, d := range c.st.diags {
		if d.Seq > after {
			out = append(out, *d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out
}

// WaitPublish waits until some document's latest diagnostics have Seq >
// after and satisfy match, and returns them. It fails when ctx ends or the
// connection ends.
func (c *Conn) WaitPublish(ctx context.Context, after uint64, match func(DiagnosticSet) bool) (DiagnosticSet, error) {
	for {
		c.st.mu.Lock()
		best := (*DiagnosticSet)(nil)
		for _, d := range c.st.diags {
			if d.Seq > after && match(*d) && (best == nil || d.Seq < best.Seq) {
				best = d
			}
		}
		changed := c.st.changed
		c.st.mu.Unlock()
		if best != nil {
			return *best, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return DiagnosticSet{}, fmt.Errorf("lsp: no matching diagnostics arrived: %w", ctx.Err())
		case <-c.frames.Done():
			return DiagnosticSet{}, fmt.Errorf("lsp: waiting for diagnostics: %w", c.frames.Err())
		}
	}
}

// WaitDiagnostics waits for diagnostics of uri computed for version (or a
// later one) and returns them. A publish carrying an older version never
// satisfies it. For a server that omits versions, a publish counts when it
// arrived after the version was sent through [Client.DidOpen] or
// [Client.DidChange] (or after WaitDiagnostics was called, for a version the
// Client did not send). A server may publish more than once per version
// (gopls sends syntax errors before type errors); a settle window on top of
// [Conn.WaitPublish] is the caller's choice.
func (c *Conn) WaitDiagnostics(ctx context.Context, uri string, version int32) (DiagnosticSet, error) {
	key := canonicalURI(uri)
	c.st.mu.Lock()
	mark, noted := c.st.sent[key]
	start := c.st.seq
	c.st.mu.Unlock()
	d, err := c.WaitPublish(ctx, 0, func(d DiagnosticSet) bool {
		if canonicalURI(d.URI) != key {
			return false
		}
		if d.Version != nil {
			return *d.Version >= version
		}
		if noted && mark.version >= version {
			return d.Seq > mark.seq
		}
		return d.Seq > start
	})
	if err != nil {
		return d, fmt.Errorf("lsp: diagnostics for %s version %d: %w", uri, version, err)
	}
	return d, nil
}

// Progress returns the work-done progress the server has begun and not
// ended, oldest first.
func (c *Conn) Progress() []ProgressState {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	out := make([]ProgressState, 0, len(c.st.progress))
	for _, p := range c.st.progress {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Begun.Before(out[j].Begun) })
	return out
}

// Indexing reports whether the server has work-done progress running
// (gopls "Loading packages", rust-analyzer "Indexing", …): answers may be
// incomplete until it ends.
func (c *Conn) Indexing() bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return len(c.st.progress) > 0
}

// WaitIdle waits until no work-done progress is running. It returns at once
// when none has begun, so call it after the server had a chance to start its
// work.
func (c *Conn) WaitIdle(ctx context.Context) error {
	for {
		c.st.mu.Lock()
		n := len(c.st.progress)
		changed := c.st.changed
		c.st.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("lsp: the server is still busy (%d progress running): %w", n, ctx.Err())
		case <-c.frames.Done():
			return fmt.Errorf("lsp: waiting for the server to finish indexing: %w", c.frames.Err())
		}
	}
}

// WaitBusy waits until the server has begun work-done progress at least
// once on this connection (at once when it already has): a server that
// indexes in the background begins only after the first document is
// opened, so [Conn.WaitIdle] alone would find it idle before it started.
// It fails when ctx ends first (the server began nothing) or the
// connection ends.
func (c *Conn) WaitBusy(ctx context.Context) error {
	for {
		c.st.mu.Lock()
		n := c.st.begun
		changed := c.st.changed
		c.st.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("lsp: the server began no work-done progress: %w", ctx.Err())
		case <-c.frames.Done():
			return fmt.Errorf("lsp: waiting for the server to begin indexing: %w", c.frames.Err())
		}
	}
}

// Messages returns the recent log and show messages, oldest first (at most
// MaxMessages).
func (c *Conn) Messages() []LogMessage {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if len(c.st.messages) < MaxMessages {
		return append([]LogMessage(nil), c.st.messages...)
	}
	return append(append([]LogMessage(nil), c.st.messages[c.st.msgNext:]...), c.st.messages[:c.st.msgNext]...)
}

// Registrations returns the capabilities the server registered dynamically,
// sorted by method then id.
func (c *Conn) Registrations() []Registration {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	out := make([]Registration, 0, len(c.st.regs))
	for _, r := range c.st.regs {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Method != out[j].Method {
			return out[i].Method < out[j].Method
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Registered reports whether the server registered method dynamically.
func (c *Conn) Registered(method string) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	for _, r := range c.st.regs {
		if r.Method == method {
			return true
		}
	}
	return false
}

// LateResponses counts answers that arrived for requests already given up
// (cancelled or timed out); they were dropped.
func (c *Conn) LateResponses() uint64 {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.late
}

// DiagnosticRefreshes counts workspace/diagnostic/refresh requests: pulled
// diagnostics should be pulled again.
func (c *Conn) DiagnosticRefreshes() uint64 {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.refreshes
}

// handleRequest answers a server→client request. It runs on the reader
// goroutine, so it must not wait on the server.
func (c *Conn) handleRequest(id json.RawMessage, method string, params json.RawMessage) {
	invalid := func(err error) {
		c.reply(id, nil, &ResponseError{Code: CodeInvalidParams, Message: fmt.Sprintf("%s: %v", method, err)})
	}
	switch method {
	case "workspace/configuration":
		var p struct {
			Items []ConfigurationItem `json:"items"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			invalid(err)
			return
		}
		out := make([]any, len(p.Items))
		for i, item := range p.Items {
			out[i] = c.configValue(item.Section)
		}
		c.reply(id, out, nil)
	case "client/registerCapability":
		var p struct {
			Registrations []Registration `json:"registrations"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			invalid(err)
			return
		}
		if err := c.st.register(p.Registrations); err != nil {
			c.reply(id, nil, &ResponseError{Code: CodeRequestFailed, Message: err.Error()})
			return
		}
		c.reply(id, nil, nil)
	case "client/unregisterCapability":
		var p struct {
			Unregisterations []Registration `json:"unregisterations"` // sic, as the spec spells it
			Unregistrations  []Registration `json:"unregistrations"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			invalid(err)
			return
		}
		c.st.unregister(append(p.Unregisterations, p.Unregistrations...))
		c.reply(id, nil, nil)
	case "window/workDoneProgress/create":
		var p struct {
			Token json.RawMessage `json:"token"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			invalid(err)
			return
		}
		c.st.createToken(string(p.Token))
		c.reply(id, nil, nil)
	case "window/showMessageRequest":
		var p struct {
			Type    MessageType `json:"type"`
			Message string      `json:"message"`
		}
		_ = json.Unmarshal(params, &p)
		c.st.log(method, p.Type, p.Message)
		c.reply(id, nil, nil) // no user to pick an action
	case "window/showDocument":
		c.reply(id, map[string]bool{"success": false}, nil)
	case "workspace/applyEdit":
		var p ApplyWorkspaceEditParams
		if err := json.Unmarshal(params, &p); err != nil {
			invalid(err)
			return
		}
		if c.opts.ApplyEdit == nil {
			c.reply(id, ApplyWorkspaceEditResult{FailureReason: "this client does not apply edits the server initiates; make the change with the edit tools or lsp_rename"}, nil)
			return
		}
		c.frames.Go(func(ctx context.Context) { c.reply(id, c.opts.ApplyEdit(ctx, p), nil) })
	case "workspace/workspaceFolders":
		folders := c.workspaceFolders()
		if len(folders) == 0 {
			c.reply(id, nil, nil)
			return
		}
		c.reply(id, folders, nil)
	case "workspace/diagnostic/refresh":
		c.st.refresh()
		c.reply(id, nil, nil)
	case "workspace/codeLens/refresh", "workspace/semanticTokens/refresh", "workspace/inlayHint/refresh",
		"workspace/inlineValue/refresh", "workspace/foldingRange/refresh":
		c.reply(id, nil, nil)
	default:
		c.reply(id, nil, &ResponseError{Code: CodeMethodNotFound, Message: "method not supported by this client: " + clipText(method, 100)})
	}
}

// configValue looks a workspace/configuration section up in Settings.
func (c *Conn) configValue(section string) any {
	settings := c.opts.Settings
	if section == "" {
		if len(settings) == 0 {
			return nil
		}
		return settings
	}
	if v, ok := settings[section]; ok {
		return v
	}
	var cur any = settings
	for _, part := range strings.Split(section, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// handleNotification records what the server pushed.
func (c *Conn) handleNotification(method string, params json.RawMessage) {
	switch method {
	case "textDocument/publishDiagnostics":
		var p PublishDiagnosticsParams
		if err := json.Unmarshal(params, &p); err != nil {
			c.st.logProtocol("dropped malformed publishDiagnostics: " + err.Error())
			return
		}
		c.st.publish(p)
	case "$/progress":
		var p struct {
			Token json.RawMessage `json:"token"`
			Value json.RawMessage `json:"value"`
		}
		var v WorkDoneProgress
		if json.Unmarshal(params, &p) != nil || json.Unmarshal(p.Value, &v) != nil {
			return // partial-result progress or garbage: not ours to track
		}
		c.st.progressValue(string(p.Token), v)
	case "window/logMessage", "window/showMessage":
		var p struct {
			Type    MessageType `json:"type"`
			Message string      `json:"message"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return
		}
		c.st.log(method, p.Type, p.Message)
	}
}

// SetWorkspaceFolders replaces the folders returned for
// workspace/workspaceFolders.
func (c *Conn) SetWorkspaceFolders(folders []WorkspaceFolder) {
	c.mu.Lock()
	c.folders = append([]WorkspaceFolder(nil), folders...)
	c.mu.Unlock()
}

func (c *Conn) workspaceFolders() []WorkspaceFolder {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]WorkspaceFolder(nil), c.folders...)
}
