package syntax

import (
	"fmt"
	"unsafe"

	tskotlin "github.com/tree-sitter-grammars/tree-sitter-kotlin/bindings/go"
	tslua "github.com/tree-sitter-grammars/tree-sitter-lua/bindings/go"
	tsyaml "github.com/tree-sitter-grammars/tree-sitter-yaml/bindings/go"
	sitter "github.com/tree-sitter/go-tree-sitter"
	tsbash "github.com/tree-sitter/tree-sitter-bash/bindings/go"
	tscsharp "github.com/tree-sitter/tree-sitter-c-sharp/bindings/go"
	tsc "github.com/tree-sitter/tree-sitter-c/bindings/go"
	tscpp "github.com/tree-sitter/tree-sitter-cpp/bindings/go"
	tscss "github.com/tree-sitter/tree-sitter-css/bindings/go"
	tsgo "github.com/tree-sitter/tree-sitter-go/bindings/go"
	tshtml "github.com/tree-sitter/tree-sitter-html/bindings/go"
	tsjava "github.com/tree-sitter/tree-sitter-java/bindings/go"
	tsjs "github.com/tree-sitter/tree-sitter-javascript/bindings/go"
	tsjson "github.com/tree-sitter/tree-sitter-json/bindings/go"
	tsphp "github.com/tree-sitter/tree-sitter-php/bindings/go"
	tspython "github.com/tree-sitter/tree-sitter-python/bindings/go"
	tsruby "github.com/tree-sitter/tree-sitter-ruby/bindings/go"
	tsrust "github.com/tree-sitter/tree-sitter-rust/bindings/go"
	tsscala "github.com/tree-sitter/tree-sitter-scala/bindings/go"
	tsts "github.com/tree-sitter/tree-sitter-typescript/bindings/go"
)

// Expando characters, as in ast-grep's impl_lang_expando! table.
const (
	expandoMu    = 'µ'
	expandoWide  = '\U00010000'
	expandoUnder = '_'
)

// Shared ladders. Statement contexts come before bare ones where a bare
// fragment is ambiguous at top level (Go's fmt.Errorf(x) is a type conversion
// there, C's malloc(x) a macro type).
var (
	jsContexts = []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "function _() {\n", Suffix: "\n}"},
		{Name: "member", Prefix: "class _ {\n", Suffix: "\n}"},
	}
	cContexts = []Context{
		{Name: "statement", Prefix: "void _(void) {\n", Suffix: "\n}", Reject: []string{"function_definition"}},
		{Name: "expression", Prefix: "void *_ = ", Suffix: ";"},
		{Name: "declaration"},
	}
	cppContexts = []Context{
		{Name: "statement", Prefix: "void _() {\n", Suffix: "\n}", Reject: []string{"function_definition"}},
		{Name: "expression", Prefix: "auto _ = ", Suffix: ";"},
		{Name: "member", Prefix: "class _ {\n", Suffix: "\n};", Needs: []string{"virtual_specifier", "access_specifier"}},
		{Name: "declaration"},
		{Name: "member", Prefix: "class _ {\n", Suffix: "\n};"},
	}
)

