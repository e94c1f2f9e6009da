package projectcheck

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// parseInput is one finished run's output.
type parseInput struct {
	root   string // where the checker ran
	base   string // what relative paths in the output are relative to
	source string // Diagnostic.Source
	stdout []byte
	stderr []byte
}

// parser turns a checker's output into diagnostics and the lines it could
// not read (progress noise already left out).
type parser func(parseInput) (diags []Diagnostic, unparsed []string)

// lines splits output into lines without their line ends.
func lines(b []byte) []string {
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return nil
	}
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = strings.TrimSuffix(l, "\r")
	}
	return ls
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// textRE is the "file:line[:col][:endline:endcol]: message" line of go vet,
// pyflakes and gcc-like tools.
var textRE = lazyRE(`^(.+?):(\d+)(?::(\d+))?(?::(\d+):(\d+))?: (.*)$`)

// textDiag reads a textRE line.
func textDiag(l string) (Diagnostic, bool) {
	m := textRE().FindStringSubmatch(l)
	if m == nil {
		return Diagnostic{}, false
	}
	return Diagnostic{File: m[1], Line: atoi(m[2]), Column: atoi(m[3]), EndLine: atoi(m[4]), EndColumn: atoi(m[5]), Message: m[6]}, true
}

// posRE is a vet JSON position, "file:line:col".
var posRE = lazyRE(`^(.+?)(?::(\d+))?(?::(\d+))?$`)

// parseGoVet reads "go vet -json": analyzer findings as JSON (on stdout
// since Go 1.25, on stderr before), type and load errors as text lines
// ("vet: ./a.go:6:4: msg", "main.go:3:8: cannot find module…") with
// tab-indented continuation lines, and "# pkg" headers.
func parseGoVet(in parseInput) ([]Diagnostic, []string) {
	var diags []Diagnostic
	var un []string
	for _, stream := range [][]byte{in.stdout, in.stderr} {
		ls := lines(stream)
		last := -1 // index in diags of the text diagnostic continuation lines extend
		for i := 0; i < len(ls); i++ {
			l := ls[i]
			switch {
			case l == "{":
				j := i + 1
				for j < len(ls) && ls[j] != "}" {
					j++
				}
				end := min(j+1, len(ls))
				ds, err := goVetJSON(strings.Join(ls[i:end], "\n"), in)
				if err != nil {
					un = append(un, ls[i:end]...)
				}
				diags = append(diags, ds...)
				i, last = j, -1
			case l == "{}", strings.HasPrefix(l, "# "),
				strings.HasPrefix(l, "go: downloading "), strings.HasPrefix(l, "go: finding module for package "):
				last = -1
			case strings.HasPrefix(l, "\t") && last >= 0:
				diags[last].Message += "\n" + strings.TrimPrefix(l, "\t")
			default:
				d, ok := textDiag(strings.TrimPrefix(l, "vet: "))
				if !ok {
					un = append(un, l)
					last = -1
					continue
				}
				d.File, d.Severity, d.Source = abs(in.base, d.File), SeverityError, in.source
				diags = append(diags, d)
				last = len(diags) - 1
			}
		}
	}
	return diags, un
}

