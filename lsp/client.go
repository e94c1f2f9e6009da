package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"sync"
	"time"

	"berth.dev/berth/framing"
)

// Deadlines of the lifecycle steps. Each bounds its step even when the
// caller's context allows more; a shorter caller deadline wins.
const (
	// InitializeTimeout bounds the initialize request (a cold gopls on a big
	// module may take a minute).
	InitializeTimeout = 120 * time.Second
	// ShutdownTimeout bounds the shutdown request; gopls is known to hang
	// here (golang/vscode-go#1896).
	ShutdownTimeout = 2 * time.Second
	// ExitTimeout bounds writing the exit notification.
	ExitTimeout = time.Second
	// ExitWait is how long Shutdown lets the server close its output after
	// exit before closing the stream itself.
	ExitWait = time.Second
)

// Client is a language-server client: a [Conn] plus the initialize
// handshake, a table of open documents, typed queries and shutdown. Its
// methods are safe for concurrent use.
type Client struct {
	*Conn

	syncSem chan struct{} // one document notification queued at a time; see lockSync

	mu     sync.Mutex // guards the fields below; never held across I/O
	docs   map[string]*Document
	init   *InitializeResult
	rawCap json.RawMessage
}

// Document is an open document as last sent to the server.
type Document struct {
	URI        string
	LanguageID string
	Version    int32
	Text       string
}

// NewClient starts a client over rw; it takes ownership of rw as [NewConn]
// does. Call [Client.Initialize] next.
func NewClient(rw io.ReadWriteCloser, opts ConnOptions) *Client {
	return &Client{Conn: NewConn(rw, opts), syncSem: make(chan struct{}, 1), docs: make(map[string]*Document)}
}

// InitOptions configure [Client.Initialize].
type InitOptions struct {
	RootURI          string            // the project root, a file URI
	WorkspaceFolders []WorkspaceFolder // default: RootURI alone
	ClientName       string            // default "berth"
	ClientVersion    string
	// InitializationOptions is the server-specific initializationOptions
	// value (for example gopls settings).
	InitializationOptions any
	// Capabilities replaces [DefaultCapabilities] when non-nil.
	Capabilities map[string]any
}

// DefaultCapabilities returns the client capabilities Initialize sends:
// hover in markdown and plain text; definition, typeDefinition,
// implementation and declaration with link support; references;
// hierarchical document symbols; workspace symbols; code action literals;
// rename with prepareSupport; call hierarchy; publishDiagnostics with versions; pull
// diagnostics; work-done progress; workspace configuration and folders;
// dynamically registered didChangeWatchedFiles; workspace edits with
// documentChanges and create/rename/delete; positions in UTF-8 or UTF-16.
// applyEdit says whether workspace/applyEdit requests are honoured.
func DefaultCapabilities(applyEdit bool) map[string]any {
	type m = map[string]any
	kinds := make([]int, 26)
	for i := range kinds {
		kinds[i] = i + 1
	}
	link := func() m { return m{"linkSupport": true} }
	return m{
		"general": m{"positionEncodings": []string{"utf-8", "utf-16"}},
		"textDocument": m{
			"synchronization": m{"didSave": true, "dynamicRegistration": false},
			"publishDiagnostics": m{
				"relatedInformation":     true,
				"versionSupport":         true,
				"tagSupport":             m{"valueSet": []int{1, 2}},
				"codeDescriptionSupport": true,
				"dataSupport":            true,
			},
			"diagnostic":     m{"dynamicRegistration": true, "relatedDocumentSupport": true},
			"hover":          m{"contentFormat": []string{"markdown", "plaintext"}},
			"definition":     link(),
			"typeDefinition": link(),
			"implementation": link(),
			"declaration":    link(),
			"references":     m{},
			"documentSymbol": m{"hierarchicalDocumentSymbolSupport": true, "symbolKind": m{"valueSet": kinds}},
			"codeAction": m{
				"codeActionLiteralSupport": m{"codeActionKind": m{"valueSet": []string{
					"", "quickfix", "refactor", "refactor.extract", "refactor.inline", "refactor.rewrite",
					"source", "source.organizeImports", "source.fixAll"}}},
				"isPreferredSupport": true,
				"disabledSupport":    true,
				"dataSupport":        true,
				"resolveSupport":     m{"properties": []string{"edit"}},
			},
			"rename":        m{"prepareSupport": true, "prepareSupportDefaultBehavior": 1},
			"callHierarchy": m{},
		},
		"workspace": m{
			"applyEdit": applyEdit,
			"workspaceEdit": m{
				"documentChanges":    true,
				"resourceOperations": []string{"create", "rename", "delete"},
				"failureHandling":    "abort",
			},
			"configuration":          true,
			"workspaceFolders":       true,
			"didChangeConfiguration": m{"dynamicRegistration": true},
			"didChangeWatchedFiles":  m{"dynamicRegistration": true, "relativePatternSupport": true},
			"symbol":                 m{"symbolKind": m{"valueSet": kinds}},
			"diagnostics":            m{"refreshSupport": true},
		},
		"window": m{"workDoneProgress": true, "showMessage": m{}},
	}
}

