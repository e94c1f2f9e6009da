package lsptest

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// Ask is one question about a project and what its answer must hold:
// Locs, when set, are exactly the locations answered ("file:line:col",
// in the tool's order); Wants are strings of the answer's text.
type Ask struct {
	Action, File string
	Line         int
	Symbol       string
	Query        string
	Locs         []string
	Wants        []string
}

func (a Ask) args() map[string]any {
	m := map[string]any{"action": a.Action}
	if a.File != "" {
		m["file"] = a.File
	}
	if a.Line > 0 {
		m["line"] = a.Line
	}
	if a.Symbol != "" {
		m["symbol"] = a.Symbol
	}
	if a.Query != "" {
		m["query"] = a.Query
	}
	return m
}

// Edit is an edit tool call: Path, Old and New as edit takes them.
type Edit struct{ Path, Old, New string }

func (d Edit) args() map[string]any {
	return map[string]any{"path": d.Path, "old_string": d.Old, "new_string": d.New}
}

func (d Edit) undo() Edit { return Edit{d.Path, d.New, d.Old} }

// LangCase is one language server's project and the known answers about
// it, for CheckLang: the same questions for every server of the table
// that the issue asks to be tested for real.
type LangCase struct {
	// Server is the server id that must answer ("pyright").
	Server string
	// Files is the project; the workspace must hold nothing else.
	Files map[string]string
	// Asks are navigation, hover and symbol questions, asked in order.
	Asks []Ask
	// Unsupported are actions the server does not offer, with what the
	// error says.
	Unsupported []Ask
	// Clean is a file whose diagnostics are none.
	Clean string
	// Break is an edit that breaks a caller (in another file when the
	// server reports other files); BreakWants are what the write's
	// diagnostics say. Undoing it must say the problems were fixed.
	Break      Edit
	BreakWants []string
	// Rename, when set, renames a symbol; RenameWants are in its result.
	// The rename is undone afterwards.
	Rename      *Ask
	RenameTo    string
	RenameWants []string
	// Check, when set, is what the project check (diagnostics "*") says
	// of the project, and CheckBroken what it says of the Break edit.
	Check, CheckBroken []string
}

// CheckLang asks c's questions with c.Files in the workspace, then breaks a
// caller with a write (diagnostics on write reports it, once, and its
// undo as fixed), runs the project check, and renames.
func CheckLang(t *testing.T, e Env, c LangCase) {
	t.Helper()
	e.PutAll(t, c.Files)
	for _, a := range c.Asks {
		if a.Locs != nil {
			wantLocs(t, a.Action+" of "+a.Symbol+a.Query, e.locations(t, a.args()), a.Locs...)
		}
		if len(a.Wants) > 0 {
			e.ok(t, "lsp", a.args(), a.Wants...)
		}
	}
	for _, a := range c.Unsupported {
		e.fails(t, "lsp", a.args(), a.Wants...)
	}
	st := e.ok(t, "lsp", map[string]any{"action": "status", "file": c.Clean}, c.Server+": running")
	if strings.Index(st.Text, c.Server+": running") < 0 {
		t.Fatalf("%s is not the running server:\n%s", c.Server, st.Text)
	}
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": c.Clean}, "diagnostics of "+c.Clean+" ("+c.Server+"): none")
	r := e.ok(t, "edit", c.Break.args(), append([]string{"diagnostics (" + c.Server + ")"}, c.BreakWants...)...)
	if strings.Contains(r.Text, "no new problems") {
		t.Fatalf("the breaking edit reported nothing new:\n%s", r.Text)
	}
	if len(c.CheckBroken) > 0 {
		e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "*"}, c.CheckBroken...)
	}
	e.ok(t, "edit", c.Break.undo().args(), "diagnostics ("+c.Server+"): no new problems; fixed")
	if len(c.Check) > 0 {
		e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "*"}, c.Check...)
	}
	if c.Rename != nil {
		a := map[string]any{"file": c.Rename.File, "line": c.Rename.Line, "symbol": c.Rename.Symbol, "new_name": c.RenameTo}
		e.ok(t, "lsp_rename", a, c.RenameWants...)
		for name := range c.Files {
			if got := readBack(t, e, name); regexp.MustCompile(`\b` + c.Rename.Symbol + `\(`).MatchString(got) {
				t.Fatalf("%s still calls %s after the rename:\n%s", name, c.Rename.Symbol, got)
			}
		}
		e.ok(t, "lsp_rename", map[string]any{"file": c.Rename.File, "line": c.Rename.Line, "symbol": c.RenameTo, "new_name": c.Rename.Symbol}, c.RenameWants...)
	}
}

