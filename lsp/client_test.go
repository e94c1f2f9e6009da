package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestInitializeAndDocuments(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	ctx := context.Background()
	type initResult struct {
		res *InitializeResult
		err error
	}
	done := make(chan initResult, 1)
	go func() {
		res, err := cl.Initialize(ctx, InitOptions{RootURI: "file:///ws/proj", ClientVersion: "test"})
		done <- initResult{res, err}
	}()
	m := p.recvMethod("initialize")
	var params struct {
		ProcessID        *int              `json:"processId"`
		RootURI          string            `json:"rootUri"`
		ClientInfo       ClientInfo        `json:"clientInfo"`
		WorkspaceFolders []WorkspaceFolder `json:"workspaceFolders"`
		Capabilities     struct {
			General struct {
				PositionEncodings []string `json:"positionEncodings"`
			} `json:"general"`
			TextDocument struct {
				PublishDiagnostics struct {
					VersionSupport bool `json:"versionSupport"`
				} `json:"publishDiagnostics"`
				Diagnostic     json.RawMessage                  `json:"diagnostic"`
				Hover          struct{ ContentFormat []string } `json:"hover"`
				Definition     struct{ LinkSupport bool }       `json:"definition"`
				DocumentSymbol struct {
					Hierarchical bool `json:"hierarchicalDocumentSymbolSupport"`
				} `json:"documentSymbol"`
				Rename struct {
					PrepareSupport bool `json:"prepareSupport"`
				} `json:"rename"`
			} `json:"textDocument"`
			Workspace struct {
				ApplyEdit     bool `json:"applyEdit"`
				Configuration bool `json:"configuration"`
				WorkspaceEdit struct {
					DocumentChanges    bool     `json:"documentChanges"`
					ResourceOperations []string `json:"resourceOperations"`
				} `json:"workspaceEdit"`
				DidChangeWatchedFiles struct {
					DynamicRegistration bool `json:"dynamicRegistration"`
				} `json:"didChangeWatchedFiles"`
			} `json:"workspace"`
			Window struct {
				WorkDoneProgress bool `json:"workDoneProgress"`
			} `json:"window"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(m.Params, &params); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Params), `"processId":null`) {
		t.Errorf("processId must be sent as null: %s", m.Params)
	}
	c := params.Capabilities
	switch {
	case params.RootURI != "file:///ws/proj", params.ClientInfo.Name != "berth",
		len(params.WorkspaceFolders) != 1 || params.WorkspaceFolders[0].Name != "proj":
		t.Errorf("root/client/folders wrong: %+v", params)
	case !c.TextDocument.PublishDiagnostics.VersionSupport, c.TextDocument.Diagnostic == nil,
		!slices.Contains(c.TextDocument.Hover.ContentFormat, "markdown"), !c.TextDocument.Definition.LinkSupport,
		!c.TextDocument.DocumentSymbol.Hierarchical, !c.TextDocument.Rename.PrepareSupport:
		t.Errorf("text document capabilities wrong: %s", m.Params)
	case c.Workspace.ApplyEdit, !c.Workspace.Configuration, !c.Workspace.WorkspaceEdit.DocumentChanges,
		!slices.Equal(c.Workspace.WorkspaceEdit.ResourceOperations, []string{"create", "rename", "delete"}),
		!c.Workspace.DidChangeWatchedFiles.DynamicRegistration, !c.Window.WorkDoneProgress,
		!slices.Contains(c.General.PositionEncodings, "utf-16"):
		t.Errorf("workspace/window capabilities wrong: %s", m.Params)
	}
	p.respond(m.ID, map[string]any{
		"capabilities": map[string]any{
			"positionEncoding":      "utf-8",
			"textDocumentSync":      map[string]any{"openClose": true, "change": 2, "save": map[string]any{"includeText": true}},
			"hoverProvider":         true,
			"renameProvider":        map[string]any{"prepareProvider": true},
			"referencesProvider":    false,
			"callHierarchyProvider": map[string]any{},
			"experimental":          map[string]any{"x": 1},
		},
		"serverInfo": map[string]any{"name": "fake", "version": "1"},
	})
	p.recvMethod("initialized")
	r := <-done
	if r.err != nil || r.res.ServerInfo.Name != "fake" {
		t.Fatalf("Initialize = %+v, %v", r.res, r.err)
	}
	if cl.PositionEncoding() != "utf-8" || !cl.Supports("textDocument/hover") || !cl.Supports("textDocument/prepareRename") ||
		cl.Supports("textDocument/references") || cl.Capabilities().SyncKind() != SyncIncremental ||
		!cl.Supports("textDocument/prepareCallHierarchy") || !cl.Supports("callHierarchy/outgoingCalls") || cl.Supports("workspace/symbol") {
		t.Fatalf("capabilities read wrong: %+v", cl.Capabilities())
	}
	if !strings.Contains(string(cl.RawCapabilities()), "experimental") {
		t.Fatal("raw capabilities not kept")
	}
	if f := p.request("workspace/workspaceFolders", nil); compact(t, f.Result) != `[{"uri":"file:///ws/proj","name":"proj"}]` {
		t.Fatalf("folders = %s", f.Result)
	}

	uri := "file:///ws/proj/main.go"
	if v, err := cl.DidOpen(ctx, uri, "go", "package main\n"); err != nil || v != 1 {
		t.Fatalf("DidOpen = %d, %v", v, err)
	}
	open := p.recvMethod("textDocument/didOpen")
	if !strings.Contains(string(open.Params), `"languageId":"go"`) || !strings.Contains(string(open.Params), `"version":1`) {
		t.Fatalf("didOpen params %s", open.Params)
	}
	if _, err := cl.DidOpen(ctx, uri, "go", "x"); err == nil {
		t.Fatal("second DidOpen accepted")
	}
	if v, err := cl.DidChange(ctx, uri, "package main\n\nfunc main() {}\n"); err != nil || v != 2 {
		t.Fatalf("DidChange = %d, %v", v, err)
	}
	change := p.recvMethod("textDocument/didChange")
	if compact(t, change.Params) != `{"contentChanges":[{"text":"package main\n\nfunc main() {}\n"}],"textDocument":{"uri":"file:///ws/proj/main.go","version":2}}` {
		t.Fatalf("didChange params %s", change.Params)
	}
	if err := cl.DidSave(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if save := p.recvMethod("textDocument/didSave"); !strings.Contains(string(save.Params), `"text":"package main`) {
		t.Fatalf("didSave without the text the server asked for: %s", save.Params)
	}
	if v, sent, err := cl.Sync(ctx, uri, "go", "package main\n\nfunc main() {}\n"); err != nil || sent || v != 2 {
		t.Fatalf("Sync of unchanged text = %d, %v, %v; want nothing sent", v, sent, err)
	}
	if v, sent, err := cl.Sync(ctx, uri, "go", "package main\n"); err != nil || !sent || v != 3 {
		t.Fatalf("Sync of changed text = %d, %v, %v", v, sent, err)
	}
	p.recvMethod("textDocument/didChange")
	other := "file:///ws/proj/b.go"
	if v, sent, err := cl.Sync(ctx, other, "go", "package main\n"); err != nil || !sent || v != 1 {
		t.Fatalf("Sync of a new file = %d, %v, %v", v, sent, err)
	}
	p.recvMethod("textDocument/didOpen")
	if docs := cl.Documents(); len(docs) != 2 || docs[0].URI != other || docs[1].Version != 3 || docs[1].Text != "package main\n" {
		t.Fatalf("documents = %+v", docs)
	}
	if err := cl.DidClose(ctx, uri); err != nil {
		t.Fatal(err)
	}
	p.recvMethod("textDocument/didClose")
	if _, ok := cl.Document(uri); ok {
		t.Fatal("closed document still in the table")
	}
	if _, err := cl.DidChange(ctx, uri, "x"); err == nil {
		t.Fatal("DidChange of a closed document accepted")
	}
}

func TestShutdown(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		cl, p := newPair(t, ConnOptions{}, true)
		errc := make(chan error, 1)
		go func() { errc <- cl.Shutdown(context.Background()) }()
		m := p.recvMethod("shutdown")
		if m.Params != nil {
			t.Errorf("shutdown carries params %s", m.Params)
		}
		p.respond(m.ID, nil)
		p.recvMethod("exit")
		p.Conn.Close() // the server exits
		if err := <-errc; err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
		<-cl.Done()
	})
	t.Run("server never answers", func(t *testing.T) {
		cl, p := newPair(t, ConnOptions{}, true)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := cl.Shutdown(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "terminate the process") {
			t.Fatalf("Shutdown = %v; want a deadline error telling the caller to terminate", err)
		}
		p.recvMethod("shutdown")
		p.recvMethod("exit") // sent even though the caller's ctx had ended
		// Then the stream is closed.
		if err := p.Drain(); err != nil {
			t.Fatal(err)
		}
		<-cl.Done()
		if !errors.Is(cl.Err(), ErrClosed) {
			t.Fatalf("Err = %v", cl.Err())
		}
	})
	t.Run("server never reads", func(t *testing.T) {
		cl, _ := newPair(t, ConnOptions{}, false)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := cl.Shutdown(ctx); err == nil {
			t.Fatal("Shutdown against a stuck server returned nil")
		}
		<-cl.Done()
	})
	t.Run("server already gone", func(t *testing.T) {
		cl, p := newPair(t, ConnOptions{}, true)
		p.Conn.Close()
		<-cl.Done()
		if err := cl.Shutdown(context.Background()); !errors.Is(err, ErrServerExited) {
			t.Fatalf("Shutdown = %v", err)
		}
	})
}

