package dap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	godap "github.com/google/go-dap"

	"berth.dev/berth/framing"
)

// Options configure a [Client]. The zero value is usable.
type Options struct {
	// OutputBytes is the size of the output ring (default DefaultOutputBytes).
	OutputBytes int

	// RequestTimeout bounds each request the client's typed methods send
	// (initialize, threads, stackTrace, continue, …), server side: when the
	// adapter does not answer within it, the request fails with an error
	// wrapping [ErrNoAnswer] even if the caller's context allows more.
	// Zero means the package's RequestTimeout. Launch and attach have their
	// own bound (LaunchTimeout), and disconnect its own
	// ([SessionOptions.DisconnectTimeout]).
	RequestTimeout time.Duration

	// StartDebugging handles the adapter's startDebugging reverse request
	// (a child session, for example a subprocess under debugpy). It runs on
	// its own goroutine with a context that ends with the client, and must
	// return when that context ends; a nil error acknowledges the request.
	// When nil, the request is refused with a message saying child
	// sessions are not supported.
	StartDebugging func(ctx context.Context, args godap.StartDebuggingRequestArguments) error

	// Logf receives protocol oddities the client tolerates (frames that
	// are not JSON, responses nobody waits for). Default: discarded.
	Logf func(format string, args ...any)
}

// Client is a Debug Adapter Protocol client, over a [framing.Conn]. It
// owns the stream it was given: one goroutine reads it, one writes it, and
// both stop and the stream is closed when the client ends, whether by
// [Client.Close], by the adapter exiting (EOF), or by a framing or write
// error. [Client.Done] and [Client.Err] report the end; every pending
// request fails at once with that error. Its methods are safe for
// concurrent use.
type Client struct {
	frames  *framing.Conn
	opts    Options
	codec   *godap.Codec
	pending framing.Pending[int, godap.ResponseMessage]

	mu  sync.Mutex // guards seq; never held across I/O
	seq int

	ev events // state, subscribers and output; see events.go
}

// NewClient starts a client over rw and takes ownership of it. Call
// [Client.Initialize] (or use a [Session]) next.
func NewClient(rw io.ReadWriteCloser, opts Options) *Client {
	return newClient(rw, opts, nil)
}

// newClient is NewClient; seed, when set, sets up the client's state
// before anything is read ([Resume]).
func newClient(rw io.ReadWriteCloser, opts Options, seed func(*Client)) *Client {
	if opts.OutputBytes <= 0 {
		opts.OutputBytes = DefaultOutputBytes
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = RequestTimeout
	}
	c := &Client{opts: opts, codec: godap.NewCodec()}
	c.ev.init(opts.OutputBytes)
	if seed != nil {
		seed(c)
	}
	c.frames = framing.NewConn(rw, framing.ConnOptions{Handle: c.handle, Ended: c.ev.end, Closed: ErrClosed, Exited: ErrAdapterExited, Broken: broken})
	c.frames.Start()
	return c
}

// Done is closed when the client has ended.
func (c *Client) Done() <-chan struct{} { return c.frames.Done() }

// Err says why the client ended: [ErrClosed], an error wrapping
// [ErrAdapterExited], or a framing or I/O error. It is nil while running.
func (c *Client) Err() error { return c.frames.Err() }

// Close ends the client: pending requests fail with [ErrClosed], the stream
// is closed, subscriptions end, and Close returns once the reader, writer
// and any startDebugging handler have stopped. The stream's Close must
// unblock a pending Read, as os/exec pipes and net.Conn do. Close returns
// the stream's Close error. It does not send disconnect; see
// [Session.Close].
func (c *Client) Close() error { return c.frames.Close() }

// RequestTimeout returns the deadline of each request: [Options.RequestTimeout],
// or the package's RequestTimeout when that was zero.
func (c *Client) RequestTimeout() time.Duration { return c.opts.RequestTimeout }

func (c *Client) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