// bundled is the one table of bundled grammars: ids, aliases, extensions,
// expando characters and context ladders. VerbatimKeywords is set where the
// grammar's grammar.json was checked: no anonymous word token is an alias
// (of a regex, a case-insensitive keyword or another rule) or an external
// token (bash's "esac", Kotlin's "get", Scala's "else" are; PHP keywords are
// case-insensitive; HTML's "doctype" is an alias).
var bundled = []struct {
	lang    Language
	grammar func() unsafe.Pointer
}{
	{Language{ID: "go", VerbatimKeywords: true, Aliases: []string{"golang"}, Extensions: []string{".go"}, Expando: expandoMu, Contexts: []Context{
		{Name: "statement", Prefix: "package p\nfunc _() {\n", Suffix: "\n}"},
		{Name: "expression", Prefix: "package p\nvar _ = ", Suffix: "\n"},
		{Name: "member", Prefix: "package p\ntype _ struct {\n", Suffix: "\n}"},
		{Name: "declaration", Prefix: "package p\n"},
		{Name: "bare"},
	}}, tsgo.Language},
	{Language{ID: "python", VerbatimKeywords: true, Aliases: []string{"py"}, Extensions: []string{".py", ".pyi", ".pyw"}, Expando: expandoMu, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "def _():\n", Indent: "    "},
		{Name: "member", Prefix: "class _:\n", Indent: "    "},
	}}, tspython.Language},
	{Language{ID: "javascript", VerbatimKeywords: true, VarQuote: `"`, Aliases: []string{"js", "jsx"}, Extensions: []string{".js", ".mjs", ".cjs", ".jsx"}, Contexts: jsContexts}, tsjs.Language},
	{Language{ID: "typescript", VerbatimKeywords: true, VarQuote: `"`, Aliases: []string{"ts"}, Extensions: []string{".ts", ".mts", ".cts"}, Contexts: jsContexts}, tsts.LanguageTypescript},
	{Language{ID: "tsx", VerbatimKeywords: true, VarQuote: `"`, Extensions: []string{".tsx"}, Contexts: jsContexts}, tsts.LanguageTSX},
	{Language{ID: "rust", VerbatimKeywords: true, Aliases: []string{"rs"}, Extensions: []string{".rs"}, Expando: expandoMu, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "fn _() {\n", Suffix: "\n}"},
		{Name: "expression", Prefix: "fn _() {\nlet _ = ", Suffix: ";\n}"},
		{Name: "member", Prefix: "impl _ {\n", Suffix: "\n}"},
	}}, tsrust.Language},
	{Language{ID: "c", VerbatimKeywords: true, Extensions: []string{".c", ".h"}, Expando: expandoWide, Contexts: cContexts}, tsc.Language},
	{Language{ID: "cpp", VerbatimKeywords: true, Aliases: []string{"c++", "cxx"}, Extensions: []string{".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".c++", ".h++", ".cu", ".ino"}, Expando: expandoWide, Contexts: cppContexts}, tscpp.Language},
	{Language{ID: "java", VerbatimKeywords: true, Extensions: []string{".java"}, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "class _ {\nvoid _() {\n", Suffix: "\n}\n}"},
		{Name: "expression", Prefix: "class _ {\nObject _ = ", Suffix: ";\n}"},
		{Name: "member", Prefix: "class _ {\n", Suffix: "\n}"},
	}}, tsjava.Language},
	{Language{ID: "kotlin", Aliases: []string{"kt"}, Extensions: []string{".kt", ".kts", ".ktm"}, Expando: expandoMu, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "fun _() {\n", Suffix: "\n}"},
		{Name: "member", Prefix: "class _ {\n", Suffix: "\n}"},
	}}, tskotlin.Language},
	{Language{ID: "c_sharp", VerbatimKeywords: true, Aliases: []string{"csharp", "cs", "c#"}, Extensions: []string{".cs"}, Expando: expandoMu, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "class _ {\nvoid _() {\n", Suffix: "\n}\n}"},
		{Name: "expression", Prefix: "class _ {\nobject _ = ", Suffix: ";\n}"},
		{Name: "member", Prefix: "class _ {\n", Suffix: "\n}"},
	}}, tscsharp.Language},
	{Language{ID: "ruby", VerbatimKeywords: true, Aliases: []string{"rb"}, Extensions: []string{".rb", ".rbw", ".gemspec", ".rake", "Rakefile", "Gemfile"}, Expando: expandoMu, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "def _\n", Suffix: "\nend"},
		{Name: "member", Prefix: "class X_\n", Suffix: "\nend"},
	}}, tsruby.Language},
	{Language{ID: "php", Extensions: []string{".php", ".phtml", ".php3", ".php4", ".php5", ".php8"}, Expando: expandoMu, Contexts: []Context{
		{Name: "bare", Prefix: "<?php\n"},
		{Name: "expression", Prefix: "<?php\n$x_ = ", Suffix: ";"},
		{Name: "statement", Prefix: "<?php\nfunction f_() {\n", Suffix: "\n}"},
		{Name: "member", Prefix: "<?php\nclass C_ {\n", Suffix: "\n}"},
	}}, tsphp.LanguagePHP},
	{Language{ID: "bash", Aliases: []string{"sh", "shell", "zsh"}, Extensions: []string{".sh", ".bash", ".zsh", ".bats", ".bashrc", ".bash_profile", ".zshrc"}, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "_() {\n", Suffix: "\n}"},
	}}, tsbash.Language},
	{Language{ID: "lua", VerbatimKeywords: true, Extensions: []string{".lua"}, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "function _()\n", Suffix: "\nend"},
		{Name: "expression", Prefix: "local _ = ", Suffix: "\n"},
	}}, tslua.Language},
	{Language{ID: "scala", Extensions: []string{".scala", ".sc", ".sbt"}, Contexts: []Context{
		{Name: "bare"},
		{Name: "statement", Prefix: "def _() = {\n", Suffix: "\n}"},
		{Name: "member", Prefix: "class _ {\n", Suffix: "\n}"},
	}}, tsscala.Language},
	{Language{ID: "json", VerbatimKeywords: true, Extensions: []string{".json", ".jsonc", ".json5"}}, tsjson.Language},
	{Language{ID: "yaml", VerbatimKeywords: true, Aliases: []string{"yml"}, Extensions: []string{".yaml", ".yml"}}, tsyaml.Language},
	{Language{ID: "html", Aliases: []string{"htm"}, Extensions: []string{".html", ".htm", ".xhtml"}}, tshtml.Language},
	{Language{ID: "css", VerbatimKeywords: true, Extensions: []string{".css", ".scss"}, Expando: expandoUnder, Contexts: []Context{
		{Name: "bare"},
		{Name: "member", Prefix: "_ {\n", Suffix: "\n}"},
	}}, tscss.Language},
}

func init() {
	for _, b := range bundled {
		l := b.lang
		l.Grammar = sitter.NewLanguage(b.grammar())
		if err := Register(l); err != nil {
			panic(fmt.Sprintf("syntax: bundled grammar table is inconsistent: %v", err))
		}
	}
}

// RuntimeABI is the range of grammar ABI versions the linked tree-sitter
// runtime loads.
func RuntimeABI() (min, max int) {
	return sitter.MIN_COMPATIBLE_LANGUAGE_VERSION, sitter.LANGUAGE_VERSION
}
