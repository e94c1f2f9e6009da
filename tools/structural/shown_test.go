package structural_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"berth.dev/berth/syntax"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/structural"
)

const httpClient = `import socket

class HTTPConnection:
    def putheader(self, header, *values):
        if not header:
            raise ValueError('Invalid header name %r' % (header,))
        self._buffer.append(header)

    def _validate(self, url):
        def check(part):
            raise ValueError(part)
        check(url)

def request(method):
    raise ValueError(method)

raise ValueError("at import")
`

// TestSearchEnclosing: every match names the declarations around it, in
// the text ("path:line in Class.method") and in the structured content.
func TestSearchEnclosing(t *testing.T) {
	ev := newEnv(t, map[string]string{"http/client.py": httpClient}, structural.Options{})
	res := ev.call(t, "ast_grep", map[string]any{"pattern": "raise ValueError($$$)", "path": "http", "language": "python"})
	wantOK(t, res,
		"http/client.py:6 in HTTPConnection.putheader\n  raise ValueError('Invalid header name %r' % (header,))",
		"http/client.py:11 in HTTPConnection._validate.check\n",
		"http/client.py:15 in request\n",
		"http/client.py:17\n  raise ValueError(\"at import\")",
	)
	b, _ := json.Marshal(res.StructuredContent)
	var sc struct {
		Matches []struct {
			StartLine int     `json:"start_line"`
			Enclosing *string `json:"enclosing"`
		} `json:"matches"`
	}
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range sc.Matches {
		e := "-"
		if m.Enclosing != nil {
			e = *m.Enclosing
		}
		got = append(got, fmt.Sprintf("%d %s", m.StartLine, e))
	}
	if want := "6 HTTPConnection.putheader,11 HTTPConnection._validate.check,15 request,17 -"; strings.Join(got, ",") != want {
		t.Errorf("structured enclosing %s, want %s (%s)", strings.Join(got, ","), want, b)
	}
	// The engine computes it only when asked.
	r, err := ev.e.Search(context.Background(), ev.fs, structural.SearchRequest{Pattern: "raise ValueError($$$)", Path: "http/client.py"})
	if err != nil || r.Total != 4 || r.Matches[0].Enclosing != "" {
		t.Errorf("Search without Enclosing: %v %+v", err, r)
	}
	// Without a parse cache (the CLI's engine), and capped.
	cold := structural.NewEngine(structural.Options{CacheBytes: -1, Workers: 2})
	r, err = cold.Search(context.Background(), ev.fs, structural.SearchRequest{Pattern: "raise ValueError($$$)", Path: "http", Language: "python", MaxResults: 2, Enclosing: true})
	if err != nil || len(r.Matches) != 2 || r.Matches[0].Enclosing != "HTTPConnection.putheader" || r.Matches[1].Enclosing != "HTTPConnection._validate.check" {
		t.Errorf("uncached capped search: %v %+v", err, r)
	}
	var each []string
	_, err = cold.SearchEach(context.Background(), ev.fs, structural.SearchRequest{Pattern: "raise ValueError($$$)", Path: "http", Language: "python", Enclosing: true}, func(_ string, _ []syntax.Match, enc []string) func() {
		return func() { each = append(each, enc...) }
	})
	if err != nil || strings.Join(each, ",") != "HTTPConnection.putheader,HTTPConnection._validate.check,request," {
		t.Errorf("SearchEach: %v %q", err, each)
	}
}

// TestStructuredBounded: the structured content of a search shows what the
// text shows, no more: the same cut (max_results), the same lines of each
// match, the same "more" counts; its JSON stays within a small multiple of
// the text even when every match is a long function.
func TestStructuredBounded(t *testing.T) {
	var b strings.Builder
	for i := range 80 {
		fmt.Fprintf(&b, "def f%d(x):\n", i)
		for j := range 40 {
			fmt.Fprintf(&b, "    x = g(x, %d, %q)\n", j, strings.Repeat("long argument ", 16))
		}
		b.WriteString("    return x\n\n")
	}
	ev := newEnv(t, map[string]string{"big.py": b.String()}, structural.Options{})
	for _, max := range []int{0, 5, 1000} {
		res := ev.call(t, "ast_grep", map[string]any{"pattern": "def $F($$$ARGS): $$$BODY", "path": "big.py", "max_results": max})
		wantOK(t, res, "80 matches in 1 file")
		text := res.AllText()
		js, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if len(js) > 2*len(text) {
			t.Errorf("max_results %d: structured content is %d bytes of JSON for %d bytes of text", max, len(js), len(text))
		}
		var sc structural.Shown
		if err := json.Unmarshal(js, &sc); err != nil {
			t.Fatal(err)
		}
		shown := map[int]int{0: 50, 5: 5, 1000: 80}[max]
		if len(sc.Matches) != shown || sc.Total != 80 || sc.More != 80-shown || sc.Truncated != (shown < 80) {
			t.Errorf("max_results %d: %d matches, total %d, more %d, truncated %v", max, len(sc.Matches), sc.Total, sc.More, sc.Truncated)
		}
		if shown < 80 && !strings.Contains(text, fmt.Sprintf("showing %d of 80 matches (%d more)", shown, 80-shown)) {
			t.Errorf("max_results %d: the text does not say how many more: %s", max, text[len(text)-200:])
		}
		m := sc.Matches[0]
		if m.MoreLines != 39 || strings.Count(m.Text, "\n") != 2 || !strings.Contains(text, "  … (39 more lines, to line 42)") ||
			!strings.Contains(m.Text, "more bytes)") || len(m.Captures["BODY"]) > structural.MaxCaptureChars+40 {
			t.Errorf("max_results %d: first match shown as %+v", max, m)
		}
		for _, line := range strings.Split(m.Text, "\n") {
			if !strings.Contains(text, "  "+line+"\n") {
				t.Errorf("max_results %d: structured line %q is not in the text", max, line)
			}
		}
	}
}

