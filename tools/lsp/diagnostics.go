package lsp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/lsp/projectcheck"
)

// Diag is a diagnostic as the tools report it in structuredContent.
type Diag struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	EndLine   int    `json:"end_line"`
	EndColumn int    `json:"end_column"`
	Severity  string `json:"severity"`
	Code      string `json:"code,omitempty"`
	Source    string `json:"source,omitempty"`
	Message   string `json:"message"`
}

// diagnostics lists a file's diagnostics, computed for its current text,
// or runs the project check for file "*".
func (s *Supervisor) diagnostics(ctx context.Context, in Input) (_ *tools.Result, err error) {
	if in.File == "*" {
		return s.projectCheck(ctx)
	}
	if in.File == "" {
		return nil, tools.Fail("file is required for diagnostics: a file relative to the workspace, or \"*\" for the project check")
	}
	name, q, v, err := s.opened(ctx, in.File)
	if err != nil {
		return nil, err
	}
	defer q.release()
	defer func() { err = q.died(err) }()
	uri := s.uriOf(name)
	s.settleBusy(ctx, q.in, q.c)
	if late := s.settle(ctx, q.in, q.c, map[string]int32{uri: v}); len(late) > 0 {
		return nil, tools.Fail("%s sent no diagnostics for %s within %v; call again (lsp status shows whether it is still indexing)", q.in.spec.ID, name, s.opts.DiagnosticsWait)
	}
	// A server that began checking the workspace meanwhile may have sent
	// a placeholder (pyright: none) for the file it has not checked yet.
	s.settleBusy(ctx, q.in, q.c)
	set, _ := q.c.Diagnostics(uri)
	var found []located
	for _, d := range set.Diagnostics {
		found = append(found, locatedDiag(uri, d))
	}
	if len(found) == 0 {
		res := tools.Textf("diagnostics of %s (%s): none", name, q.in.spec.ID)
		res.StructuredContent = map[string]any{"diagnostics": []Diag{}}
		return res, nil
	}
	slices.SortStableFunc(found, func(a, b located) int {
		if a.d.Range.Start.Line != b.d.Range.Start.Line {
			return int(a.d.Range.Start.Line) - int(b.d.Range.Start.Line)
		}
		return int(a.d.Range.Start.Character) - int(b.d.Range.Start.Character)
	})
	text, ds := s.render(ctx, found, MaxDiagnostics, q.c.PositionEncoding())
	res := tools.Textf("diagnostics of %s (%s): %s\n%s", name, q.in.spec.ID, countSeverities(found), text)
	res.StructuredContent = paged(map[string]any{"diagnostics": ds}, len(found), 0, len(ds))
	return res, nil
}

func locatedDiag(uri string, d lspc.Diagnostic) located { return located{uri: uri, d: d} }

func countSeverities(ls []located) string {
	counts := map[string]int{}
	for _, l := range ls {
		counts[l.d.Severity.String()]++
	}
	var parts []string
	for _, sev := range []string{"error", "warning", "info", "hint", "unknown"} {
		if n := counts[sev]; n > 0 {
			parts = append(parts, plural(n, sev))
		}
	}
	return strings.Join(parts, ", ")
}

// diag converts a located diagnostic for structuredContent, with 1-based
// lines and byte columns.
func (s *Supervisor) diag(ctx context.Context, sl *sourceLines, l located, enc string) Diag {
	lo, _ := s.loc(ctx, sl, l.uri, l.d.Range, enc)
	return Diag{
		File: lo.File, Line: lo.Line, Column: lo.Column, EndLine: lo.EndLine, EndColumn: lo.EndColumn,
		Severity: l.d.Severity.String(), Code: l.d.CodeString(), Source: l.d.Source, Message: strings.TrimSpace(l.d.Message),
	}
}

// render writes diagnostics as "file:line:col: severity: message (source
// code)" with the source line, at most limit of them, and returns them for
// structuredContent too.
func (s *Supervisor) render(ctx context.Context, ls []located, limit int, enc string) (string, []Diag) {
	var b strings.Builder
	var out []Diag
	sl := &sourceLines{s: s}
	for _, l := range ls[:min(len(ls), limit)] {
		d := s.diag(ctx, sl, l, enc)
		out = append(out, d)
		msg := d.Message
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i] + " …"
		}
		fmt.Fprintf(&b, "%s:%d:%d: %s: %s", d.File, d.Line, d.Column, d.Severity, msg)
		var tag []string
		if d.Source != "" {
			tag = append(tag, d.Source)
		}
		if d.Code != "" {
			tag = append(tag, d.Code)
		}
		if len(tag) > 0 {
			b.WriteString(" (" + strings.Join(tag, " ") + ")")
		}
		b.WriteString("\n")
		if p, err := lspc.URIPath(l.uri); err == nil {
			if text, ok := sl.line(ctx, p, int(l.d.Range.Start.Line)); ok && strings.TrimSpace(text) != "" {
				b.WriteString("    " + clipLine(text) + "\n")
			}
		}
	}
	if len(ls) > limit {
		fmt.Fprintf(&b, "… and %d more\n", len(ls)-limit)
	}
	return strings.TrimRight(b.String(), "\n"), out
}

