// Package lsp is a JSON-RPC 2.0 client for language servers: [Conn] moves
// messages over any byte stream (a process's stdio, an exec stream into a
// sandbox, a net.Conn), answers the requests servers send to clients, and
// keeps what servers push (diagnostics, progress, log messages); [Client]
// adds the initialize handshake, document synchronisation, typed queries and
// a bounded shutdown.
//
// The package knows nothing about sandboxes or processes. Whoever starts the
// server hands the Conn its stream, and after [Client.Shutdown] escalates to
// TERM and KILL on the process itself.
package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"berth.dev/berth/framing"
)

var (
	// ErrServerExited reports that the server's output ended: the process
	// exited or the stream to it was cut. Pending and later calls fail with
	// it; the server must be restarted.
	ErrServerExited = errors.New("lsp: the language server exited (its output stream ended); restart it and retry")

	// ErrClosed reports a call on a connection closed by [Conn.Close].
	ErrClosed = errors.New("lsp: connection closed by the client")

	// ErrNoAnswer reports a request the server did not answer within
	// [ConnOptions.RequestTimeout]; $/cancelRequest was sent. The server
	// may be stuck (stopped, deadlocked, or busy for good).
	ErrNoAnswer = errors.New("lsp: the language server did not answer in time")
)

// broken names a read or write failure, which ends the connection.
func broken(op string, err error) error {
	return fmt.Errorf("lsp: %s the language server failed, the connection is unusable; restart the server: %w", op, err)
}

// JSON-RPC and LSP error codes.
const (
	CodeParseError           = -32700
	CodeInvalidRequest       = -32600
	CodeMethodNotFound       = -32601
	CodeInvalidParams        = -32602
	CodeInternalError        = -32603
	CodeServerNotInitialized = -32002
	CodeRequestFailed        = -32803
	CodeServerCancelled      = -32802
	CodeContentModified      = -32801
	CodeRequestCancelled     = -32800
)

// ResponseError is an error answer from the server. Calls return it wrapped;
// use errors.As to read the code.
type ResponseError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("server error %d: %s", e.Code, clipText(e.Message, 1000))
}

// ConnOptions configure a [Conn]. The zero value is usable.
type ConnOptions struct {
	// Settings answers workspace/configuration: an item's section is looked
	// up as a key, then as a dotted path through nested maps ("pylsp.plugins");
	// an empty section gets the whole map; a missing one gets null.
	Settings map[string]any

	// WorkspaceFolders answers workspace/workspaceFolders (null when empty).
	// [Client.Initialize] sets it from its options when empty.
	WorkspaceFolders []WorkspaceFolder

	// ApplyEdit handles workspace/applyEdit. It runs on its own goroutine
	// with a context that ends with the connection, may call the Conn (but
	// not Close it), and must return when its context ends. When nil, every
	// edit is refused with applied=false and a reason, and the client does
	// not announce workspace.applyEdit.
	ApplyEdit func(ctx context.Context, p ApplyWorkspaceEditParams) ApplyWorkspaceEditResult

	// RequestTimeout bounds every request but initialize, whatever the
	// caller's context allows (0: only the caller's context): a server
	// that does not answer within it gets $/cancelRequest and the call
	// fails with ErrNoAnswer, so that one stuck server never holds a call
	// until its caller gives up.
	RequestTimeout time.Duration
}

// Conn is a JSON-RPC 2.0 connection to a language server, over a
// [framing.Conn]. It owns the stream it was given: one goroutine reads it,
// one writes it, and both stop and the stream is closed when the
// connection ends, whether by [Conn.Close], by the server exiting (EOF), or
// by a framing or write error. [Conn.Done] and [Conn.Err] report the end;
// every pending call fails at once with that error.
type Conn struct {
	frames  *framing.Conn
	opts    ConnOptions
	pending framing.Pending[int64, *wireMsg]

	mu      sync.Mutex // guards nextID and folders; never held across I/O
	nextID  int64
	folders []WorkspaceFolder

	st state // what the server pushed; see state.go
}

// wireMsg is any JSON-RPC message. Requests have Method and ID,
// notifications Method only, responses ID and Result or Error.
type wireMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *ResponseError  `json:"error,omitempty"`
}

// NewConn starts a connection over rw and takes ownership of it.
func NewConn(rw io.ReadWriteCloser, opts ConnOptions) *Conn {
	c := &Conn{opts: opts, folders: opts.WorkspaceFolders}
	c.st.init()
	c.frames = framing.NewConn(rw, framing.ConnOptions{Handle: c.handle, Ended: c.st.wake, Closed: ErrClosed, Exited: ErrServerExited, Broken: broken})
	c.frames.Start()
	return c
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.frames.Done() }

// Err says why the connection ended: [ErrClosed], an error wrapping
// [ErrServerExited], or a framing or I/O error. It is nil while running.
func (c *Conn) Err() error { return c.frames.Err() }

// Close ends the connection: pending calls fail with [ErrClosed], the stream
// is closed, and Close returns once the reader, writer and any applyEdit
// handler have stopped. The stream's Close must unblock a pending Read, as
// os/exec pipes and net.Conn do. Close returns the stream's Close error.
func (c *Conn) Close() error { return c.frames.Close() }

