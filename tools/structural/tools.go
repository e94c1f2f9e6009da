package structural

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Output caps of the tools' text.
const (
	// MaxMatchLines is how many lines of a match's text ast_grep shows.
	MaxMatchLines = 3
	// MaxLineChars bounds one shown line of a match, a capture or a diff.
	MaxLineChars = 200
	// MaxCaptureChars bounds one shown capture.
	MaxCaptureChars = 120
	// MaxDiffLines bounds the diff preview of ast_edit.
	MaxDiffLines = 200
)

// GrepInput is ast_grep's input.
type GrepInput struct {
	Pattern    string `json:"pattern" jsonschema:"a code fragment with metavariables: $NAME one node, $$$NAME a possibly empty sequence of siblings, $_ any node without binding; a repeated $NAME must capture the same text"`
	Path       string `json:"path,omitempty" jsonschema:"file or directory to search, relative to the workspace or absolute under it; default the whole workspace"`
	Language   string `json:"language,omitempty" jsonschema:"language id (go, python, rust, typescript, …); inferred when path is a file, required for a directory"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"how many matches to return (default 50, at most 1000); the total is always counted"`
}

// EditInput is ast_edit's input: one rule (Pattern, Rewrite, Transform) or
// several (Rules).
type EditInput struct {
	Pattern   string               `json:"pattern,omitempty" jsonschema:"what to match, as for ast_grep (or give rules)"`
	Rewrite   *string              `json:"rewrite,omitempty" jsonschema:"what goes there instead, with $NAME and $$$NAME replaced by what they captured (or by a transform's result); \"\" deletes the matches"`
	Transform map[string]Transform `json:"transform,omitempty" jsonschema:"new variables for the rewrite, by name: {\"NEW\": {\"source\": \"$MSG\", \"replace\": \"%v\", \"by\": \"%w\"}} makes $NEW, $MSG's text with every %v replaced by %w (Go RE2 regexp; $1 in by inserts a group)"`
	Rules     []Rule               `json:"rules,omitempty" jsonschema:"several rewrites in one edit, instead of pattern/rewrite/transform: applied in order to each file, each to what the one before left, staged as one edit"`
	Path      string               `json:"path,omitempty" jsonschema:"file or directory to rewrite, relative to the workspace or absolute under it; default the whole workspace"`
	Language  string               `json:"language,omitempty" jsonschema:"language id; inferred when path is a file, required for a directory"`
}

// ResolveInput is resolve's input.
type ResolveInput struct {
	EditID string `json:"edit_id" jsonschema:"the id from an ast_edit result, such as edit_1"`
	Action string `json:"action" jsonschema:"accept to write the staged edit, discard to drop it"`
}

const grepDescription = `Structural code search: finds code by syntax-tree shape, not text. The pattern is parsed with the file's grammar, so whitespace, line breaks and comments do not matter and text inside strings or comments never matches code. $NAME matches one node, $$$NAME a possibly empty sequence of siblings, $_ any node; a metavariable used twice must capture the same text (if ($X != null) $X.dispose()). Results are path:line anchored with the matched text and the captures; .gitignore'd, binary and very large files are skipped and counted.`

const editDescription = `Structural rewrite, staged: replaces every match of pattern (as in ast_grep) with rewrite, its $NAME / $$$NAME substituted. A metavariable cannot stand for part of a string; to change part of a capture, match the whole ($MSG) and derive a new variable with transform, a regexp replacement: {"pattern": "fmt.Errorf($MSG, $E)", "rewrite": "fmt.Errorf($W, $E)", "transform": {"W": {"source": "$MSG", "replace": "%v", "by": "%w"}}}. rules [{pattern, rewrite, transform}, …] applies several rewrites in order as one edit. A rewrite variable the pattern does not bind is an error; a $$$NAME that captured nothing takes one separating comma with it (f($W, $$$A, err) gives f("x", err)); a rewrite that leaves a syntax error is refused, naming the file and line; a match the rewrite leaves as it was is not a replacement. Nothing is written: the result shows a diff and an edit_id; call resolve with it to accept (write all files) or discard.`

