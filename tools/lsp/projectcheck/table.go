package projectcheck

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"berth.dev/berth/tools/internal/proc"
)

// language is one row of the table.
type language struct {
	lang    string
	markers []string // any of them, in root
	tools   []tool   // in order of preference
	missing string   // what to install, for "binary missing"
}

// tool is one checker program.
type tool struct {
	id      string   // Applicable.Checker and Diagnostic.Source
	display string   // the command for Checkers
	local   []string // project-local programs, relative to root, preferred
	names   []string // program names looked up on PATH
	module  string   // python module run as "python -m module", after the names
	args    []string // arguments after the program
	python  bool     // gets the project's venv (VIRTUAL_ENV, PATH)
	parse   parser
	// hostFix says how to get the program from outside the workspace, for
	// the host, where a project-local program is never run.
	hostFix string
}

// pyflakesScript runs pyflakes ("$@", after the find program in $1) on
// every .py file of the project outside hidden directories, virtualenvs,
// node_modules and caches: pyflakes has no exclude option and would
// otherwise check .venv.
const pyflakesScript = `find=$1; shift; exec "$find" . \( -name '.?*' -o -name node_modules -o -name __pycache__ -o -name venv -o -name site-packages \) -prune -o -type f -name '*.py' -exec "$@" {} +`

var mypyArgs = []string{
	"--show-column-numbers", "--show-error-end", "--show-error-codes", "--hide-error-context",
	"--no-error-summary", "--no-color-output", "--no-pretty", ".",
}