// goVetJSON reads one JSON object of go vet -json: package → analyzer →
// findings, or an analyzer's error.
func goVetJSON(block string, in parseInput) ([]Diagnostic, error) {
	var tree map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(block), &tree); err != nil {
		return nil, err
	}
	var diags []Diagnostic
	var errs []string
	for _, pkg := range slices.Sorted(maps.Keys(tree)) {
		for _, analyzer := range slices.Sorted(maps.Keys(tree[pkg])) {
			raw := tree[pkg][analyzer]
			var findings []struct {
				Posn    string `json:"posn"`
				End     string `json:"end"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(raw, &findings); err != nil {
				var e struct {
					Err string `json:"error"`
				}
				if json.Unmarshal(raw, &e) == nil && e.Err != "" {
					errs = append(errs, fmt.Sprintf("%s: %s: %s", pkg, analyzer, e.Err))
				}
				continue
			}
			for _, f := range findings {
				d := Diagnostic{Severity: SeverityWarning, Code: analyzer, Message: f.Message, Source: in.source}
				if m := posRE().FindStringSubmatch(f.Posn); m != nil && f.Posn != "-" {
					d.File, d.Line, d.Column = abs(in.base, m[1]), atoi(m[2]), atoi(m[3])
				}
				if m := posRE().FindStringSubmatch(f.End); m != nil && abs(in.base, m[1]) == d.File {
					d.EndLine, d.EndColumn = atoi(m[2]), atoi(m[3])
				}
				diags = append(diags, d)
			}
		}
	}
	if len(errs) > 0 {
		return diags, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return diags, nil
}

// cargoNoise is cargo's progress and summary output on stderr.
var cargoNoise = lazyRE(`^\s*(Compiling|Checking|Finished|Blocking|Updating|Downloading|Downloaded|Locking|Adding|Removing|Fresh|Running|Documenting|Packaging|Unpacking|Fetching|Building)\b|^warning: .* generated \d+ warnings?|^error: could not compile |^warning: build failed, waiting for other jobs to finish`)

type cargoSpan struct {
	FileName    string  `json:"file_name"`
	LineStart   int     `json:"line_start"`
	LineEnd     int     `json:"line_end"`
	ColumnStart int     `json:"column_start"`
	ColumnEnd   int     `json:"column_end"`
	IsPrimary   bool    `json:"is_primary"`
	Label       *string `json:"label"`
}

type cargoMessage struct {
	Reason  string `json:"reason"`
	Message *struct {
		Message string `json:"message"`
		Level   string `json:"level"`
		Code    *struct {
			Code string `json:"code"`
		} `json:"code"`
		Spans []cargoSpan `json:"spans"`
	} `json:"message"`
}

// cargoSummary is rustc's closing count, a message without spans.
var cargoSummary = lazyRE(`^(aborting due to|\d+ warnings? emitted)`)

// parseCargo reads cargo's JSON messages on stdout; relative span paths
// are relative to the cargo workspace root (in.base).
func parseCargo(in parseInput) ([]Diagnostic, []string) {
	var diags []Diagnostic
	var un []string
	for _, l := range lines(in.stdout) {
		var msg cargoMessage
		if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &msg) != nil {
			un = append(un, l)
			continue
		}
		if msg.Reason != "compiler-message" || msg.Message == nil {
			continue
		}
		m := msg.Message
		var sev string
		switch m.Level {
		case "error", "error: internal compiler error":
			sev = SeverityError
		case "warning":
			sev = SeverityWarning
		case "note":
			sev = SeverityInfo
		case "help":
			sev = SeverityHint
		default: // failure-note: "For more information about this error, try …"
			continue
		}
		if len(m.Spans) == 0 && cargoSummary().MatchString(m.Message) {
			continue
		}
		d := Diagnostic{Severity: sev, Message: m.Message, Source: in.source}
		if m.Code != nil {
			d.Code = m.Code.Code
		}
		for _, s := range m.Spans {
			if !s.IsPrimary {
				continue
			}
			d.File, d.Line, d.Column, d.EndLine, d.EndColumn = abs(in.base, s.FileName), s.LineStart, s.ColumnStart, s.LineEnd, s.ColumnEnd
			if s.Label != nil && *s.Label != "" {
				d.Message += ": " + *s.Label // as rustc's short format
			}
			break
		}
		diags = append(diags, d)
	}
	for _, l := range lines(in.stderr) {
		if !cargoNoise().MatchString(l) {
			un = append(un, l)
		}
	}
	return diags, un
}

var (
	tscRE       = lazyRE(`^(.+)\((\d+),(\d+)\): (error|warning|message|suggestion) (TS\d+): (.*)$`)
	tscGlobalRE = lazyRE(`^(error|warning|message) (TS\d+): (.*)$`)
)

func tscSeverity(s string) string {
	switch s {
	case "error":
		return SeverityError
	case "warning":
		return SeverityWarning
	case "suggestion":
		return SeverityHint
	}
	return SeverityInfo
}

// parseTsc reads "tsc --pretty false": "file(line,col): error TS1234: msg"
// with two-space-indented elaboration lines, and file-less
// "error TS18003: msg".
func parseTsc(in parseInput) ([]Diagnostic, []string) {
	var diags []Diagnostic
	var un []string
	last := -1
	for _, l := range lines(in.stdout) {
		if m := tscRE().FindStringSubmatch(l); m != nil {
			diags = append(diags, Diagnostic{File: abs(in.base, m[1]), Line: atoi(m[2]), Column: atoi(m[3]), Severity: tscSeverity(m[4]), Code: m[5], Message: m[6], Source: in.source})
			last = len(diags) - 1
			continue
		}
		if m := tscGlobalRE().FindStringSubmatch(l); m != nil {
			diags = append(diags, Diagnostic{Severity: tscSeverity(m[1]), Code: m[2], Message: m[3], Source: in.source})
			last = len(diags) - 1
			continue
		}
		if strings.HasPrefix(l, "  ") && last >= 0 {
			diags[last].Message += "\n" + strings.TrimPrefix(l, "  ")
			continue
		}
		if strings.TrimSpace(l) != "" {
			un = append(un, l)
		}
		last = -1
	}
	return diags, append(un, lines(in.stderr)...)
}

type pyrightPos struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

// parsePyright reads "pyright --outputjson" on stdout; its positions are
// 0-based.
func parsePyright(in parseInput) ([]Diagnostic, []string) {
	var report struct {
		Diagnostics *[]struct {
			File     string `json:"file"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Rule     string `json:"rule"`
			Range    *struct {
				Start pyrightPos `json:"start"`
				End   pyrightPos `json:"end"`
			} `json:"range"`
		} `json:"generalDiagnostics"`
	}
	out := in.stdout
	i := bytes.IndexByte(out, '{')
	if i < 0 || json.Unmarshal(out[i:], &report) != nil || report.Diagnostics == nil {
		return nil, append(lines(in.stdout), lines(in.stderr)...)
	}
	un := lines(out[:i])
	var diags []Diagnostic
	for _, r := range *report.Diagnostics {
		d := Diagnostic{File: abs(in.base, r.File), Message: r.Message, Code: r.Rule, Source: in.source}
		switch r.Severity {
		case "error":
			d.Severity = SeverityError
		case "warning":
			d.Severity = SeverityWarning
		default: // information
			d.Severity = SeverityInfo
		}
		if r.Range != nil {
			d.Line, d.Column = r.Range.Start.Line+1, r.Range.Start.Character+1
			d.EndLine, d.EndColumn = r.Range.End.Line+1, r.Range.End.Character+1
		}
		diags = append(diags, d)
	}
	return diags, append(un, lines(in.stderr)...)
}