// TSProject is a TypeScript project (tsconfig.json): src/greet.ts declares
// Greeter 1:18, English 5:14, hello 12:17; src/main.ts calls hello at 4:13
// and 5:13; src/extra.ts at 3:8.
var TSProject = map[string]string{
	"tsconfig.json": `{"compilerOptions": {"strict": true, "target": "es2020", "module": "commonjs", "noEmit": true}, "include": ["src"]}
`,
	"src/greet.ts": `export interface Greeter {
  greet(name: string): string;
}

export class English implements Greeter {
  greet(name: string): string {
    return "Hello, " + name;
  }
}

/** Greets name with g. */
export function hello(g: Greeter, name: string): string {
  return g.greet(name);
}
`,
	"src/main.ts": `import { hello, English } from "./greet";

const e = new English();
console.log(hello(e, "world"));
console.log(hello(e, "again"));
`,
	"src/extra.ts": `import { hello, English } from "./greet";

export const x = hello(new English(), "extra");
`,
}

// TypeScript is CheckLang's case for typescript-language-server on
// TSProject.
var TypeScript = LangCase{
	Server: "typescript-language-server",
	Files:  TSProject,
	Asks: []Ask{
		{Action: "definition", File: "src/main.ts", Line: 4, Symbol: "hello", Locs: []string{"src/greet.ts:12:17"}},
		// Every caller, in files never opened by a query.
		{Action: "references", File: "src/greet.ts", Line: 12, Symbol: "hello",
			Locs: []string{"src/extra.ts:1:10", "src/extra.ts:3:18", "src/greet.ts:12:17", "src/main.ts:1:10", "src/main.ts:4:13", "src/main.ts:5:13"}},
		{Action: "implementation", File: "src/greet.ts", Line: 1, Symbol: "Greeter", Locs: []string{"src/greet.ts:5:14"}},
		{Action: "incoming_calls", File: "src/greet.ts", Line: 12, Symbol: "hello", Wants: []string{"3 calls in 2 files"}},
		{Action: "hover", File: "src/main.ts", Line: 4, Symbol: "hello", Wants: []string{"hello(g: Greeter, name: string): string", "Greets name with g."}},
		{Action: "symbols", File: "src/greet.ts", Wants: []string{"1-3: interface Greeter", "5-9: class English", "12-14: function hello"}},
		{Action: "symbols", Query: "English", Wants: []string{"class English", "src/greet.ts:5:1"}},
	},
	Clean:       "src/main.ts",
	Break:       Edit{"src/greet.ts", "name: string): string {\n  return g", "name: string, punct: string): string {\n  return g"},
	BreakWants:  []string{"src/main.ts:4:", "src/main.ts:5:", "Expected 3 arguments, but got 2."},
	Rename:      &Ask{File: "src/main.ts", Line: 4, Symbol: "hello"},
	RenameTo:    "sayHello",
	RenameWants: []string{"6 occurrences in 3 files"},
	Check:       []string{"tsc", "no problems"},
	CheckBroken: []string{"tsc", "src/main.ts:4:", "Expected 3 arguments, but got 2."},
}

// JSProject is a plain JavaScript project (jsconfig.json with checkJs):
// lib.js declares hello 2:17; main.js calls it at 3:1 and 4:1.
var JSProject = map[string]string{
	"jsconfig.json": `{"compilerOptions": {"checkJs": true, "module": "es2020", "target": "es2020", "noEmit": true}}
`,
	"lib.js": `/** Greets name. @param {string} name */
export function hello(name) {
  return "Hello, " + name;
}
`,
	"main.js": `import { hello } from "./lib.js";

hello("world");
hello("again");
`,
}

