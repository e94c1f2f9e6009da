package dap

import (
	"context"
	"errors"
	"fmt"
	"time"

	godap "github.com/google/go-dap"
)

// bounded returns ctx limited to d (a shorter caller deadline wins).
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// do sends req bounded by the client's request deadline and type-checks
// the response. A request the adapter left unanswered past that deadline,
// while ctx itself had not ended, fails with an error wrapping
// [ErrNoAnswer].
func do[R godap.ResponseMessage](ctx context.Context, c *Client, req godap.RequestMessage) (R, error) {
	var zero R
	d := c.opts.RequestTimeout
	rctx, cancel := bounded(ctx, d)
	defer cancel()
	resp, err := c.Request(rctx, req)
	if err != nil {
		if ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) && c.Err() == nil {
			note := ""
			if c.Capabilities().SupportsCancelRequest {
				note = " (sent cancel)"
			}
			return zero, fmt.Errorf("dap: %s: no answer within %v%s: %w", req.GetRequest().Command, d, note, ErrNoAnswer)
		}
		return zero, err
	}
	r, ok := resp.(R)
	if !ok {
		return zero, fmt.Errorf("dap: %s: the adapter answered with %T, not %T; the adapter speaks an unexpected DAP dialect", req.GetRequest().Command, resp, zero)
	}
	return r, nil
}

// InitializeArguments returns what [Client.Initialize] sends: client id
// berth, 1-based lines and columns, plain paths, variable types, no
// terminal (runInTerminal is refused), and startDebugging only when
// [Options.StartDebugging] is set.
func (c *Client) InitializeArguments(adapterID string) godap.InitializeRequestArguments {
	return godap.InitializeRequestArguments{
		ClientID:                      "berth",
		ClientName:                    "berth",
		AdapterID:                     adapterID,
		Locale:                        "en-US",
		LinesStartAt1:                 true,
		ColumnsStartAt1:               true,
		PathFormat:                    "path",
		SupportsVariableType:          true,
		SupportsRunInTerminalRequest:  false,
		SupportsStartDebuggingRequest: c.opts.StartDebugging != nil,
	}
}

// Initialize sends initialize and returns the adapter's capabilities, which
// [Client.Capabilities] reports from then on. ctx bounds the request (cap
// [Options.RequestTimeout]).
func (c *Client) Initialize(ctx context.Context, adapterID string) (godap.Capabilities, error) {
	resp, err := do[*godap.InitializeResponse](ctx, c, &godap.InitializeRequest{
		Request:   godap.Request{Command: "initialize"},
		Arguments: c.InitializeArguments(adapterID),
	})
	if err != nil {
		return godap.Capabilities{}, err
	}
	return resp.Body, nil
}

// Threads lists the debuggee's threads.
func (c *Client) Threads(ctx context.Context) ([]godap.Thread, error) {
	resp, err := do[*godap.ThreadsResponse](ctx, c, &godap.ThreadsRequest{Request: godap.Request{Command: "threads"}})
	if err != nil {
		return nil, err
	}
	return resp.Body.Threads, nil
}

// StackTrace returns up to levels frames of a stopped thread, top first
// (levels ≤ 0 or above MaxFrames means MaxFrames), and the adapter's count
// of all frames (0 when it did not say).
func (c *Client) StackTrace(ctx context.Context, threadID, levels int) (frames []godap.StackFrame, total int, err error) {
	if levels <= 0 || levels > MaxFrames {
		levels = MaxFrames
	}
	resp, err := do[*godap.StackTraceResponse](ctx, c, &godap.StackTraceRequest{
		Request:   godap.Request{Command: "stackTrace"},
		Arguments: godap.StackTraceArguments{ThreadId: threadID, Levels: levels},
	})
	if err != nil {
		return nil, 0, err
	}
	frames = resp.Body.StackFrames
	if len(frames) > levels { // some adapters ignore levels
		frames = frames[:levels]
	}
	return frames, resp.Body.TotalFrames, nil
}