// table is the per-language command table of docs/tools.md §2 ("*" runs the
// project check).
var table = []language{
	{
		lang: "go", markers: []string{"go.mod", "go.work"},
		tools:   []tool{{id: "go vet", display: "go vet -json ./... (go vet -json work with only a go.work)", names: []string{"go"}, args: []string{"vet", "-json", "./..."}, parse: parseGoVet}},
		missing: "go (the Go toolchain)",
	},
	{
		lang: "rust", markers: []string{"Cargo.toml"},
		tools:   []tool{{id: "cargo check", display: "cargo check --all-targets --message-format=json-diagnostic-short", names: []string{"cargo"}, args: []string{"check", "--all-targets", "--message-format=json-diagnostic-short"}, parse: parseCargo}},
		missing: "cargo (the Rust toolchain)",
	},
	{
		lang: "typescript", markers: []string{"tsconfig.json"},
		tools:   []tool{{id: "tsc", display: "tsc --noEmit --pretty false", local: []string{"node_modules/.bin/tsc"}, names: []string{"tsc"}, args: []string{"--noEmit", "--pretty", "false"}, parse: parseTsc, hostFix: "install typescript globally (npm install -g typescript)"}},
		missing: "tsc (npm install --save-dev typescript, which puts it in node_modules/.bin)",
	},
	{
		// A JavaScript project checked by TypeScript (checkJs in its
		// jsconfig.json); tsc reads jsconfig.json only when named.
		lang: "javascript", markers: []string{"jsconfig.json"},
		tools:   []tool{{id: "tsc", display: "tsc -p jsconfig.json --noEmit --pretty false", local: []string{"node_modules/.bin/tsc"}, names: []string{"tsc"}, args: []string{"-p", "jsconfig.json", "--noEmit", "--pretty", "false"}, parse: parseTsc, hostFix: "install typescript globally (npm install -g typescript)"}},
		missing: "tsc (npm install --save-dev typescript, which puts it in node_modules/.bin)",
	},
	{
		lang: "python", markers: []string{"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "pyrightconfig.json", "mypy.ini"},
		tools: []tool{
			{id: "pyright", display: "pyright --outputjson", local: []string{".venv/bin/pyright", "node_modules/.bin/pyright"}, names: []string{"pyright"}, args: []string{"--outputjson"}, python: true, parse: parsePyright, hostFix: "install pyright outside the workspace (npm install -g pyright)"},
			{id: "mypy", display: "mypy " + strings.Join(mypyArgs, " "), local: []string{".venv/bin/mypy"}, names: []string{"mypy"}, module: "mypy", args: mypyArgs, python: true, parse: parseMypy, hostFix: "install mypy outside the workspace (apt-get install python3-mypy)"},
			{id: "pyflakes", display: "pyflakes on every .py file outside hidden directories, venv, node_modules and __pycache__", local: []string{".venv/bin/pyflakes"}, names: []string{"pyflakes", "pyflakes3"}, module: "pyflakes", python: true, parse: parsePyflakes, hostFix: "install pyflakes outside the workspace (apt-get install python3-pyflakes)"},
		},
		missing: "pyright, mypy or pyflakes (in .venv, node_modules/.bin or on PATH; Debian: apt-get install python3-pyflakes)",
	},
	{
		lang: "dart", markers: []string{"pubspec.yaml"},
		tools:   []tool{{id: "dart analyze", display: "dart analyze --format=machine", names: []string{"dart"}, args: []string{"analyze", "--format=machine"}, parse: parseDart}},
		missing: "dart (the Dart or Flutter SDK)",
	},
}

// venvDir is the project-local virtualenv, relative to root.
const venvDir = ".venv"

// plan turns a probe into the applicable checkers and the missing ones.
func plan(pr *probe, workspace, root string) ([]Applicable, []Missing) {
	var app []Applicable
	var miss []Missing
	for _, l := range table {
		marker := ""
		for _, m := range l.markers {
			if pr.markers[m] {
				marker = m
				break
			}
		}
		if marker == "" {
			miss = append(miss, Missing{Language: l.lang, Reason: fmt.Sprintf("marker missing: none of %s in %s", strings.Join(l.markers, ", "), root)})
			continue
		}
		a, ok := resolve(pr, l, workspace, root)
		if !ok {
			reason := fmt.Sprintf("binary missing: %s is in %s, but no %s resolves in the sandbox", marker, root, l.missing)
			if len(a.Skipped) > 0 {
				reason = fmt.Sprintf("binary missing: %s is in %s, but %s", marker, root, strings.Join(a.Skipped, "; "))
			}
			miss = append(miss, Missing{Language: l.lang, Reason: reason, Skipped: a.Skipped})
			continue
		}
		a.Language, a.Root, a.Marker = l.lang, root, marker
		if l.lang == "go" && !pr.markers["go.mod"] {
			// "./..." matches nothing in a go.work directory that is no
			// module itself; "work" (Go 1.25) is every workspace module.
			a.args[len(a.args)-1] = "work"
			a.Command = strings.TrimSuffix(a.Command, "./...") + "work"
		}
		app = append(app, a)
	}
	return app, miss
}

// resolve picks the first tool of l whose program resolves and builds its
// command line. On the host, what it passed over from the workspace is in
// Skipped, also when nothing resolves.
func resolve(pr *probe, l language, workspace, root string) (Applicable, bool) {
	venvPy := pr.venvPython
	var skipped []string
	if pr.host && pr.venvSkip != "" && slices.ContainsFunc(l.tools, func(t tool) bool { return t.python }) {
		skipped = append(skipped, pr.venvSkip)
	}
	for _, t := range l.tools {
		argv, bin, why, ok := pick(pr, t, workspace, root, venvPy)
		for _, w := range why {
			if !slices.Contains(skipped, w) {
				skipped = append(skipped, w)
			}
		}
		if !ok {
			continue
		}
		a := Applicable{Checker: t.id, Binary: bin, base: root, parse: t.parse, Skipped: skipped}
		if t.id == "mypy" && venvPy != "" && !within(path.Join(root, venvDir), bin) {
			// A mypy from outside the venv still resolves imports from it.
			argv = append(argv, "--python-executable", venvPy)
		}
		if t.python && venvPy != "" && pr.venvReal != "" {
			a.Interpreter = strings.TrimPrefix(strings.TrimPrefix(venvPy, root), "/") + " → " + pr.venvReal
		}
		argv = append(argv, t.args...)
		a.Command = strings.Join(argv, " ")
		if t.id == "pyflakes" {
			if find := pr.find("find"); find != "" {
				a.Command += " on every .py file outside hidden directories, venv, node_modules and __pycache__"
				argv = append([]string{"/bin/sh", "-c", pyflakesScript, "berth-pyflakes", find}, argv...)
			} else {
				argv = append(argv, ".")
				a.Command = strings.Join(argv, " ")
			}
		}
		if t.python && venvPy != "" {
			venv := path.Join(root, venvDir)
			a.env = append(a.env, "VIRTUAL_ENV="+venv)
			// On the host the venv's bin is never put on PATH: a program
			// found there (a node for pyright's #!/usr/bin/env node, a
			// python) would be the workspace's own.
			if pr.path != "" && !pr.host {
				a.env = append(a.env, "PATH="+path.Join(venv, "bin")+":"+pr.path)
			}
		}
		if t.id == "cargo check" {
			a.env = append(a.env, "CARGO_TERM_COLOR=never")
			if pr.cargoWorkspace != "" {
				a.base = pr.cargoWorkspace
			}
		}
		if pr.host {
			a.ExecWhy = hostExecWhy(pr, t)
			if a.ExecWhy == "" && t.python && venvPy != "" && pr.venvRuns != "" {
				a.ExecWhy = "the venv's python (" + venvPy + ") runs " + pr.venvRuns + " at startup, which is the project's code"
			}
			if l.lang == "go" {
				a.env = append(a.env, proc.HostEnv)
			}
			a.env = append(a.env, pr.pinEnv...)
			if len(pr.pinNeeds) > 0 {
				why := strings.Join(pr.pinNeeds, "; ")
				if a.ExecWhy != "" {
					why = a.ExecWhy + "; " + why
				}
				a.ExecWhy = why
			}
		}
		a.args = argv
		return a, true
	}
	return Applicable{Skipped: skipped}, false
}

// hostExecWhy says why running t on the host executes the project's own
// code, or "" when it does not. Such a check runs only as an approved
// exec-level step.
func hostExecWhy(pr *probe, t tool) string {
	switch {
	case t.id == "cargo check":
		return "cargo check compiles and runs the crate's build scripts (build.rs) and proc macros, follows its rust-toolchain file, and writes Cargo.lock and target/ into the workspace"
	case t.id == "mypy" && pr.mypyPlugins != "":
		return "mypy imports the plugins that " + pr.mypyPlugins + " names, which is running their code"
	case t.id == "dart analyze" && pr.dartPlugins:
		return "dart analyze runs the analyzer plugins that analysis_options.yaml names"
	}
	return ""
}

// pick resolves one tool: a project-local program (never on the host),
// then the venv's python with the module, then the names on PATH (outside
// the workspace), then a python on PATH with the module. skipped says what
// was passed over on the host.
func pick(pr *probe, t tool, workspace, root, venvPy string) (argv []string, bin string, skipped []string, ok bool) {
	for _, rel := range t.local {
		if !pr.locals[rel] {
			continue
		}
		if pr.host {
			skipped = append(skipped, fmt.Sprintf("%s is the workspace's own program; on the host berth runs only programs from outside the workspace: %s or use a container", rel, t.hostFix))
			continue
		}
		bin = path.Join(root, rel)
		return []string{bin}, bin, nil, true
	}
	if t.module != "" && venvPy != "" && slices.Contains(pr.modules[venvPy], t.module) {
		return []string{venvPy, "-m", t.module}, venvPy, skipped, true
	}
	for _, n := range t.names {
		for _, b := range pr.bins {
			if path.Base(b) == n && !within(workspace, b) {
				return []string{b}, b, skipped, true
			}
		}
		if why, ok := pr.binSkip[n]; ok {
			skipped = append(skipped, why)
		}
	}
	if why, ok := pr.binSkip["python3"]; ok && t.module != "" {
		skipped = append(skipped, why)
	}
	if t.module != "" {
		for _, py := range pr.pythons {
			if py != venvPy && !within(workspace, py) && slices.Contains(pr.modules[py], t.module) {
				return []string{py, "-m", t.module}, py, skipped, true
			}
		}
	}
	return nil, "", skipped, false
}
