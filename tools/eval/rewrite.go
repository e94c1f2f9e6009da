package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The IPython idioms of EVAL-3 are rewritten by berth into calls of
// helpers that the prelude defines in every kernel, so they behave the same
// in ipykernel and in berth's own kernels:
//
//	%pip install x      → __berth_pip("install x")
//	%cd dir             → __berth_cd("dir")
//	!cmd                → __berth_sh("cmd")
//	x = !cmd            → x = __berth_sh("cmd", capture=True)
//	%timeit stmt        → __berth_timeit("stmt")
//	%%bash (cell)       → __berth_bash("<body>")
//	%%timeit [setup]    → __berth_timeit("<body>", setup="setup")
//
// Lines that start inside a string literal are never rewritten.

// pyString returns s as a Python string literal.
func pyString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a JSON string is a valid Python (and JavaScript) literal
	return strings.TrimSuffix(b.String(), "\n")
}

// rewritePython rewrites the IPython idioms of a Python cell.
func rewritePython(code string) (string, error) {
	lines := strings.Split(code, "\n")
	// Cell magics: the first non-blank line.
	first := 0
	for first < len(lines) && strings.TrimSpace(lines[first]) == "" {
		first++
	}
	if first < len(lines) {
		head := strings.TrimSpace(lines[first])
		if name, rest, ok := cellMagic(head); ok {
			body := strings.Join(lines[first+1:], "\n")
			switch name {
			case "bash", "sh", "script":
				if name == "script" {
					return "", fmt.Errorf("%%%%script is not supported; use %%%%bash or !cmd")
				}
				return "__berth_bash(" + pyString(body) + ")", nil
			case "timeit":
				return timeitCall(body, rest, true)
			case "capture", "time", "writefile", "html", "javascript", "latex", "markdown":
				return "", fmt.Errorf("%%%%%s is not supported by berth's eval; write plain Python (berth rewrites %%pip, %%cd, !cmd, %%%%bash and %%%%timeit)", name)
			default:
				return "", fmt.Errorf("unknown cell magic %%%%%s; berth rewrites %%%%bash and %%%%timeit, and the line magics %%pip, %%cd, %%timeit and !cmd", name)
			}
		}
	}
	var out []string
	st := pyScanner{}
	for _, line := range lines {
		inString := st.inString()
		st.scan(line)
		if inString {
			out = append(out, line)
			continue
		}
		r, err := rewritePythonLine(line)
		if err != nil {
			return "", err
		}
		out = append(out, r)
	}
	return strings.Join(out, "\n"), nil
}

// cellMagic parses "%%name rest".
func cellMagic(head string) (name, rest string, ok bool) {
	if !strings.HasPrefix(head, "%%") {
		return "", "", false
	}
	f := strings.SplitN(strings.TrimPrefix(head, "%%"), " ", 2)
	if f[0] == "" {
		return "", "", false
	}
	if len(f) == 2 {
		rest = strings.TrimSpace(f[1])
	}
	return f[0], rest, true
}

// rewritePythonLine rewrites one line that starts outside any string.
func rewritePythonLine(line string) (string, error) {
	trimmed := strings.TrimLeft(line, " \t")
	indent := line[:len(line)-len(trimmed)]
	switch {
	case strings.HasPrefix(trimmed, "!"):
		return indent + "__berth_sh(" + pyString(strings.TrimPrefix(trimmed, "!")) + ")", nil
	case strings.HasPrefix(trimmed, "%") && !strings.HasPrefix(trimmed, "%%"):
		f := strings.SplitN(strings.TrimPrefix(trimmed, "%"), " ", 2)
		arg := ""
		if len(f) == 2 {
			arg = strings.TrimSpace(f[1])
		}
		switch f[0] {
		case "pip":
			return indent + "__berth_pip(" + pyString(arg) + ")", nil
		case "cd":
			return indent + "__berth_cd(" + pyString(arg) + ")", nil
		case "timeit":
			c, err := timeitCall(arg, "", false)
			return indent + c, err
		case "pwd":
			return indent + "__berth_cd(None)", nil
		default:
			return "", fmt.Errorf("unknown line magic %%%s; berth rewrites %%pip, %%cd, %%pwd, %%timeit, !cmd, %%%%bash and %%%%timeit", f[0])
		}
	}
	// x = !cmd
	if i := strings.Index(trimmed, "= !"); i > 0 {
		lhs := strings.TrimSpace(trimmed[:i])
		if isTarget(lhs) {
			return indent + lhs + " = __berth_sh(" + pyString(strings.TrimSpace(trimmed[i+3:])) + ", capture=True)", nil
		}
	}
	return line, nil
}