// Initialize sends initialize and then initialized, and keeps the server's
// capabilities. It is bounded by [InitializeTimeout] and ctx.
func (c *Client) Initialize(ctx context.Context, opts InitOptions) (*InitializeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, InitializeTimeout)
	defer cancel()
	folders := opts.WorkspaceFolders
	if len(folders) == 0 && opts.RootURI != "" {
		name := opts.RootURI
		if p, err := URIPath(opts.RootURI); err == nil {
			name = path.Base(p)
		}
		folders = []WorkspaceFolder{{URI: opts.RootURI, Name: name}}
	}
	if len(c.Conn.workspaceFolders()) == 0 {
		c.SetWorkspaceFolders(folders)
	}
	caps := opts.Capabilities
	if caps == nil {
		caps = DefaultCapabilities(c.opts.ApplyEdit != nil)
	}
	name := opts.ClientName
	if name == "" {
		name = "berth"
	}
	params := InitializeParams{
		ClientInfo:            &ClientInfo{Name: name, Version: opts.ClientVersion},
		InitializationOptions: opts.InitializationOptions,
		Capabilities:          caps,
		WorkspaceFolders:      folders,
	}
	if opts.RootURI != "" {
		params.RootURI = &opts.RootURI
	}
	var raw json.RawMessage
	if err := c.Call(ctx, "initialize", params, &raw); err != nil {
		return nil, err
	}
	var res InitializeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("lsp: initialize: the server's answer is not an InitializeResult: %w", err)
	}
	var capsOnly struct {
		Capabilities json.RawMessage `json:"capabilities"`
	}
	_ = json.Unmarshal(raw, &capsOnly)
	c.mu.Lock()
	c.init = &res
	c.rawCap = capsOnly.Capabilities
	c.mu.Unlock()
	if err := c.Notify(ctx, "initialized", struct{}{}); err != nil {
		return nil, err
	}
	return &res, nil
}

// Capabilities returns the server's static capabilities (zero before
// Initialize).
func (c *Client) Capabilities() ServerCapabilities {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.init == nil {
		return ServerCapabilities{}
	}
	return c.init.Capabilities
}

// RawCapabilities returns the server's capabilities as sent, for fields
// [ServerCapabilities] does not decode.
func (c *Client) RawCapabilities() json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rawCap
}

// ServerInfo returns the server's name and version, when it sent them.
func (c *Client) ServerInfo() *ServerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.init == nil {
		return nil
	}
	return c.init.ServerInfo
}

// Supports reports whether the server announced method statically or
// registered it dynamically.
func (c *Client) Supports(method string) bool {
	return c.Capabilities().Supports(method) || c.Registered(method)
}