const resolveDescription = `Applies or drops an edit staged by ast_edit. accept writes every file of the edit, but refuses the whole edit (writing nothing) when any of them changed since it was staged, except by another edit accepted here: then its replacements are carried over that one's, and only where they overlap is the edit refused, with the diff it would stage now; discard drops it.`

// Register adds ast_grep (read), ast_edit (write) and resolve (write) to r,
// bound to the workspace ws and the run's Engine e.
func Register(r *tools.Registry, ws sandbox.FS, e *Engine) {
	h := &handlers{fs: ws, e: e}
	tools.Register(r, tools.Tool{Name: "ast_grep", Level: tools.LevelRead, Description: grepDescription, Output: tools.OutputOf[Shown](), Hints: tools.Hints{Idempotent: true, Confined: true}}, h.grep)
	tools.Register(r, tools.Tool{Name: "ast_edit", Level: tools.LevelWrite, Description: editDescription, Hints: tools.Hints{Additive: true, Confined: true}}, h.edit)
	tools.Register(r, tools.Tool{Name: "resolve", Level: tools.LevelWrite, Description: resolveDescription, Hints: tools.Hints{Confined: true}}, h.resolve, tools.Enum("action", ActionAccept, ActionDiscard))
}

type handlers struct {
	fs sandbox.FS
	e  *Engine
}

// ShownMatch is a match as ast_grep shows it, in its text and in its
// structuredContent alike: the first MaxMatchLines lines of the matched
// text, each cut to MaxLineChars, and the captures on one line each, cut
// to MaxCaptureChars; MoreLines counts the lines left out.
type ShownMatch struct {
	File      string            `json:"file" jsonschema:"the file, relative to the workspace"`
	StartLine int               `json:"start_line" jsonschema:"line where the match starts, from 1"`
	StartCol  int               `json:"start_col" jsonschema:"column where the match starts, from 1"`
	EndLine   int               `json:"end_line" jsonschema:"line where the match ends"`
	EndCol    int               `json:"end_col" jsonschema:"column where the match ends"`
	Enclosing string            `json:"enclosing,omitempty" jsonschema:"the function, method or class the match is in"`
	Text      string            `json:"text" jsonschema:"the first lines of the matched text"`
	MoreLines int               `json:"more_lines,omitempty" jsonschema:"how many more lines the match has than text shows"`
	Captures  map[string]string `json:"captures" jsonschema:"each metavariable's capture, on one line"`
}

// Shown is a search result as ast_grep shows it, and its structuredContent:
// the matches shown, the total count and how many more were counted than
// shown (More), the files, and the no-match hint. No field carries more
// than the text says.
type Shown struct {
	Matches       []ShownMatch   `json:"matches" jsonschema:"the matches shown, in file order"`
	Total         int            `json:"total" jsonschema:"how many matches were counted"`
	Truncated     bool           `json:"truncated" jsonschema:"whether the search stopped at its limit before counting every match"`
	More          int            `json:"more,omitempty" jsonschema:"how many more matches were counted than shown"`
	Files         int            `json:"files" jsonschema:"how many files have matches"`
	FilesSearched int            `json:"files_searched" jsonschema:"how many files were searched"`
	Skipped       map[string]int `json:"skipped,omitempty" jsonschema:"files not searched, counted by reason"`
	Hint          string         `json:"hint,omitempty" jsonschema:"why nothing matched and what to try, when nothing did"`
}