// isTarget reports whether s is a plain assignment target: names and
// dots, or a tuple of them.
func isTarget(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r == '_' || r == '.' || r == ',' || r == ' ':
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r > 127:
		default:
			return false
		}
	}
	return !(s[0] >= '0' && s[0] <= '9')
}

// timeitCall builds the __berth_timeit call for "%timeit [-n N] [-r R]
// stmt" (line) or "%%timeit [-n N] [-r R] [setup]" (cell, body is stmt).
func timeitCall(body, args string, cell bool) (string, error) {
	opts := map[string]string{}
	f := strings.Fields(args)
	if !cell {
		f = strings.Fields(body)
	}
	i := 0
	for i+1 < len(f) && (f[i] == "-n" || f[i] == "-r") {
		opts[f[i]] = f[i+1]
		i += 2
	}
	rest := strings.Join(f[i:], " ")
	if !cell {
		// Keep the statement's own spacing: drop only the options.
		s := strings.TrimSpace(body)
		for range i {
			s = strings.TrimSpace(s[len(strings.Fields(s)[0]):])
		}
		body, rest = s, ""
	}
	call := "__berth_timeit(" + pyString(body)
	if rest != "" {
		call += ", setup=" + pyString(rest)
	}
	for k, name := range map[string]string{"-n": "number", "-r": "repeat"} {
		if v, ok := opts[k]; ok {
			if strings.Trim(v, "0123456789") != "" {
				return "", fmt.Errorf("%%timeit %s needs a number, not %q", k, v)
			}
			call += ", " + name + "=" + v
		}
	}
	return call + ")", nil
}

// pyScanner tracks whether Python source is inside a string literal across
// lines (a triple-quoted string, or a single-quoted one continued with a
// backslash).
type pyScanner struct {
	quote string // the open string's delimiter, "" outside
}

func (p *pyScanner) inString() bool { return p.quote != "" }

func (p *pyScanner) scan(line string) {
	for i := 0; i < len(line); {
		if p.quote != "" {
			switch {
			case line[i] == '\\':
				i += 2
			case strings.HasPrefix(line[i:], p.quote):
				i += len(p.quote)
				p.quote = ""
			default:
				i++
			}
			continue
		}
		switch c := line[i]; c {
		case '#':
			return
		case '"', '\'':
			q := string(c)
			if strings.HasPrefix(line[i:], strings.Repeat(q, 3)) {
				q = strings.Repeat(q, 3)
			}
			p.quote = q
			i += len(q)
		default:
			i++
		}
	}
	// A single-quoted string ends with the line unless continued.
	if len(p.quote) == 1 && !strings.HasSuffix(line, "\\") {
		p.quote = ""
	}
}

// rewriteJavaScript rewrites "!cmd" lines of a JavaScript cell into shell
// calls; lines inside template literals or block comments are left alone.
func rewriteJavaScript(code string) string {
	lines := strings.Split(code, "\n")
	inTemplate, inComment := false, false
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " \t")
		if !inTemplate && !inComment && strings.HasPrefix(trimmed, "!") && !strings.HasPrefix(trimmed, "!=") {
			indent := line[:len(line)-len(trimmed)]
			lines[i] = indent + "__berth_sh(" + pyString(strings.TrimPrefix(trimmed, "!")) + ");"
			continue
		}
		for j := 0; j < len(line); j++ {
			switch {
			case inComment:
				if strings.HasPrefix(line[j:], "*/") {
					inComment = false
					j++
				}
			case inTemplate:
				if line[j] == '\\' {
					j++
				} else if line[j] == '`' {
					inTemplate = false
				}
			case strings.HasPrefix(line[j:], "//"):
				j = len(line)
			case strings.HasPrefix(line[j:], "/*"):
				inComment = true
				j++
			case line[j] == '`':
				inTemplate = true
			case line[j] == '"' || line[j] == '\'':
				q := line[j]
				for j++; j < len(line) && line[j] != q; j++ {
					if line[j] == '\\' {
						j++
					}
				}
			}
		}
	}
	return strings.Join(lines, "\n")
}
