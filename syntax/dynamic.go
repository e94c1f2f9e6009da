package syntax

// Dynamic grammars: tree-sitter grammars compiled into shared libraries and
// loaded at run time from a JSON descriptor (as ast-grep's customLanguages).
// Dart and Swift come this way (`berth grammars install`, package
// syntax/grammars, compiles them from their npm packages), and users add their
// own grammars the same way.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

static void *berth_dlopen(const char *path, char **err) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) *err = dlerror();
	return h;
}

static void *berth_dlsym(void *h, const char *sym, char **err) {
	dlerror();
	void *p = dlsym(h, sym);
	char *e = dlerror();
	if (e) *err = e;
	return p;
}

static const void *berth_call_language(void *fn) {
	return ((const void *(*)(void))fn)();
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	sitter "github.com/tree-sitter/go-tree-sitter"
)

// GrammarDescriptor is the JSON file that describes a grammar compiled into a
// shared library. Field names follow berth's style; ast-grep's customLanguages
// names (libraryPath, languageSymbol, expandoChar) are accepted as well.
//
// Adding a grammar by config: compile any tree-sitter grammar (ABI 13–15)
// into a shared library, for example
//
//	cc -O2 -fPIC -shared -I src src/parser.c src/scanner.c -o libtree-sitter-mylang.so
//
// (`berth grammars install` does this for the grammars berth knows), put a
// descriptor next to it and either drop both into DefaultGrammarDir or list
// the descriptor (or its directory) in $BERTH_GRAMMARS. The contexts are the pattern context ladder (see Context);
// without them a pattern must parse as a whole file of the language.
//
//	{
//	  "id": "dart",
//	  "library": "libtree-sitter-dart.so",
//	  "symbol": "tree_sitter_dart",
//	  "extensions": [".dart"],
//	  "expando": "",
//	  "version": "1.0.0",
//	  "contexts": [{"name": "statement", "prefix": "void _() {\n", "suffix": "\n}"}]
//	}
type GrammarDescriptor struct {
	// ID is the language id used with --lang / "lang" (required).
	ID string `json:"id"`
	// Aliases are other accepted names.
	Aliases []string `json:"aliases,omitempty"`
	// Library is the shared library, relative to the descriptor's directory
	// or absolute (required).
	Library string `json:"library"`
	// Symbol is the C function returning the TSLanguage; default
	// "tree_sitter_" + id with '-' replaced by '_'.
	Symbol string `json:"symbol,omitempty"`
	// Extensions are file name extensions; a leading dot is added when
	// missing (ast-grep writes them without one).
	Extensions []string `json:"extensions,omitempty"`
	// Filenames are whole base names mapped to the language ("Makefile").
	Filenames []string `json:"filenames,omitempty"`
	// Expando is a single character that replaces '$' in patterns when '$'
	// cannot start an identifier in the language; "" keeps '$'.
	Expando string `json:"expando,omitempty"`
	// Version is informational (the grammar package version).
	Version string `json:"version,omitempty"`
	// Integrity is informational: the npm tarball's subresource integrity
	// ("sha512-…") the library was built from.
	Integrity string `json:"integrity,omitempty"`
	// Contexts is the pattern context ladder, tried in order; empty means a
	// single bare context.
	Contexts []ContextDescriptor `json:"contexts,omitempty"`
	// Chain lists node kinds that continue the sibling before them (see
	// Language.Chain): Dart's "selector".
	Chain []string `json:"chain,omitempty"`
}

// ContextDescriptor is one rung of a descriptor's context ladder; see Context.
type ContextDescriptor struct {
	Name   string   `json:"name"`
	Prefix string   `json:"prefix,omitempty"`
	Suffix string   `json:"suffix,omitempty"`
	Indent string   `json:"indent,omitempty"`
	Reject []string `json:"reject,omitempty"`
	Needs  []string `json:"needs,omitempty"`
	// Append is added to the fragment unless it already ends with it.
	Append string `json:"append,omitempty"`
	// BlockEllipsis writes `{ $$$ }` as `{ $$$<it> }` before parsing; see
	// Context.BlockEllipsis.
	BlockEllipsis string `json:"block_ellipsis,omitempty"`
	// Sequence accepts a fragment that is a run of sibling nodes.
	Sequence bool `json:"sequence,omitempty"`
}