// TestNoMatchHintStringLiteral: a metavariable inside a string literal
// binds nothing; when nothing matches, the hint says so and shows the
// pattern with the whole string as the metavariable, and a transform.
func TestNoMatchHintStringLiteral(t *testing.T) {
	ev := newEnv(t, map[string]string{"e.go": "package e\n\nfunc f(err error) error {\n\treturn fmt.Errorf(\"open: %v\", err)\n}\n"}, structural.Options{})
	res := ev.call(t, "ast_grep", map[string]any{"pattern": `fmt.Errorf("$MSG: %v", $E)`, "path": "e.go"})
	wantOK(t, res, "0 matches", `$MSG is inside the string literal "$MSG: %v" of the pattern, and metavariables do not bind inside string literals`,
		"as in fmt.Errorf($MSG, $E)", `"transform": {"NEW": {"source": "$MSG"`)
	if strings.Contains(res.AllText(), "exact about nesting") {
		t.Errorf("the generic hint is shown too: %s", res.AllText())
	}
	res = ev.call(t, "ast_edit", map[string]any{"pattern": `fmt.Errorf("$MSG: %v", $E)`, "rewrite": "fmt.Errorf(\"x\", $E)", "path": "e.go"})
	wantOK(t, res, "no edit was staged", "metavariables do not bind inside string literals")
	// A rewrite that uses it is an error saying why.
	res = ev.call(t, "ast_edit", map[string]any{"pattern": `fmt.Errorf("$MSG: %v", $E)`, "rewrite": `fmt.Errorf("$MSG: %w", $E)`, "path": "e.go"})
	wantError(t, res, "the rewrite uses $MSG, which the pattern does not bind: the pattern binds $E", "written inside a string literal")
	// A metavariable in a name.
	ev = newEnv(t, map[string]string{"a.js": "el.onclick(h);\n"}, structural.Options{})
	wantOK(t, ev.call(t, "ast_grep", map[string]any{"pattern": "el.on$EVENT($H)", "path": "a.js"}), "$EVENT is part of on$EVENT in the pattern")
	// A pattern that matches shows no hint; one without inert variables the generic one.
	wantOK(t, ev.call(t, "ast_grep", map[string]any{"pattern": "el.missing($H)", "path": "a.js"}), "exact about nesting")
}

// TestGrepOutputSchema: ast_grep lists an output schema, and every
// successful result's structured content — matches, a cut result, no
// match with its hint — validates against it, as an MCP client checks.
func TestGrepOutputSchema(t *testing.T) {
	ev := newEnv(t, map[string]string{"http/client.py": httpClient, "a.go": "package a\n\nfunc f() { g(1, 2); g(3, 4) }\n"}, structural.Options{})
	var schema *jsonschema.Schema
	for _, in := range ev.r.List(tools.SurfaceDefault) {
		switch in.Name {
		case "ast_grep":
			schema = in.OutputSchema
		case "ast_edit", "resolve":
			if in.OutputSchema != nil {
				t.Errorf("%s lists an output schema; its results have no fixed shape", in.Name)
			}
		}
	}
	if schema == nil {
		t.Fatal("ast_grep lists no output schema")
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []map[string]any{
		{"pattern": "raise ValueError($$$)", "language": "python"},
		{"pattern": "g($A, $B)", "language": "go", "max_results": 1},
		{"pattern": "nothing_like_this($X)", "language": "go"},
	} {
		res := ev.call(t, "ast_grep", args)
		if res.IsError || res.StructuredContent == nil {
			t.Fatalf("%v: %s", args, res.AllText())
		}
		b, _ := json.Marshal(res.StructuredContent)
		var v any
		json.Unmarshal(b, &v)
		if err := resolved.Validate(v); err != nil {
			t.Errorf("%v: the structured content does not fit the output schema: %v\n%s", args, err, b)
		}
	}
}
