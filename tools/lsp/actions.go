package lsp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Caps of the lsp tool (docs/tools.md §2).
const (
	MaxReferences       = 50
	MaxCalls            = 50
	MaxWorkspaceSymbols = 100
	MaxDocumentSymbols  = 200
	MaxLocations        = 50
	MaxDiagnostics      = 200
	MaxCodeActions      = 50
	MaxHoverChars       = 4000
	// MaxLibraryHoverChars caps the first paragraph of the docs of a
	// symbol from outside the workspace (a builtin, a library, a local's
	// type), which hover shows after its signature.
	MaxLibraryHoverChars = 600
	// MaxLineChars caps a source line shown next to a location.
	MaxLineChars = 200
	// nearbyLines is how far around the given line a missing symbol is
	// looked for, to suggest the right line.
	nearbyLines = 10
)

// Input is the lsp tool's arguments.
type Input struct {
	Action string `json:"action" jsonschema:"what to ask; the tool's description says what each action reads"`
	File   string `json:"file,omitempty" jsonschema:"the file, relative to the workspace; \"*\" with diagnostics runs the project check"`
	Line   int    `json:"line,omitempty" jsonschema:"1-based line of the symbol"`
	Symbol string `json:"symbol,omitempty" jsonschema:"the identifier on that line; a whole identifier is matched first, a part of one only when none matches; \"name#2\" picks its second occurrence on the line"`
	Query  string `json:"query,omitempty" jsonschema:"symbols: search the whole workspace for this name"`
	Start  int    `json:"start,omitempty" jsonschema:"lists (references, calls, symbols): skip this many items, to page past the first ones"`
	Depth  int    `json:"depth,omitempty" jsonschema:"symbols with file: how many levels to list (default 2: top-level symbols and their members, without the locals of functions; a depth given lists locals too)"`
	Kind   string `json:"kind,omitempty" jsonschema:"symbols: only these kinds, comma-separated (function, method, class, struct, interface, variable, constant, field, …)"`
}

// Register adds lsp (read) and lsp_rename (write) to r, bound to a new
// supervisor, with lsp's description and action enum rendered from its
// table, and wraps the write tools with diagnostics on write. The caller
// closes the supervisor when the run closes.
func Register(r *tools.Registry, sb sandbox.Sandbox, ws sandbox.FS, runCtx context.Context, opts Options) *Supervisor {
	s := New(sb, ws, runCtx, opts)
	tools.Register(r, tools.Tool{Name: lspTool, Level: tools.LevelRead, Description: describe(s.serverIDs()), Hints: tools.Hints{Idempotent: true, Confined: true}}, noted(s, retried(s.do)), tools.Enum("action", actionNames()...))
	tools.Register(r, tools.Tool{Name: "lsp_rename", Level: tools.LevelWrite, Description: renameDescription, Hints: tools.Hints{Confined: true}}, noted(s, retried(s.rename)))
	r.Use(s.Middleware())
	return s
}

// lspTool is the name of the tool that the action table is of.
const lspTool = "lsp"

// action is a row of the lsp tool's table: what the tool's description,
// its schema's enum and its "use one of" errors are rendered from, and
// what a call runs.
type action struct {
	name string
	args string // the Input fields it reads, as the description shows them
	doc  string // what it answers, for the description
	run  handler
}

// handler runs one action of an lsp call.
type handler func(s *Supervisor, ctx context.Context, in Input) (*tools.Result, error)

// atSymbol is what a position action reads (LSP-2), and atSymbolPaged
// what one that answers a list reads.
const (
	atSymbol      = "file, line, symbol"
	atSymbolPaged = "file, line, symbol[, start]"
)