// UnmarshalJSON accepts ast-grep's customLanguages key names as synonyms.
func (d *GrammarDescriptor) UnmarshalJSON(b []byte) error {
	type plain GrammarDescriptor
	var aux struct {
		plain
		LibraryPath    string `json:"libraryPath"`
		LanguageSymbol string `json:"languageSymbol"`
		ExpandoChar    string `json:"expandoChar"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&aux); err != nil {
		return err
	}
	*d = GrammarDescriptor(aux.plain)
	if d.Library == "" {
		d.Library = aux.LibraryPath
	}
	if d.Symbol == "" {
		d.Symbol = aux.LanguageSymbol
	}
	if d.Expando == "" {
		d.Expando = aux.ExpandoChar
	}
	return nil
}

// Environment variables and defaults for dynamic grammars.
const (
	// GrammarsEnv lists descriptor files or directories of descriptors,
	// separated by ':' (os.PathListSeparator). When set it replaces the
	// default directory.
	GrammarsEnv = "BERTH_GRAMMARS"
	// GrammarDirEnv overrides the default grammar directory (where
	// `berth grammars install` writes).
	GrammarDirEnv = "BERTH_GRAMMAR_DIR"
	// maxDescriptorBytes caps a descriptor file's size.
	maxDescriptorBytes = 1 << 20
)

var (
	dynMu     sync.Mutex
	dynLoaded = map[string]*Language{} // absolute descriptor path → language
)

// DefaultGrammarDir returns the directory `berth grammars install` writes to
// by default: $BERTH_GRAMMAR_DIR, else $XDG_CACHE_HOME/berth/grammars, else
// $HOME/.cache/berth/grammars.
func DefaultGrammarDir() string {
	if d := os.Getenv(GrammarDirEnv); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "berth", "grammars")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "berth", "grammars")
}

// ReadGrammarDescriptor reads and validates a descriptor file without loading
// its library.
func ReadGrammarDescriptor(path string) (*GrammarDescriptor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("syntax: grammar descriptor: %w; check the path (see %s)", err, GrammarsEnv)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDescriptorBytes+1))
	if err != nil {
		return nil, fmt.Errorf("syntax: grammar descriptor %s: %w", path, err)
	}
	if len(b) > maxDescriptorBytes {
		return nil, fmt.Errorf("syntax: grammar descriptor %s is over %d bytes; a descriptor is a small JSON object", path, maxDescriptorBytes)
	}
	var d GrammarDescriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("syntax: grammar descriptor %s is not valid: %w; it must be a JSON object with id, library and optional symbol, extensions, expando, contexts", path, err)
	}
	if strings.TrimSpace(d.ID) == "" {
		return nil, fmt.Errorf("syntax: grammar descriptor %s has no \"id\"; name the language", path)
	}
	if d.Library == "" {
		return nil, fmt.Errorf("syntax: grammar descriptor %s (%s) has no \"library\"; give the shared library's path, relative to the descriptor", path, d.ID)
	}
	if d.Expando != "" && utf8.RuneCountInString(d.Expando) != 1 {
		return nil, fmt.Errorf("syntax: grammar descriptor %s (%s): \"expando\" must be one character, got %q", path, d.ID, d.Expando)
	}
	for i, c := range d.Contexts {
		if c.Name == "" {
			return nil, fmt.Errorf("syntax: grammar descriptor %s (%s): context %d has no \"name\"", path, d.ID, i+1)
		}
	}
	return &d, nil
}

// LoadGrammar loads the grammar a descriptor file describes: it opens the
// shared library, calls its language function, checks the grammar's ABI and
// registers the language. Loading the same descriptor again returns the
// language already loaded. Libraries stay loaded for the life of the process.
func LoadGrammar(descriptorPath string) (*Language, error) {
	abs, err := filepath.Abs(descriptorPath)
	if err != nil {
		return nil, fmt.Errorf("syntax: grammar descriptor %s: %w", descriptorPath, err)
	}
	dynMu.Lock()
	defer dynMu.Unlock()
	if l, ok := dynLoaded[abs]; ok {
		return l, nil
	}
	d, err := ReadGrammarDescriptor(abs)
	if err != nil {
		return nil, err
	}
	if old, err := Lookup(d.ID); err == nil {
		return nil, fmt.Errorf("syntax: grammar descriptor %s: language id %q is already registered (as %q); give the descriptor another id or remove the duplicate descriptor", abs, d.ID, old.ID)
	}
	lib := d.Library
	if !filepath.IsAbs(lib) {
		lib = filepath.Join(filepath.Dir(abs), lib)
	}
	if _, err := os.Stat(lib); err != nil {
		return nil, fmt.Errorf("syntax: grammar %q: library %s: %w; install it (berth grammars install) or fix \"library\" in %s", d.ID, lib, err, abs)
	}
	symbol := d.Symbol
	if symbol == "" {
		symbol = "tree_sitter_" + strings.ReplaceAll(d.ID, "-", "_")
	}
	ptr, err := openGrammar(lib, symbol)
	if err != nil {
		return nil, fmt.Errorf("syntax: grammar %q: %w (descriptor %s)", d.ID, err, abs)
	}
	g := sitter.NewLanguage(ptr)
	if abi := g.AbiVersion(); abi < sitter.MIN_COMPATIBLE_LANGUAGE_VERSION || abi > sitter.LANGUAGE_VERSION {
		return nil, fmt.Errorf("syntax: grammar %q: %s has ABI version %d, but this berth supports %d–%d; regenerate the parser with a matching tree-sitter CLI or use a grammar release built for it",
			d.ID, lib, abi, sitter.MIN_COMPATIBLE_LANGUAGE_VERSION, sitter.LANGUAGE_VERSION)
	}
	l := Language{ID: d.ID, Aliases: d.Aliases, Grammar: g, Chain: d.Chain}
	for _, e := range d.Extensions {
		if e == "" {
			continue
		}
		if !strings.HasPrefix(e, ".") {
			e = "." + e
		}
		l.Extensions = append(l.Extensions, e)
	}
	l.Extensions = append(l.Extensions, d.Filenames...)
	if d.Expando != "" {
		r, _ := utf8.DecodeRuneInString(d.Expando)
		if r != '$' {
			l.Expando = r
		}
	}
	for _, c := range d.Contexts {
		l.Contexts = append(l.Contexts, Context(c))
	}
	if err := Register(l); err != nil {
		return nil, fmt.Errorf("%w (descriptor %s)", err, abs)
	}
	reg, err := Lookup(d.ID)
	if err != nil {
		return nil, err
	}
	dynLoaded[abs] = reg
	return reg, nil
}

// openGrammar dlopens lib and calls symbol to get the TSLanguage pointer.
func openGrammar(lib, symbol string) (unsafe.Pointer, error) {
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	var cerr *C.char
	h := C.berth_dlopen(clib, &cerr)
	if h == nil {
		return nil, fmt.Errorf("cannot load %s: %s; it must be a shared library built for this platform (berth grammars install builds the grammars it knows)", lib, C.GoString(cerr))
	}
	csym := C.CString(symbol)
	defer C.free(unsafe.Pointer(csym))
	cerr = nil
	fn := C.berth_dlsym(h, csym, &cerr)
	if cerr != nil || fn == nil {
		msg := "the symbol is NULL"
		if cerr != nil {
			msg = C.GoString(cerr)
		}
		C.dlclose(h)
		return nil, fmt.Errorf("%s has no function %s (%s); set \"symbol\" in the descriptor to the grammar's tree_sitter_<name> function (nm -D %s | grep tree_sitter_)", lib, symbol, msg, lib)
	}
	p := C.berth_call_language(fn)
	if p == nil {
		return nil, fmt.Errorf("%s: %s returned no language", lib, symbol)
	}
	return unsafe.Pointer(p), nil
}

// LoadGrammarDir loads every *.json descriptor in dir, in name order. A
// descriptor that fails does not stop the others; the errors are joined.
func LoadGrammarDir(dir string) ([]*Language, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("syntax: grammar directory: %w; install grammars with `berth grammars install` or fix %s", err, GrammarsEnv)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var langs []*Language
	var errs []error
	for _, n := range names {
		l, err := LoadGrammar(filepath.Join(dir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		langs = append(langs, l)
	}
	return langs, errors.Join(errs...)
}

// LoadConfigured loads the dynamic grammars berth is configured with: the
// descriptor files and directories listed in $BERTH_GRAMMARS (separated by
// ':'), or, when that is unset, the descriptors in DefaultGrammarDir and then
// those in BundledGrammarDir (missing directories are not an error: no
// grammars were installed). A bundled grammar whose id is already registered
// (installed by the user in DefaultGrammarDir) is skipped. It is safe to call
// more than once. Failures are joined; the grammars that loaded are returned
// and registered either way.
func LoadConfigured() ([]*Language, error) {
	list, set := os.LookupEnv(GrammarsEnv)
	if !set {
		var langs []*Language
		var errs []error
		if dir := DefaultGrammarDir(); dir != "" {
			if _, err := os.Stat(dir); err == nil {
				ls, err := LoadGrammarDir(dir)
				langs = append(langs, ls...)
				errs = append(errs, err)
			}
		}
		if dir := BundledGrammarDir(); dir != "" {
			ls, err := loadBundled(dir)
			langs = append(langs, ls...)
			errs = append(errs, err)
		}
		return langs, errors.Join(errs...)
	}
	var langs []*Language
	var errs []error
	for _, p := range filepath.SplitList(list) {
		if p == "" {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("syntax: %s entry %s: %w; list descriptor files or directories", GrammarsEnv, p, err))
			continue
		}
		var ls []*Language
		if st.IsDir() {
			ls, err = LoadGrammarDir(p)
		} else {
			var l *Language
			if l, err = LoadGrammar(p); l != nil {
				ls = []*Language{l}
			}
		}
		langs = append(langs, ls...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return langs, errors.Join(errs...)
}

// BundledGrammarDir returns the grammar directory shipped with berth's
// executable: lib/berth/grammars next to the bin directory the executable is
// in (/usr/local/bin/berth → /usr/local/lib/berth/grammars), as berth's image
// installs it. It returns "" when that directory does not exist.
func BundledGrammarDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	dir := filepath.Join(filepath.Dir(filepath.Dir(exe)), "lib", "berth", "grammars")
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return ""
	}
	return dir
}

// loadBundled loads the descriptors in dir whose ids no loaded grammar has
// taken already (a grammar the user installed wins over the bundled one).
func loadBundled(dir string) ([]*Language, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("syntax: bundled grammar directory: %w", err)
	}
	var langs []*Language
	var errs []error
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if abs, err := filepath.Abs(p); err == nil {
			dynMu.Lock()
			_, done := dynLoaded[abs]
			dynMu.Unlock()
			if done {
				continue
			}
		}
		d, err := ReadGrammarDescriptor(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := Lookup(d.ID); err == nil {
			continue
		}
		l, err := LoadGrammar(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		langs = append(langs, l)
	}
	return langs, errors.Join(errs...)
}

// CheckGrammar opens the shared library a descriptor names, without
// registering the language, and parses snippet with it: the check that a
// freshly built grammar works before it is installed. It fails when the
// library does not load, its ABI is unsupported, or the snippet does not
// parse without errors.
func CheckGrammar(ctx context.Context, descriptorPath string, snippet []byte) error {
	abs, err := filepath.Abs(descriptorPath)
	if err != nil {
		return fmt.Errorf("syntax: grammar descriptor %s: %w", descriptorPath, err)
	}
	d, err := ReadGrammarDescriptor(abs)
	if err != nil {
		return err
	}
	lib := d.Library
	if !filepath.IsAbs(lib) {
		lib = filepath.Join(filepath.Dir(abs), lib)
	}
	symbol := d.Symbol
	if symbol == "" {
		symbol = "tree_sitter_" + strings.ReplaceAll(d.ID, "-", "_")
	}
	ptr, err := openGrammar(lib, symbol)
	if err != nil {
		return fmt.Errorf("syntax: grammar %q: %w", d.ID, err)
	}
	g := sitter.NewLanguage(ptr)
	if abi := g.AbiVersion(); abi < sitter.MIN_COMPATIBLE_LANGUAGE_VERSION || abi > sitter.LANGUAGE_VERSION {
		return fmt.Errorf("syntax: grammar %q: %s has ABI version %d, but this berth supports %d–%d",
			d.ID, lib, abi, sitter.MIN_COMPATIBLE_LANGUAGE_VERSION, sitter.LANGUAGE_VERSION)
	}
	t, err := parse(ctx, prepared(Language{ID: d.ID, Grammar: g, Contexts: []Context{{Name: "bare"}}}), snippet)
	if err != nil {
		return fmt.Errorf("syntax: grammar %q: parsing its check snippet: %w", d.ID, err)
	}
	tr := &Tree{t: t}
	if tr.HasError() {
		return fmt.Errorf("syntax: grammar %q: %s parses its check snippet with syntax errors; the build is broken or the grammar is not the expected one", d.ID, lib)
	}
	return nil
}
