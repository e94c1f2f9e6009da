package kernel

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Output event types delivered by [Client.Execute] (IOPub msg_type values).
const (
	EventStream            = "stream"
	EventDisplayData       = "display_data"
	EventUpdateDisplayData = "update_display_data"
	EventExecuteResult     = "execute_result"
	EventError             = "error"
	EventClearOutput       = "clear_output"
)

// Event is one output of a cell, in the order IOPub delivered it.
type Event struct {
	// Type is one of the Event* constants.
	Type string
	// Name is the stream ("stdout" or "stderr") and Text its text, for
	// [EventStream].
	Name, Text string
	// Data maps MIME types to values (a JSON string for text and base64
	// images, any JSON for application/json); Metadata likewise. For
	// display_data, update_display_data and execute_result.
	Data, Metadata map[string]json.RawMessage
	// DisplayID is transient.display_id, when the kernel set one.
	DisplayID string
	// ExecutionCount is set for [EventExecuteResult].
	ExecutionCount int
	// Error is set for [EventError].
	Error *ExecError
	// Wait is clear_output's wait flag.
	Wait bool
	// Dropped is how many bytes of this output the client cut while
	// receiving it (the middles of strings longer than [MaxString]); the
	// text and data keep each long string's head and tail.
	Dropped int64
	// Message is the verified message the event came from.
	Message *Message
}

// TextData returns the MIME value mime as a string, when it is one.
func (e Event) TextData(mime string) (string, bool) {
	raw, ok := e.Data[mime]
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// ExecError is an exception raised by a cell: name, value and the
// traceback lines (which may carry ANSI colour codes).
type ExecError struct {
	Name      string   `json:"ename"`
	Value     string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// InputRequest is the kernel asking for a line of input (Python's input()).
type InputRequest struct {
	Prompt   string `json:"prompt"`
	Password bool   `json:"password"`
}

// ExecuteOptions are the per-call settings of [Client.Execute].
type ExecuteOptions struct {
	// Silent asks the kernel not to publish output or count the execution.
	Silent bool
	// NoHistory keeps the cell out of the kernel's history.
	NoHistory bool
	// StopOnError aborts cells queued behind this one if it fails.
	StopOnError bool
	// UserExpressions are evaluated after the cell; results are in the reply.
	UserExpressions map[string]string
	// OnEvent receives each output event, on the goroutine that called
	// Execute, one at a time. Any call means the cell is producing output.
	OnEvent func(Event)
	// OnInput answers input_request. It runs on its own goroutine (so
	// output keeps flowing to OnEvent meanwhile), may take as long as it
	// needs, and must return when ctx is done (the cell finished, was
	// abandoned, or Execute's ctx ended). Its value is sent as the
	// input_reply; an error fails Execute, leaving the cell waiting: the
	// caller should interrupt. nil tells the kernel stdin is not allowed.
	OnInput func(ctx context.Context, req InputRequest) (string, error)
}

// ExecuteReply is the kernel's execute_reply.
type ExecuteReply struct {
	// Status is "ok", "error" or "aborted".
	Status         string
	ExecutionCount int
	// Error is set when Status is "error".
	Error *ExecError
	// Payload and UserExpressions are passed through raw.
	Payload         []json.RawMessage
	UserExpressions map[string]json.RawMessage
	// OutputDropped is how many bytes of the cell's output the kernel
	// dropped because its buffer towards this client was full (the
	// client read slower than the cell wrote). berth's bundled kernels
	// report it in the reply's berth_output_dropped; ipykernel drops
	// past its high-water mark without saying, so it is 0 there.
	OutputDropped int64
}

type executeRequest struct {
	Code            string            `json:"code"`
	Silent          bool              `json:"silent"`
	StoreHistory    bool              `json:"store_history"`
	UserExpressions map[string]string `json:"user_expressions"`
	AllowStdin      bool              `json:"allow_stdin"`
	StopOnError     bool              `json:"stop_on_error"`
}

// iopubContent covers the fields of the IOPub messages Execute reads.
type iopubContent struct {
	ExecutionState string                     `json:"execution_state"`
	Name           string                     `json:"name"`
	Text           string                     `json:"text"`
	Data           map[string]json.RawMessage `json:"data"`
	Metadata       map[string]json.RawMessage `json:"metadata"`
	Transient      struct {
		DisplayID string `json:"display_id"`
	} `json:"transient"`
	ExecutionCount *int `json:"execution_count"`
	ExecError
	Wait bool `json:"wait"`
}

// Execute runs code and streams its output to opts.OnEvent until the kernel
// has both published IOPub status idle for this request and sent its
// execute_reply. A cell that raised is not a Go error: the reply says
// "error" and carries the traceback. ctx bounds the whole call; when it
// ends Execute returns its error and the cell may still be running (the
// caller decides whether to [Client.Interrupt]). When the kernel dies the
// error wraps [ErrDead]; when it died (or the request could not be sent)
// before anything about the request came back, it also wraps
// [ErrNotTaken]: the cell never ran.
func (c *Client) Execute(ctx context.Context, code string, opts ExecuteOptions) (*ExecuteReply, error) {
	m, err := c.newMessage("execute_request", executeRequest{
		Code:            code,
		Silent:          opts.Silent,
		StoreHistory:    !opts.NoHistory,
		UserExpressions: orNoExpressions(opts.UserExpressions),
		AllowStdin:      opts.OnInput != nil,
		StopOnError:     opts.StopOnError,
	})
	if err != nil {
		return nil, err
	}
	id := m.Header.MsgID
	w := newWaiter()
	c.register(w, id)
	defer c.unregister(id)

	inCtx, inCancel := context.WithCancel(ctx)
	var inWG sync.WaitGroup
	defer func() {
		inCancel()
		inWG.Wait()
	}()
	inErr := make(chan error, 1)

	// After a dropped stream, IOPub must be back (and subscribed) before
	// the cell runs, or its output would go to nobody.
	if err := c.sendSubscribed(ctx, m); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrNotTaken, err)
	}
	var reply *ExecuteReply
	idle := false
	taken := false // anything about this request came back
	for !idle || reply == nil {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kernel: execute: %w; the cell may still be running, interrupt the kernel before the next call", ctx.Err())
		case <-c.dead:
			// What arrived just before the death counts.
			if !taken && len(w.drain()) == 0 {
				return nil, fmt.Errorf("kernel: execute: %w: %w", ErrNotTaken, c.deadErr)
			}
			return nil, fmt.Errorf("kernel: execute: %w", c.deadErr)
		case err := <-inErr:
			return nil, fmt.Errorf("kernel: execute: input handler: %w; the cell is still waiting for input, interrupt the kernel", err)
		case <-w.notify:
		}
		for _, in := range w.drain() {
			taken = true
			t := in.msg.Header.MsgType
			switch {
			case in.ch == Shell && t == "execute_reply":
				r, err := decodeExecuteReply(in.msg.Content)
				if err != nil {
					return nil, err
				}
				reply = r
			case in.ch == IOPub && t == "status":
				var st iopubContent
				if json.Unmarshal(in.msg.Content, &st) == nil && st.ExecutionState == "idle" {
					idle = true
				}
			case in.ch == IOPub:
				if ev, ok := decodeEvent(in.msg); ok && opts.OnEvent != nil {
					opts.OnEvent(ev)
				}
			case in.ch == Stdin && t == "input_request" && opts.OnInput != nil:
				var req InputRequest
				if err := json.Unmarshal(in.msg.Content, &req); err != nil {
					return nil, fmt.Errorf("kernel: decode input_request: %w", err)
				}
				inWG.Add(1)
				go c.answer(inCtx, &inWG, inErr, opts.OnInput, req, in.msg.Header)
			}
		}
	}
	return reply, nil
}

