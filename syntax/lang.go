// Package syntax is berth's structural code engine: tree-sitter grammars,
// an ast-grep compatible pattern compiler and matcher, and a rewrite engine.
//
// It works on bytes only. It never touches a sandbox or a file system: callers
// read files and hand the contents in. It is the only cgo package of berth.
//
// Besides the bundled grammars, grammars compiled into shared libraries are
// loaded at run time from JSON descriptors (LoadGrammar, LoadGrammarDir,
// LoadConfigured; Dart and Swift come this way, installed by
// `berth grammars install`, package syntax/grammars). See GrammarDescriptor for adding a grammar by config.
package syntax

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"

	sitter "github.com/tree-sitter/go-tree-sitter"
)

// Context is one rung of a language's pattern context ladder: a pattern
// fragment is parsed as Prefix + fragment + Suffix. When Indent is set, every
// line of the fragment after the first is prefixed with it as well, and so is
// the first line (Python bodies need indentation).
type Context struct {
	Name   string // "bare", "statement", "expression", "member", "declaration"
	Prefix string
	Suffix string
	Indent string
	// Reject lists effective node kinds this rung refuses (tree-sitter-cpp
	// accepts a function definition inside a function body, which C++ does
	// not have).
	Reject []string
	// Needs, when set, makes the rung accept only fragments containing a node
	// of one of these kinds (a C++ member rung for "override" methods that
	// comes before the declaration rung).
	Needs []string
	// Append is added after the fragment, as part of it, unless the
	// fragment already ends with it (a Dart statement pattern written
	// without its ';').
	Append string
	// BlockEllipsis, when set, is a statement terminator (Dart: ";"): a
	// `{ $$$ }` block in the fragment is written `{ $$$; }` before parsing,
	// so that it parses as a block of statements rather than a set literal
	// (tree-sitter-dart reads `for (…) { $$$ }` as a for loop over an
	// expression statement `{$$$}` missing its `;`), and the statement
	// `$$$;` reads back as the ellipsis.
	BlockEllipsis string
	// Sequence lets the rung accept a fragment that parses as several
	// sibling nodes (Dart has no call node: `print(x)` is an identifier
	// followed by a selector). Such a pattern matches runs of consecutive
	// children; see matchSeq.
	Sequence bool
}

// Language is a grammar together with the metadata the pattern compiler
// needs. Bundled languages are in the table returned by Languages; more can be
// added at run time with Register (for grammars loaded from a shared library).
type Language struct {
	// ID is the canonical language id ("go", "python", "c_sharp", …).
	ID string
	// Aliases are other accepted names ("golang", "py", "csharp", …).
	Aliases []string
	// Extensions are file name suffixes including the dot (".go"), or whole
	// base names for files without an extension ("Makefile" style).
	Extensions []string
	// Expando replaces '$' in patterns before parsing when '$' is not legal
	// in the language's identifiers (ast-grep's expando character). Zero
	// keeps '$'.
	Expando rune
	// Contexts is the context ladder, tried in order; the first context in
	// which the fragment parses without ERROR or MISSING nodes wins. Empty
	// means a single "bare" context.
	Contexts []Context
	// Grammar is the tree-sitter language.
	Grammar *sitter.Language
	// VerbatimKeywords declares that the grammar's anonymous word tokens
	// (keywords such as "return") always appear in source spelled exactly
	// as their kind: none comes from a case-insensitive or aliased rule or
	// from an external scanner. Pattern.Literals then includes a pattern's
	// keywords, so searches skip files that lack them without parsing.
	VerbatimKeywords bool
	// VarQuote, when set, is the quote of the language's string literals
	// (`"`): a pattern that parses in no context is tried again with its
	// single metavariables quoted, one at a time and then all, for the
	// places where the grammar accepts only a string literal
	// (`import type { $$$ } from $S`); the quoted literal reads back as the
	// metavariable and matches any node there, as in ast-grep, whose
	// pattern parses with an ERROR there and still matches.
	VarQuote string
	// Chain lists named node kinds that continue the expression before
	// them as its siblings instead of wrapping it (tree-sitter-dart's
	// "selector": `c.value` is an identifier followed by a selector, where
	// other grammars, and ast-grep's Dart, have one member-expression
	// node). A single metavariable that matches a node followed by such
	// siblings binds the whole run, as it binds the one node elsewhere,
	// unless the pattern itself continues with a node of a chain kind
	// (`$X.dispose()`).
	Chain []string

	ptr    unsafe.Pointer // *C.TSLanguage
	chain  *chainKinds    // Chain as kind ids, resolved on first use
	kinds  *kindNames     // symbol names by kind id, read on first use
	scopes *scopeTable    // declaration kinds for Tree.Enclosing, built on first use
}

// kindNames holds a grammar's symbol names, read from it the first time a
// name is asked for: a grammar has hundreds, and reading them all for every
// bundled language at start cost every berth command milliseconds.
type kindNames struct {
	once  sync.Once
	names []string
}