// CountFrames counts a stopped thread's frames from index start on,
// asking for at most limit of them: limit means at least that many. It
// is how a caller learns the true depth when [Client.StackTrace]'s total
// is missing or an estimate (delve adds an arbitrary number when there
// are more frames than it was asked for).
func (c *Client) CountFrames(ctx context.Context, threadID, start, limit int) (int, error) {
	resp, err := do[*godap.StackTraceResponse](ctx, c, &godap.StackTraceRequest{
		Request:   godap.Request{Command: "stackTrace"},
		Arguments: godap.StackTraceArguments{ThreadId: threadID, StartFrame: start, Levels: limit},
	})
	if err != nil {
		return 0, err
	}
	return min(len(resp.Body.StackFrames), limit), nil
}

// Scopes returns the scopes of a frame (locals, globals, registers…), each
// with the reference [Client.Variables] takes.
func (c *Client) Scopes(ctx context.Context, frameID int) ([]godap.Scope, error) {
	resp, err := do[*godap.ScopesResponse](ctx, c, &godap.ScopesRequest{
		Request:   godap.Request{Command: "scopes"},
		Arguments: godap.ScopesArguments{FrameId: frameID},
	})
	if err != nil {
		return nil, err
	}
	return resp.Body.Scopes, nil
}

// Variables is one page of a variable's children.
type Variables struct {
	// Vars are at most MaxVariables children, values clipped to
	// MaxValueChars characters.
	Vars []godap.Variable
	// Start is the index of Vars[0] among all children.
	Start int
	// Remaining is how many children follow this page; ask again with
	// start = Start + len(Vars) to see them.
	Remaining int
}

// Variables returns the children of reference (a scope's or a variable's
// variablesReference) from index start on, at most MaxVariables of them.
func (c *Client) Variables(ctx context.Context, reference, start int) (Variables, error) {
	if reference <= 0 {
		return Variables{}, fmt.Errorf("dap: variables: reference %d has no children; use a reference above 0 from scopes or from a variable", reference)
	}
	resp, err := do[*godap.VariablesResponse](ctx, c, &godap.VariablesRequest{
		Request:   godap.Request{Command: "variables"},
		Arguments: godap.VariablesArguments{VariablesReference: reference},
	})
	if err != nil {
		return Variables{}, err
	}
	all := resp.Body.Variables
	start = min(max(start, 0), len(all))
	end := min(start+MaxVariables, len(all))
	page := Variables{Vars: make([]godap.Variable, 0, end-start), Start: start, Remaining: len(all) - end}
	for _, v := range all[start:end] {
		v.Value = ClipValue(v.Value)
		page.Vars = append(page.Vars, v)
	}
	return page, nil
}

// Evaluate evaluates expression in a frame's scope (frameID 0: the
// adapter's global scope). evalContext is "repl", "watch" or "hover"
// ("repl" when empty). The result is clipped to MaxValueChars characters.
func (c *Client) Evaluate(ctx context.Context, expression string, frameID int, evalContext string) (godap.EvaluateResponseBody, error) {
	if evalContext == "" {
		evalContext = "repl"
	}
	resp, err := do[*godap.EvaluateResponse](ctx, c, &godap.EvaluateRequest{
		Request:   godap.Request{Command: "evaluate"},
		Arguments: godap.EvaluateArguments{Expression: expression, FrameId: frameID, Context: evalContext},
	})
	if err != nil {
		return godap.EvaluateResponseBody{}, err
	}
	body := resp.Body
	body.Result = ClipValue(body.Result)
	return body, nil
}

// ExceptionInfo returns what the adapter knows of the exception a thread
// stopped on (a stop with reason "exception"): its id (the type, for
// debugpy), description (the message) and details. Ask only when
// [Client.Capabilities] has SupportsExceptionInfoRequest. The description
// and the details' message are clipped to MaxValueChars characters.
func (c *Client) ExceptionInfo(ctx context.Context, threadID int) (godap.ExceptionInfoResponseBody, error) {
	resp, err := do[*godap.ExceptionInfoResponse](ctx, c, &godap.ExceptionInfoRequest{
		Request:   godap.Request{Command: "exceptionInfo"},
		Arguments: godap.ExceptionInfoArguments{ThreadId: threadID},
	})
	if err != nil {
		return godap.ExceptionInfoResponseBody{}, err
	}
	body := resp.Body
	body.Description = ClipValue(body.Description)
	if body.Details != nil {
		d := *body.Details
		d.Message = ClipValue(d.Message)
		body.Details = &d
	}
	return body, nil
}