func TestQueries(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	ctx := context.Background()
	uri := "file:///ws/a.go"
	pos := Position{Line: 3, Character: 5}
	answer := func(method string, result any) json.RawMessage {
		t.Helper()
		m := p.recvMethod(method)
		p.respond(m.ID, result)
		return m.Params
	}
	rng := map[string]any{"start": map[string]int{"line": 1, "character": 2}, "end": map[string]int{"line": 1, "character": 5}}

	hc := make(chan *Hover, 1)
	go func() { h, _ := cl.Hover(ctx, uri, pos); hc <- h }()
	params := answer("textDocument/hover", map[string]any{"contents": map[string]any{"kind": "markdown", "value": "func F()"}})
	if compact(t, params) != `{"textDocument":{"uri":"file:///ws/a.go"},"position":{"line":3,"character":5}}` {
		t.Fatalf("hover params %s", params)
	}
	if h := <-hc; h == nil {
		t.Fatal("no hover")
	} else if text, err := h.Text(); err != nil || text != "func F()" {
		t.Fatalf("hover text %q, %v", text, err)
	}

	lc := make(chan []Location, 1)
	go func() { l, _ := cl.Locations(ctx, "textDocument/definition", uri, pos); lc <- l }()
	answer("textDocument/definition", []any{map[string]any{"targetUri": "file:///ws/b.go", "targetRange": rng, "targetSelectionRange": rng}})
	if l := <-lc; len(l) != 1 || l[0].URI != "file:///ws/b.go" || l[0].Range.End.Character != 5 {
		t.Fatalf("definition = %+v", l)
	}

	go func() { l, _ := cl.References(ctx, uri, pos, true); lc <- l }()
	params = answer("textDocument/references", []any{map[string]any{"uri": uri, "range": rng}, map[string]any{"uri": "file:///ws/c.go", "range": rng}})
	if !strings.Contains(string(params), `"context":{"includeDeclaration":true}`) {
		t.Fatalf("references params %s", params)
	}
	if l := <-lc; len(l) != 2 {
		t.Fatalf("references = %+v", l)
	}

	ec := make(chan *WorkspaceEdit, 1)
	go func() { e, _ := cl.Rename(ctx, uri, pos, "G"); ec <- e }()
	params = answer("textDocument/rename", map[string]any{"changes": map[string]any{uri: []any{map[string]any{"range": rng, "newText": "G"}}}})
	if !strings.Contains(string(params), `"newName":"G"`) {
		t.Fatalf("rename params %s", params)
	}
	if e := <-ec; e == nil || len(e.Changes[uri]) != 1 {
		t.Fatalf("rename = %+v", e)
	}

	rc := make(chan DocumentDiagnosticReport, 1)
	go func() { r, _ := cl.PullDiagnostics(ctx, uri, ""); rc <- r }()
	answer("textDocument/diagnostic", map[string]any{"kind": "full", "resultId": "r1", "items": []any{map[string]any{"range": rng, "message": "boom"}}})
	if r := <-rc; r.Kind != "full" || len(r.Items) != 1 || r.Items[0].Message != "boom" {
		t.Fatalf("pull = %+v", r)
	}

	sc := make(chan []SymbolInformation, 1)
	go func() { s, _ := cl.WorkspaceSymbols(ctx, "F"); sc <- s }()
	answer("workspace/symbol", []any{map[string]any{"name": "F", "kind": 12, "location": map[string]any{"uri": uri}}})
	if s := <-sc; len(s) != 1 || s[0].Kind.String() != "function" {
		t.Fatalf("workspace symbols = %+v", s)
	}

	hc2 := make(chan []CallHierarchyItem, 1)
	go func() { items, _ := cl.PrepareCallHierarchy(ctx, uri, pos); hc2 <- items }()
	item := map[string]any{"name": "F", "kind": 12, "uri": uri, "range": rng, "selectionRange": rng, "data": map[string]any{"id": 7}}
	answer("textDocument/prepareCallHierarchy", []any{item})
	items := <-hc2
	if len(items) != 1 || items[0].Name != "F" || string(items[0].Data) != `{"id":7}` {
		t.Fatalf("prepareCallHierarchy = %+v", items)
	}
	cc := make(chan []CallHierarchyCall, 1)
	go func() { calls, _ := cl.IncomingCalls(ctx, items[0]); cc <- calls }()
	params = answer("callHierarchy/incomingCalls", []any{map[string]any{"from": map[string]any{"name": "G", "kind": 12, "uri": "file:///ws/c.go", "range": rng, "selectionRange": rng}, "fromRanges": []any{rng, rng}}})
	if !strings.Contains(string(params), `"data":{"id":7}`) {
		t.Fatalf("incomingCalls params %s: the item's data must go back", params)
	}
	if calls := <-cc; len(calls) != 1 || calls[0].Item.Name != "G" || len(calls[0].FromRanges) != 2 {
		t.Fatalf("incoming calls = %+v", calls)
	}
	go func() { calls, _ := cl.OutgoingCalls(ctx, items[0]); cc <- calls }()
	answer("callHierarchy/outgoingCalls", []any{map[string]any{"to": map[string]any{"name": "H", "kind": 6, "uri": uri, "range": rng, "selectionRange": rng}, "fromRanges": []any{rng}}})
	if calls := <-cc; len(calls) != 1 || calls[0].Item.Name != "H" || calls[0].Item.Kind.String() != "method" || len(calls[0].FromRanges) != 1 {
		t.Fatalf("outgoing calls = %+v", calls)
	}

	ac := make(chan []CodeAction, 1)
	go func() { a, _ := cl.CodeActions(ctx, uri, Range{}, nil); ac <- a }()
	params = answer("textDocument/codeAction", []any{map[string]any{"title": "Fix", "kind": "quickfix"}})
	if !strings.Contains(string(params), `"context":{"diagnostics":[]}`) {
		t.Fatalf("codeAction params %s", params)
	}
	if a := <-ac; len(a) != 1 || a[0].Kind != "quickfix" {
		t.Fatalf("code actions = %+v", a)
	}
}

