package lsp

import (
	"context"
	"encoding/json"
	"fmt"
)

func positionParams(uri string, pos Position) TextDocumentPositionParams {
	return TextDocumentPositionParams{TextDocument: TextDocumentIdentifier{URI: uri}, Position: pos}
}

// Hover asks textDocument/hover; it returns nil when the server has nothing.
func (c *Client) Hover(ctx context.Context, uri string, pos Position) (*Hover, error) {
	var raw json.RawMessage
	if err := c.Call(ctx, "textDocument/hover", positionParams(uri, pos), &raw); err != nil {
		return nil, err
	}
	if isNull(raw) {
		return nil, nil
	}
	var h Hover
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("lsp: textDocument/hover: decoding the answer: %w", err)
	}
	return &h, nil
}

// Locations asks a definition-like method ("textDocument/definition",
// "textDocument/typeDefinition", "textDocument/implementation",
// "textDocument/declaration") and normalises the answer with
// [DecodeLocations].
func (c *Client) Locations(ctx context.Context, method, uri string, pos Position) ([]Location, error) {
	var raw json.RawMessage
	if err := c.Call(ctx, method, positionParams(uri, pos), &raw); err != nil {
		return nil, err
	}
	locs, err := DecodeLocations(raw)
	if err != nil {
		return nil, fmt.Errorf("lsp: %s: %w", method, err)
	}
	return locs, nil
}

// References asks textDocument/references.
func (c *Client) References(ctx context.Context, uri string, pos Position, includeDeclaration bool) ([]Location, error) {
	params := struct {
		TextDocumentPositionParams
		Context struct {
			IncludeDeclaration bool `json:"includeDeclaration"`
		} `json:"context"`
	}{TextDocumentPositionParams: positionParams(uri, pos)}
	params.Context.IncludeDeclaration = includeDeclaration
	var raw json.RawMessage
	if err := c.Call(ctx, "textDocument/references", params, &raw); err != nil {
		return nil, err
	}
	locs, err := DecodeLocations(raw)
	if err != nil {
		return nil, fmt.Errorf("lsp: textDocument/references: %w", err)
	}
	return locs, nil
}

// DocumentSymbols asks textDocument/documentSymbol; see
// [DecodeDocumentSymbols] for the two shapes.
func (c *Client) DocumentSymbols(ctx context.Context, uri string) ([]DocumentSymbol, []SymbolInformation, error) {
	var raw json.RawMessage
	if err := c.Call(ctx, "textDocument/documentSymbol", map[string]any{"textDocument": TextDocumentIdentifier{URI: uri}}, &raw); err != nil {
		return nil, nil, err
	}
	return DecodeDocumentSymbols(raw)
}

// WorkspaceSymbols asks workspace/symbol.
func (c *Client) WorkspaceSymbols(ctx context.Context, query string) ([]SymbolInformation, error) {
	var syms []SymbolInformation
	if err := c.Call(ctx, "workspace/symbol", map[string]string{"query": query}, &syms); err != nil {
		return nil, err
	}
	return syms, nil
}

// PrepareCallHierarchy asks textDocument/prepareCallHierarchy: the
// function-like symbols at pos (none when there is none).
func (c *Client) PrepareCallHierarchy(ctx context.Context, uri string, pos Position) ([]CallHierarchyItem, error) {
	var items []CallHierarchyItem
	if err := c.Call(ctx, "textDocument/prepareCallHierarchy", positionParams(uri, pos), &items); err != nil {
		return nil, err
	}
	return items, nil
}

// IncomingCalls asks callHierarchy/incomingCalls: who calls item, each
// caller with its call sites.
func (c *Client) IncomingCalls(ctx context.Context, item CallHierarchyItem) ([]CallHierarchyCall, error) {
	return c.calls(ctx, "callHierarchy/incomingCalls", "from", item)
}

// OutgoingCalls asks callHierarchy/outgoingCalls: what item calls, each
// callee with the call sites in item's document.
func (c *Client) OutgoingCalls(ctx context.Context, item CallHierarchyItem) ([]CallHierarchyCall, error) {
	return c.calls(ctx, "callHierarchy/outgoingCalls", "to", item)
}