// Continue resumes a thread (all threads, for most adapters). It returns
// once the adapter accepted the request, not when the debuggee stops again:
// take [State.Stops] first and call [Client.WaitStop] after.
func (c *Client) Continue(ctx context.Context, threadID int) error {
	stops := c.State().Stops
	_, err := do[*godap.ContinueResponse](ctx, c, &godap.ContinueRequest{
		Request:   godap.Request{Command: "continue"},
		Arguments: godap.ContinueArguments{ThreadId: threadID},
	})
	return c.resumedIf(err, stops)
}

// Next steps over one line; see [Client.Continue] for waiting.
func (c *Client) Next(ctx context.Context, threadID int) error {
	stops := c.State().Stops
	_, err := do[*godap.NextResponse](ctx, c, &godap.NextRequest{
		Request:   godap.Request{Command: "next"},
		Arguments: godap.NextArguments{ThreadId: threadID},
	})
	return c.resumedIf(err, stops)
}

// StepIn steps into the call on the current line; see [Client.Continue].
func (c *Client) StepIn(ctx context.Context, threadID int) error {
	stops := c.State().Stops
	_, err := do[*godap.StepInResponse](ctx, c, &godap.StepInRequest{
		Request:   godap.Request{Command: "stepIn"},
		Arguments: godap.StepInArguments{ThreadId: threadID},
	})
	return c.resumedIf(err, stops)
}

// StepOut runs to the return of the current function; see [Client.Continue].
func (c *Client) StepOut(ctx context.Context, threadID int) error {
	stops := c.State().Stops
	_, err := do[*godap.StepOutResponse](ctx, c, &godap.StepOutRequest{
		Request:   godap.Request{Command: "stepOut"},
		Arguments: godap.StepOutArguments{ThreadId: threadID},
	})
	return c.resumedIf(err, stops)
}

// Pause asks a running thread to stop; the stopped event (reason "pause")
// follows. See [Client.Continue] for waiting.
func (c *Client) Pause(ctx context.Context, threadID int) error {
	_, err := do[*godap.PauseResponse](ctx, c, &godap.PauseRequest{
		Request:   godap.Request{Command: "pause"},
		Arguments: godap.PauseArguments{ThreadId: threadID},
	})
	return err
}

// resumedIf marks the debuggee running after an accepted resume request:
// adapters need not send a continued event for it.
func (c *Client) resumedIf(err error, stops uint64) error {
	if err == nil {
		c.ev.resumed(stops)
	}
	return err
}

// Disconnect sends disconnect and waits at most DisconnectTimeout (or
// ctx's shorter deadline) for the answer. terminateDebuggee asks the
// adapter to kill the debuggee (the default after launch; after attach the
// debuggee is left running unless asked). An adapter that has already
// exited counts as disconnected. The stream stays open; close the client
// next.
func (c *Client) Disconnect(ctx context.Context, terminateDebuggee bool) error {
	return c.disconnect(ctx, terminateDebuggee, DisconnectTimeout)
}

func (c *Client) disconnect(ctx context.Context, terminateDebuggee bool, timeout time.Duration) error {
	if c.Err() != nil {
		return nil
	}
	ctx, cancel := bounded(ctx, timeout)
	defer cancel()
	_, err := c.Request(ctx, &godap.DisconnectRequest{
		Request:   godap.Request{Command: "disconnect"},
		Arguments: &godap.DisconnectArguments{TerminateDebuggee: terminateDebuggee},
	})
	if err != nil && errors.Is(err, ErrAdapterExited) {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("dap: the debug adapter did not answer disconnect within %v; stop its process: %w", timeout, err)
	}
	return err
}
