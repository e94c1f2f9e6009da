// Package mcpserver serves one open [controller.Run] as a Model Context
// Protocol server, on the official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// tools/list is the run's registry as a surface sees it ([controller.Run.Tools],
// the list GET /v1/runs/{id}/tools?surface= gives), asked afresh on every
// list; tools/call goes through [controller.Run.Call] with the surface, so
// the registry, its middleware and the permission gate apply exactly as on
// POST /v1/runs/{id}/tools/{name}. A result keeps its shape: text blocks,
// images as MCP image content, structuredContent and isError.
//
// A call error is a JSON-RPC error whose data is {"code","status"}: the
// code and HTTP status the HTTP API would answer (denied/403 for a tool
// above the surface, unknown_tool/404, bad_request/400, …; see
// controller/httpapi). unknown_tool uses JSON-RPC's invalid-params code
// (-32602), every other call error [CodeCallError]. Arguments the tool
// refuses (bad_request) are a result with isError set, not a call error
// (SEP-1303): the model sees what to correct.
//
// Cards as elicitation: when the client declared the elicitation capability,
// an ask_user call's question card is sent to it as elicitation/create
// (options as an enum, several as an array of the enum, free text as a
// string field; decline or cancel skips the card). A permission card goes
// to the client only with [Options.ClientIsOperator]: otherwise the session
// whose call it gates could approve its own call, so the card stays on the
// event stream and the console for the operator, as without MCP. Without
// elicitation nothing changes: ask_user draws its card on the event stream
// and fails closed with nobody there.
//
// Over HTTP, a plain call of an initialized session is answered without
// the SDK's session machinery (direct.go), as application/json.
//
// A call whose client sent a progress token reports notifications/progress
// while it runs: each note its tool gives (tools.Progress: a kernel
// starting, a cell's output, a language server starting, a debug launch
// waiting for its first stop) as it comes, and every [ProgressInterval]
// without one the seconds it has run and the run's resources' states. Cancellation
// (notifications/cancelled) and, over HTTP, a client that drops the POST
// of a call cancel the call.
//
// The server negotiates the protocol versions in [ProtocolVersions]:
// 2026-07-28 ([StatelessVersion]), where every request stands alone
// (stateless.go) and cards are multi round-trip requests (mrtr.go), and
// 2025-11-25 and older, with sessions, where a server may send
// elicitation/create while it serves a call.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/controller"
	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

// ProtocolVersions are the MCP protocol versions the server negotiates,
// newest first: [StatelessVersion], without sessions, and those of the
// initialize handshake, with them.
var ProtocolVersions = []string{StatelessVersion, "2025-11-25", "2025-06-18", "2025-03-26"}

// StatelessVersion is the first protocol version without sessions
// (2026-07-28): no initialize, the client's version, capabilities and
// identity in each request's _meta, server/discover, and a run named by
// the URL rather than by a session.
const StatelessVersion = "2026-07-28"

// ListTTL is the ttlMs of a tools/list result (and of server/discover's):
// a run's tool list is fixed while it is open (its mode and registry do
// not change), so a client may keep it this long. Its cacheScope is
// private: the list is that of one tenant's run.
const ListTTL = 5 * time.Minute

// CodeCallError is the JSON-RPC error code of a call error other than an
// unknown tool or bad arguments; its data carries berth's error code.
const CodeCallError = -32000

// ServerName is the implementation name the server reports.
const ServerName = "berth"

// Classifier maps a call error to the HTTP status and error code the HTTP
// API answers for it (controller/httpapi's table).
type Classifier func(error) (status int, code string)

