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

// EditInput is ast_edit's input.
type EditInput struct {
	Pattern  string `json:"pattern" jsonschema:"what to match, as for ast_grep"`
	Rewrite  string `json:"rewrite" jsonschema:"what goes there instead, with $NAME and $$$NAME replaced by what they captured"`
	Path     string `json:"path,omitempty" jsonschema:"file or directory to rewrite, relative to the workspace or absolute under it; default the whole workspace"`
	Language string `json:"language,omitempty" jsonschema:"language id; inferred when path is a file, required for a directory"`
}

// ResolveInput is resolve's input.
type ResolveInput struct {
	EditID string `json:"edit_id" jsonschema:"the id from an ast_edit result, such as edit_1"`
	Action string `json:"action" jsonschema:"accept to write the staged edit, discard to drop it"`
}

const grepDescription = `Structural code search: finds code by syntax-tree shape, not text. The pattern is parsed with the file's grammar, so whitespace, line breaks and comments do not matter and text inside strings or comments never matches code. $NAME matches one node, $$$NAME a possibly empty sequence of siblings, $_ any node; a metavariable used twice must capture the same text (if ($X != null) $X.dispose()). Results are path:line anchored with the matched text and the captures; .gitignore'd, binary and very large files are skipped and counted.`

const editDescription = `Structural rewrite, staged: replaces every match of pattern (as in ast_grep) with rewrite, its $NAME / $$$NAME substituted. Nothing is written: the result shows a diff and an edit_id; call resolve with it to accept (write all files) or discard.`

const resolveDescription = `Applies or drops an edit staged by ast_edit. accept writes every file of the edit, but refuses the whole edit (writing nothing) when any of them changed since it was staged; discard drops it.`

// Register adds ast_grep (read), ast_edit (write) and resolve (write) to r,
// bound to the workspace ws and the run's Engine e.
func Register(r *tools.Registry, ws sandbox.FS, e *Engine) {
	h := &handlers{fs: ws, e: e}
	tools.Register(r, tools.Tool{Name: "ast_grep", Level: tools.LevelRead, Description: grepDescription}, h.grep)
	tools.Register(r, tools.Tool{Name: "ast_edit", Level: tools.LevelWrite, Description: editDescription}, h.edit)
	tools.Register(r, tools.Tool{Name: "resolve", Level: tools.LevelWrite, Description: resolveDescription}, h.resolve)
}

type handlers struct {
	fs sandbox.FS
	e  *Engine
}

// structured is ast_grep's structuredContent.
type structured struct {
	Matches   []FileMatch `json:"matches"`
	Total     int         `json:"total"`
	Truncated bool        `json:"truncated"`
}

func (h *handlers) grep(ctx context.Context, in GrepInput) (*tools.Result, error) {
	if in.MaxResults < 0 || in.MaxResults > MaxMaxResults {
		return tools.Errorf("max_results %d is out of range: give 1 to %d (default %d)", in.MaxResults, MaxMaxResults, DefaultMaxResults), nil
	}
	res, err := h.e.Search(ctx, h.fs, SearchRequest{Pattern: in.Pattern, Language: in.Language, Path: in.Path, MaxResults: in.MaxResults})
	if err != nil {
		return nil, err
	}
	out := tools.Text(FormatSearch(res))
	matches := res.Matches
	if matches == nil {
		matches = []FileMatch{}
	}
	out.StructuredContent = structured{Matches: matches, Total: res.Total, Truncated: res.Truncated}
	return out, nil
}

// FormatSearch writes a search result for a model: a header line, then each
// match as path:line with the first lines of its text and its captures.
func FormatSearch(res *SearchResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %s (%s searched", plural(res.Total, "match"), plural(res.Files, "file"), plural(res.FilesSearched, "file"))
	if s := skipSummary(res.Skipped); s != "" {
		fmt.Fprintf(&b, "; skipped: %s", s)
	}
	b.WriteString(")\n")
	last := ""
	for _, m := range res.Matches {
		if m.File != last {
			if last != "" {
				b.WriteString("\n")
			}
			last = m.File
		}
		fmt.Fprintf(&b, "%s:%d\n", m.File, m.StartLine)
		lines := strings.Split(m.Text, "\n")
		for i, l := range lines {
			if i == MaxMatchLines {
				fmt.Fprintf(&b, "  … (%d more lines, to line %d)\n", len(lines)-i, m.EndLine)
				break
			}
			b.WriteString("  " + cut(l, MaxLineChars) + "\n")
		}
		for _, k := range sortedKeys(m.Captures) {
			fmt.Fprintf(&b, "  $%s = %s\n", k, oneLine(m.Captures[k], MaxCaptureChars))
		}
	}
	if res.Truncated {
		fmt.Fprintf(&b, "\nshowing %d of %d matches: narrow path or the pattern, or raise max_results (at most %d)\n", len(res.Matches), res.Total, MaxMaxResults)
	} else if res.Total == 0 {
		b.WriteString("no match: the pattern is parsed as code, so check it against the code's real shape (ast_grep is exact about nesting and parentheses)\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (h *handlers) edit(ctx context.Context, in EditInput) (*tools.Result, error) {
	p, err := h.e.Stage(ctx, h.fs, EditRequest{Pattern: in.Pattern, Rewrite: in.Rewrite, Language: in.Language, Path: in.Path})
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
	if p.ID == "" {
		fmt.Fprintf(&b, "nothing matched %q: no edit was staged%s", p.Pattern, skips)
		return b.String()
	}
	fmt.Fprintf(&b, "(proposed) %s in %s%s; nothing is written yet: call resolve with edit_id %q and action \"accept\" to write them, or \"discard\"\n\n",
		plural(p.Replacements, "replacement"), plural(len(p.Files), "file"), skips, p.ID)
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