// Call sends a request and decodes the answer into result (which may be nil,
// or a *json.RawMessage to keep the answer raw). params may be nil for none.
// When ctx ends first, Call sends $/cancelRequest, forgets the id (a late
// answer is dropped) and returns an error wrapping ctx.Err(). When the
// connection ends, Call returns at once with an error wrapping [Conn.Err].
// A server error answer is returned as a wrapped [*ResponseError].
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	if err := c.frames.Err(); err != nil {
		return fmt.Errorf("lsp: %s: %w", method, err)
	}
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	answer := c.pending.Add(id)

	body, err := encode(json.RawMessage(strconv.FormatInt(id, 10)), method, params)
	if err != nil {
		c.pending.Forget(id)
		return err
	}
	if err := c.frames.Send(ctx, body); err != nil {
		c.pending.Forget(id)
		return fmt.Errorf("lsp: %s: request not sent: %w", method, err)
	}
	if d := c.opts.RequestTimeout; d > 0 && method != "initialize" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, ErrNoAnswer)
		defer cancel()
	}
	resp, gaveUp, err := c.pending.Await(ctx, c.frames, id, answer)
	switch {
	case gaveUp && errors.Is(context.Cause(ctx), ErrNoAnswer):
		c.cancelRequest(id)
		return fmt.Errorf("lsp: %s: no answer within %v (sent $/cancelRequest): %w", method, c.opts.RequestTimeout, ErrNoAnswer)
	case gaveUp:
		c.cancelRequest(id)
		return fmt.Errorf("lsp: %s: gave up waiting for the server (sent $/cancelRequest): %w", method, err)
	case err != nil:
		return fmt.Errorf("lsp: %s: %w", method, err)
	}
	return decodeResponse(method, resp, result)
}

// cancelRequest queues $/cancelRequest without waiting; cancellation is
// advisory, so a full queue drops it rather than blocking the caller.
func (c *Conn) cancelRequest(id int64) {
	body, err := encode(nil, "$/cancelRequest", map[string]int64{"id": id})
	if err != nil {
		return
	}
	c.frames.TrySend(body)
}

func decodeResponse(method string, resp *wireMsg, result any) error {
	if resp.Error != nil {
		return fmt.Errorf("lsp: %s: %w", method, resp.Error)
	}
	if result == nil {
		return nil
	}
	if raw, ok := result.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], resp.Result...)
		return nil
	}
	if isNull(resp.Result) {
		return nil
	}
	if err := json.Unmarshal(resp.Result, result); err != nil {
		return fmt.Errorf("lsp: %s: the server's answer does not decode as %T: %w", method, result, err)
	}
	return nil
}

// Notify sends a notification and returns once it is written (or ctx or the
// connection ends first).
func (c *Conn) Notify(ctx context.Context, method string, params any) error {
	written, err := c.queueNotify(ctx, method, params)
	if err != nil {
		return err
	}
	return c.waitWritten(ctx, method, written)
}

// queueNotify queues a notification without waiting for the write; the
// returned frame's Wait yields the write's result. Notifications queued one
// after another are written in that order.
func (c *Conn) queueNotify(ctx context.Context, method string, params any) (*framing.Queued, error) {
	body, err := encode(nil, method, params)
	if err != nil {
		return nil, err
	}
	written, err := c.frames.Queue(ctx, body)
	if err != nil {
		return nil, fmt.Errorf("lsp: %s: notification not sent: %w", method, err)
	}
	return written, nil
}

func (c *Conn) waitWritten(ctx context.Context, method string, written *framing.Queued) error {
	if err := written.Wait(ctx); err != nil {
		return fmt.Errorf("lsp: %s: notification may not have reached the server: %w", method, err)
	}
	return nil
}

// encode builds a request (id set) or a notification (id nil).
func encode(id json.RawMessage, method string, params any) ([]byte, error) {
	m := wireMsg{JSONRPC: "2.0", ID: id, Method: method}
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("lsp: %s: encoding params: %w", method, err)
		}
		m.Params = p
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("lsp: %s: encoding message: %w", method, err)
	}
	return body, nil
}

// reply answers a server request with a result or an error.
func (c *Conn) reply(id json.RawMessage, result any, rerr *ResponseError) {
	m := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result,omitempty"`
		Error   *ResponseError  `json:"error,omitempty"`
	}{JSONRPC: "2.0", ID: id, Error: rerr}
	if rerr == nil {
		// A successful response must carry "result", even when null.
		r, err := json.Marshal(result)
		if err != nil {
			m.Error = &ResponseError{Code: CodeInternalError, Message: err.Error()}
		} else {
			m.Result = json.RawMessage(r)
		}
	}
	body, err := json.Marshal(m)
	if err != nil {
		return
	}
	_ = c.frames.Send(c.frames.Context(), body)
}

// handle dispatches one incoming frame. It runs on the reader goroutine.
func (c *Conn) handle(body []byte) {
	var m wireMsg
	if err := json.Unmarshal(body, &m); err != nil {
		c.st.logProtocol(fmt.Sprintf("dropped a frame that is not JSON-RPC: %v: %s", err, clipText(string(body), 200)))
		return
	}
	hasID := len(m.ID) > 0 && string(m.ID) != "null"
	switch {
	case m.Method != "" && hasID:
		c.handleRequest(m.ID, m.Method, m.Params)
	case m.Method != "":
		c.handleNotification(m.Method, m.Params)
	case hasID:
		id, err := strconv.ParseInt(string(m.ID), 10, 64)
		if err != nil {
			c.st.logProtocol("dropped a response with an id we never sent: " + clipText(string(m.ID), 80))
			return
		}
		if answer, ok := c.pending.Take(id); ok {
			answer <- &m
		} else {
			c.st.noteLate()
		}
	default:
		if m.Error != nil {
			c.st.logProtocol("the server reported an error without an id: " + m.Error.Error())
		}
	}
}