var (
	mypyRE     = lazyRE(`^(.+?):(\d+)(?::(\d+))?(?::(\d+):(\d+))?: (error|warning|note): (.*)$`)
	mypyFileRE = lazyRE(`^(.+?): (error|warning|note): (.*)$`)
	mypyCodeRE = lazyRE(`  \[([a-z0-9-]+)\]$`)
)

// parseMypy reads mypy's "file:line:col:endline:endcol: error: msg  [code]"
// lines. A note at the same place as the finding before it (hints,
// "Following member(s) …") is added to that finding's message; other
// notes (reveal_type) are info diagnostics.
func parseMypy(in parseInput) ([]Diagnostic, []string) {
	var diags []Diagnostic
	var un []string
	for _, l := range lines(in.stdout) {
		var d Diagnostic
		var level string
		if m := mypyRE().FindStringSubmatch(l); m != nil {
			d = Diagnostic{File: m[1], Line: atoi(m[2]), Column: atoi(m[3]), EndLine: atoi(m[4]), EndColumn: atoi(m[5]), Message: m[7]}
			level = m[6]
		} else if m := mypyFileRE().FindStringSubmatch(l); m != nil && !strings.Contains(m[1], " ") {
			d = Diagnostic{File: m[1], Message: m[3]}
			level = m[2]
		} else {
			un = append(un, l)
			continue
		}
		d.File, d.Source = abs(in.base, d.File), in.source
		if level == "note" && len(diags) > 0 {
			p := &diags[len(diags)-1]
			if p.File == d.File && p.Line == d.Line && p.Column == d.Column {
				p.Message += "\n" + d.Message
				continue
			}
		}
		if m := mypyCodeRE().FindStringSubmatchIndex(d.Message); m != nil {
			d.Code = d.Message[m[2]:m[3]]
			d.Message = d.Message[:m[0]]
		}
		switch level {
		case "error":
			d.Severity = SeverityError
		case "warning":
			d.Severity = SeverityWarning
		default:
			d.Severity = SeverityInfo
		}
		diags = append(diags, d)
	}
	return diags, append(un, lines(in.stderr)...)
}

// caretRE is the "    ^" line under a quoted source line.
var caretRE = lazyRE(`^\s*\^+\s*$`)