// nextSeq returns the next sequence number of a message we send. Numbers
// are never reused within a client, so a late response to a forgotten
// request cannot be mistaken for another's.
func (c *Client) nextSeq() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

// Call is a request in flight, from [Client.Send].
type Call struct {
	c       *Client
	seq     int
	command string
	answer  <-chan godap.ResponseMessage
}

// Send sends req without waiting for its response; [Call.Wait] collects it.
// It sets req's seq and type. ctx bounds only the queueing.
func (c *Client) Send(ctx context.Context, req godap.RequestMessage) (*Call, error) {
	r := req.GetRequest()
	if r.Command == "" {
		return nil, errors.New("dap: request without a command")
	}
	if err := c.frames.Err(); err != nil {
		return nil, fmt.Errorf("dap: %s: %w", r.Command, err)
	}
	r.Seq, r.Type = c.nextSeq(), "request"
	call := &Call{c: c, seq: r.Seq, command: r.Command, answer: c.pending.Add(r.Seq)}

	body, err := json.Marshal(req)
	if err != nil {
		c.pending.Forget(call.seq)
		return nil, fmt.Errorf("dap: %s: encoding the request: %w", r.Command, err)
	}
	if err := c.frames.Send(ctx, body); err != nil {
		c.pending.Forget(call.seq)
		return nil, fmt.Errorf("dap: %s: request not sent: %w", r.Command, err)
	}
	return call, nil
}

// Wait returns the response. A failed response is returned together with
// an error wrapping [*ResponseError]. When ctx ends first, Wait forgets the
// request (a late response is dropped), sends cancel if the adapter
// announced supportsCancelRequest, and returns an error wrapping ctx.Err().
// When the client ends, Wait returns at once with an error wrapping
// [Client.Err].
func (call *Call) Wait(ctx context.Context) (godap.ResponseMessage, error) {
	c := call.c
	resp, gaveUp, err := c.pending.Await(ctx, c.frames, call.seq, call.answer)
	switch {
	case gaveUp:
		note := ""
		if c.Capabilities().SupportsCancelRequest {
			c.cancel(call.seq)
			note = " (sent cancel)"
		}
		return nil, fmt.Errorf("dap: %s: gave up waiting for the debug adapter%s: %w", call.command, note, err)
	case err != nil:
		return nil, fmt.Errorf("dap: %s: %w", call.command, err)
	}
	return checkResponse(resp)
}

func checkResponse(resp godap.ResponseMessage) (godap.ResponseMessage, error) {
	if er, ok := resp.(*godap.ErrorResponse); ok {
		return resp, responseError(er)
	}
	return resp, nil
}

// Request sends req and waits for its response, as [Client.Send] followed
// by [Call.Wait]. The response is go-dap's type for the command
// (*godap.StackTraceResponse for stackTrace), a [*RawResponse] for a
// command go-dap does not know, or a *godap.ErrorResponse with an error.
func (c *Client) Request(ctx context.Context, req godap.RequestMessage) (godap.ResponseMessage, error) {
	call, err := c.Send(ctx, req)
	if err != nil {
		return nil, err
	}
	return call.Wait(ctx)
}

// cancel queues a cancel request without waiting; cancellation is advisory,
// so a full queue drops it rather than blocking the caller. Its response
// matches no pending request and is dropped.
func (c *Client) cancel(requestSeq int) {
	req := &godap.CancelRequest{
		Request:   godap.Request{Command: "cancel"},
		Arguments: &godap.CancelArguments{RequestId: requestSeq},
	}
	req.Seq, req.Type = c.nextSeq(), "request"
	body, err := json.Marshal(req)
	if err != nil {
		return
	}
	c.frames.TrySend(body)
}

// envelope is the part of every DAP message the reader looks at first.
type envelope struct {
	Seq        int    `json:"seq"`
	Type       string `json:"type"`
	Command    string `json:"command"`
	Event      string `json:"event"`
	RequestSeq int    `json:"request_seq"`
	Success    bool   `json:"success"`
}

