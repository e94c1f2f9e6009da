package lsp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// This file holds the few LSP 3.17 structures the engine and the tools use,
// as plain structs. Unions stay json.RawMessage, read by the Decode helpers
// below, so a server's unexpected shape is an error to report rather than a
// silently empty value.

// Position is a zero-based line and character offset. How Character counts
// depends on the negotiated position encoding; see [Client.PositionEncoding]
// and [Character].
type Position struct {
	Line      uint32 `json:"line"`
	Character uint32 `json:"character"`
}

// Range is a half-open span between two positions.
type Range struct {
	Start Position `json:"start"`
	End   Position `json:"end"`
}

// Location is a range in a document.
type Location struct {
	URI   string `json:"uri"`
	Range Range  `json:"range"`
}

// LocationLink is a Location with the origin span and the target's full
// declaration range.
type LocationLink struct {
	OriginSelectionRange *Range `json:"originSelectionRange,omitempty"`
	TargetURI            string `json:"targetUri"`
	TargetRange          Range  `json:"targetRange"`
	TargetSelectionRange Range  `json:"targetSelectionRange"`
}

// TextDocumentIdentifier names a document.
type TextDocumentIdentifier struct {
	URI string `json:"uri"`
}

// TextDocumentItem is a document as sent by didOpen.
type TextDocumentItem struct {
	URI        string `json:"uri"`
	LanguageID string `json:"languageId"`
	Version    int32  `json:"version"`
	Text       string `json:"text"`
}

// VersionedTextDocumentIdentifier names a document at a version.
type VersionedTextDocumentIdentifier struct {
	URI     string `json:"uri"`
	Version int32  `json:"version"`
}

// OptionalVersionedTextDocumentIdentifier names a document at a version, or
// at whatever version is on disk when Version is nil.
type OptionalVersionedTextDocumentIdentifier struct {
	URI     string `json:"uri"`
	Version *int32 `json:"version"`
}

// TextDocumentPositionParams addresses a position in a document.
type TextDocumentPositionParams struct {
	TextDocument TextDocumentIdentifier `json:"textDocument"`
	Position     Position               `json:"position"`
}

// DiagnosticSeverity ranks a diagnostic; zero means the server did not say.
type DiagnosticSeverity int

// The diagnostic severities.
const (
	SeverityError       DiagnosticSeverity = 1
	SeverityWarning     DiagnosticSeverity = 2
	SeverityInformation DiagnosticSeverity = 3
	SeverityHint        DiagnosticSeverity = 4
)

// String returns "error", "warning", "info", "hint" or "unknown".
func (s DiagnosticSeverity) String() string {
	switch s {
	case SeverityError:
		return "error"
	case SeverityWarning:
		return "warning"
	case SeverityInformation:
		return "info"
	case SeverityHint:
		return "hint"
	}
	return "unknown"
}

// Diagnostic is one error, warning or hint.
type Diagnostic struct {
	Range              Range                          `json:"range"`
	Severity           DiagnosticSeverity             `json:"severity,omitempty"`
	Code               json.RawMessage                `json:"code,omitempty"` // integer or string
	CodeDescription    *CodeDescription               `json:"codeDescription,omitempty"`
	Source             string                         `json:"source,omitempty"`
	Message            string                         `json:"message"`
	Tags               []int                          `json:"tags,omitempty"`
	RelatedInformation []DiagnosticRelatedInformation `json:"relatedInformation,omitempty"`
	Data               json.RawMessage                `json:"data,omitempty"`
}

// CodeString returns the diagnostic's code as text ("" when absent).
func (d Diagnostic) CodeString() string {
	if len(d.Code) == 0 || string(d.Code) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(d.Code, &s) == nil {
		return s
	}
	return string(d.Code)
}

// CodeDescription links a diagnostic code to documentation.
type CodeDescription struct {
	Href string `json:"href"`
}