// answer runs the input handler and sends input_reply with the request's
// header as parent.
func (c *Client) answer(ctx context.Context, wg *sync.WaitGroup, errc chan<- error, h func(context.Context, InputRequest) (string, error), req InputRequest, parent Header) {
	defer wg.Done()
	fail := func(err error) {
		if ctx.Err() != nil {
			return // the cell is over or abandoned: nobody waits for the answer
		}
		select {
		case errc <- err:
		default:
		}
	}
	value, err := h(ctx, req)
	if err != nil {
		fail(err)
		return
	}
	if ctx.Err() != nil {
		return
	}
	m, err := c.newMessage("input_reply", struct {
		Value string `json:"value"`
	}{value})
	if err != nil {
		fail(err)
		return
	}
	m.ParentHeader = parent
	if err := c.send(ctx, Stdin, m); err != nil {
		fail(err)
	}
}

func orNoExpressions(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func decodeExecuteReply(content []byte) (*ExecuteReply, error) {
	var r struct {
		Status          string                     `json:"status"`
		ExecutionCount  int                        `json:"execution_count"`
		Payload         []json.RawMessage          `json:"payload"`
		UserExpressions map[string]json.RawMessage `json:"user_expressions"`
		OutputDropped   int64                      `json:"berth_output_dropped"`
		ExecError
	}
	if err := json.Unmarshal(content, &r); err != nil {
		return nil, fmt.Errorf("kernel: decode execute_reply: %w", err)
	}
	out := &ExecuteReply{Status: r.Status, ExecutionCount: r.ExecutionCount, Payload: r.Payload, UserExpressions: r.UserExpressions, OutputDropped: max(r.OutputDropped, 0)}
	if r.Status == "error" {
		e := r.ExecError
		out.Error = &e
	}
	return out, nil
}

// decodeEvent turns an IOPub output message into an Event; other IOPub
// messages (execute_input, comm_*) report false.
func decodeEvent(m *Message) (Event, bool) {
	switch m.Header.MsgType {
	case EventStream, EventDisplayData, EventUpdateDisplayData, EventExecuteResult, EventError, EventClearOutput:
	default:
		return Event{}, false
	}
	var ct iopubContent
	if err := json.Unmarshal(m.Content, &ct); err != nil {
		return Event{}, false
	}
	ev := Event{
		Type:      m.Header.MsgType,
		Name:      ct.Name,
		Text:      ct.Text,
		Data:      ct.Data,
		Metadata:  ct.Metadata,
		DisplayID: ct.Transient.DisplayID,
		Wait:      ct.Wait,
		Dropped:   m.Dropped,
		Message:   m,
	}
	if ct.ExecutionCount != nil {
		ev.ExecutionCount = *ct.ExecutionCount
	}
	if ev.Type == EventError {
		e := ct.ExecError
		ev.Error = &e
	}
	return ev, true
}