// calls asks a call hierarchy method whose answers name the other end of
// each call in their field end ("from" or "to").
func (c *Client) calls(ctx context.Context, method, end string, item CallHierarchyItem) ([]CallHierarchyCall, error) {
	var raw []map[string]json.RawMessage
	if err := c.Call(ctx, method, map[string]any{"item": item}, &raw); err != nil {
		return nil, err
	}
	out := make([]CallHierarchyCall, len(raw))
	for i, x := range raw {
		if err := json.Unmarshal(x[end], &out[i].Item); err != nil {
			return nil, fmt.Errorf("lsp: %s: decoding call %d: %w", method, i, err)
		}
		if fr := x["fromRanges"]; fr != nil && json.Unmarshal(fr, &out[i].FromRanges) != nil {
			return nil, fmt.Errorf("lsp: %s: the call sites of call %d are not ranges", method, i)
		}
	}
	return out, nil
}

// CodeActions asks textDocument/codeAction for a range, passing the
// diagnostics that overlap it.
func (c *Client) CodeActions(ctx context.Context, uri string, rng Range, diagnostics []Diagnostic) ([]CodeAction, error) {
	if diagnostics == nil {
		diagnostics = []Diagnostic{}
	}
	params := map[string]any{
		"textDocument": TextDocumentIdentifier{URI: uri},
		"range":        rng,
		"context":      CodeActionContext{Diagnostics: diagnostics},
	}
	var raw json.RawMessage
	if err := c.Call(ctx, "textDocument/codeAction", params, &raw); err != nil {
		return nil, err
	}
	return DecodeCodeActions(raw)
}

// PrepareRename asks textDocument/prepareRename.
func (c *Client) PrepareRename(ctx context.Context, uri string, pos Position) (PrepareRenameResult, error) {
	var raw json.RawMessage
	if err := c.Call(ctx, "textDocument/prepareRename", positionParams(uri, pos), &raw); err != nil {
		return PrepareRenameResult{}, err
	}
	return DecodePrepareRename(raw)
}

// Rename asks textDocument/rename; it returns nil when the server has no
// edit. The edit is not applied.
func (c *Client) Rename(ctx context.Context, uri string, pos Position, newName string) (*WorkspaceEdit, error) {
	params := struct {
		TextDocumentPositionParams
		NewName string `json:"newName"`
	}{positionParams(uri, pos), newName}
	var edit *WorkspaceEdit
	if err := c.Call(ctx, "textDocument/rename", params, &edit); err != nil {
		return nil, err
	}
	return edit, nil
}

// PullDiagnostics asks textDocument/diagnostic (LSP 3.17 pull diagnostics).
// previousResultID may be empty.
func (c *Client) PullDiagnostics(ctx context.Context, uri, previousResultID string) (DocumentDiagnosticReport, error) {
	params := map[string]any{"textDocument": TextDocumentIdentifier{URI: uri}}
	if previousResultID != "" {
		params["previousResultId"] = previousResultID
	}
	var rep DocumentDiagnosticReport
	if err := c.Call(ctx, "textDocument/diagnostic", params, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// Character converts a byte offset within one line of text into an LSP
// character offset in the given encoding ("utf-8", "utf-16" or "utf-32").
// An offset past the end of the line is clamped to its end.
func Character(line string, byteOffset int, encoding string) uint32 {
	byteOffset = min(max(byteOffset, 0), len(line))
	if encoding == "utf-8" {
		return uint32(byteOffset)
	}
	var n uint32
	for _, r := range line[:byteOffset] {
		n++
		if encoding != "utf-32" && r >= 0x10000 {
			n++ // a surrogate pair
		}
	}
	return n
}

// ByteOffset converts an LSP character offset within one line of text into
// a byte offset, the inverse of [Character]. An offset past the end of the
// line, or inside a UTF-16 surrogate pair, is clamped.
func ByteOffset(line string, character uint32, encoding string) int {
	if encoding == "utf-8" {
		return min(int(character), len(line))
	}
	var n uint32
	for i, r := range line {
		if n >= character {
			return i
		}
		n++
		if encoding != "utf-32" && r >= 0x10000 {
			n++
		}
		if n > character { // inside a surrogate pair
			return i
		}
	}
	return len(line)
}