// DiagnosticRelatedInformation points at a related location.
type DiagnosticRelatedInformation struct {
	Location Location `json:"location"`
	Message  string   `json:"message"`
}

// PublishDiagnosticsParams is the textDocument/publishDiagnostics payload.
// Version is nil when the server does not say which text it checked.
type PublishDiagnosticsParams struct {
	URI         string       `json:"uri"`
	Version     *int32       `json:"version,omitempty"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// DocumentDiagnosticReport is the result of a textDocument/diagnostic pull:
// Kind "full" carries Items, Kind "unchanged" means the ResultID still holds.
type DocumentDiagnosticReport struct {
	Kind             string                     `json:"kind"`
	ResultID         string                     `json:"resultId,omitempty"`
	Items            []Diagnostic               `json:"items,omitempty"`
	RelatedDocuments map[string]json.RawMessage `json:"relatedDocuments,omitempty"`
}

// WorkspaceFolder is a root the server should consider.
type WorkspaceFolder struct {
	URI  string `json:"uri"`
	Name string `json:"name"`
}

// ClientInfo names the client in initialize.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// InitializeParams is the subset of the initialize request we send.
// ProcessID is deliberately always null: the server may run in another pid
// namespace, and a server told to watch a pid it cannot see exits.
type InitializeParams struct {
	ProcessID             *int              `json:"processId"`
	ClientInfo            *ClientInfo       `json:"clientInfo,omitempty"`
	Locale                string            `json:"locale,omitempty"`
	RootURI               *string           `json:"rootUri"`
	InitializationOptions any               `json:"initializationOptions,omitempty"`
	Capabilities          any               `json:"capabilities"`
	Trace                 string            `json:"trace,omitempty"`
	WorkspaceFolders      []WorkspaceFolder `json:"workspaceFolders"`
}

// InitializeResult is the server's answer to initialize.
type InitializeResult struct {
	Capabilities ServerCapabilities `json:"capabilities"`
	ServerInfo   *ServerInfo        `json:"serverInfo,omitempty"`
}

// ServerInfo names the server.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// ServerCapabilities is the subset of server capabilities we act on. The
// provider fields are unions (boolean or options) kept raw; ask
// [ServerCapabilities.Supports].
type ServerCapabilities struct {
	PositionEncoding        string          `json:"positionEncoding,omitempty"`
	TextDocumentSync        json.RawMessage `json:"textDocumentSync,omitempty"`
	HoverProvider           json.RawMessage `json:"hoverProvider,omitempty"`
	DefinitionProvider      json.RawMessage `json:"definitionProvider,omitempty"`
	TypeDefinitionProvider  json.RawMessage `json:"typeDefinitionProvider,omitempty"`
	ImplementationProvider  json.RawMessage `json:"implementationProvider,omitempty"`
	ReferencesProvider      json.RawMessage `json:"referencesProvider,omitempty"`
	DocumentSymbolProvider  json.RawMessage `json:"documentSymbolProvider,omitempty"`
	WorkspaceSymbolProvider json.RawMessage `json:"workspaceSymbolProvider,omitempty"`
	CodeActionProvider      json.RawMessage `json:"codeActionProvider,omitempty"`
	RenameProvider          json.RawMessage `json:"renameProvider,omitempty"`
	DiagnosticProvider      json.RawMessage `json:"diagnosticProvider,omitempty"`
	CallHierarchyProvider   json.RawMessage `json:"callHierarchyProvider,omitempty"`
	Workspace               json.RawMessage `json:"workspace,omitempty"`
}

// TextDocumentSyncKind says how the server wants document changes.
type TextDocumentSyncKind int

// The sync kinds.
const (
	SyncNone        TextDocumentSyncKind = 0
	SyncFull        TextDocumentSyncKind = 1
	SyncIncremental TextDocumentSyncKind = 2
)

type textDocumentSyncOptions struct {
	OpenClose bool                 `json:"openClose"`
	Change    TextDocumentSyncKind `json:"change"`
	Save      json.RawMessage      `json:"save"` // boolean or {includeText}
}

func (s ServerCapabilities) syncOptions() textDocumentSyncOptions {
	var kind TextDocumentSyncKind
	if json.Unmarshal(s.TextDocumentSync, &kind) == nil {
		return textDocumentSyncOptions{OpenClose: true, Change: kind}
	}
	var o textDocumentSyncOptions
	_ = json.Unmarshal(s.TextDocumentSync, &o)
	return o
}

// SyncKind returns how the server wants changes sent.
func (s ServerCapabilities) SyncKind() TextDocumentSyncKind { return s.syncOptions().Change }

// SaveIncludesText reports whether didSave should carry the document text.
func (s ServerCapabilities) SaveIncludesText() bool {
	var o struct {
		IncludeText bool `json:"includeText"`
	}
	return json.Unmarshal(s.syncOptions().Save, &o) == nil && o.IncludeText
}

// PrepareRename reports whether the server answers textDocument/prepareRename.
func (s ServerCapabilities) PrepareRename() bool {
	var o struct {
		PrepareProvider bool `json:"prepareProvider"`
	}
	return json.Unmarshal(s.RenameProvider, &o) == nil && o.PrepareProvider
}

// Supports reports whether the static capabilities announce method (for
// example "textDocument/hover"). Dynamic registrations are checked by
// [Client.Supports].
func (s ServerCapabilities) Supports(method string) bool {
	var raw json.RawMessage
	switch method {
	case "textDocument/hover":
		raw = s.HoverProvider
	case "textDocument/definition":
		raw = s.DefinitionProvider
	case "textDocument/typeDefinition":
		raw = s.TypeDefinitionProvider
	case "textDocument/implementation":
		raw = s.ImplementationProvider
	case "textDocument/references":
		raw = s.ReferencesProvider
	case "textDocument/documentSymbol":
		raw = s.DocumentSymbolProvider
	case "workspace/symbol":
		raw = s.WorkspaceSymbolProvider
	case "textDocument/codeAction":
		raw = s.CodeActionProvider
	case "textDocument/rename":
		raw = s.RenameProvider
	case "textDocument/prepareRename":
		return s.PrepareRename()
	case "textDocument/diagnostic":
		raw = s.DiagnosticProvider
	case "textDocument/prepareCallHierarchy", "callHierarchy/incomingCalls", "callHierarchy/outgoingCalls":
		raw = s.CallHierarchyProvider
	default:
		return false
	}
	return provided(raw)
}

// provided reads a "boolean | options" capability.
func provided(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "false" && string(raw) != "null"
}

// Registration is a capability the server registered dynamically.
type Registration struct {
	ID              string          `json:"id"`
	Method          string          `json:"method"`
	RegisterOptions json.RawMessage `json:"registerOptions,omitempty"`
}

// ConfigurationItem is one entry of a workspace/configuration request.
type ConfigurationItem struct {
	ScopeURI string `json:"scopeUri,omitempty"`
	Section  string `json:"section,omitempty"`
}

// WorkDoneProgress is the value of a $/progress notification for work done
// progress: Kind is "begin" (with Title), "report" or "end".
type WorkDoneProgress struct {
	Kind        string  `json:"kind"`
	Title       string  `json:"title,omitempty"`
	Cancellable bool    `json:"cancellable,omitempty"`
	Message     string  `json:"message,omitempty"`
	Percentage  *uint32 `json:"percentage,omitempty"`
}

// MessageType ranks window/logMessage and window/showMessage.
type MessageType int

// The message types.
const (
	MessageError   MessageType = 1
	MessageWarning MessageType = 2
	MessageInfo    MessageType = 3
	MessageLog     MessageType = 4
	MessageDebug   MessageType = 5
)

// String returns "error", "warning", "info", "log" or "debug".
func (t MessageType) String() string {
	switch t {
	case MessageError:
		return "error"
	case MessageWarning:
		return "warning"
	case MessageInfo:
		return "info"
	case MessageLog:
		return "log"
	case MessageDebug:
		return "debug"
	}
	return "unknown"
}

// TextEdit replaces Range with NewText.
type TextEdit struct {
	Range   Range  `json:"range"`
	NewText string `json:"newText"`
}

// TextDocumentEdit is a list of edits to one document version.
type TextDocumentEdit struct {
	TextDocument OptionalVersionedTextDocumentIdentifier `json:"textDocument"`
	Edits        []TextEdit                              `json:"edits"`
}

// CreateFile is a workspace edit that creates a file.
type CreateFile struct {
	Kind    string             `json:"kind"` // "create"
	URI     string             `json:"uri"`
	Options *CreateFileOptions `json:"options,omitempty"`
}

// CreateFileOptions modify [CreateFile].
type CreateFileOptions struct {
	Overwrite      bool `json:"overwrite,omitempty"`
	IgnoreIfExists bool `json:"ignoreIfExists,omitempty"`
}

// RenameFile is a workspace edit that renames a file.
type RenameFile struct {
	Kind    string             `json:"kind"` // "rename"
	OldURI  string             `json:"oldUri"`
	NewURI  string             `json:"newUri"`
	Options *CreateFileOptions `json:"options,omitempty"` // same two flags
}

// DeleteFile is a workspace edit that deletes a file or directory.
type DeleteFile struct {
	Kind    string             `json:"kind"` // "delete"
	URI     string             `json:"uri"`
	Options *DeleteFileOptions `json:"options,omitempty"`
}

// DeleteFileOptions modify [DeleteFile].
type DeleteFileOptions struct {
	Recursive         bool `json:"recursive,omitempty"`
	IgnoreIfNotExists bool `json:"ignoreIfNotExists,omitempty"`
}

// WorkspaceEdit is a change to many documents: either Changes (URI → edits)
// or DocumentChanges (TextDocumentEdit, CreateFile, RenameFile, DeleteFile in
// order), which wins when both are present. Read it with
// [WorkspaceEdit.Operations].
type WorkspaceEdit struct {
	Changes           map[string][]TextEdit `json:"changes,omitempty"`
	DocumentChanges   []json.RawMessage     `json:"documentChanges,omitempty"`
	ChangeAnnotations json.RawMessage       `json:"changeAnnotations,omitempty"`
}

// DocumentChange is one step of a WorkspaceEdit; exactly one field is set.
type DocumentChange struct {
	Edit   *TextDocumentEdit
	Create *CreateFile
	Rename *RenameFile
	Delete *DeleteFile
}

// URIs lists every URI the step touches, for a workspace containment check.
func (c DocumentChange) URIs() []string {
	switch {
	case c.Edit != nil:
		return []string{c.Edit.TextDocument.URI}
	case c.Create != nil:
		return []string{c.Create.URI}
	case c.Rename != nil:
		return []string{c.Rename.OldURI, c.Rename.NewURI}
	case c.Delete != nil:
		return []string{c.Delete.URI}
	}
	return nil
}

// Operations returns the edit's steps in the order they must be applied.
// Changes (an unordered map) comes out sorted by URI. An unknown kind is an
// error: applying part of an edit we do not understand would be worse than
// refusing it.
func (e WorkspaceEdit) Operations() ([]DocumentChange, error) {
	if len(e.DocumentChanges) == 0 {
		uris := make([]string, 0, len(e.Changes))
		for uri := range e.Changes {
			uris = append(uris, uri)
		}
		sort.Strings(uris)
		ops := make([]DocumentChange, 0, len(uris))
		for _, uri := range uris {
			ops = append(ops, DocumentChange{Edit: &TextDocumentEdit{
				TextDocument: OptionalVersionedTextDocumentIdentifier{URI: uri},
				Edits:        e.Changes[uri],
			}})
		}
		return ops, nil
	}
	ops := make([]DocumentChange, 0, len(e.DocumentChanges))
	for i, raw := range e.DocumentChanges {
		var probe struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return nil, fmt.Errorf("lsp: workspace edit step %d is not an object: %w", i, err)
		}
		var op DocumentChange
		var target any
		switch probe.Kind {
		case "":
			op.Edit = new(TextDocumentEdit)
			target = op.Edit
		case "create":
			op.Create = new(CreateFile)
			target = op.Create
		case "rename":
			op.Rename = new(RenameFile)
			target = op.Rename
		case "delete":
			op.Delete = new(DeleteFile)
			target = op.Delete
		default:
			return nil, fmt.Errorf("lsp: workspace edit step %d has unknown kind %q; refusing the whole edit", i, clipText(probe.Kind, 40))
		}
		if err := json.Unmarshal(raw, target); err != nil {
			return nil, fmt.Errorf("lsp: workspace edit step %d (%s): %w", i, probe.Kind, err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// ApplyWorkspaceEditParams is the workspace/applyEdit request.
type ApplyWorkspaceEditParams struct {
	Label string        `json:"label,omitempty"`
	Edit  WorkspaceEdit `json:"edit"`
}

// ApplyWorkspaceEditResult answers workspace/applyEdit.
type ApplyWorkspaceEditResult struct {
	Applied       bool    `json:"applied"`
	FailureReason string  `json:"failureReason,omitempty"`
	FailedChange  *uint32 `json:"failedChange,omitempty"`
}

// MarkupContent is formatted text; Kind is "markdown" or "plaintext".
type MarkupContent struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

// Hover is the result of textDocument/hover. Contents is a union
// (MarkupContent, MarkedString or MarkedString[]); read it with Text.
type Hover struct {
	Contents json.RawMessage `json:"contents"`
	Range    *Range          `json:"range,omitempty"`
}

// Text returns the hover contents as text: markup as is, marked strings
// joined by blank lines, code blocks fenced with their language.
func (h Hover) Text() (string, error) {
	var markup MarkupContent
	if err := json.Unmarshal(h.Contents, &markup); err == nil && markup.Kind != "" {
		return markup.Value, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(h.Contents, &list); err != nil {
		list = []json.RawMessage{h.Contents}
	}
	parts := make([]string, 0, len(list))
	for _, raw := range list {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			parts = append(parts, s)
			continue
		}
		var ms struct {
			Language *string `json:"language"`
			Value    string  `json:"value"`
		}
		if err := json.Unmarshal(raw, &ms); err != nil || ms.Language == nil {
			return "", fmt.Errorf("lsp: hover contents %s are neither markup nor marked strings", clipText(string(raw), 80))
		}
		parts = append(parts, "```"+*ms.Language+"\n"+ms.Value+"\n```")
	}
	return strings.Join(parts, "\n\n"), nil
}

// SymbolKind classifies a symbol (1 = File … 26 = TypeParameter).
type SymbolKind int

var symbolKindNames = [...]string{"", "file", "module", "namespace", "package", "class", "method",
	"property", "field", "constructor", "enum", "interface", "function", "variable", "constant",
	"string", "number", "boolean", "array", "object", "key", "null", "enum member", "struct",
	"event", "operator", "type parameter"}

// String returns the lower-case kind name, such as "function".
func (k SymbolKind) String() string {
	if k > 0 && int(k) < len(symbolKindNames) {
		return symbolKindNames[k]
	}
	return fmt.Sprintf("kind %d", int(k))
}

// SymbolInformation is a flat symbol (document or workspace symbols). A
// workspace symbol may carry a Location without a range.
type SymbolInformation struct {
	Name          string     `json:"name"`
	Kind          SymbolKind `json:"kind"`
	Tags          []int      `json:"tags,omitempty"`
	Deprecated    bool       `json:"deprecated,omitempty"`
	Location      Location   `json:"location"`
	ContainerName string     `json:"containerName,omitempty"`
}

// DocumentSymbol is a symbol in a document's hierarchy.
type DocumentSymbol struct {
	Name           string           `json:"name"`
	Detail         string           `json:"detail,omitempty"`
	Kind           SymbolKind       `json:"kind"`
	Tags           []int            `json:"tags,omitempty"`
	Deprecated     bool             `json:"deprecated,omitempty"`
	Range          Range            `json:"range"`
	SelectionRange Range            `json:"selectionRange"`
	Children       []DocumentSymbol `json:"children,omitempty"`
}

// CallHierarchyItem is a function-like symbol of a call hierarchy: what
// textDocument/prepareCallHierarchy returns and the incoming and outgoing
// calls name. Data is the server's own, sent back unchanged.
type CallHierarchyItem struct {
	Name           string          `json:"name"`
	Kind           SymbolKind      `json:"kind"`
	Tags           []int           `json:"tags,omitempty"`
	Detail         string          `json:"detail,omitempty"`
	URI            string          `json:"uri"`
	Range          Range           `json:"range"`
	SelectionRange Range           `json:"selectionRange"`
	Data           json.RawMessage `json:"data,omitempty"`
}

// CallHierarchyCall is one answer of callHierarchy/incomingCalls (Item is
// the caller, "from") or callHierarchy/outgoingCalls (Item is the callee,
// "to"). FromRanges are the call sites, always in the caller's document.
type CallHierarchyCall struct {
	Item       CallHierarchyItem
	FromRanges []Range
}

// Command is a server command a client may execute.
type Command struct {
	Title     string            `json:"title"`
	Command   string            `json:"command"`
	Arguments []json.RawMessage `json:"arguments,omitempty"`
}

// CodeAction is a fix or refactoring the server offers. A bare Command in a
// codeAction result is decoded as a CodeAction with only Title and Command.
type CodeAction struct {
	Title       string       `json:"title"`
	Kind        string       `json:"kind,omitempty"`
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
	IsPreferred bool         `json:"isPreferred,omitempty"`
	Disabled    *struct {
		Reason string `json:"reason"`
	} `json:"disabled,omitempty"`
	Edit    *WorkspaceEdit  `json:"edit,omitempty"`
	Command *Command        `json:"command,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// CodeActionContext carries the diagnostics a code action request is about.
type CodeActionContext struct {
	Diagnostics []Diagnostic `json:"diagnostics"`
	Only        []string     `json:"only,omitempty"`
}

// isNull reports an absent or null result.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// DecodeLocations reads a definition-like result (null, Location,
// Location[] or LocationLink[]). A LocationLink becomes a Location at its
// TargetSelectionRange: the symbol's name, not its whole declaration.
func DecodeLocations(raw json.RawMessage) ([]Location, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil
	}
	if raw[0] == '{' {
		var loc Location
		if err := json.Unmarshal(raw, &loc); err != nil {
			return nil, fmt.Errorf("lsp: decoding location: %w", err)
		}
		return []Location{loc}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("lsp: locations are neither an object nor an array: %w", err)
	}
	locs := make([]Location, 0, len(items))
	for i, item := range items {
		var probe struct {
			URI                  string `json:"uri"`
			Range                Range  `json:"range"`
			TargetURI            string `json:"targetUri"`
			TargetSelectionRange Range  `json:"targetSelectionRange"`
		}
		if err := json.Unmarshal(item, &probe); err != nil {
			return nil, fmt.Errorf("lsp: decoding location %d: %w", i, err)
		}
		switch {
		case probe.TargetURI != "":
			locs = append(locs, Location{URI: probe.TargetURI, Range: probe.TargetSelectionRange})
		case probe.URI != "":
			locs = append(locs, Location{URI: probe.URI, Range: probe.Range})
		default:
			return nil, fmt.Errorf("lsp: location %d has neither uri nor targetUri", i)
		}
	}
	return locs, nil
}

