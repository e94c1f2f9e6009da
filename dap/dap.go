// Package dap is a Debug Adapter Protocol client over a byte stream.
//
// [Client] moves messages over any stream (a process's stdio, an exec stream
// into a sandbox, a net.Conn): requests with sequence matching, events kept
// in a small state struct and handed to subscribers, the adapter's output in
// a bounded ring, and reverse requests answered or refused. [Session] adds
// the launch order that works for debugpy and delve alike, breakpoints that
// may be set before launch, and a bounded disconnect.
//
// Message types come from github.com/google/go-dap (DAP specification as
// shipped in go-dap v0.12.0). Messages go-dap does not know (custom events
// such as debugpy's "debugpySockets", responses to custom commands, unknown
// reverse requests) never break the connection: they are kept raw as
// [RawEvent], [RawResponse] and [RawRequest].
//
// The package knows nothing about sandboxes or processes. Whoever starts the
// adapter hands the Client its stream and, after [Session.Close], stops the
// process itself (close stdin, wait, TERM, KILL).
package dap

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	godap "github.com/google/go-dap"
)

// Caps the tool layer shows to a model. The engine applies MaxFrames to
// [Client.StackTrace], MaxVariables to [Client.Variables] and MaxValueChars to
// every variable value and evaluate result it returns.
const (
	// MaxFrames is the most stack frames one stack request returns.
	MaxFrames = 30
	// MaxVariables is the most children one variables request returns.
	MaxVariables = 50
	// MaxValueChars is the longest value shown, in characters; longer values
	// are clipped with a note saying how much was left out.
	MaxValueChars = 400
)

// Deadlines. Each bounds its step even when the caller's context allows
// more; a shorter caller deadline wins.
const (
	// RequestTimeout bounds an ordinary request when
	// [Options.RequestTimeout] is zero (reliability plan R4: a DAP request
	// gets 30 s). A request the adapter does not answer in time fails with
	// [ErrNoAnswer].
	RequestTimeout = 30 * time.Second
	// LaunchTimeout bounds launch or attach, from initialize to the launch
	// response. delve builds the program first (13.7 s on a cold cache).
	LaunchTimeout = 120 * time.Second
	// DisconnectTimeout bounds the disconnect request, as VS Code does.
	DisconnectTimeout = 2 * time.Second
)

// Buffer sizes.
const (
	// DefaultOutputBytes is the size of the output ring when
	// [Options.OutputBytes] is zero.
	DefaultOutputBytes = 256 << 10
	// MaxQueuedEvents is how many events a [Subscription] holds for a slow
	// reader; beyond it the oldest are dropped and counted.
	MaxQueuedEvents = 4096
)

var (
	// ErrAdapterExited reports that the adapter's output ended: the process
	// exited or the stream to it was cut. Pending and later requests fail
	// with it; start a new session.
	ErrAdapterExited = errors.New("dap: the debug adapter exited (its output stream ended); start a new debug session")

	// ErrClosed reports a call on a client closed by [Client.Close].
	ErrClosed = errors.New("dap: the debug session was closed; start a new one")

	// ErrNoAnswer reports a request the adapter did not answer within its
	// deadline ([Options.RequestTimeout]) while the caller was still
	// waiting: the adapter is stuck or stopped. The client stays open (a
	// late answer is dropped); end the session and start a new one.
	ErrNoAnswer = errors.New("dap: the debug adapter did not answer in time; it is stuck or stopped: end the session (disconnect, then stop its process) and start a new one")
)

// broken names a read or write failure, which ends the client.
func broken(op string, err error) error {
	return fmt.Errorf("dap: %s the debug adapter failed, the session is unusable; start a new one: %w", op, err)
}

// ResponseError is a failed response (success: false). Requests return it
// as an error; use errors.As to read the fields.
type ResponseError struct {
	Command string // the request's command
	// Message is the response's short message ("cancelled", "notStopped",
	// or a sentence, depending on the adapter).
	Message string
	// Detail is body.error.format with its {variables} substituted, when
	// the adapter sent one.
	Detail string
	ID     int // body.error.id, 0 when absent
}

func (e *ResponseError) Error() string {
	text := e.Detail
	if text == "" {
		text = e.Message
	} else if e.Message != "" && !strings.Contains(e.Detail, e.Message) {
		text = e.Message + ": " + e.Detail
	}
	if text == "" {
		text = "no reason given"
	}
	return fmt.Sprintf("dap: the adapter refused %s: %s", e.Command, clipText(text, 1000))
}

// responseError builds a ResponseError from a failed response.
func responseError(r *godap.ErrorResponse) *ResponseError {
	e := &ResponseError{Command: r.Command, Message: r.Message}
	if m := r.Body.Error; m != nil {
		e.ID = m.Id
		e.Detail = formatMessage(m.Format, m.Variables)
	}
	return e
}

var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// formatMessage substitutes {name} placeholders as the DAP ErrorMessage
// format defines; unknown names stay as they are.
func formatMessage(format string, vars map[string]string) string {
	return placeholder.ReplaceAllStringFunc(format, func(m string) string {
		if v, ok := vars[m[1:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// RawEvent is an event go-dap does not know. It implements
// godap.EventMessage, so subscribers receive it like any other event.
type RawEvent struct {
	godap.Event
	Body json.RawMessage `json:"body,omitempty"`
}

// RawResponse is a successful response to a command go-dap does not know.
type RawResponse struct {
	godap.Response
	Body json.RawMessage `json:"body,omitempty"`
}

// RawRequest is a request with arguments kept raw: a reverse request go-dap
// does not know, or a custom command sent with [Client.Request].
type RawRequest struct {
	godap.Request
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ClipValue shortens s to MaxValueChars characters, saying how many were
// left out.
func ClipValue(s string) string {
	n := utf8.RuneCountInString(s)
	if n <= MaxValueChars {
		return s
	}
	cut := 0
	for i := range s {
		if cut == MaxValueChars {
			return fmt.Sprintf("%s… (%d more characters)", s[:i], n-MaxValueChars)
		}
		cut++
	}
	return s
}

// clipText shortens peer-controlled text quoted in an error or log.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