// actions is the lsp tool's table, in the order its description lists
// them (docs/tools.md §2).
var actions = []action{
	{"diagnostics", "file", fmt.Sprintf(`errors and warnings of the file (first %d); file "*" runs the project check (go vet, cargo check, tsc, pyright/mypy)`, MaxDiagnostics), (*Supervisor).diagnostics},
	{"definition", atSymbolPaged, fmt.Sprintf("where the symbol is defined (first %d)", MaxLocations), navigation("textDocument/definition", (*Supervisor).locationsAt)},
	{"type_definition", atSymbolPaged, fmt.Sprintf("where its type is defined (first %d)", MaxLocations), navigation("textDocument/typeDefinition", (*Supervisor).locationsAt)},
	{"implementation", atSymbolPaged, fmt.Sprintf("what implements it (first %d)", MaxLocations), navigation("textDocument/implementation", (*Supervisor).locationsAt)},
	{"references", atSymbolPaged, fmt.Sprintf("every use, grouped by file (first %d)", MaxReferences), navigation("textDocument/references", (*Supervisor).references)},
	{"incoming_calls", atSymbolPaged, fmt.Sprintf("who calls the function: each call site, in its caller (first %d)", MaxCalls), navigation("textDocument/prepareCallHierarchy", calls(true))},
	{"outgoing_calls", atSymbolPaged, fmt.Sprintf("what the function calls: each call site in it, with the callee (first %d)", MaxCalls), navigation("textDocument/prepareCallHierarchy", calls(false))},
	{"hover", atSymbol, fmt.Sprintf("its signature and doc (first %d characters)", MaxHoverChars), navigation("textDocument/hover", (*Supervisor).hover)},
	{"symbols", "query or file[, kind, depth, start]", fmt.Sprintf("query searches the workspace, exact names and workspace files first (first %d); file lists the file's symbols with kinds and lines, %d levels deep without locals unless depth says (first %d)", MaxWorkspaceSymbols, DefaultSymbolDepth, MaxDocumentSymbols), (*Supervisor).symbols},
	{"code_actions", atSymbol, fmt.Sprintf("the server's quick fixes there, listed, not applied (first %d)", MaxCodeActions), navigation("textDocument/codeAction", (*Supervisor).codeActions)},
	{"status", "[file]", "every server of the table here — root, marker, binary, running or why not", (*Supervisor).status},
	{"reload", "[file]", "restart the server of this root (all running servers without file)", (*Supervisor).reload},
}

// actionNames returns the names of the table's actions, in its order.
func actionNames() []string {
	names := make([]string, len(actions))
	for i, a := range actions {
		names[i] = a.name
	}
	return names
}

// describe renders the lsp tool's description: the servers it asks
// (servers, a list of their ids), then one line per action of the table.
func describe(servers string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Ask the project's language server (%s) running in the sandbox.\n", servers)
	b.WriteString("Positions are a 1-based line plus the symbol's identifier on that line — never a column; each answer says what it resolved (\"resolved at main.go:11:15-20\").")
	for _, a := range actions {
		fmt.Fprintf(&b, "\n- %s %s: %s.", a.name, a.args, a.doc)
	}
	return b.String()
}

// lookup returns the table's row for an action, or the error that names
// the actions there are.
func lookup(name string) (*action, error) {
	for i := range actions {
		if actions[i].name == name {
			return &actions[i], nil
		}
	}
	if name == "" {
		return nil, tools.Fail("action is required: one of %s", strings.Join(actionNames(), ", "))
	}
	return nil, tools.Fail("unknown action %q: use one of %s", name, strings.Join(actionNames(), ", "))
}

// do runs an lsp call: its action's row of the table, on an open run.
func (s *Supervisor) do(ctx context.Context, in Input) (*tools.Result, error) {
	if s.isClosed() {
		return nil, errClosed
	}
	a, err := lookup(in.Action)
	if err != nil {
		return nil, err
	}
	return a.run(s, ctx, in)
}

// retried is the handler of a tool of the supervisor's over h. When the
// server died under the call (killed, crashed) and nothing was changed, h
// runs once more, with a restarted server. Its error goes to the registry,
// which makes it the tool's error result, through forModel.
func retried[In any](h func(context.Context, In) (*tools.Result, error)) func(context.Context, In) (*tools.Result, error) {
	return func(ctx context.Context, in In) (*tools.Result, error) {
		res, err := h(ctx, in)
		if errors.Is(err, errDied) && ctx.Err() == nil {
			res, err = h(ctx, in)
		}
		return res, forModel(ctx, err)
	}
}

// forModel drops the "lsp: " that the errors of the protocol engine
// (package berth.dev/berth/lsp) and of the supervisor start with: the
// model called lsp, so the prefix tells it nothing. It is the one change
// made to an error on its way out; the call's end stays a call error.
func forModel(ctx context.Context, err error) error {
	if err == nil || tools.IsCallError(ctx, err) {
		return err
	}
	if msg, ok := strings.CutPrefix(err.Error(), "lsp: "); ok {
		return tools.Fail("%s", msg)
	}
	return err
}