// parsePyflakes reads pyflakes: findings on stdout ("file:line:col: msg",
// older versions without col), syntax errors on stderr, each followed by
// the offending source line and a caret line.
func parsePyflakes(in parseInput) ([]Diagnostic, []string) {
	var diags []Diagnostic
	var un []string
	for _, l := range lines(in.stdout) {
		d, ok := textDiag(l)
		if !ok {
			un = append(un, l)
			continue
		}
		d.File, d.Severity, d.Source = abs(in.base, d.File), SeverityWarning, in.source
		diags = append(diags, d)
	}
	context := 0 // source and caret lines still expected after a syntax error
	for _, l := range lines(in.stderr) {
		if d, ok := textDiag(l); ok {
			d.File, d.Severity, d.Source = abs(in.base, d.File), SeverityError, in.source
			diags = append(diags, d)
			context = 2
			continue
		}
		if context > 0 {
			context--
			if caretRE().MatchString(l) {
				context = 0
			}
			continue
		}
		un = append(un, l)
	}
	return diags, un
}

// parseDart reads "dart analyze --format=machine":
// SEVERITY|TYPE|CODE|FILE|LINE|COL|LENGTH|MESSAGE, with "\", "|", newline
// and carriage return escaped in FILE and MESSAGE.
func parseDart(in parseInput) ([]Diagnostic, []string) {
	var diags []Diagnostic
	var un []string
	for _, l := range append(lines(in.stdout), lines(in.stderr)...) {
		f := splitDart(l)
		sev := ""
		if len(f) == 8 {
			switch f[0] {
			case "ERROR":
				sev = SeverityError
			case "WARNING":
				sev = SeverityWarning
			case "INFO":
				sev = SeverityInfo
			}
		}
		if sev == "" {
			un = append(un, l)
			continue
		}
		diags = append(diags, Diagnostic{File: abs(in.base, f[3]), Line: atoi(f[4]), Column: atoi(f[5]), Severity: sev, Code: f[2], Message: f[7], Source: in.source})
	}
	return diags, un
}

// splitDart splits a machine-format line at unescaped pipes and unescapes
// the fields.
func splitDart(l string) []string {
	var fields []string
	var cur strings.Builder
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c == '\\' && i+1 < len(l):
			i++
			switch l[i] {
			case 'n':
				cur.WriteByte('\n')
			case 'r':
				cur.WriteByte('\r')
			default:
				cur.WriteByte(l[i])
			}
		case c == '|':
			fields = append(fields, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(fields, cur.String())
}

func severityRank(s string) int {
	switch s {
	case SeverityError:
		return 0
	case SeverityWarning:
		return 1
	case SeverityInfo:
		return 2
	}
	return 3
}

// tidy drops repeated diagnostics and puts errors first, keeping the
// checker's order otherwise.
func tidy(diags []Diagnostic) []Diagnostic {
	seen := make(map[Diagnostic]bool, len(diags))
	out := diags[:0]
	for _, d := range diags {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b Diagnostic) int {
		return cmp.Compare(severityRank(a.Severity), severityRank(b.Severity))
	})
	return out
}

// tail keeps the last non-blank lines of un, at most maxUnparsedLines and
// MaxUnparsed bytes.
func tail(un []string) string {
	var keep []string
	for _, l := range un {
		if strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	const cut = "… (earlier lines left out)\n"
	clipped := false
	if len(keep) > maxUnparsedLines {
		keep, clipped = keep[len(keep)-maxUnparsedLines:], true
	}
	s := strings.Join(keep, "\n")
	if len(s) > MaxUnparsed-len(cut) {
		s, clipped = s[len(s)-(MaxUnparsed-len(cut)):], true
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	if clipped {
		s = cut + s
	}
	return s
}

// capBuffer keeps the first max bytes written to it and drops the rest;
// it never fails a write, so the process is never blocked on it.
type capBuffer struct {
	max int

	mu   sync.Mutex
	buf  []byte
	over bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if room := b.max - len(b.buf); room < len(p) {
		b.over = true
		p = p[:max(room, 0)]
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

func (b *capBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf
}

func (b *capBuffer) dropped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.over
}

// lazyRE compiles a regular expression on first use: the parsers are
// needed by few runs, and compiling them all at start cost every berth
// command (the CLI's searches included) most of a millisecond.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
