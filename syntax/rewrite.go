package syntax

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Edit replaces src[StartByte:EndByte] with Text.
type Edit struct {
	StartByte, EndByte int
	Text               string
}

// Rewrite turns matches of src into edits that replace each matched node with
// template, its metavariables substituted:
//   - $NAME and $$NAME insert the capture's text; $$$NAME inserts the source
//     from the first to the last captured node, separators included;
//     unknown or empty captures insert nothing, and the separators around
//     them stay, as in the ast-grep CLI ([Template.Rewrite] drops one);
//     $$$ and $lower stay literal;
//   - a multi-line capture is de-indented by the indentation of its own first
//     line and re-indented to the indentation of the template line it sits on;
//   - template lines after the first are indented like the line where the
//     match starts (spaces and tabs are kept as they are, unlike ast-grep,
//     which counts only spaces);
//   - of overlapping matches the outermost (earliest, longest) wins; the
//     others are dropped, not re-applied.
//
// Rewrite inserts nothing for a variable the pattern does not bind, as
// ast-grep does; [NewTemplate] checks a template against its pattern first.
func Rewrite(src []byte, matches []Match, template string) ([]Edit, error) {
	ms, err := outermost(src, matches)
	if err != nil {
		return nil, err
	}
	edits := make([]Edit, len(ms))
	for i, m := range ms {
		edits[i] = Edit{StartByte: m.StartByte, EndByte: m.EndByte, Text: expand(src, m, template, false)}
	}
	return edits, nil
}

// outermost returns the matches a rewrite replaces, by position: of
// overlapping ones the outermost (earliest, longest). It refuses a match
// that does not fit src.
func outermost(src []byte, matches []Match) ([]Match, error) {
	ms := append([]Match(nil), matches...)
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].StartByte != ms[j].StartByte {
			return ms[i].StartByte < ms[j].StartByte
		}
		return ms[i].EndByte > ms[j].EndByte
	})
	out := ms[:0]
	end := -1
	for _, m := range ms {
		if m.StartByte < 0 || m.EndByte > len(src) || m.StartByte > m.EndByte || string(src[m.StartByte:m.EndByte]) != m.Text {
			return nil, fmt.Errorf("syntax: rewrite: the match at byte %d does not fit this source (it was found in other content); search the current content again", m.StartByte)
		}
		if m.StartByte < end {
			continue
		}
		end = m.EndByte
		if m.StartByte == m.EndByte {
			end = m.EndByte + 1
		}
		out = append(out, m)
	}
	return out, nil
}

// lineIndent returns the leading spaces and tabs of the line containing off.
func lineIndent(src []byte, off int) string {
	ls := bytes.LastIndexByte(src[:off], '\n') + 1
	i := ls
	for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
		i++
	}
	return string(src[ls:i])
}

func isVarChar(c byte) bool { return c == '_' || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') }

// templateVar reads the metavariable that starts at template[i], a '$': up
// to three '$' end at j, the name at k. name is "" when the '$'s start no
// variable ($$$ alone, $lower, $1), which a template keeps as text.
func templateVar(template string, i int) (j, k int, name string) {
	j = i
	for j < len(template) && template[j] == '$' && j-i < 3 {
		j++
	}
	k = j
	for k < len(template) && isVarChar(template[k]) {
		k++
	}
	name = template[j:k]
	if name == "" || !(name[0] == '_' || (name[0] >= 'A' && name[0] <= 'Z')) {
		return j, j, ""
	}
	return j, k, name
}

// TemplateVars returns the names of the metavariables a rewrite template
// uses, without their '$'s, in order of first use.
func TemplateVars(template string) []string {
	var names []string
	for i := 0; i < len(template); {
		if template[i] != '$' {
			i++
			continue
		}
		_, k, name := templateVar(template, i)
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
		i = max(k, i+1)
	}
	return names
}

// expand substitutes m's captures into template and indents the result for
// the match's position. With dropSep, a multi capture that is empty takes
// one separating comma of the template with it (see [Template.Rewrite]).
func expand(src []byte, m Match, template string, dropSep bool) string {
	var b []byte
	lineStart := 0 // index in b of the current template line
	for i := 0; i < len(template); {
		c := template[i]
		if c == '\n' {
			b = append(b, '\n')
			i++
			lineStart = len(b)
			continue
		}
		if c != '$' {
			b = append(b, c)
			i++
			continue
		}
		j, k, name := templateVar(template, i)
		if name == "" {
			b = append(b, template[i:j]...)
			i = j
			continue
		}
		i = k
		capt, ok := m.Captures[name]
		if !ok {
			continue // unknown and non-binding metavariables insert nothing
		}
		if dropSep && capt.Multi && capt.Text == "" {
			if n := sepAfter(template[i:]); n > 0 {
				i += n
			} else if n := sepBefore(b); n > 0 {
				b = b[:len(b)-n]
				lineStart = bytes.LastIndexByte(b, '\n') + 1
			}
			continue
		}
		text := capt.Text
		if strings.Contains(text, "\n") {
			cur := string(b[lineStart:])
			ind := cur[:len(cur)-len(strings.TrimLeft(cur, " \t"))]
			text = reindent(text, lineIndent(src, capt.Range.StartByte), ind)
		}
		b = append(b, text...)
	}
	out := string(b)
	ind := lineIndent(src, m.StartByte)
	if ind == "" || !strings.Contains(out, "\n") {
		return out
	}
	return indentRest(out, ind)
}

// isBlank reports whether c is a space, tab, or line break.
func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// sepAfter returns the length of the separator that starts rest, the
// template after an empty multi capture: blanks, a comma and the blanks
// after it; 0 when no comma follows.
func sepAfter(rest string) int {
	i := 0
	for i < len(rest) && isBlank(rest[i]) {
		i++
	}
	if i == len(rest) || rest[i] != ',' {
		return 0
	}
	i++
	for i < len(rest) && isBlank(rest[i]) {
		i++
	}
	return i
}

// sepBefore returns the length of the separator that ends out, the text
// written before an empty multi capture that ends its list: a comma and the
// blanks after it; 0 when out does not end so.
func sepBefore(out []byte) int {
	i := len(out)
	for i > 0 && isBlank(out[i-1]) {
		i--
	}
	if i == 0 || out[i-1] != ',' {
		return 0
	}
	return len(out) - i + 1
}

// reindent strips from lines after the first the prefix from (or as much of
// it as is there) and prefixes them with to. Empty lines stay empty.
func reindent(text, from, to string) string {
	lines := strings.Split(text, "\n")
	for i := 1; i < len(lines); i++ {
		l := lines[i]
		n := 0
		for n < len(from) && n < len(l) && l[n] == from[n] {
			n++
		}
		l = l[n:]
		if strings.TrimSpace(l) != "" {
			l = to + l
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}

func indentRest(text, ind string) string {
	lines := strings.Split(text, "\n")
	for i := 1; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "" {
			lines[i] = ind + lines[i]
		}
	}
	return strings.Join(lines, "\n")
}

// Apply returns a copy of src with edits applied. Edits must not overlap (as
// returned by Rewrite); they may come in any order.
func Apply(src []byte, edits []Edit) []byte {
	es := append([]Edit(nil), edits...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].StartByte < es[j].StartByte })
	var out bytes.Buffer
	out.Grow(len(src))
	pos := 0
	for _, e := range es {
		if e.StartByte < pos {
			continue
		}
		out.Write(src[pos:e.StartByte])
		out.WriteString(e.Text)
		pos = e.EndByte
	}
	out.Write(src[pos:])
	return out.Bytes()
}