// JavaScript is CheckLang's case for typescript-language-server on
// JSProject.
var JavaScript = LangCase{
	Server: "typescript-language-server",
	Files:  JSProject,
	Asks: []Ask{
		{Action: "definition", File: "main.js", Line: 3, Symbol: "hello", Locs: []string{"lib.js:2:17"}},
		{Action: "references", File: "lib.js", Line: 2, Symbol: "hello", Locs: []string{"lib.js:2:17", "main.js:1:10", "main.js:3:1", "main.js:4:1"}},
		{Action: "hover", File: "main.js", Line: 3, Symbol: "hello", Wants: []string{"hello(name: string): string", "Greets name."}},
		{Action: "symbols", File: "lib.js", Wants: []string{"2-4: function hello"}},
	},
	Clean:       "main.js",
	Break:       Edit{"lib.js", "@param {string} name */\nexport function hello(name) {", "@param {string} name @param {number} n */\nexport function hello(name, n) {"},
	BreakWants:  []string{"main.js:3:", "main.js:4:", "Expected 2 arguments, but got 1."},
	Rename:      &Ask{File: "main.js", Line: 3, Symbol: "hello"},
	RenameTo:    "sayHello",
	RenameWants: []string{"4 occurrences in 2 files"},
	Check:       []string{"tsc", "no problems"},
	CheckBroken: []string{"tsc", "main.js:3:", "Expected 2 arguments, but got 1."},
}

// Pyright is CheckLang's case for pyright on PythonProject (see
// CheckPython for pylsp's).
var Pyright = LangCase{
	Server: "pyright",
	Files:  PythonProject,
	Asks: []Ask{
		{Action: "definition", File: "main.py", Line: 3, Symbol: "hello", Locs: []string{"pkg/greet.py:1:5"}},
		{Action: "references", File: "pkg/greet.py", Line: 1, Symbol: "hello", Locs: []string{"main.py:1:23", "main.py:3:7", "pkg/greet.py:1:5", "pkg/greet.py:7:16"}},
		{Action: "incoming_calls", File: "pkg/greet.py", Line: 1, Symbol: "hello", Wants: []string{"2 calls in 2 files"}},
		{Action: "hover", File: "main.py", Line: 3, Symbol: "hello", Wants: []string{"def hello(name", "Greet name."}},
		{Action: "symbols", File: "pkg/greet.py", Wants: []string{"1-3: function hello", "5-7: class English", "  6-7: method greet"}},
		{Action: "symbols", Query: "English", Wants: []string{"class English", "pkg/greet.py:5:7"}},
	},
	Unsupported: []Ask{{Action: "implementation", File: "main.py", Line: 4, Symbol: "English", Wants: []string{"pyright does not offer implementation"}}},
	Clean:       "main.py",
	// A new parameter breaks both callers, one in another file.
	Break:       Edit{"pkg/greet.py", "def hello(name):", "def hello(name, punct):"},
	BreakWants:  []string{"main.py:3:", "pkg/greet.py:7:", `Argument missing for parameter "punct"`},
	Rename:      &Ask{File: "main.py", Line: 3, Symbol: "hello"},
	RenameTo:    "say_hello",
	RenameWants: []string{"4 occurrences in 2 files"},
	// Warnings only (the container's python has no setuptools source).
	Check:       []string{"pyright (", "exit status 0)"},
	CheckBroken: []string{"pyright", "main.py:3:", `Argument missing for parameter "punct"`},
}

// BashProject is two scripts: lib.sh declares greet 4:1, main.sh sources it
// and calls greet at 4:1 and 5:1.
var BashProject = map[string]string{
	"lib.sh": `#!/usr/bin/env bash

# greet prints a greeting.
greet() {
  echo "Hello, $1"
}
`,
	"main.sh": `#!/usr/bin/env bash
source ./lib.sh

greet world
greet again
`,
}