// Options configure [New].
type Options struct {
	// Surface is the surface the session sees and calls at; empty is the
	// run's mode.
	Surface tools.Surface
	// ClientIsOperator sends permission cards to the client as elicitation.
	// Set it only when the operator configured that the MCP client is the
	// operator (a local developer's editor): otherwise the session whose
	// call a card gates would approve it itself.
	ClientIsOperator bool
	// Classify names call errors; nil uses [Classify].
	Classify Classifier
	// Version is the version the server reports.
	Version string
	// Logger logs elicitation failures; nil discards.
	Logger *slog.Logger
	// Tenant is the tenant whose session caps an [HTTP] session counts
	// against ([Caps]).
	Tenant string
	// Status, when set, returns a note added to the periodic progress
	// messages of every call, or "" for none: berth sets it to say that it
	// is building its sandbox agent, which the first calls wait for.
	Status func() string
	// Principal names the credential of the request, which a requestState
	// is bound to (mrtr.go).
	Principal string

	// sessionID makes the ids of Streamable HTTP sessions ([HTTP]).
	sessionID func() string
	// announceRun puts the run's id in the _meta of tools/list and
	// tools/call results (MetaRun): the run-opening endpoint's stateless
	// clients learn which run serves them.
	announceRun bool
}

// MetaRun is the _meta key, in results of the run-opening endpoint
// (/v1/mcp) at StatelessVersion, whose value is the id of the run that
// served the request: /v1/runs/{id}/mcp serves that run too.
const MetaRun = "dev.berth/run"

// New returns an MCP server for run. One server may serve several sessions;
// each sees the run's tools at opts.Surface.
func New(run *controller.Run, opts Options) *mcp.Server {
	srv, _ := newServer(run, opts)
	return srv
}

// newServer is New, with the handler that answers the server's calls.
func newServer(run *controller.Run, opts Options) (*mcp.Server, *handler) {
	opts = opts.withDefaults()
	h := &handler{run: run, opts: opts}
	srv := mcp.NewServer(&mcp.Implementation{Name: ServerName, Version: opts.Version}, serverOptions(opts,
		fmt.Sprintf("berth run %s: the tools of one conversation's sandbox (%s, workspace %s).",
			run.ID(), run.Sandbox(), run.Info().Workspace)))
	srv.AddReceivingMiddleware(h.middleware)
	return srv, h
}

// newBareServer is a server without a run, for the requests of the
// run-opening endpoint that need none (server/discover, a notification):
// it answers them with instructions and serves no tool.
func newBareServer(opts Options, instructions string) *mcp.Server {
	opts = opts.withDefaults()
	return mcp.NewServer(&mcp.Implementation{Name: ServerName, Version: opts.Version}, serverOptions(opts, instructions))
}

func (opts Options) withDefaults() Options {
	if opts.Classify == nil {
		opts.Classify = Classify
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "devel"
	}
	return opts
}

func serverOptions(opts Options, instructions string) *mcp.ServerOptions {
	return &mcp.ServerOptions{
		Instructions:              instructions,
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		SupportedProtocolVersions: ProtocolVersions,
		GetSessionID:              opts.sessionID,
		// server/discover's result: what it says changes only with the
		// berth's version.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			if c.TTLMs == 0 {
				c.TTLMs = int(ListTTL / time.Millisecond)
			}
			if c.CacheScope == "" {
				c.CacheScope = "private"
			}
		},
	}
}

type handler struct {
	run  *controller.Run
	opts Options

	// direct are the calls answered without the SDK ([HTTP]'s direct
	// path) in flight, by JSON-RPC id, so that notifications/cancelled
	// reaches them.
	directMu sync.Mutex
	direct   map[string]context.CancelFunc
}

// middleware answers tools/list and tools/call from the run itself, so
// that the list follows the run and a tool outside the surface is refused
// by the run, by name, with berth's code.
func (h *handler) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			res := h.list()
			if h.opts.announceRun {
				res.Meta = mcp.Meta{MetaRun: h.run.ID()}
			}
			return res, nil
		case *mcp.CallToolRequest:
			res, err := h.call(ctx, r)
			if res != nil && h.opts.announceRun {
				res.Meta = mcp.Meta{MetaRun: h.run.ID()}
			}
			if res != nil && stateless(r.Session) && !res.NeedsInput() {
				res = withResultType(res, "complete")
			}
			return res, err
		case *mcp.ServerRequest[*mcp.CancelledParams]:
			if r.Params != nil {
				if id, err := json.Marshal(r.Params.RequestID); err == nil {
					h.cancelDirect(string(id))
				}
			}
		}
		return next(ctx, method, req)
	}
}