// handle dispatches one incoming frame. It runs on the reader goroutine.
func (c *Client) handle(body []byte) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		c.logf("dap: dropped a frame that is not a JSON object: %v: %s", err, clipText(string(body), 200))
		return
	}
	msg, err := c.codec.DecodeMessage(body)
	var unknown *godap.DecodeProtocolMessageFieldError
	switch {
	case errors.As(err, &unknown):
		msg, err = decodeRaw(env.Type, body)
	case err == nil:
	default:
		// go-dap knows the message but its fields do not fit the schema
		// (an adapter quirk): keep it raw rather than lose it.
		c.logf("dap: %s %s%s does not match the schema, kept raw: %v", env.Type, env.Command, env.Event, err)
		msg, err = decodeRaw(env.Type, body)
	}
	if err != nil {
		c.logf("dap: dropped a frame: %v: %s", err, clipText(string(body), 200))
		return
	}
	switch m := msg.(type) {
	case godap.ResponseMessage:
		c.deliver(m)
	case godap.EventMessage:
		c.ev.handle(m)
	case godap.RequestMessage:
		c.handleReverse(m)
	}
}

// decodeRaw decodes a message go-dap does not know into a Raw type.
func decodeRaw(typ string, body []byte) (godap.Message, error) {
	var m godap.Message
	switch typ {
	case "response":
		m = &RawResponse{}
	case "event":
		m = &RawEvent{}
	case "request":
		m = &RawRequest{}
	default:
		return nil, fmt.Errorf("message type %q is not request, response or event", clipText(typ, 40))
	}
	if err := json.Unmarshal(body, m); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *Client) deliver(m godap.ResponseMessage) {
	r := m.GetResponse()
	answer, ok := c.pending.Take(r.RequestSeq)
	if !ok {
		c.logf("dap: dropped a late response to %s (request_seq %d): nobody waits for it", r.Command, r.RequestSeq)
		return
	}
	if init, ok := m.(*godap.InitializeResponse); ok {
		c.ev.setCapabilities(init.Body)
	}
	answer <- m
}

// handleReverse answers a request from the adapter.
func (c *Client) handleReverse(m godap.RequestMessage) {
	r := m.GetRequest()
	switch req := m.(type) {
	case *godap.RunInTerminalRequest:
		c.replyError(r, "berth has no terminal: launch with \"console\": \"internalConsole\" so the program's output comes back as output events")
	case *godap.StartDebuggingRequest:
		if c.opts.StartDebugging == nil {
			c.replyError(r, "berth debugs one session at a time and does not start child debug sessions")
			return
		}
		c.frames.Go(func(ctx context.Context) {
			if err := c.opts.StartDebugging(ctx, req.Arguments); err != nil {
				c.replyError(r, err.Error())
				return
			}
			c.reply(&godap.StartDebuggingResponse{Response: godap.Response{Command: r.Command, RequestSeq: r.Seq, Success: true}})
		})
	default:
		c.replyError(r, fmt.Sprintf("berth does not handle the reverse request %q", clipText(r.Command, 80)))
	}
}

func (c *Client) replyError(r *godap.Request, text string) {
	c.reply(&godap.ErrorResponse{
		Response: godap.Response{Command: r.Command, RequestSeq: r.Seq, Success: false, Message: text},
		Body:     godap.ErrorResponseBody{Error: &godap.ErrorMessage{Id: 1, Format: text}},
	})
}

// reply queues a response to a reverse request. It runs on the reader
// goroutine (or a handler) and gives up when the client ends.
func (c *Client) reply(m godap.ResponseMessage) {
	resp := m.GetResponse()
	resp.Seq, resp.Type = c.nextSeq(), "response"
	body, err := json.Marshal(m)
	if err != nil {
		return
	}
	_ = c.frames.Send(c.frames.Context(), body)
}