// Bash is CheckLang's case for bash-language-server (with shellcheck) on
// BashProject.
var Bash = LangCase{
	Server: "bash-language-server",
	Files:  BashProject,
	Asks: []Ask{
		{Action: "definition", File: "main.sh", Line: 4, Symbol: "greet", Locs: []string{"lib.sh:4:1"}},
		{Action: "references", File: "lib.sh", Line: 4, Symbol: "greet", Locs: []string{"lib.sh:4:1", "main.sh:4:1", "main.sh:5:1"}},
		{Action: "hover", File: "main.sh", Line: 4, Symbol: "greet", Wants: []string{"greet prints a greeting."}},
		{Action: "symbols", File: "lib.sh", Wants: []string{"4-6: function greet"}},
	},
	Unsupported: []Ask{{Action: "incoming_calls", File: "lib.sh", Line: 4, Symbol: "greet", Wants: []string{"bash-language-server does not offer incoming_calls"}}},
	Clean:       "main.sh",
	// shellcheck: a variable used but never assigned.
	Break:       Edit{"main.sh", "greet again", "greet \"$whom\""},
	BreakWants:  []string{"main.sh:5:", "whom is referenced but not assigned"},
	Rename:      &Ask{File: "main.sh", Line: 4, Symbol: "greet"},
	RenameTo:    "welcome",
	RenameWants: []string{"3 occurrences in 2 files"},
}

// CProject is a C project whose sources compile only with the flags of its
// compile_commands.json (-Iinclude -DVOLUME=3): include/greet.h declares
// greet 5:5, src/greet.c defines it 4:5, src/main.c calls it at 4:3 and
// 5:10. root is the workspace's absolute path in the sandbox, as the
// compilation database names it.
func CProject(root string) map[string]string {
	entry := func(file string) string {
		return `{"directory": "` + root + `", "file": "` + file + `", "arguments": ["cc", "-Iinclude", "-DVOLUME=3", "-c", "` + file + `"]}`
	}
	return map[string]string{
		"compile_commands.json": "[\n" + entry("src/greet.c") + ",\n" + entry("src/main.c") + "\n]\n",
		"include/greet.h": `#ifndef GREET_H
#define GREET_H

/* Greets name, VOLUME times. */
int greet(const char *name);

#endif
`,
		"src/greet.c": `#include "greet.h"
#include <stdio.h>

int greet(const char *name) {
  int n = 0;
  for (int i = 0; i < VOLUME; i++)
    n += printf("Hello, %s\n", name);
  return n;
}
`,
		"src/main.c": `#include "greet.h"

int main(void) {
  greet("world");
  return greet("again") > 0 ? 0 : 1;
}
`,
	}
}

// Clangd is CheckLang's case for clangd on CProject(root).
func Clangd(root string) LangCase {
	return LangCase{
		Server: "clangd",
		Files:  CProject(root),
		Asks: []Ask{
			// The callers in a file no query opened: the answer waits for
			// the background index.
			{Action: "references", File: "include/greet.h", Line: 5, Symbol: "greet", Locs: []string{"include/greet.h:5:5", "src/greet.c:4:5", "src/main.c:4:3", "src/main.c:5:10"}},
			{Action: "definition", File: "src/main.c", Line: 4, Symbol: "greet", Locs: []string{"src/greet.c:4:5"}},
			{Action: "incoming_calls", File: "src/greet.c", Line: 4, Symbol: "greet", Wants: []string{"2 calls in 1 file", "4:3 in main"}},
			{Action: "hover", File: "src/main.c", Line: 4, Symbol: "greet", Wants: []string{"int greet(const char *name)", "Greets name, VOLUME times."}},
			// -DVOLUME=3 is applied.
			{Action: "hover", File: "src/greet.c", Line: 6, Symbol: "VOLUME", Wants: []string{"#define VOLUME 3"}},
			{Action: "symbols", File: "src/greet.c", Wants: []string{"4-9: function greet"}},
			{Action: "symbols", Query: "greet", Wants: []string{"greet", "src/greet.c:4:5"}},
		},
		// Without -Iinclude and -DVOLUME=3 it would not compile.
		Clean:       "src/greet.c",
		Break:       Edit{"src/main.c", `greet("world");`, `greet("world", 2);`},
		BreakWants:  []string{"src/main.c:4:", "Too many arguments to function call, expected single argument 'name', have 2 arguments"},
		Rename:      &Ask{File: "src/main.c", Line: 4, Symbol: "greet"},
		RenameTo:    "welcome",
		RenameWants: []string{"4 occurrences in 3 files"},
	}
}