// stateless reports whether ss serves a request of the stateless
// protocol (StatelessVersion or later), whose results carry a resultType.
func stateless(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	return ip != nil && ip.ProtocolVersion >= StatelessVersion
}

// withResultType is res with its resultType set to rt. The SDK sets it
// only on the results of tools registered with it, and berth answers
// tools/call itself; the field is unexported, and decoding is the one way
// to set it.
func withResultType(res *mcp.CallToolResult, rt string) *mcp.CallToolResult {
	b, err := json.Marshal(res)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return res
	}
	typed, _ := json.Marshal(rt)
	sep := ","
	if string(b) == "{}" {
		sep = ""
	}
	b = append(append([]byte(`{"resultType":`), typed...), append([]byte(sep), b[1:]...)...)
	out := new(mcp.CallToolResult)
	if err := json.Unmarshal(b, out); err != nil {
		return res
	}
	return out
}

// annotations are a tool's MCP annotations, every hint set explicitly:
// MCP's defaults (destructive, open world) would call ast_edit, which
// only stages, destructive, and every tool confined to the workspace open.
func annotations(in tools.Info) *mcp.ToolAnnotations {
	readOnly := in.Level == tools.LevelRead
	destructive := !readOnly && !in.Hints.Additive
	open := !in.Hints.Confined
	return &mcp.ToolAnnotations{Title: in.Name, ReadOnlyHint: readOnly, DestructiveHint: &destructive,
		IdempotentHint: readOnly || in.Hints.Idempotent, OpenWorldHint: &open}
}

// list is the run's tools at the surface, in name order.
func (h *handler) list() *mcp.ListToolsResult {
	infos := h.run.Tools(h.opts.Surface)
	out := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, 0, len(infos))}
	out.TTLMs = int(ListTTL / time.Millisecond)
	out.CacheScope = "private"
	for _, in := range infos {
		t := &mcp.Tool{Name: in.Name, Description: in.Description, InputSchema: in.InputSchema}
		if in.InputSchema == nil {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		if in.OutputSchema != nil {
			t.OutputSchema = in.OutputSchema
		}
		t.Annotations = annotations(in)
		out.Tools = append(out.Tools, t)
	}
	return out
}

func (h *handler) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p := req.Params
	args := p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if rel, ok := cancelOf(req); ok {
		defer rel.track(cancel)()
	}
	if roundTrips(req.Session) && (p.Name == "ask_user" || h.opts.ClientIsOperator) {
		return h.callRoundTrip(ctx, req, args)
	}
	if stop := h.elicit(ctx, req.Session, p.Name, args); stop != nil {
		defer stop()
	}
	if tok := p.GetProgressToken(); tok != nil && req.Session != nil {
		var stop func()
		ctx, stop = h.progress(ctx, req.Session, tok, p.Name)
		defer stop()
	}
	res, err := h.run.Call(ctx, h.opts.Surface, p.Name, args)
	return h.finish(p.Name, res, err)
}