// Show bounds a search result for a model (see Shown).
func Show(res *SearchResult) *Shown {
	sh := &Shown{
		Matches: make([]ShownMatch, len(res.Matches)), Total: res.Total, Truncated: res.Truncated,
		More: res.Total - len(res.Matches), Files: res.Files, FilesSearched: res.FilesSearched, Hint: res.Hint,
	}
	for k, n := range res.Skipped {
		if n > 0 {
			if sh.Skipped == nil {
				sh.Skipped = map[string]int{}
			}
			sh.Skipped[k] = n
		}
	}
	for i, m := range res.Matches {
		lines := strings.Split(m.Text, "\n")
		n := min(len(lines), MaxMatchLines)
		for j := range lines[:n] {
			lines[j] = cut(lines[j], MaxLineChars)
		}
		sm := ShownMatch{
			File: m.File, StartLine: m.StartLine, StartCol: m.StartCol, EndLine: m.EndLine, EndCol: m.EndCol,
			Enclosing: m.Enclosing, Text: strings.Join(lines[:n], "\n"), MoreLines: len(lines) - n,
			Captures: make(map[string]string, len(m.Captures)),
		}
		for k, c := range m.Captures {
			sm.Captures[k] = oneLine(c, MaxCaptureChars)
		}
		sh.Matches[i] = sm
	}
	return sh
}

func (h *handlers) grep(ctx context.Context, in GrepInput) (*tools.Result, error) {
	if in.MaxResults < 0 || in.MaxResults > MaxMaxResults {
		return tools.Errorf("max_results %d is out of range: give 1 to %d (default %d)", in.MaxResults, MaxMaxResults, DefaultMaxResults), nil
	}
	res, err := h.e.Search(ctx, h.fs, SearchRequest{Pattern: in.Pattern, Language: in.Language, Path: in.Path, MaxResults: in.MaxResults, Enclosing: true})
	if err != nil {
		return nil, err
	}
	sh := Show(res)
	out := tools.Text(sh.Format())
	out.StructuredContent = sh
	return out, nil
}

// FormatSearch writes a search result for a model: a header line, then each
// match as path:line (with " in " and its enclosing symbol when it has one),
// the first lines of its text and its captures.
func FormatSearch(res *SearchResult) string { return Show(res).Format() }