var (
	registryMu sync.RWMutex
	byName     = map[string]*Language{} // ids and aliases
	byExt      = map[string]*Language{}
	ordered    []*Language
)

// Register adds a language whose grammar comes from elsewhere (for example a
// grammar compiled into a shared library at install time). The id, aliases and
// extensions must not clash with an existing language.
func Register(l Language) error {
	if l.ID == "" {
		return fmt.Errorf("syntax: register: the language has no id; set Language.ID")
	}
	if l.Grammar == nil || l.Grammar.Inner == nil {
		return fmt.Errorf("syntax: register %q: the language has no tree-sitter grammar; set Language.Grammar", l.ID)
	}
	abi := l.Grammar.AbiVersion()
	if abi < sitter.MIN_COMPATIBLE_LANGUAGE_VERSION || abi > sitter.LANGUAGE_VERSION {
		return fmt.Errorf("syntax: register %q: grammar ABI %d is outside the supported range %d–%d; regenerate the grammar with a matching tree-sitter CLI",
			l.ID, abi, sitter.MIN_COMPATIBLE_LANGUAGE_VERSION, sitter.LANGUAGE_VERSION)
	}
	if len(l.Contexts) == 0 {
		l.Contexts = []Context{{Name: "bare"}}
	}
	lp := prepared(l)
	registryMu.Lock()
	defer registryMu.Unlock()
	names := append([]string{l.ID}, l.Aliases...)
	for _, name := range names {
		if old, ok := byName[strings.ToLower(name)]; ok {
			return fmt.Errorf("syntax: register %q: the name %q is already used by language %q; pick another id or alias", l.ID, name, old.ID)
		}
	}
	for _, ext := range l.Extensions {
		if old, ok := byExt[strings.ToLower(ext)]; ok {
			return fmt.Errorf("syntax: register %q: the extension %q already maps to language %q", l.ID, ext, old.ID)
		}
	}
	for _, name := range names {
		byName[strings.ToLower(name)] = lp
	}
	for _, ext := range lp.Extensions {
		byExt[strings.ToLower(ext)] = lp
	}
	ordered = append(ordered, lp)
	return nil
}

// prepared returns a copy of l ready to parse with (not registered).
func prepared(l Language) *Language {
	l.ptr = unsafe.Pointer(l.Grammar.Inner)
	l.kinds = new(kindNames)
	l.chain = new(chainKinds)
	l.scopes = new(scopeTable)
	return &l
}

// Lookup returns the language with the given id or alias (case-insensitive).
func Lookup(id string) (*Language, error) {
	registryMu.RLock()
	l, ok := byName[strings.ToLower(strings.TrimSpace(id))]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("syntax: unknown language %q; use one of: %s", id, strings.Join(IDs(), ", "))
	}
	return l, nil
}

// LanguageForPath infers the language of a file from its name. It returns nil
// when the extension is unknown.
func LanguageForPath(path string) *Language {
	base := filepath.Base(path)
	registryMu.RLock()
	defer registryMu.RUnlock()
	if l, ok := byExt[strings.ToLower(base)]; ok {
		return l
	}
	// Longest suffix first, so ".d.ts"-style entries could win over ".ts".
	lower := strings.ToLower(base)
	for i := 0; i < len(lower); i++ {
		if lower[i] != '.' {
			continue
		}
		if l, ok := byExt[lower[i:]]; ok {
			return l
		}
	}
	return nil
}

// IDs returns the ids of all registered languages, sorted.
func IDs() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	ids := make([]string, 0, len(ordered))
	for _, l := range ordered {
		ids = append(ids, l.ID)
	}
	sort.Strings(ids)
	return ids
}

// Languages returns all registered languages in registration order.
func Languages() []*Language {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return append([]*Language(nil), ordered...)
}

// chainKinds is a Language's Chain as a set of kind ids.
type chainKinds struct {
	once sync.Once
	ids  map[uint16]bool
}

// chainKind reports whether nodes of kind k continue the sibling before
// them (see Language.Chain).
func (l *Language) chainKind(k uint16) bool {
	if len(l.Chain) == 0 || l.chain == nil {
		return false
	}
	ck := l.chain
	ck.once.Do(func() {
		ck.ids = map[uint16]bool{}
		// Every symbol of that name: a grammar may alias several rules to
		// one kind.
		for id := uint16(1); uint32(id) < l.Grammar.NodeKindCount(); id++ {
			if l.Grammar.NodeKindIsNamed(id) && slices.Contains(l.Chain, l.kindName(id)) {
				ck.ids[id] = true
			}
		}
	})
	return ck.ids[k]
}

// kindName returns the node kind name for a kind id.
func (l *Language) kindName(k uint16) string {
	if k == errorKind {
		return "ERROR"
	}
	kn := l.kinds
	kn.once.Do(func() {
		kn.names = make([]string, l.Grammar.NodeKindCount())
		for i := range kn.names {
			kn.names[i] = l.Grammar.NodeKindForId(uint16(i))
		}
	})
	if int(k) < len(kn.names) {
		return kn.names[k]
	}
	return fmt.Sprintf("kind%d", k)
}