// inputErrorResult is err as a tool result with isError set when it is an
// input error (bad_request: arguments that fail the tool's schema or its
// own checks), nil otherwise. MCP makes input validation errors tool
// execution errors (SEP-1303, 2025-11-25) so the model sees them and
// corrects its call; many hosts never show a protocol error to the model.
func (h *handler) inputErrorResult(tool string, err error) *mcp.CallToolResult {
	if _, code := h.opts.Classify(err); code != "bad_request" {
		return nil
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

// ProgressInterval is how often a call whose client sent a progress token
// reports notifications/progress while it runs.
const ProgressInterval = 2 * time.Second

// maxProgressMessage caps a progress message.
const maxProgressMessage = 1 << 10

// progress reports, while the call runs, what it is doing: each note the
// tool gives (tools.Progress: a server starting, a cell's latest output, a
// launch waiting for its first stop) as soon as it comes, at most one per
// minProgressGap, and every ProgressInterval without one how long the call
// has run and the run's resources' states. The progress value is the
// seconds run, increasing with each notification. It returns the call's
// context, carrying the note receiver, and the function that stops it.
func (h *handler) progress(ctx context.Context, ss *mcp.ServerSession, tok any, tool string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	notes := make(chan string, 1)
	callCtx := tools.WithProgress(ctx, func(note string) {
		for {
			select {
			case notes <- note:
				return
			default:
			}
			select { // keep the latest: drop the one waiting
			case <-notes:
			default:
			}
		}
	})
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(ProgressInterval)
		defer tick.Stop()
		var last float64
		send := func(msg string) {
			p := time.Since(start).Seconds()
			if p <= last {
				p = last + 0.001 // progress must increase
			}
			last = p
			if len(msg) > maxProgressMessage {
				msg = msg[:maxProgressMessage] + "…"
			}
			if err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: p, Message: msg}); err != nil && ctx.Err() == nil {
				h.opts.Logger.Debug("mcp: progress not sent", "run", h.run.ID(), "tool", tool, "err", err)
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case note := <-notes:
				send(tool + ": " + note)
				tick.Reset(ProgressInterval)
				select { // at most one note per gap
				case <-ctx.Done():
					return
				case <-time.After(minProgressGap):
				}
			case <-tick.C:
				var b strings.Builder
				fmt.Fprintf(&b, "%s running for %s", tool, time.Since(start).Round(time.Second))
				if h.opts.Status != nil {
					if note := h.opts.Status(); note != "" {
						fmt.Fprintf(&b, "; %s", note)
					}
				}
				for _, r := range h.run.Resources() {
					fmt.Fprintf(&b, "; %s %s: %s", r.Kind, r.Name, r.State)
				}
				send(b.String())
			}
		}
	}()
	return callCtx, func() {
		cancel()
		<-done
	}
}

// minProgressGap is the least time between two notes sent for a call: a
// cell printing in a loop sends its latest line a few times a second, not
// every line.
const minProgressGap = 250 * time.Millisecond

// callError is err as a JSON-RPC error carrying berth's code.
func (h *handler) callError(tool string, err error) error {
	status, code := h.opts.Classify(err)
	jcode := int64(CodeCallError)
	if code == "unknown_tool" || code == "bad_request" {
		jcode = jsonrpc.CodeInvalidParams
	}
	data, _ := json.Marshal(ErrorData{Code: code, Status: status, Tool: tool})
	return &jsonrpc.Error{Code: jcode, Message: err.Error(), Data: data}
}

// ErrorData is the data of a call's JSON-RPC error.
type ErrorData struct {
	Code   string `json:"code"`
	Status int    `json:"status"`
	Tool   string `json:"tool,omitempty"`
}

// Result converts a tool result to MCP's shape.
func Result(res *tools.Result) *mcp.CallToolResult {
	out := &mcp.CallToolResult{Content: []mcp.Content{}, IsError: res.IsError, StructuredContent: res.StructuredContent}
	for _, c := range res.Content {
		switch c.Type {
		case "image":
			out.Content = append(out.Content, &mcp.ImageContent{MIMEType: c.MimeType, Data: c.Data})
		default:
			out.Content = append(out.Content, &mcp.TextContent{Text: c.Text})
		}
	}
	return out
}

// elicit follows the run's cards during a call when they are to go to this
// client: the question card of an ask_user call (the card asking the
// call's question) when it declared elicitation, and the permission cards
// of the call's tool when the client is the operator. It
// returns nil when nothing is followed, else the function that stops it.
// Following subscribes to the run's events only then, so a permission card
// of a session that is not the operator still fails closed with nobody on
// the event stream.
func (h *handler) elicit(ctx context.Context, ss *mcp.ServerSession, tool string, args json.RawMessage) (stop func()) {
	port := h.run.Questions()
	if port == nil || ss == nil || !canElicit(ss) {
		return nil
	}
	if tool != "ask_user" && !h.opts.ClientIsOperator {
		return nil
	}
	mine := h.mine(tool, args)
	sub := port.Subscribe(^uint64(0)) // only what opens from now on
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			evs, err := sub.Next(ctx)
			if err != nil {
				return
			}
			for _, e := range evs {
				if e.Type != questions.EventCardOpened {
					continue
				}
				var c questions.Card
				if json.Unmarshal(e.Data, &c) != nil {
					continue
				}
				if !mine(c) {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.answer(ctx, ss, port, c)
				}()
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		sub.Close()
	}
}

