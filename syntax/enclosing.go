package syntax

import (
	"maps"
	"sort"
	"strings"
	"sync"
)

// Enclosing symbols. A match is located by the declarations around it: the
// functions, methods, classes, impls, modules and types whose syntax nodes
// contain it, named as the source names them and joined with "." from the
// outside in ("HTTPConnection.putheader", "(*Server).Serve", "Vec.push").
// Each language has a small table of declaration kinds and where each one
// keeps its name; a language without a table (and a declaration whose name
// cannot be found, such as an anonymous namespace) adds nothing.

// nameHow says how a declaration's name is read when a plain child kind is
// not enough.
type nameHow uint8

const (
	byChild      nameHow = iota // the first direct child of one of the name kinds
	goReceiver                  // Go method: "(*T).M" or "T.M"
	cDeclarator                 // C/C++ function: the name inside the declarator chain
	rustImplType                // Rust impl: the implemented type, without its generic arguments
)

// scopeRule describes one declaration kind.
type scopeRule struct {
	how   nameHow
	names []string // byChild: kinds of the child that holds the name
	// needs, when set, makes the node a declaration only when it has a
	// direct child of one of these kinds: a C struct with a body, not a
	// use of its type; a JavaScript variable whose value is a function.
	needs []string
}

func byKinds(names ...string) scopeRule { return scopeRule{names: names} }

var (
	jsFunctionValue = []string{"arrow_function", "function_expression", "function", "generator_function"}
	jsScopes        = map[string]scopeRule{
		"function_declaration":           byKinds("identifier"),
		"generator_function_declaration": byKinds("identifier"),
		"class_declaration":              byKinds("identifier", "type_identifier"),
		"abstract_class_declaration":     byKinds("type_identifier"),
		"class":                          byKinds("identifier", "type_identifier"),
		"interface_declaration":          byKinds("type_identifier"),
		"enum_declaration":               byKinds("identifier"),
		"internal_module":                byKinds("identifier", "nested_identifier"),
		"method_definition":              byKinds("property_identifier", "private_property_identifier"),
		"variable_declarator":            {names: []string{"identifier"}, needs: jsFunctionValue},
		"field_definition":               {names: []string{"property_identifier", "private_property_identifier"}, needs: jsFunctionValue},
		"public_field_definition":        {names: []string{"property_identifier", "private_property_identifier"}, needs: jsFunctionValue},
	}
	cScopes = map[string]scopeRule{
		"function_definition": {how: cDeclarator},
		"struct_specifier":    {names: []string{"type_identifier"}, needs: []string{"field_declaration_list"}},
		"union_specifier":     {names: []string{"type_identifier"}, needs: []string{"field_declaration_list"}},
		"enum_specifier":      {names: []string{"type_identifier"}, needs: []string{"enumerator_list"}},
	}
	cppScopes = mergeScopes(cScopes, map[string]scopeRule{
		"class_specifier":      {names: []string{"type_identifier"}, needs: []string{"field_declaration_list"}},
		"namespace_definition": byKinds("namespace_identifier", "nested_namespace_specifier"),
	})
	javaName = byKinds("identifier")
)

// scopeRules are the declaration tables by language id.
var scopeRules = map[string]map[string]scopeRule{
	"go": {
		"function_declaration": byKinds("identifier"),
		"method_declaration":   {how: goReceiver},
		"type_spec":            byKinds("type_identifier"),
	},
	"python": {
		"function_definition": byKinds("identifier"),
		"class_definition":    byKinds("identifier"),
	},
	"javascript": jsScopes,
	"typescript": jsScopes,
	"tsx":        jsScopes,
	"rust": {
		"function_item":           byKinds("identifier"),
		"function_signature_item": byKinds("identifier"),
		"impl_item":               {how: rustImplType},
		"trait_item":              byKinds("type_identifier"),
		"mod_item":                byKinds("identifier"),
	},
	"c":   cScopes,
	"cpp": cppScopes,
	"java": {
		"class_declaration":           javaName,
		"interface_declaration":       javaName,
		"enum_declaration":            javaName,
		"record_declaration":          javaName,
		"annotation_type_declaration": javaName,
		"method_declaration":          javaName,
		"constructor_declaration":     javaName,
	},
	"ruby": {
		"class":            byKinds("constant", "scope_resolution"),
		"module":           byKinds("constant", "scope_resolution"),
		"method":           byKinds("identifier", "operator", "setter"),
		"singleton_method": byKinds("identifier", "operator", "setter"),
	},
}