// ClangdOut is Clangd with its compile_commands.json in out/, where
// clangd does not look by itself: berth finds it and passes
// --compile-commands-dir, so -Iinclude and -DVOLUME=3 still apply, and
// status names it.
func ClangdOut(root string) LangCase {
	c := Clangd(root)
	files := map[string]string{}
	for name, text := range c.Files {
		if name == "compile_commands.json" {
			name = "out/compile_commands.json"
		}
		files[name] = text
	}
	c.Files = files
	c.Asks = append(c.Asks, Ask{Action: "status", File: "src/main.c", Wants: []string{"clangd: running", "compilation database: out/compile_commands.json (passed as --compile-commands-dir=out)"}})
	return c
}

// CheckCLoose checks clangd on a loose .c file with no compile_commands.json
// anywhere: it compiles it with its fallback flags, from the workspace
// root, and diagnoses a write.
func CheckCLoose(t *testing.T, e Env) {
	t.Helper()
	e.Put(t, "loose.c", "#include <stdio.h>\n\nstatic int twice(int x) { return 2 * x; }\n\nint main(void) {\n  printf(\"%d\\n\", twice(21));\n  return 0;\n}\n")
	wantLocs(t, "definition of twice", e.locations(t, map[string]any{"action": "definition", "file": "loose.c", "line": 6, "symbol": "twice"}), "loose.c:3:12")
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": "loose.c", "line": 6, "symbol": "printf"}, "printf")
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "loose.c"}, "diagnostics of loose.c (clangd): none")
	e.ok(t, "lsp", map[string]any{"action": "status", "file": "loose.c"}, "clangd: running; root the workspace root (no marker found; clangd works without one)")
	e.ok(t, "edit", map[string]any{"path": "loose.c", "old_string": "return 2 * x;", "new_string": "return 2 * y;"},
		"diagnostics (clangd): 1 new problem", "loose.c:3:", "Use of undeclared identifier 'y'")
	e.ok(t, "edit", map[string]any{"path": "loose.c", "old_string": "return 2 * y;", "new_string": "return 2 * x;"}, "fixed 1 problem")
	wantLocs(t, "references of twice", e.locations(t, map[string]any{"action": "references", "file": "loose.c", "line": 3, "symbol": "twice"}), "loose.c:3:12", "loose.c:6:18")
}

// CManySources returns n C sources that each call target(), declared in
// many/t.h and defined in many/t.c, with a compile_commands.json (root is
// the workspace's absolute path): before clangd's background index is
// complete, references to target list only the open file's.
func CManySources(root string, n int) map[string]string {
	files := map[string]string{
		"many/t.h": "int target(void);\n",
		"many/t.c": "#include \"t.h\"\n\nint target(void) { return 1; }\n",
	}
	var cdb strings.Builder
	cdb.WriteString("[\n")
	add := func(file string) {
		cdb.WriteString(`{"directory": "` + root + `", "file": "` + file + `", "arguments": ["cc", "-Imany", "-c", "` + file + `"]},` + "\n")
	}
	add("many/t.c")
	for i := range n {
		name := "many/u" + pad3(i) + ".c"
		files[name] = "#include \"t.h\"\n\nint use" + pad3(i) + "(void) { return target(); }\n"
		add(name)
	}
	files["compile_commands.json"] = strings.TrimSuffix(cdb.String(), ",\n") + "\n]\n"
	return files
}

func pad3(i int) string { return fmt.Sprintf("%03d", i) }

// CheckCIndexWait checks, on a fresh clangd over CManySources(root, n),
// that lsp_rename refuses while the background index runs, that the first
// references waits for it and lists every use (n callers, the declaration
// and the definition; the tool's page shows the first), and that status
// no longer says indexing afterwards.
func CheckCIndexWait(t *testing.T, e Env, n int) {
	t.Helper()
	e.fails(t, "lsp_rename", map[string]any{"file": "many/t.c", "line": 3, "symbol": "target", "new_name": "aim"}, "clangd at the workspace root is still indexing", "nothing was changed")
	r := e.list(t, map[string]any{"action": "references", "file": "many/t.c", "line": 3, "symbol": "target"})
	if r.Total != n+2 {
		t.Fatalf("references of target: %d locations, want %d (every caller, the declaration and the definition)", r.Total, n+2)
	}
	st := e.ok(t, "lsp", map[string]any{"action": "status"}, "clangd: running")
	if strings.Contains(st.Text, "indexing") {
		t.Fatalf("status still says indexing after the index was waited for:\n%s", st.Text)
	}
}
