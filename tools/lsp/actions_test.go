package lsp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/lsp"
)

// TestActionTable pins what the lsp tool's action table renders: the
// description (every action with what it reads, the caps), the schema's
// enum, and the "use one of" errors, which stay tool errors. It needs no
// language server.
func TestActionTable(t *testing.T) {
	h := newHostRun(t, lsp.Options{})
	actions := []string{"diagnostics", "definition", "type_definition", "implementation", "references", "incoming_calls", "outgoing_calls", "hover", "symbols", "code_actions", "status", "reload"}
	var info tools.Info
	for _, i := range h.reg.List(tools.SurfaceReadonly) {
		if i.Name == "lsp" {
			info = i
		}
	}
	for _, a := range actions {
		if !strings.Contains(info.Description, "\n- "+a+" ") {
			t.Errorf("the description has no line for %s:\n%s", a, info.Description)
		}
	}
	for _, want := range []string{
		"gopls, pyright, pylsp, typescript-language-server, clangd, bash-language-server, rust-analyzer, dart",
		"definition file, line, symbol[, start]:",
		"hover file, line, symbol:",
		fmt.Sprintf("who calls the function: each call site, in its caller (first %d)", lsp.MaxCalls),
		fmt.Sprintf("errors and warnings of the file (first %d)", lsp.MaxDiagnostics),
		fmt.Sprintf("every use, grouped by file (first %d)", lsp.MaxReferences),
		fmt.Sprintf("(first %d characters)", lsp.MaxHoverChars),
		fmt.Sprintf("query searches the workspace, exact names and workspace files first (first %d)", lsp.MaxWorkspaceSymbols),
		fmt.Sprintf("without locals unless depth says (first %d)", lsp.MaxDocumentSymbols),
	} {
		if !strings.Contains(info.Description, want) {
			t.Errorf("the description lacks %q:\n%s", want, info.Description)
		}
	}
	var enum []string
	for _, v := range info.InputSchema.Properties["action"].Enum {
		enum = append(enum, v.(string))
	}
	if !slices.Equal(enum, actions) {
		t.Errorf("the action enum is %q, want %q", enum, actions)
	}

	list := strings.Join(actions, ", ")
	for _, tc := range []struct{ args, want string }{
		{`{"action":"frobnicate"}`, `unknown action "frobnicate": use one of ` + list},
		{`{"action":"Definition"}`, `unknown action "Definition": use one of ` + list},
		{`{"action":""}`, "action is required: one of " + list},
	} {
		res, err := h.reg.Call(t.Context(), tools.SurfaceDefault, "lsp", json.RawMessage(tc.args))
		if err != nil || !res.IsError || !strings.Contains(res.AllText(), tc.want) {
			t.Errorf("%s: res %+v, err %v: want a tool error with %q", tc.args, res, err, tc.want)
		}
	}
	for _, args := range []string{`{}`, `{"action":5}`, `{"action":null}`, `{"Action":"hover"}`, `{"action":"hover","bogus":1}`, `{"action":"frobnicate","bogus":1}`} {
		var ie *tools.InputError
		if _, err := h.reg.Call(t.Context(), tools.SurfaceDefault, "lsp", json.RawMessage(args)); !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want an InputError", args, err)
		}
	}
}