// mine reports whether a card is one a call of tool with args draws and
// that goes to its client: other calls draw cards on the same run at the
// same time.
func (h *handler) mine(tool string, args json.RawMessage) func(questions.Card) bool {
	var question string
	if tool == "ask_user" {
		var in struct {
			Question string `json:"question"`
		}
		json.Unmarshal(args, &in) // a bad argument fails the call itself
		question = strings.TrimSpace(in.Question)
	}
	return func(c questions.Card) bool {
		switch c.Kind {
		case questions.KindQuestion:
			return tool == "ask_user" && c.Question == question
		case questions.KindPermission:
			return h.opts.ClientIsOperator && c.Tool == tool
		}
		return false
	}
}

// canElicit reports whether berth may send ss's client elicitation/create
// while it serves a call: the client declared elicitation at a protocol
// version that has server-to-client requests (before StatelessVersion).
func canElicit(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil && ip.ProtocolVersion < StatelessVersion
}

// answer sends card c to the client and answers it with the client's reply.
func (h *handler) answer(ctx context.Context, ss *mcp.ServerSession, port *questions.Port, c questions.Card) {
	params, err := ElicitParams(c)
	if err != nil {
		h.opts.Logger.Warn("mcp: card not sent as elicitation", "run", h.run.ID(), "card", c.N, "err", err)
		return
	}
	res, err := ss.Elicit(ctx, params)
	if err != nil {
		if ctx.Err() == nil {
			h.opts.Logger.Warn("mcp: elicitation failed; the card stays open on the event stream", "run", h.run.ID(), "card", c.N, "err", err)
		}
		return
	}
	a, err := AnswerOf(c, res)
	if err == nil {
		via := "over stdio"
		if id := ss.ID(); id != "" {
			via = "session " + id
		}
		a.By = h.answerer(via)
		err = port.Answer(c.N, a, h.rights())
	}
	if err != nil && !errors.Is(err, questions.ErrNoCard) {
		h.opts.Logger.Warn("mcp: the client's elicitation answer was refused; the card stays open", "run", h.run.ID(), "card", c.N, "err", err)
	}
}

// Field names of the elicitation forms.
const (
	FieldChoice   = "choice"
	FieldText     = "text"
	FieldDecision = "decision"
)

// ElicitParams is card c as an elicitation/create form.
func ElicitParams(c questions.Card) (*mcp.ElicitParams, error) {
	props := map[string]any{}
	var required []string
	var msg strings.Builder
	switch c.Kind {
	case questions.KindQuestion:
		msg.WriteString(c.Question)
		if c.Context != "" {
			msg.WriteString("\n\n" + c.Context)
		}
		if len(c.Options) > 0 {
			// Titled options (2025-11-25): each option's label is its
			// value, shown with its own description.
			titled := make([]any, len(c.Options))
			for i, o := range c.Options {
				title := o.Label
				if o.Description != "" {
					title += " — " + o.Description
				}
				titled[i] = map[string]any{"const": o.Label, "title": title}
			}
			choice := map[string]any{"type": "string", "oneOf": titled, "title": "Choice"}
			if c.MultiSelect {
				choice = map[string]any{"type": "array", "items": map[string]any{"anyOf": titled}, "title": "Choices"}
			}
			props[FieldChoice] = choice
			if !c.AllowFreeText {
				required = append(required, FieldChoice)
			}
		}
		if c.AllowFreeText {
			props[FieldText] = map[string]any{"type": "string", "title": "Answer", "description": "a typed answer"}
			if len(c.Options) == 0 {
				required = append(required, FieldText)
			}
		}
	case questions.KindPermission:
		// The call once: its whole rendering (Detail) when there is one,
		// clipped and counted, else the headline of its arguments.
		fmt.Fprintf(&msg, "May %s run? (level %s, surface %s)\n\n", c.Tool, c.Level, c.Surface)
		call := c.Detail
		if call == "" {
			call = c.Summary
		}
		msg.WriteString(clipCall(call))
		decisions := []any{
			map[string]any{"const": string(questions.Approve), "title": "Approve once"},
			map[string]any{"const": string(questions.Deny), "title": "Deny"},
			map[string]any{"const": string(questions.AllowRun), "title": fmt.Sprintf("Allow every %s call in this run", c.Tool)},
		}
		if c.TooLarge {
			decisions = decisions[1:2]
		}
		props[FieldDecision] = map[string]any{"type": "string", "oneOf": decisions, "title": "Decision"}
		required = append(required, FieldDecision)
	default:
		return nil, fmt.Errorf("mcpserver: card %d is of kind %q, which has no form", c.N, c.Kind)
	}
	schema := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		schema["required"] = required
	}
	return &mcp.ElicitParams{Mode: "form", Message: fmt.Sprintf("[card %d] %s", c.N, msg.String()), RequestedSchema: schema}, nil
}