// PositionEncoding returns the negotiated position encoding: "utf-8",
// "utf-32" or (the default) "utf-16".
func (c *Client) PositionEncoding() string {
	if e := c.Capabilities().PositionEncoding; e != "" {
		return e
	}
	return "utf-16"
}

// lockSync serialises document notifications, so versions reach the
// server in order, without holding a mutex across I/O: waiting for the turn
// honours ctx.
func (c *Client) lockSync(ctx context.Context) error {
	select {
	case c.syncSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.Done():
		return c.Err()
	}
}

func (c *Client) unlockSync() { <-c.syncSem }

// DidOpen opens a document at version 1 and returns that version.
func (c *Client) DidOpen(ctx context.Context, uri, languageID, text string) (int32, error) {
	if err := c.lockSync(ctx); err != nil {
		return 0, fmt.Errorf("lsp: didOpen %s: %w", uri, err)
	}
	written, err := c.didOpenLocked(ctx, uri, languageID, text)
	c.unlockSync()
	if err != nil {
		return 0, err
	}
	return 1, c.waitWritten(ctx, "textDocument/didOpen", written)
}

func (c *Client) didOpenLocked(ctx context.Context, uri, languageID, text string) (*framing.Queued, error) {
	key := canonicalURI(uri)
	c.mu.Lock()
	_, open := c.docs[key]
	c.mu.Unlock()
	if open {
		return nil, fmt.Errorf("lsp: didOpen %s: the document is already open; send DidChange, or DidClose first", uri)
	}
	c.st.noteSent(uri, 1)
	written, err := c.queueNotify(ctx, "textDocument/didOpen", map[string]any{"textDocument": TextDocumentItem{URI: uri, LanguageID: languageID, Version: 1, Text: text}})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.docs[key] = &Document{URI: uri, LanguageID: languageID, Version: 1, Text: text}
	c.mu.Unlock()
	return written, nil
}

// DidChange replaces an open document's text (a full-text change, which
// every sync kind accepts), bumps its version and returns the new version.
func (c *Client) DidChange(ctx context.Context, uri, text string) (int32, error) {
	if err := c.lockSync(ctx); err != nil {
		return 0, fmt.Errorf("lsp: didChange %s: %w", uri, err)
	}
	version, written, err := c.didChangeLocked(ctx, uri, text)
	c.unlockSync()
	if err != nil {
		return 0, err
	}
	return version, c.waitWritten(ctx, "textDocument/didChange", written)
}

func (c *Client) didChangeLocked(ctx context.Context, uri, text string) (int32, *framing.Queued, error) {
	c.mu.Lock()
	doc, ok := c.docs[canonicalURI(uri)]
	var version int32
	var docURI string
	if ok {
		version, docURI = doc.Version+1, doc.URI
	}
	c.mu.Unlock()
	if !ok {
		return 0, nil, fmt.Errorf("lsp: didChange %s: the document is not open; send DidOpen first", uri)
	}
	c.st.noteSent(uri, version)
	written, err := c.queueNotify(ctx, "textDocument/didChange", map[string]any{
		"textDocument":   VersionedTextDocumentIdentifier{URI: docURI, Version: version},
		"contentChanges": []map[string]string{{"text": text}},
	})
	if err != nil {
		return 0, nil, err
	}
	c.mu.Lock()
	doc.Version, doc.Text = version, text
	c.mu.Unlock()
	return version, written, nil
}

// DidSave tells the server an open document was saved, with its text when
// the server asked for it.
func (c *Client) DidSave(ctx context.Context, uri string) error {
	if err := c.lockSync(ctx); err != nil {
		return fmt.Errorf("lsp: didSave %s: %w", uri, err)
	}
	c.mu.Lock()
	doc, ok := c.docs[canonicalURI(uri)]
	params := map[string]any{}
	if ok {
		params["textDocument"] = TextDocumentIdentifier{URI: doc.URI}
		if c.init != nil && c.init.Capabilities.SaveIncludesText() {
			params["text"] = doc.Text
		}
	}
	c.mu.Unlock()
	if !ok {
		c.unlockSync()
		return fmt.Errorf("lsp: didSave %s: the document is not open; send DidOpen first", uri)
	}
	written, err := c.queueNotify(ctx, "textDocument/didSave", params)
	c.unlockSync()
	if err != nil {
		return err
	}
	return c.waitWritten(ctx, "textDocument/didSave", written)
}