// checkSummary is a project check's result for structuredContent: what
// ran and how it ended, and the counts of its findings, which are listed
// once, in the result's diagnostics. Its unparsed output is there only
// when the text shows it: when it is the only explanation of a failure.
func checkSummary(r *projectcheck.Result) map[string]any {
	m := map[string]any{"language": r.Language, "checker": r.Checker, "root": r.Root, "command": r.Command,
		"status": r.Status, "total": r.Total, "shown": len(r.Diagnostics)}
	if r.Interpreter != "" {
		m["interpreter"] = r.Interpreter
	}
	if len(r.Skipped) > 0 {
		m["skipped"] = r.Skipped
	}
	if r.TimedOut {
		m["timed_out"] = true
	}
	if r.Truncated {
		m["truncated"] = true
	}
	if r.Total == 0 && !r.Status.Success() {
		m["unparsed"] = r.Unparsed
	}
	return m
}

// projectCheck runs the project's own checks (diagnostics "*"): one
// checker per language whose marker is at the workspace root and whose
// program resolves in the sandbox. On the host no program of the workspace
// is chosen, and a check that executes project code runs only as an
// approved exec-level step (projectcheck.Run asks); a refused one is
// reported and the others still run.
func (s *Supervisor) projectCheck(ctx context.Context) (*tools.Result, error) {
	apps, missing, err := projectcheck.Find(ctx, s.sb, s.root, s.root, projectcheck.Options{Host: s.opts.Host})
	if err != nil {
		return nil, err
	}
	if len(apps) == 0 {
		var why []string
		for _, m := range missing {
			why = append(why, m.Language+": "+m.Reason)
		}
		return nil, tools.Fail("no project check applies at the workspace root: %s. Ask for one file's diagnostics instead (lsp diagnostics with file)", strings.Join(why, "; "))
	}
	var b strings.Builder
	var all []Diag
	var results []map[string]any // each check's summary; its findings are in all
	var refused []string
	sl := &sourceLines{s: s}
	for _, m := range missing {
		if len(m.Skipped) > 0 {
			fmt.Fprintf(&b, "%s: not checked: %s\n", m.Language, strings.TrimPrefix(m.Reason, "binary missing: "))
		}
	}
	for _, a := range apps {
		r, err := projectcheck.Run(ctx, s.sb, a)
		if errors.Is(err, tools.ErrStepRefused) {
			refused = append(refused, err.Error())
			fmt.Fprintf(&b, "%s: not run: %v\n", a.Checker, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		results = append(results, checkSummary(r))
		for _, why := range r.Skipped {
			fmt.Fprintf(&b, "%s: skipped %s\n", a.Checker, why)
		}
		if r.Interpreter != "" {
			fmt.Fprintf(&b, "%s: interpreter %s\n", a.Checker, r.Interpreter)
		}
		fmt.Fprintf(&b, "%s (%s, %s): ", a.Checker, a.Command, r.Status)
		switch {
		case r.Total == 0 && r.Status.Success():
			b.WriteString("no problems\n")
		case r.Total == 0:
			b.WriteString("failed without reporting a problem it could place; its output:\n" + r.Unparsed + "\n")
		default:
			fmt.Fprintf(&b, "%s", plural(r.Total, "problem"))
			if r.Total > len(r.Diagnostics) {
				fmt.Fprintf(&b, ", the first %d shown", len(r.Diagnostics))
			}
			b.WriteString("\n")
		}
		if r.TimedOut {
			fmt.Fprintf(&b, "(stopped after %v; what it printed until then is shown)\n", projectcheck.CheckTimeout)
		}
		for _, d := range r.Diagnostics {
			name := d.File
			if n, ok := s.rel(d.File); ok {
				name = n
			}
			x := Diag{File: name, Line: d.Line, Column: d.Column, EndLine: d.EndLine, EndColumn: d.EndColumn, Severity: d.Severity, Code: d.Code, Source: d.Source, Message: d.Message}
			all = append(all, x)
			msg := x.Message
			if i := strings.IndexByte(msg, '\n'); i >= 0 {
				msg = msg[:i] + " …"
			}
			switch {
			case x.File == "":
				fmt.Fprintf(&b, "%s: %s", x.Severity, msg)
			case x.Column > 0:
				fmt.Fprintf(&b, "%s:%d:%d: %s: %s", x.File, x.Line, x.Column, x.Severity, msg)
			default:
				fmt.Fprintf(&b, "%s:%d: %s: %s", x.File, x.Line, x.Severity, msg)
			}
			if x.Code != "" {
				b.WriteString(" (" + x.Code + ")")
			}
			b.WriteString("\n")
			if x.File != "" && x.Line > 0 {
				if text, ok := sl.line(ctx, d.File, x.Line-1); ok && strings.TrimSpace(text) != "" {
					b.WriteString("    " + clipLine(text) + "\n")
				}
			}
		}
	}
	if len(results) == 0 {
		return nil, tools.Fail("no project check ran at the workspace root: %s. Ask for one file's diagnostics instead (lsp diagnostics with file)", strings.TrimRight(b.String(), "\n"))
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = map[string]any{"diagnostics": nonNil(all), "checks": results, "refused": refused}
	return res, nil
}