// MaxElicitCall caps the characters of a call shown in a permission
// elicitation's message; the operator console shows the whole call.
const MaxElicitCall = 4000

// clipCall is a call's rendering cut to MaxElicitCall characters at a
// line end where there is one, saying how much was left out.
func clipCall(s string) string {
	r := []rune(s)
	if len(r) <= MaxElicitCall {
		return s
	}
	cut := MaxElicitCall
	if i := strings.LastIndexByte(string(r[:cut]), '\n'); i > 0 && i > len(string(r[:cut]))/2 {
		cut = len([]rune(string(r[:cut])[:i]))
	}
	return fmt.Sprintf("%s\n… (%d more characters of %d not shown; the operator console shows the whole call)", string(r[:cut]), len(r)-cut, len(r))
}

// AnswerOf is the card answer an elicitation result means: accept with the
// form's values; decline or cancel skips a question and denies a
// permission request.
func AnswerOf(c questions.Card, res *mcp.ElicitResult) (questions.Answer, error) {
	if res.Action != "accept" {
		if c.Kind == questions.KindPermission {
			return questions.Answer{Decision: questions.Deny}, nil
		}
		return questions.Answer{Skip: true}, nil
	}
	if c.Kind == questions.KindPermission {
		d, _ := res.Content[FieldDecision].(string)
		return questions.Answer{Decision: questions.Decision(d)}, nil
	}
	var a questions.Answer
	switch v := res.Content[FieldChoice].(type) {
	case string:
		if v != "" {
			a.Choice = []string{v}
		}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				a.Choice = append(a.Choice, s)
			}
		}
	}
	a.Text, _ = res.Content[FieldText].(string)
	if len(a.Choice) == 0 && a.Text == "" {
		return questions.Answer{}, fmt.Errorf("mcpserver: the accepted form for card %d has neither a choice nor a text", c.N)
	}
	return a, nil
}

// Classify is the default [Classifier]: the codes of the call errors
// [controller.Run.Call] returns, as the HTTP API names them.
func Classify(err error) (int, string) {
	var in *tools.InputError
	switch {
	case errors.Is(err, tools.ErrUnknownTool):
		return http.StatusNotFound, "unknown_tool"
	case errors.Is(err, tools.ErrDenied):
		return http.StatusForbidden, "denied"
	case errors.As(err, &in):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, controller.ErrRestarting):
		return http.StatusServiceUnavailable, "restarting"
	case errors.Is(err, controller.ErrUnknownRun):
		return http.StatusNotFound, "unknown_run"
	case errors.Is(err, controller.ErrTooMany):
		return http.StatusTooManyRequests, "too_many"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	case errors.Is(err, context.Canceled):
		return 499, "cancelled"
	}
	return http.StatusInternalServerError, "internal"
}
