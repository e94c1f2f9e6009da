package syntax

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Replace is a transform, ast-grep's transform.replace: it derives a new
// variable from Source, a variable the pattern binds ("$MSG", "$$$ARGS")
// or another transform's, by replacing every match of the regular
// expression Replace (Go RE2 syntax) in its text with By. In By, $1, ${1}
// and ${name} insert the regexp's groups (regexp.Regexp.Expand: write
// ${1}x, not $1x, before a letter or digit); $$ is a literal '$'.
type Replace struct {
	Source  string
	Replace string
	By      string
}

// Template is a rewrite template checked against the pattern it fills,
// with the transforms it may use. It is safe for concurrent use.
type Template struct {
	text  string
	steps []transformStep // in dependency order
}

type transformStep struct {
	name, source string
	re           *regexp.Regexp
	by           string
}

// NewTemplate checks text and transforms against p: every variable the
// template uses must be bound by the pattern or defined by a transform,
// every transform's source too, and every regular expression must compile.
// The errors name what the pattern binds, so the template can be fixed in
// one step. transforms is keyed by the new variable's name (with or
// without its '$').
func NewTemplate(p *Pattern, text string, transforms map[string]Replace) (*Template, error) {
	bound := p.Vars()
	defined := map[string]Replace{}
	for key, r := range transforms {
		name := strings.TrimLeft(key, "$")
		if !validVarName(name) {
			return nil, fmt.Errorf("syntax: transform %q: a transform's name is a variable name, upper-case letters, digits and _ ($NAME in the rewrite)", key)
		}
		if slices.Contains(bound, name) {
			return nil, fmt.Errorf("syntax: transform %s: the pattern binds $%s already; give the transform another name, such as %s_NEW, and use that in the rewrite", name, name, name)
		}
		if _, dup := defined[name]; dup {
			return nil, fmt.Errorf("syntax: transform %s is defined twice", name)
		}
		defined[name] = r
	}
	known := func(name string) bool { _, ok := defined[name]; return ok || slices.Contains(bound, name) }
	var unbound []string
	for _, name := range TemplateVars(text) {
		if !known(name) {
			unbound = append(unbound, "$"+name)
		}
	}
	if len(unbound) > 0 {
		msg := fmt.Sprintf("syntax: the rewrite uses %s, which the pattern does not bind: %s; use only those, or define the name in transform",
			joinAnd(unbound), p.describeVars(defined))
		for _, v := range p.inert {
			if slices.Contains(unbound, v.Var) {
				where := "inside a name"
				if v.InString {
					where = "inside a string literal"
				}
				msg += fmt.Sprintf(" (%s is written %s in the pattern, %q, where a metavariable binds nothing: match the whole string or name with one metavariable and change its text with a transform)", v.Var, where, v.Leaf)
				break
			}
		}
		return nil, errors.New(msg)
	}
	tm := &Template{text: text}
	// Order the transforms so that each comes after the one it reads.
	names := make([]string, 0, len(defined))
	for name := range defined {
		names = append(names, name)
	}
	sort.Strings(names)
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("syntax: the transforms %s read each other in a cycle; one of them must read a variable of the pattern", strings.Join(append(chain, name), " → "))
		case 2:
			return nil
		}
		state[name] = 1
		r := defined[name]
		src := strings.TrimLeft(strings.TrimSpace(r.Source), "$")
		if !validVarName(src) {
			return fmt.Errorf("syntax: transform %s: source %q is not a variable; write it as $NAME or $$$NAME, one the pattern binds (%s)", name, r.Source, p.describeVars(nil))
		}
		if !known(src) {
			return fmt.Errorf("syntax: transform %s: its source $%s is not bound: %s", name, src, p.describeVars(defined))
		}
		if _, ok := defined[src]; ok {
			if err := visit(src, append(chain, name)); err != nil {
				return err
			}
		}
		if r.Replace == "" {
			return fmt.Errorf("syntax: transform %s: replace is empty; give the regular expression to find in $%s", name, src)
		}
		re, err := regexp.Compile(r.Replace)
		if err != nil {
			return fmt.Errorf("syntax: transform %s: replace %q is not a valid regular expression (Go RE2 syntax): %v", name, r.Replace, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		tm.steps = append(tm.steps, transformStep{name: name, source: src, re: re, by: r.By})
		state[name] = 2
		return nil
	}
	for _, name := range names {
		if err := visit(name, nil); err != nil {
			return nil, err
		}
	}
	return tm, nil
}

// Rewrite is the package's Rewrite with the template's transforms: each
// match gets the transformed variables as captures of its own (with their
// source's range, for indentation) before the template is filled. Unlike
// Rewrite and the ast-grep CLI (0.51.1 writes f("x", , err) for f($W,
// $$$A, err) when $$$A is empty), a multi capture that is empty takes one
// separating comma with it: the comma after it and the blanks around that
// comma, or, when it ends its list, the comma before it and the blanks
// after that one. So f($W, $$$A, err) gives f("x", err), f($W, $$$A)
// gives f("x"), and ($$$A,) gives ().
func (tm *Template) Rewrite(src []byte, matches []Match) ([]Edit, error) {
	ms, err := outermost(src, matches)
	if err != nil {
		return nil, err
	}
	edits := make([]Edit, len(ms))
	for i, m := range ms {
		if len(tm.steps) > 0 {
			caps := make(map[string]*Capture, len(m.Captures)+len(tm.steps))
			for k, c := range m.Captures {
				caps[k] = c
			}
			for _, st := range tm.steps {
				c := caps[st.source]
				if c == nil {
					continue
				}
				caps[st.name] = &Capture{Multi: c.Multi, Text: st.re.ReplaceAllString(c.Text, st.by), Range: c.Range}
			}
			m.Captures = caps
		}
		edits[i] = Edit{StartByte: m.StartByte, EndByte: m.EndByte, Text: expand(src, m, tm.text, true)}
	}
	return edits, nil
}

// describeVars says what the pattern binds and the transforms define:
// "the pattern binds $E, $$$ARGS; the transforms define $NEW".
func (p *Pattern) describeVars(defined map[string]Replace) string {
	var vs []string
	for _, v := range p.vars {
		vs = append(vs, v.display())
	}
	s := "the pattern binds no variable"
	if len(vs) > 0 {
		s = "the pattern binds " + strings.Join(vs, ", ")
	}
	if len(defined) > 0 {
		var ds []string
		for name := range defined {
			ds = append(ds, "$"+name)
		}
		sort.Strings(ds)
		s += "; the transforms define " + strings.Join(ds, ", ")
	}
	return s
}

// joinAnd joins "a", "a and b", "a, b and c".
func joinAnd(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