// DidClose closes an open document.
func (c *Client) DidClose(ctx context.Context, uri string) error {
	if err := c.lockSync(ctx); err != nil {
		return fmt.Errorf("lsp: didClose %s: %w", uri, err)
	}
	key := canonicalURI(uri)
	c.mu.Lock()
	doc, ok := c.docs[key]
	c.mu.Unlock()
	if !ok {
		c.unlockSync()
		return fmt.Errorf("lsp: didClose %s: the document is not open", uri)
	}
	written, err := c.queueNotify(ctx, "textDocument/didClose", map[string]any{"textDocument": TextDocumentIdentifier{URI: doc.URI}})
	if err == nil {
		c.mu.Lock()
		delete(c.docs, key)
		c.mu.Unlock()
	}
	c.unlockSync()
	if err != nil {
		return err
	}
	return c.waitWritten(ctx, "textDocument/didClose", written)
}

// Sync makes the server's view of a document equal text: it opens the
// document if needed, sends a change if the text differs from what was last
// sent, and otherwise sends nothing. It returns the current version and
// whether anything was sent. Use it to re-sync files changed behind the
// server's back before a query.
func (c *Client) Sync(ctx context.Context, uri, languageID, text string) (version int32, sent bool, err error) {
	if err := c.lockSync(ctx); err != nil {
		return 0, false, fmt.Errorf("lsp: sync %s: %w", uri, err)
	}
	doc, ok := c.Document(uri)
	var written *framing.Queued
	switch {
	case !ok:
		version = 1
		written, err = c.didOpenLocked(ctx, uri, languageID, text)
	case doc.Text == text:
		c.unlockSync()
		return doc.Version, false, nil
	default:
		version, written, err = c.didChangeLocked(ctx, uri, text)
	}
	c.unlockSync()
	if err != nil {
		return 0, false, err
	}
	return version, true, c.waitWritten(ctx, "document sync", written)
}

// Document returns an open document as last sent.
func (c *Client) Document(uri string) (Document, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	doc, ok := c.docs[canonicalURI(uri)]
	if !ok {
		return Document{}, false
	}
	return *doc, true
}

// Documents returns every open document, sorted by URI.
func (c *Client) Documents() []Document {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Document, 0, len(c.docs))
	for _, d := range c.docs {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out
}

// Shutdown stops the server politely and closes the stream, each step
// bounded: the shutdown request ([ShutdownTimeout] or ctx, whichever ends
// first), the exit notification ([ExitTimeout], even when ctx has ended),
// then up to [ExitWait] for the server to close its output, then
// [Conn.Close]. It returns the first failure; the stream is closed either
// way. If the server process is still running afterwards, its owner should
// send TERM, then KILL.
func (c *Client) Shutdown(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, ShutdownTimeout)
	err := c.Call(sctx, "shutdown", nil, nil)
	cancel()
	if err != nil {
		err = fmt.Errorf("lsp: the server did not complete shutdown; the stream is closed now, terminate the process: %w", err)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ExitTimeout)
	if xerr := c.Notify(ectx, "exit", nil); xerr != nil && err == nil && !errors.Is(xerr, ErrServerExited) {
		err = xerr
	}
	cancel()
	wait := time.NewTimer(ExitWait)
	select {
	case <-c.Done():
	case <-wait.C:
	case <-ctx.Done():
	}
	wait.Stop()
	if cerr := c.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("lsp: closing the server stream: %w", cerr)
	}
	return err
}