// DecodeDocumentSymbols reads a textDocument/documentSymbol result, which is
// either DocumentSymbol[] (hierarchical) or SymbolInformation[] (flat); one
// of the two results is set.
func DecodeDocumentSymbols(raw json.RawMessage) ([]DocumentSymbol, []SymbolInformation, error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, fmt.Errorf("lsp: document symbols are not an array: %w", err)
	}
	if len(items) == 0 {
		return nil, nil, nil
	}
	var probe struct {
		Location json.RawMessage `json:"location"`
	}
	if err := json.Unmarshal(items[0], &probe); err != nil {
		return nil, nil, fmt.Errorf("lsp: decoding document symbol: %w", err)
	}
	if probe.Location != nil {
		var flat []SymbolInformation
		if err := json.Unmarshal(raw, &flat); err != nil {
			return nil, nil, fmt.Errorf("lsp: decoding symbol information: %w", err)
		}
		return nil, flat, nil
	}
	var tree []DocumentSymbol
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil, nil, fmt.Errorf("lsp: decoding document symbols: %w", err)
	}
	return tree, nil, nil
}

// DecodeCodeActions reads a textDocument/codeAction result, whose items are
// CodeAction or Command.
func DecodeCodeActions(raw json.RawMessage) ([]CodeAction, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("lsp: code actions are not an array: %w", err)
	}
	actions := make([]CodeAction, 0, len(items))
	for i, item := range items {
		var probe struct {
			Command json.RawMessage `json:"command"`
		}
		if err := json.Unmarshal(item, &probe); err != nil {
			return nil, fmt.Errorf("lsp: decoding code action %d: %w", i, err)
		}
		if c := bytes.TrimSpace(probe.Command); len(c) > 0 && c[0] == '"' {
			var cmd Command
			if err := json.Unmarshal(item, &cmd); err != nil {
				return nil, fmt.Errorf("lsp: decoding command %d: %w", i, err)
			}
			actions = append(actions, CodeAction{Title: cmd.Title, Command: &cmd})
			continue
		}
		var a CodeAction
		if err := json.Unmarshal(item, &a); err != nil {
			return nil, fmt.Errorf("lsp: decoding code action %d: %w", i, err)
		}
		actions = append(actions, a)
	}
	return actions, nil
}