func TestDecoders(t *testing.T) {
	rng := `{"start":{"line":1,"character":2},"end":{"line":1,"character":5}}`
	t.Run("locations", func(t *testing.T) {
		tests := []struct {
			in      string
			want    int
			wantErr bool
		}{
			{in: `null`}, {in: `[]`},
			{in: `{"uri":"file:///a","range":` + rng + `}`, want: 1},
			{in: `[{"uri":"file:///a","range":` + rng + `},{"uri":"file:///b","range":` + rng + `}]`, want: 2},
			{in: `[{"targetUri":"file:///a","targetRange":` + rng + `,"targetSelectionRange":` + rng + `}]`, want: 1},
			{in: `[{"range":` + rng + `}]`, wantErr: true},
			{in: `"x"`, wantErr: true},
		}
		for _, tt := range tests {
			got, err := DecodeLocations(json.RawMessage(tt.in))
			if (err != nil) != tt.wantErr || len(got) != tt.want {
				t.Errorf("DecodeLocations(%s) = %+v, %v", tt.in, got, err)
			}
		}
	})
	t.Run("hover", func(t *testing.T) {
		tests := []struct{ in, want string }{
			{`{"kind":"plaintext","value":"int"}`, "int"},
			{`"plain"`, "plain"},
			{`{"language":"go","value":"func F()"}`, "```go\nfunc F()\n```"},
			{`["doc",{"language":"go","value":"x"}]`, "doc\n\n```go\nx\n```"},
		}
		for _, tt := range tests {
			got, err := Hover{Contents: json.RawMessage(tt.in)}.Text()
			if err != nil || got != tt.want {
				t.Errorf("Hover(%s).Text() = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		}
		if _, err := (Hover{Contents: json.RawMessage(`{"x":1}`)}).Text(); err == nil {
			t.Error("unknown hover shape accepted")
		}
	})
	t.Run("document symbols", func(t *testing.T) {
		tree, flat, err := DecodeDocumentSymbols(json.RawMessage(`[{"name":"T","kind":23,"range":` + rng + `,"selectionRange":` + rng + `,"children":[{"name":"M","kind":6,"range":` + rng + `,"selectionRange":` + rng + `}]}]`))
		if err != nil || flat != nil || len(tree) != 1 || tree[0].Children[0].Kind.String() != "method" {
			t.Fatalf("hierarchical: %+v %+v %v", tree, flat, err)
		}
		tree, flat, err = DecodeDocumentSymbols(json.RawMessage(`[{"name":"F","kind":12,"location":{"uri":"file:///a","range":` + rng + `},"containerName":"p"}]`))
		if err != nil || tree != nil || len(flat) != 1 || flat[0].ContainerName != "p" {
			t.Fatalf("flat: %+v %+v %v", tree, flat, err)
		}
	})
	t.Run("code actions", func(t *testing.T) {
		got, err := DecodeCodeActions(json.RawMessage(`[{"title":"Run","command":"go.test","arguments":[1]},{"title":"Fix","kind":"quickfix","isPreferred":true,"command":{"title":"x","command":"y"},"edit":{"changes":{}}}]`))
		if err != nil || len(got) != 2 || got[0].Command.Command != "go.test" || got[0].Kind != "" || !got[1].IsPreferred || got[1].Edit == nil {
			t.Fatalf("code actions = %+v, %v", got, err)
		}
	})
	t.Run("workspace edit", func(t *testing.T) {
		var e WorkspaceEdit
		if err := json.Unmarshal([]byte(`{"changes":{"file:///b":[],"file:///a":[{"range":`+rng+`,"newText":"x"}]}}`), &e); err != nil {
			t.Fatal(err)
		}
		ops, err := e.Operations()
		if err != nil || len(ops) != 2 || ops[0].Edit.TextDocument.URI != "file:///a" || ops[0].Edit.TextDocument.Version != nil {
			t.Fatalf("changes → %+v, %v", ops, err)
		}
		if err := json.Unmarshal([]byte(`{"documentChanges":[
			{"kind":"create","uri":"file:///n","options":{"ignoreIfExists":true}},
			{"textDocument":{"uri":"file:///n","version":null},"edits":[{"range":`+rng+`,"newText":"y"}]},
			{"kind":"rename","oldUri":"file:///o","newUri":"file:///p"},
			{"kind":"delete","uri":"file:///d","options":{"recursive":true}}]}`), &e); err != nil {
			t.Fatal(err)
		}
		ops, err = e.Operations()
		if err != nil || len(ops) != 4 || ops[0].Create == nil || !ops[0].Create.Options.IgnoreIfExists || ops[1].Edit == nil ||
			ops[2].Rename.NewURI != "file:///p" || !ops[3].Delete.Options.Recursive {
			t.Fatalf("documentChanges → %+v, %v", ops, err)
		}
		if u := ops[2].URIs(); !slices.Equal(u, []string{"file:///o", "file:///p"}) {
			t.Fatalf("rename URIs = %v", u)
		}
		e = WorkspaceEdit{DocumentChanges: []json.RawMessage{json.RawMessage(`{"kind":"chmod","uri":"file:///x"}`)}}
		if _, err := e.Operations(); err == nil {
			t.Fatal("unknown kind accepted")
		}
	})
	t.Run("prepare rename", func(t *testing.T) {
		tests := []struct {
			in       string
			ok       bool
			hasRange bool
			wantErr  bool
		}{
			{in: `null`},
			{in: rng, ok: true, hasRange: true},
			{in: `{"range":` + rng + `,"placeholder":"x"}`, ok: true, hasRange: true},
			{in: `{"defaultBehavior":true}`, ok: true},
			{in: `{"weird":1}`, wantErr: true},
		}
		for _, tt := range tests {
			got, err := DecodePrepareRename(json.RawMessage(tt.in))
			if (err != nil) != tt.wantErr || got.OK != tt.ok || (got.Range != nil) != tt.hasRange {
				t.Errorf("DecodePrepareRename(%s) = %+v, %v", tt.in, got, err)
			}
		}
	})
	t.Run("diagnostic code", func(t *testing.T) {
		for in, want := range map[string]string{`"E501"`: "E501", `1002`: "1002", ``: "", `null`: ""} {
			if got := (Diagnostic{Code: json.RawMessage(in)}).CodeString(); got != want {
				t.Errorf("CodeString(%s) = %q, want %q", in, got, want)
			}
		}
	})
}

func TestURI(t *testing.T) {
	roundTrip := []struct{ path, uri string }{
		{"/", "file:///"},
		{"/ws/main.go", "file:///ws/main.go"},
		{"/ws/my file.go", "file:///ws/my%20file.go"},
		{"/ws/a@b:c+d/x#y?z%w", "file:///ws/a%40b%3Ac%2Bd/x%23y%3Fz%25w"},
		{"/ws/ünï/日本.go", "file:///ws/%C3%BCn%C3%AF/%E6%97%A5%E6%9C%AC.go"},
		{"/ws/-._~!$&'()*,;=", "file:///ws/-._~%21%24%26%27%28%29%2A%2C%3B%3D"},
	}
	for _, tt := range roundTrip {
		uri, err := FileURI(tt.path)
		if err != nil || uri != tt.uri {
			t.Errorf("FileURI(%q) = %q, %v; want %q", tt.path, uri, err, tt.uri)
		}
		back, err := URIPath(uri)
		if err != nil || back != tt.path {
			t.Errorf("URIPath(%q) = %q, %v; want %q", uri, back, err, tt.path)
		}
	}
	accepted := []struct{ uri, path string }{
		{"file:///ws/a@b/x.go", "/ws/a@b/x.go"},            // gopls leaves @ unescaped
		{"file:///ws/%3a%2b", "/ws/:+"},                    // lower-case hex
		{"FILE://localhost/ws/x", "/ws/x"},                 // localhost authority
		{"file:/ws/x", "/ws/x"},                            // short form
		{"file:///ws/sub/../../etc/passwd", "/etc/passwd"}, // resolved, for the caller's containment check
	}
	for _, tt := range accepted {
		if got, err := URIPath(tt.uri); err != nil || got != tt.path {
			t.Errorf("URIPath(%q) = %q, %v; want %q", tt.uri, got, err, tt.path)
		}
	}
	rejected := []string{"http://x/y", "untitled:Untitled-1", "file://host/etc/passwd", "file:ws/x", "file:///ws/x?q",
		"file:///ws/x#f", "file:///ws/%zz", "file:///ws/%2", "file:///ws/%00x", "/ws/x", ""}
	for _, uri := range rejected {
		if got, err := URIPath(uri); !errors.Is(err, ErrURI) {
			t.Errorf("URIPath(%q) = %q, %v; want ErrURI", uri, got, err)
		}
	}
	for _, p := range []string{"ws/x", "", "/ws/\x00"} {
		if _, err := FileURI(p); !errors.Is(err, ErrURI) {
			t.Errorf("FileURI(%q) err = %v; want ErrURI", p, err)
		}
	}
}

func FuzzURIRoundTrip(f *testing.F) {
	f.Add("/ws/a b/ü@%.go")
	f.Fuzz(func(t *testing.T, p string) {
		uri, err := FileURI(p)
		if err != nil {
			return
		}
		back, err := URIPath(uri)
		if err != nil {
			t.Fatalf("URIPath(FileURI(%q) = %q): %v", p, uri, err)
		}
		if again, _ := FileURI(back); again != uri {
			t.Fatalf("round trip %q → %q → %q → %q", p, uri, back, again)
		}
	})
}

func TestPositionEncoding(t *testing.T) {
	line := "aé😀b" // 1 + 2 + 4 + 1 bytes; UTF-16: 1 + 1 + 2 + 1
	tests := []struct {
		enc  string
		byte int
		char uint32
	}{
		{"utf-8", 7, 7}, {"utf-16", 0, 0}, {"utf-16", 1, 1}, {"utf-16", 3, 2}, {"utf-16", 7, 4}, {"utf-16", 8, 5},
		{"utf-32", 7, 3}, {"utf-32", 8, 4},
	}
	for _, tt := range tests {
		if got := Character(line, tt.byte, tt.enc); got != tt.char {
			t.Errorf("Character(%d, %s) = %d, want %d", tt.byte, tt.enc, got, tt.char)
		}
		if got := ByteOffset(line, tt.char, tt.enc); got != tt.byte {
			t.Errorf("ByteOffset(%d, %s) = %d, want %d", tt.char, tt.enc, got, tt.byte)
		}
	}
	if got := ByteOffset(line, 3, "utf-16"); got != 3 { // inside the surrogate pair: clamp to the rune start
		t.Errorf("ByteOffset inside a pair = %d, want 3", got)
	}
	if got := ByteOffset(line, 99, "utf-16"); got != len(line) {
		t.Errorf("ByteOffset past the end = %d", got)
	}
	if got := Character(line, 99, "utf-16"); got != 5 {
		t.Errorf("Character past the end = %d", got)
	}
}

func TestConcurrentChangesKeepVersionOrder(t *testing.T) {
	cl, p := newPair(t, ConnOptions{}, true)
	ctx := context.Background()
	uri := "file:///ws/a.go"
	if _, err := cl.DidOpen(ctx, uri, "go", "v1"); err != nil {
		t.Fatal(err)
	}
	p.recvMethod("textDocument/didOpen")
	const n = 20
	errc := make(chan error, n)
	for i := range n {
		go func() {
			_, err := cl.DidChange(ctx, uri, fmt.Sprint("text ", i))
			errc <- err
		}()
	}
	for want := int32(2); want <= n+1; want++ {
		var params struct {
			TextDocument VersionedTextDocumentIdentifier `json:"textDocument"`
		}
		if err := json.Unmarshal(p.recvMethod("textDocument/didChange").Params, &params); err != nil {
			t.Fatal(err)
		}
		if params.TextDocument.Version != want {
			t.Fatalf("server saw version %d, want %d", params.TextDocument.Version, want)
		}
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if doc, _ := cl.Document(uri); doc.Version != n+1 {
		t.Fatalf("table version %d", doc.Version)
	}
}

func TestStuckServerBlocksOnlyTheCaller(t *testing.T) {
	cl, _ := newPair(t, ConnOptions{}, false) // the server never reads
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := cl.DidOpen(ctx, "file:///ws/a.go", "go", "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DidOpen = %v; want the caller's deadline", err)
	}
	// The table is still readable, and the document counts as open (its
	// didOpen is queued and goes out first if the server recovers).
	if _, ok := cl.Document("file:///ws/a.go"); !ok {
		t.Fatal("queued didOpen not recorded")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := cl.Call(ctx2, "textDocument/hover", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v; want the caller's deadline", err)
	}
}