// Format writes the text of sh (see FormatSearch).
func (sh *Shown) Format() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %s (%s searched", plural(sh.Total, "match"), plural(sh.Files, "file"), plural(sh.FilesSearched, "file"))
	if s := skipSummary(sh.Skipped); s != "" {
		fmt.Fprintf(&b, "; skipped: %s", s)
	}
	b.WriteString(")\n")
	last := ""
	for _, m := range sh.Matches {
		if m.File != last {
			if last != "" {
				b.WriteString("\n")
			}
			last = m.File
		}
		fmt.Fprintf(&b, "%s:%d", m.File, m.StartLine)
		if m.Enclosing != "" {
			b.WriteString(" in " + m.Enclosing)
		}
		b.WriteString("\n")
		for _, l := range strings.Split(m.Text, "\n") {
			b.WriteString("  " + l + "\n")
		}
		if m.MoreLines > 0 {
			fmt.Fprintf(&b, "  … (%d more lines, to line %d)\n", m.MoreLines, m.EndLine)
		}
		for _, k := range sortedKeys(m.Captures) {
			fmt.Fprintf(&b, "  $%s = %s\n", k, m.Captures[k])
		}
	}
	switch {
	case sh.Truncated:
		fmt.Fprintf(&b, "\nshowing %d of %d matches (%d more): narrow path or the pattern, or raise max_results (at most %d)\n", len(sh.Matches), sh.Total, sh.More, MaxMaxResults)
	case sh.Total == 0 && sh.Hint != "":
		b.WriteString("no match: " + sh.Hint + "\n")
	case sh.Total == 0:
		b.WriteString("no match: the pattern is parsed as code, so check it against the code's real shape (ast_grep is exact about nesting and parentheses)\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (h *handlers) edit(ctx context.Context, in EditInput) (*tools.Result, error) {
	req := EditRequest{Pattern: in.Pattern, Transform: in.Transform, Rules: in.Rules, Language: in.Language, Path: in.Path, RefuseSyntaxErrors: true}
	switch {
	case in.Rewrite != nil:
		req.Rewrite = *in.Rewrite
	case len(in.Rules) == 0:
		return nil, tools.Fail("rewrite is missing: give what replaces each match of pattern (\"\" deletes them), or give rules")
	}
	p, err := h.e.Stage(ctx, h.fs, req)
	if err != nil {
		return nil, err
	}
	return tools.Text(FormatProposal(p)), nil
}

// FormatProposal writes a staged edit for a model: the (proposed) line
// naming the edit_id, then a diff preview of at most MaxDiffLines lines.
func FormatProposal(p *Proposal) string {
	var b strings.Builder
	skips := ""
	if s := skipSummary(p.Skipped); s != "" {
		skips = " (skipped: " + s + ")"
	}
	same := ""
	if p.Unchanged > 0 {
		same = fmt.Sprintf("%s left as %s: the rewrite gives the text %s already", plural(p.Unchanged, "match"), pick(p.Unchanged, "it was", "they were"), pick(p.Unchanged, "it has", "they have"))
	}
	if p.ID == "" {
		if same != "" {
			fmt.Fprintf(&b, "nothing to change: %s; no edit was staged%s", same, skips)
			return b.String()
		}
		if len(p.Rules) > 1 {
			fmt.Fprintf(&b, "nothing matched the patterns of the %d rules: no edit was staged%s", len(p.Rules), skips)
		} else {
			fmt.Fprintf(&b, "nothing matched %q: no edit was staged%s", p.Pattern, skips)
		}
		if p.Hint != "" {
			b.WriteString("; " + p.Hint)
		}
		return b.String()
	}
	if same != "" {
		same = " (" + same + ")"
	}
	fmt.Fprintf(&b, "(proposed) %s in %s%s%s; nothing is written yet: call resolve with edit_id %q and action \"accept\" to write them, or \"discard\"\n",
		plural(p.Replacements, "replacement"), plural(len(p.Files), "file"), same, skips, p.ID)
	for _, f := range p.Files {
		for _, w := range f.SyntaxWarnings {
			fmt.Fprintf(&b, "warning: %s:%d: the rewritten code has a syntax error here: %s; fix the rewrite and stage it again, or discard\n", f.Path, w.Line, w.What)
		}
	}
	b.WriteString("\n")
	lines := strings.SplitAfter(p.Diff, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if i == MaxDiffLines {
			fmt.Fprintf(&b, "… %d more diff lines not shown\n", len(lines)-i)
			break
		}
		b.WriteString(cut(strings.TrimSuffix(l, "\n"), MaxLineChars) + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (h *handlers) resolve(ctx context.Context, in ResolveInput) (*tools.Result, error) {
	a, err := h.e.Resolve(ctx, h.fs, in.EditID, in.Action)
	if err != nil {
		return nil, err
	}
	if a.Action == ActionDiscard {
		return tools.Textf("discarded %s: nothing was written", a.ID), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "accepted %s: wrote %s in %s\n", a.ID, plural(a.Replacements, "replacement"), plural(len(a.Files), "file"))
	for _, f := range a.Files {
		if len(f.MergedOver) > 0 {
			fmt.Fprintf(&b, "  %s (%d, carried over %s, accepted since this edit was staged)\n", f.Path, f.Replacements, strings.Join(f.MergedOver, ", "))
			continue
		}
		fmt.Fprintf(&b, "  %s (%d)\n", f.Path, f.Replacements)
	}
	for _, w := range a.Warnings {
		b.WriteString("warning: " + w + "\n")
	}
	res := tools.Text(strings.TrimSuffix(b.String(), "\n"))
	res.Touched = a.Paths()
	return res, nil
}

// cut bounds a line to n bytes (on a rune boundary), marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !runeStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("… (%d more bytes)", len(s)-i)
}

func runeStart(b byte) bool { return b&0xC0 != 0x80 }

// oneLine shows a capture on one line: line breaks as "⏎", bounded.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	if strings.Contains(s, "\n") {
		lines := strings.Split(s, "\n")
		for i := range lines {
			if i > 0 {
				lines[i] = strings.TrimLeft(lines[i], " \t")
			}
		}
		s = strings.Join(lines, " ⏎ ")
	}
	return cut(s, n)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// pick returns one when n is 1, else more.
func pick(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}

// plural returns "n word" or "n words".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	if strings.HasSuffix(word, "ch") {
		return fmt.Sprintf("%d %ses", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