// PrepareRenameResult is the normalised textDocument/prepareRename answer.
// OK is false when the server says the position cannot be renamed (null).
// Range is nil when the server leaves the choice to the client
// (defaultBehavior).
type PrepareRenameResult struct {
	OK          bool
	Range       *Range
	Placeholder string
}

// DecodePrepareRename reads a prepareRename result: null, Range,
// {range, placeholder} or {defaultBehavior}.
func DecodePrepareRename(raw json.RawMessage) (PrepareRenameResult, error) {
	if isNull(raw) {
		return PrepareRenameResult{}, nil
	}
	var v struct {
		Start           *Position `json:"start"`
		End             *Position `json:"end"`
		Range           *Range    `json:"range"`
		Placeholder     string    `json:"placeholder"`
		DefaultBehavior bool      `json:"defaultBehavior"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return PrepareRenameResult{}, fmt.Errorf("lsp: decoding prepareRename result: %w", err)
	}
	switch {
	case v.Start != nil && v.End != nil:
		return PrepareRenameResult{OK: true, Range: &Range{Start: *v.Start, End: *v.End}}, nil
	case v.Range != nil:
		return PrepareRenameResult{OK: true, Range: v.Range, Placeholder: v.Placeholder}, nil
	case v.DefaultBehavior:
		return PrepareRenameResult{OK: true}, nil
	}
	return PrepareRenameResult{}, fmt.Errorf("lsp: prepareRename result %s has an unknown shape", clipText(string(raw), 80))
}