func mergeScopes(a, b map[string]scopeRule) map[string]scopeRule {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

// scopeTable is a language's declaration table by kind id, built on first
// use.
type scopeTable struct {
	once  sync.Once
	rules []*scopeRule // by kind id; nil: not a declaration
}

func (l *Language) scopeRules() []*scopeRule {
	st := l.scopes
	st.once.Do(func() {
		table := scopeRules[l.ID]
		if len(table) == 0 {
			return
		}
		n := int(l.Grammar.NodeKindCount())
		st.rules = make([]*scopeRule, n)
		for k := range n {
			if r, ok := table[l.kindName(uint16(k))]; ok {
				st.rules[k] = &r
			}
		}
	})
	return st.rules
}

// Enclosing returns the declarations around the source range [start, end)
// (a match's StartByte and EndByte), outermost first, joined with ".": for
// a match inside method putheader of class HTTPConnection,
// "HTTPConnection.putheader". A node that spans exactly the range is the
// match itself, not its enclosure: a pattern that matches a method reports
// the class. A Go method is named as Go's method expressions write it,
// "(*Server).Serve" for a pointer receiver and "Server.Serve" for a value
// one (type parameters left out). It returns "" at the top level, and for a
// language without a declaration table.
func (t *Tree) Enclosing(start, end int) string {
	tr := t.t
	rules := tr.lang.scopeRules()
	if rules == nil || len(tr.nodes) == 0 || start < 0 || end < start || end > len(tr.src) {
		return ""
	}
	s, e := uint32(start), uint32(end)
	// Nodes are in pre-order, so their start offsets do not decrease: the
	// last node starting at or before s lies inside the smallest node
	// containing the range, which is then its first ancestor containing it.
	i := int32(sort.Search(len(tr.nodes), func(i int) bool { return tr.nodes[i].start > s }) - 1)
	for i > 0 && (tr.nodes[i].start > s || tr.nodes[i].end < e) {
		i = tr.nodes[i].parent
	}
	if i < 0 {
		return ""
	}
	// Outermost node spanning exactly the range: the match itself.
	for p := tr.nodes[i].parent; p >= 0 && tr.nodes[p].start == s && tr.nodes[p].end == e; p = tr.nodes[p].parent {
		i = p
	}
	var names []string
	for p := tr.nodes[i].parent; p >= 0; p = tr.nodes[p].parent {
		k := tr.nodes[p].kind
		if int(k) >= len(rules) || rules[k] == nil {
			continue
		}
		if name := tr.declName(p, rules[k]); name != "" {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	for a, b := 0, len(names)-1; a < b; a, b = a+1, b-1 {
		names[a], names[b] = names[b], names[a]
	}
	return strings.Join(names, ".")
}

// childOf returns the first direct child of node i whose kind is one of
// kinds, or -1.
func (t *tree) childOf(i int32, kinds []string) int32 {
	if t.nodes[i].nchild == 0 {
		return -1
	}
	for c := i + 1; c >= 0; c = t.nodes[c].next {
		name := t.lang.kindName(t.nodes[c].kind)
		for _, k := range kinds {
			if name == k {
				return c
			}
		}
	}
	return -1
}

// declName returns the name of declaration node i, or "".
func (t *tree) declName(i int32, r *scopeRule) string {
	if len(r.needs) > 0 && t.childOf(i, r.needs) < 0 {
		return ""
	}
	switch r.how {
	case goReceiver:
		return t.goMethodName(i)
	case cDeclarator:
		return t.cFunctionName(i)
	case rustImplType:
		return t.rustImplName(i)
	}
	if c := t.childOf(i, r.names); c >= 0 {
		return t.text(c)
	}
	return ""
}

// goMethodName names a Go method_declaration "(*T).M" or "T.M".
func (t *tree) goMethodName(i int32) string {
	name := t.childOf(i, []string{"field_identifier"})
	if name < 0 {
		return ""
	}
	recv := ""
	if pl := t.childOf(i, []string{"parameter_list"}); pl >= 0 {
		if pd := t.childOf(pl, []string{"parameter_declaration"}); pd >= 0 {
			// The receiver's type is the parameter's last named child.
			typ := int32(-1)
			for c := pd + 1; c >= 0; c = t.nodes[c].next {
				if t.nodes[c].named() {
					typ = c
				}
			}
			if typ >= 0 {
				recv = t.goTypeName(typ)
			}
		}
	}
	if recv == "" {
		return t.text(name)
	}
	return recv + "." + t.text(name)
}

// goTypeName is a receiver type without type arguments: "T", "(*T)".
func (t *tree) goTypeName(i int32) string {
	switch t.lang.kindName(t.nodes[i].kind) {
	case "pointer_type":
		for c := i + 1; c >= 0; c = t.nodes[c].next {
			if t.nodes[c].named() {
				if base := t.goTypeName(c); base != "" {
					return "(*" + base + ")"
				}
			}
		}
		return ""
	case "generic_type":
		if c := t.childOf(i, []string{"type_identifier"}); c >= 0 {
			return t.text(c)
		}
		return ""
	case "parenthesized_type":
		for c := i + 1; c >= 0; c = t.nodes[c].next {
			if t.nodes[c].named() {
				return t.goTypeName(c)
			}
		}
		return ""
	}
	return t.text(i)
}

// cFunctionName follows a C/C++ function_definition's declarator chain
// (pointer, reference, parenthesised declarators) to the
// function_declarator and returns its name as written ("main", "C::out",
// "~C").
func (t *tree) cFunctionName(i int32) string {
	for depth := 0; depth < 8; depth++ {
		d := int32(-1)
		for c := i + 1; c >= 0 && t.nodes[i].nchild > 0; c = t.nodes[c].next {
			if strings.HasSuffix(t.lang.kindName(t.nodes[c].kind), "declarator") {
				d = c
				break
			}
		}
		if d < 0 {
			return ""
		}
		if t.lang.kindName(t.nodes[d].kind) == "function_declarator" {
			for c := d + 1; c >= 0 && t.nodes[d].nchild > 0; c = t.nodes[c].next {
				if t.nodes[c].named() {
					return t.text(c)
				}
			}
			return ""
		}
		i = d
	}
	return ""
}

// rustImplName returns the type a Rust impl_item implements: in
// `impl Trait for Type` the second type, else the first, without generic
// arguments.
func (t *tree) rustImplName(i int32) string {
	var types []int32
	for c := i + 1; c >= 0 && t.nodes[i].nchild > 0; c = t.nodes[c].next {
		if !t.nodes[c].named() {
			continue
		}
		switch t.lang.kindName(t.nodes[c].kind) {
		case "type_parameters", "where_clause", "declaration_list", "line_comment", "block_comment":
			continue
		}
		types = append(types, c)
	}
	if len(types) == 0 {
		return ""
	}
	typ := types[len(types)-1]
	if t.lang.kindName(t.nodes[typ].kind) == "generic_type" {
		for c := typ + 1; c >= 0; c = t.nodes[c].next {
			if t.nodes[c].named() {
				return t.text(c)
			}
		}
	}
	return t.text(typ)
}
