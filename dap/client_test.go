package dap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	godap "github.com/google/go-dap"
)

// TestOutOfOrderResponses: each caller gets the response to its own
// request, whatever order the adapter answers in.
func TestOutOfOrderResponses(t *testing.T) {
	c, p := newPair(t, Options{})
	const n = 4
	wait := p.script(func() {
		var reqs []msg
		for range n {
			reqs = append(reqs, p.expect("evaluate"))
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			var args godap.EvaluateArguments
			json.Unmarshal(reqs[i].Arguments, &args)
			p.respond(reqs[i], map[string]any{"result": "value of " + args.Expression, "variablesReference": 0})
		}
	})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			expr := fmt.Sprintf("x%d", i)
			got, err := c.Evaluate(t.Context(), expr, 0, "")
			if err != nil {
				t.Errorf("evaluate %s: %v", expr, err)
				return
			}
			if got.Result != "value of "+expr {
				t.Errorf("evaluate %s = %q, want the answer to its own request", expr, got.Result)
			}
		})
	}
	wg.Wait()
	wait()
}

// TestUnknownMessagesKeptRaw: an event and a response go-dap does not know
// reach the caller raw, and the connection keeps working.
func TestUnknownMessagesKeptRaw(t *testing.T) {
	c, p := newPair(t, Options{})
	sub := c.Subscribe(nil)
	defer sub.Close()
	wait := p.script(func() {
		p.event("debugpySockets", map[string]any{"sockets": []int{1, 2}})
		p.event("output", map[string]any{"category": "stdout", "output": "hi\n"})
		req := p.expect("debugpyCustom")
		p.respond(req, map[string]any{"answer": 42})
		req = p.expect("threads")
		p.respond(req, map[string]any{"threads": []map[string]any{{"id": 1, "name": "main"}}})
	})
	ctx := t.Context()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := ev.(*RawEvent)
	if !ok || raw.Event.Event != "debugpySockets" || !strings.Contains(string(raw.Body), `"sockets":[1,2]`) {
		t.Fatalf("first event = %#v, want the raw debugpySockets event with its body", ev)
	}
	ev, err = sub.Next(ctx)
	if out, ok := ev.(*godap.OutputEvent); err != nil || !ok || out.Body.Output != "hi\n" {
		t.Fatalf("second event = %#v, %v; want the decoded output event", ev, err)
	}
	resp, err := c.Request(ctx, &RawRequest{Request: godap.Request{Command: "debugpyCustom"}, Arguments: json.RawMessage(`{"q":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if rr, ok := resp.(*RawResponse); !ok || string(rr.Body) != `{"answer":42}` {
		t.Fatalf("custom response = %#v, want a RawResponse with the body", resp)
	}
	threads, err := c.Threads(ctx)
	if err != nil || len(threads) != 1 || threads[0].Name != "main" {
		t.Fatalf("threads after unknown messages = %v, %v", threads, err)
	}
	wait()
}

// TestReverseRequests: runInTerminal, startDebugging (without a handler)
// and unknown reverse requests get error responses, and the connection
// keeps working.
func TestReverseRequests(t *testing.T) {
	tests := []struct {
		command string
		args    any
		want    string
	}{
		{"runInTerminal", map[string]any{"kind": "integrated", "cwd": "/w", "args": []string{"python3", "x.py"}}, "internalConsole"},
		{"startDebugging", map[string]any{"request": "attach", "configuration": map[string]any{}}, "does not start child debug sessions"},
		{"fooBar", map[string]any{}, `"fooBar"`},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			c, p := newPair(t, Options{})
			var got msg
			wait := p.script(func() {
				p.send(map[string]any{"type": "request", "command": tt.command, "arguments": tt.args})
				// The reply and the threads request may come in either order.
				for range 2 {
					m, ok := p.recv()
					switch {
					case !ok:
						t.Error("peer: stream ended")
						return
					case m.Type == "response":
						got = m
					default:
						p.respond(m, map[string]any{"threads": []any{}})
					}
				}
			})
			if _, err := c.Threads(t.Context()); err != nil {
				t.Fatal(err)
			}
			wait()
			if got.Type != "response" || got.Command != tt.command || got.RequestSeq != 1 || got.Success {
				t.Fatalf("reply = %+v, want a failed response to request 1 (%s)", got, tt.command)
			}
			if !strings.Contains(got.Message, tt.want) {
				t.Errorf("reply message %q does not contain %q", got.Message, tt.want)
			}
		})
	}
}

// TestStartDebuggingHandler: with a handler set, startDebugging reaches it
// and is acknowledged.
func TestStartDebuggingHandler(t *testing.T) {
	gotArgs := make(chan godap.StartDebuggingRequestArguments, 1)
	c, p := newPair(t, Options{StartDebugging: func(ctx context.Context, a godap.StartDebuggingRequestArguments) error {
		gotArgs <- a
		return nil
	}})
	if !c.InitializeArguments("x").SupportsStartDebuggingRequest {
		t.Error("initialize does not announce startDebugging although a handler is set")
	}
	p.send(map[string]any{"type": "request", "command": "startDebugging", "arguments": map[string]any{"request": "attach", "configuration": map[string]any{"pid": 7}}})
	reply, _ := p.recv()
	if !reply.Success || reply.Command != "startDebugging" {
		t.Fatalf("reply = %+v, want success", reply)
	}
	if a := <-gotArgs; a.Request != "attach" {
		t.Errorf("handler got %+v", a)
	}
}

// TestAdapterDeath: when the adapter's stream ends, every pending request
// fails at once with ErrAdapterExited, and later ones too.
func TestAdapterDeath(t *testing.T) {
	c, p := newPair(t, Options{})
	wait := p.script(func() {
		p.expect("threads")
		p.expect("threads")
		p.Conn.Close()
	})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_, err := c.Threads(t.Context())
			if !errors.Is(err, ErrAdapterExited) {
				t.Errorf("pending request: err = %v, want ErrAdapterExited", err)
			}
		})
	}
	wg.Wait()
	wait()
	<-c.Done()
	if !errors.Is(c.Err(), ErrAdapterExited) {
		t.Errorf("Err() = %v", c.Err())
	}
	if _, err := c.Threads(t.Context()); !errors.Is(err, ErrAdapterExited) {
		t.Errorf("request after death: %v", err)
	}
	if err := c.Disconnect(t.Context(), true); err != nil {
		t.Errorf("disconnect after the adapter exited = %v, want nil", err)
	}
}

// TestFailedResponse: success:false becomes a ResponseError with the
// adapter's message and the formatted body.error.
func TestFailedResponse(t *testing.T) {
	tests := []struct {
		name    string
		message string
		errBody any
		want    string
		detail  string
	}{
		{"message only", "notStopped", nil, "dap: the adapter refused stackTrace: notStopped", ""},
		{"format with variables", "", map[string]any{"id": 2001, "format": "Unable to find thread {id} in {where}", "variables": map[string]string{"id": "7", "where": "main"}}, "Unable to find thread 7 in main", "Unable to find thread 7 in main"},
		{"unknown variable kept", "failed", map[string]any{"id": 1, "format": "bad {x}"}, "failed: bad {x}", "bad {x}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := newPair(t, Options{})
			wait := p.script(func() {
				req := p.expect("stackTrace")
				p.fail(req, tt.message, tt.errBody)
			})
			_, _, err := c.StackTrace(t.Context(), 1, 0)
			wait()
			var re *ResponseError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a ResponseError", err)
			}
			if re.Command != "stackTrace" || re.Detail != tt.detail {
				t.Errorf("ResponseError = %+v, want detail %q", re, tt.detail)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestCancel: when the caller gives up, cancel is sent (the adapter
// supports it), the late response is dropped, and the next request still
// matches its own response.
func TestCancel(t *testing.T) {
	c, p := newPair(t, Options{})
	received := make(chan struct{})
	wait := p.script(func() {
		init := p.expect("initialize")
		p.respond(init, map[string]any{"supportsCancelRequest": true})
		slow := p.expect("stackTrace")
		close(received)
		cancel := p.expect("cancel")
		var args godap.CancelArguments
		json.Unmarshal(cancel.Arguments, &args)
		if args.RequestId != slow.Seq {
			t.Errorf("cancel names request %d, want %d", args.RequestId, slow.Seq)
		}
		p.respond(cancel, nil)
		p.respond(slow, map[string]any{"stackFrames": []map[string]any{{"id": 99, "name": "late", "line": 1, "column": 1}}})
		next := p.expect("stackTrace")
		if next.Seq <= cancel.Seq {
			t.Errorf("seq %d reused after %d", next.Seq, cancel.Seq)
		}
		p.respond(next, map[string]any{"stackFrames": []map[string]any{{"id": 1, "name": "fresh", "line": 1, "column": 1}}})
	})
	if _, err := c.Initialize(t.Context(), "fake"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-received; cancel() }()
	if _, _, err := c.StackTrace(ctx, 1, 0); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "sent cancel") {
		t.Fatalf("cancelled request: err = %v", err)
	}
	frames, _, err := c.StackTrace(t.Context(), 1, 0)
	if err != nil || len(frames) != 1 || frames[0].Name != "fresh" {
		t.Fatalf("next request = %v, %v; want its own answer, not the late one", frames, err)
	}
	wait()
}

// TestOutputRing: output is kept within the ring's size, telemetry is not
// kept, and dropped bytes are counted.
func TestOutputRing(t *testing.T) {
	c, p := newPair(t, Options{OutputBytes: 100})
	wait := p.script(func() {
		for i := range 30 {
			p.event("output", map[string]any{"category": "stdout", "output": fmt.Sprintf("line %03d\n", i)}) // 9 bytes
		}
		p.event("output", map[string]any{"category": "telemetry", "output": "ignored"})
		p.event("output", map[string]any{"output": "console text"})
		req := p.expect("threads")
		p.respond(req, map[string]any{"threads": []any{}})
	})
	if _, err := c.Threads(t.Context()); err != nil { // events before a response are handled before it
		t.Fatal(err)
	}
	wait()
	chunks, dropped := c.Output()
	var text strings.Builder
	for _, ch := range chunks {
		text.WriteString(ch.Text)
	}
	total := 30*9 + len("console text")
	if text.Len() != 100 || dropped != int64(total-100) {
		t.Fatalf("kept %d bytes, dropped %d; want 100 kept and %d dropped", text.Len(), dropped, total-100)
	}
	last := chunks[len(chunks)-1]
	if last.Category != "console" || last.Text != "console text" || last.Offset != int64(total-len("console text")) {
		t.Errorf("last chunk = %+v", last)
	}
	if !strings.HasSuffix(text.String(), "line 029\nconsole text") {
		t.Errorf("ring does not end with the newest output: %q", text.String())
	}
	if chunks[0].Offset != dropped {
		t.Errorf("first chunk offset %d, want %d (everything before it dropped)", chunks[0].Offset, dropped)
	}
}

// TestRing covers the trimming edge cases directly.
func TestRing(t *testing.T) {
	tests := []struct {
		name    string
		limit   int
		adds    []string
		want    string
		dropped int64
	}{
		{"fits", 10, []string{"abc", "def"}, "abcdef", 0},
		{"oversized chunk keeps its tail", 4, []string{"abcdefgh"}, "efgh", 4},
		{"partial trim", 5, []string{"abcd", "ef"}, "bcdef", 1},
		{"no split characters", 4, []string{"aé", "xyz"}, "xyz", 3},
		{"whole characters kept", 5, []string{"aé", "xyz"}, "éxyz", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ring{limit: tt.limit}
			for _, a := range tt.adds {
				r.add("stdout", a)
			}
			var b strings.Builder
			for _, ch := range r.chunks {
				b.WriteString(ch.Text)
			}
			if b.String() != tt.want || r.dropped != tt.dropped {
				t.Errorf("ring = %q dropped %d, want %q dropped %d", b.String(), r.dropped, tt.want, tt.dropped)
			}
		})
	}
}

// TestVariablesCap: at most MaxVariables children per page, values clipped,
// the remaining count reported.
func TestVariablesCap(t *testing.T) {
	c, p := newPair(t, Options{})
	vars := make([]map[string]any, 120)
	for i := range vars {
		vars[i] = map[string]any{"name": fmt.Sprintf("v%d", i), "value": strings.Repeat("x", MaxValueChars+10), "variablesReference": 0}
	}
	wait := p.script(func() {
		for range 2 {
			req := p.expect("variables")
			p.respond(req, map[string]any{"variables": vars})
		}
	})
	page, err := c.Variables(t.Context(), 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Vars) != MaxVariables || page.Remaining != 70 || page.Vars[0].Name != "v0" {
		t.Errorf("first page: %d vars, %d remaining", len(page.Vars), page.Remaining)
	}
	if v := page.Vars[0].Value; !strings.HasSuffix(v, "… (10 more characters)") || len(v) < MaxValueChars {
		t.Errorf("value not clipped as expected: %q", v)
	}
	page, err = c.Variables(t.Context(), 5, 100)
	if err != nil || len(page.Vars) != 20 || page.Remaining != 0 || page.Vars[0].Name != "v100" {
		t.Errorf("last page: %+v, %v", page, err)
	}
	wait()
	if _, err := c.Variables(t.Context(), 0, 0); err == nil {
		t.Error("reference 0 accepted")
	}
}

func TestFormatMessage(t *testing.T) {
	tests := []struct {
		format string
		vars   map[string]string
		want   string
	}{
		{"plain", nil, "plain"},
		{"{a} and {b}", map[string]string{"a": "1", "b": "2"}, "1 and 2"},
		{"{missing}", map[string]string{}, "{missing}"},
		{"{_exception}", map[string]string{"_exception": "boom"}, "boom"},
	}
	for _, tt := range tests {
		if got := formatMessage(tt.format, tt.vars); got != tt.want {
			t.Errorf("formatMessage(%q) = %q, want %q", tt.format, got, tt.want)
		}
	}
}

func TestClipValue(t *testing.T) {
	long := strings.Repeat("é", MaxValueChars+3)
	tests := []struct {
		in, want string
	}{
		{"short", "short"},
		{strings.Repeat("a", MaxValueChars), strings.Repeat("a", MaxValueChars)},
		{long, strings.Repeat("é", MaxValueChars) + "… (3 more characters)"},
	}
	for _, tt := range tests {
		if got := ClipValue(tt.in); got != tt.want {
			t.Errorf("ClipValue(%d chars) = %q", len(tt.in), got)
		}
	}
}

// TestSubscriptionEnd: a subscription returns queued events, then the
// client's error once it has ended; Close ends it early.
func TestSubscriptionEnd(t *testing.T) {
	c, p := newPair(t, Options{})
	sub := c.Subscribe(EventNamed("stopped"))
	other := c.Subscribe(nil)
	other.Close()
	wait := p.script(func() {
		p.event("output", map[string]any{"output": "x"})
		p.event("stopped", map[string]any{"reason": "pause", "threadId": 3})
		p.Conn.Close()
	})
	wait()
	<-c.Done()
	ev, err := sub.Next(t.Context())
	if st, ok := ev.(*godap.StoppedEvent); err != nil || !ok || st.Body.ThreadId != 3 {
		t.Fatalf("Next = %#v, %v; want the queued stopped event", ev, err)
	}
	if _, err := sub.Next(t.Context()); !errors.Is(err, ErrAdapterExited) {
		t.Errorf("Next after the end = %v, want ErrAdapterExited", err)
	}
	if _, err := other.Next(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next on a closed subscription = %v, want ErrClosed", err)
	}
	if st := c.State(); st.Stopped == nil || st.Stopped.Reason != "pause" || st.Stops != 1 {
		t.Errorf("state = %+v", st)
	}
}

// TestExceptionInfo: exceptionInfo asks for the thread's exception and
// clips its description and message.
func TestExceptionInfo(t *testing.T) {
	c, p := newPair(t, Options{})
	long := strings.Repeat("m", MaxValueChars+5)
	wait := p.script(func() {
		req := p.expect("exceptionInfo")
		if string(req.Arguments) != `{"threadId":7}` {
			t.Errorf("arguments %s", req.Arguments)
		}
		p.respond(req, map[string]any{"exceptionId": "ValueError", "description": long, "breakMode": "unhandled",
			"details": map[string]any{"message": long, "typeName": "ValueError", "stackTrace": "tb"}})
	})
	info, err := c.ExceptionInfo(t.Context(), 7)
	wait()
	if err != nil {
		t.Fatal(err)
	}
	if info.ExceptionId != "ValueError" || info.BreakMode != "unhandled" || info.Details == nil || info.Details.TypeName != "ValueError" {
		t.Errorf("info = %+v", info)
	}
	for _, s := range []string{info.Description, info.Details.Message} {
		if !strings.HasSuffix(s, "… (5 more characters)") {
			t.Errorf("not clipped: %q", s)
		}
	}
}

// TestCountFrames: the count asks from start for at most limit frames
// and never reports more than limit.
func TestCountFrames(t *testing.T) {
	c, p := newPair(t, Options{})
	frames := func(n int) []map[string]any {
		out := make([]map[string]any, n)
		for i := range out {
			out[i] = map[string]any{"id": i, "name": "f", "line": 1, "column": 1}
		}
		return out
	}
	wait := p.script(func() {
		req := p.expect("stackTrace")
		if string(req.Arguments) != `{"threadId":1,"startFrame":30,"levels":100}` {
			t.Errorf("arguments %s", req.Arguments)
		}
		p.respond(req, map[string]any{"stackFrames": frames(12), "totalFrames": 80})
		p.respond(p.expect("stackTrace"), map[string]any{"stackFrames": frames(7)}) // an adapter ignoring levels
	})
	if n, err := c.CountFrames(t.Context(), 1, 30, 100); n != 12 || err != nil {
		t.Errorf("count = %d, %v; want 12", n, err)
	}
	if n, err := c.CountFrames(t.Context(), 1, 30, 5); n != 5 || err != nil {
		t.Errorf("count = %d, %v; want the limit 5", n, err)
	}
	wait()
}

// TestNoAnswer: a request the adapter never answers fails with ErrNoAnswer
// once the client's request deadline passes, however long the caller would
// wait; a caller's own shorter deadline is the caller's, not ErrNoAnswer;
// the unanswered request does not hold a concurrent one; and the client
// keeps working (the late answer is dropped).
func TestNoAnswer(t *testing.T) {
	const deadline = 150 * time.Millisecond
	tests := []struct {
		name string
		// callerTimeout bounds the caller's context (0: none).
		callerTimeout time.Duration
		cancelSupport bool
		wantNoAnswer  bool
		wantText      []string
	}{
		{name: "server deadline", wantNoAnswer: true, wantText: []string{"dap: stackTrace: no answer within 150ms", "did not answer in time"}},
		{name: "server deadline, cancel sent", cancelSupport: true, wantNoAnswer: true, wantText: []string{"no answer within 150ms (sent cancel)"}},
		{name: "caller deadline first", callerTimeout: deadline / 3, wantText: []string{"gave up waiting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := newPair(t, Options{RequestTimeout: deadline})
			if got := c.RequestTimeout(); got != deadline {
				t.Errorf("RequestTimeout() = %v, want %v", got, deadline)
			}
			received := make(chan struct{})
			gaveUp := make(chan struct{})
			wait := p.script(func() {
				init := p.expect("initialize")
				p.respond(init, map[string]any{"supportsCancelRequest": tt.cancelSupport})
				slow := p.expect("stackTrace") // answered only after the client gave up
				close(received)
				th := p.expect("threads") // sent while stackTrace waits
				p.respond(th, map[string]any{"threads": []map[string]any{{"id": 1, "name": "main"}}})
				<-gaveUp
				if tt.cancelSupport {
					cancel := p.expect("cancel")
					p.respond(cancel, nil)
				}
				p.respond(slow, map[string]any{"stackFrames": []map[string]any{{"id": 9, "name": "late", "line": 1, "column": 1}}})
				next := p.expect("stackTrace")
				p.respond(next, map[string]any{"stackFrames": []map[string]any{{"id": 1, "name": "fresh", "line": 1, "column": 1}}})
			})
			if _, err := c.Initialize(t.Context(), "fake"); err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if tt.callerTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.callerTimeout)
				defer cancel()
			}
			errc := make(chan error, 1)
			go func() {
				_, _, err := c.StackTrace(ctx, 1, 0)
				errc <- err
			}()
			<-received
			// The stuck request does not hold another.
			if ths, err := c.Threads(t.Context()); err != nil || len(ths) != 1 {
				t.Errorf("threads while stackTrace is unanswered = %v, %v", ths, err)
			}
			var err error
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second): // safety net; deadline + slack
				t.Fatal("the unanswered stackTrace did not fail within its deadline")
			}
			close(gaveUp)
			if got := errors.Is(err, ErrNoAnswer); got != tt.wantNoAnswer {
				t.Errorf("err = %v; errors.Is(ErrNoAnswer) = %v, want %v", err, got, tt.wantNoAnswer)
			}
			if !tt.wantNoAnswer && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want the caller's context.DeadlineExceeded", err)
			}
			for _, w := range tt.wantText {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want %q in it", err, w)
				}
			}
			frames, _, err := c.StackTrace(t.Context(), 1, 0)
			if err != nil || len(frames) != 1 || frames[0].Name != "fresh" {
				t.Errorf("next request = %v, %v; want its own answer, not the late one", frames, err)
			}
			wait()
		})
	}
}

// TestRequestTimeoutDefault: a zero Options.RequestTimeout is the
// package's RequestTimeout.
func TestRequestTimeoutDefault(t *testing.T) {
	c, _ := newPair(t, Options{})
	if got := c.RequestTimeout(); got != RequestTimeout {
		t.Errorf("RequestTimeout() = %v, want %v", got, RequestTimeout)
	}
}
