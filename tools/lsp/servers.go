package lsp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools/internal/proc"
)

// Server describes one language server of the table (LSP-1, REG-2).
type Server struct {
	// ID names the server in status and errors ("gopls").
	ID string
	// Languages maps file extensions (".go") to the LSP language id sent in
	// didOpen ("go").
	Languages map[string]string
	// Markers are the root markers, any of them; the root of a file is the
	// nearest ancestor directory, inside the workspace, holding one.
	Markers []string
	// MarkerOptional says the server works without a marker (pylsp,
	// pyright): a file with none above it is served from the workspace
	// root, and status says so.
	MarkerOptional bool
	// Binaries are the executable names looked up, in order of preference;
	// a trailing "-*" also matches versioned names (clangd-16), highest
	// version first.
	Binaries []string
	// Args follow the binary.
	Args []string
	// Local are project-local directories (relative to the root) searched
	// before PATH inside a container: ".venv/bin", "node_modules/.bin". They
	// are never used on the host, where nothing in the workspace is run.
	Local []string
	// Settings answer workspace/configuration.
	Settings map[string]any
	// InitOptions is sent as initializationOptions.
	InitOptions any
	// HostInitOptions replaces InitOptions on the host, where a read-level
	// call must run no project code: rust-analyzer's build scripts, proc
	// macros and check on save are turned off there.
	HostInitOptions any
	// HostRefuse are paths, relative to the server's root or any
	// directory above it up to "/", whose presence means the server would
	// load and run code the workspace ships (the project's own
	// node_modules/typescript, which typescript-language-server prefers to
	// its bundled one, and which Node's resolution finds in any parent).
	// On the host such a server is not started.
	HostRefuse []string
	// HostModule is a file the server would otherwise look for in its
	// root's node_modules and every one above it
	// (typescript-language-server's typescript/lib/tsserver.js). On the
	// host it is taken from beside the server's own installation, outside
	// the workspace, and given to the server as the initialization option
	// HostModuleOption (dotted: "tsserver.path"); a server whose
	// installation has none is not started there.
	HostModule, HostModuleOption string
	// HostArgs follow Args on the host only: clangd's
	// --enable-config=false, so that a workspace .clangd can neither add
	// flags nor point clangd at a remote index.
	HostArgs []string
	// Typeshed is, for a server that resolves an import to a stub of its
	// bundled typeshed's stdlib before the workspace's own package of
	// that name (pyright), where that typeshed lies, relative to the
	// directory of the server's real program file
	// ("dist/typeshed-fallback"); TypeshedSetting is the setting (dotted,
	// a list) that gives the server another. When the root holds such a
	// package, the server is given a private typeshed without its stub
	// (typeshed.go).
	Typeshed, TypeshedSetting string
	// Settle, when longer than the supervisor's, is the quiet period after
	// a change before its diagnostics are taken as complete: pyright
	// publishes a changed file's diagnostics first and its callers' when
	// it has re-checked them, a few hundred milliseconds later.
	Settle time.Duration
	// BackgroundIndex says the server indexes the project in the
	// background, reporting work-done progress ($/progress) while it does
	// (clangd's background index, tsserver's project load): until it
	// finishes, cross-file answers (references, calls, workspace symbols)
	// are incomplete, so the first such answer waits for it, status says
	// the server is indexing, and lsp_rename refuses while it is.
	BackgroundIndex bool
	// FindsFilesLate says the server lists the workspace's files a while
	// after it started, and begins work-done progress once it has
	// (pyright's "N files to analyze"): until then its cross-file answers
	// cover only the open files and what they import, so the first such
	// answer waits, up to indexStartWait, for that progress to begin (not
	// to end: pyright's references read the files they need).
	FindsFilesLate bool
	// OpenRoot says the server searches only the files it was told about
	// (tsserver: a loose JavaScript file's inferred project holds the
	// open files only): before the first cross-file answer, the root's
	// files of the server's languages are opened, at most MaxOpenedFiles.
	OpenRoot bool
	// AnalyzeOnOpen says the server analyzes a document after it acked
	// its didOpen or didChange, and answers from its older analysis until
	// then (bash-language-server: a definition asked right after the open
	// found nothing): a query waits, up to DiagnosticsWait, for the
	// diagnostics it publishes when the analysis is done.
	AnalyzeOnOpen bool
	// SilentWhenUnchanged says the server publishes a file's diagnostics
	// only when they changed (typescript-language-server): a change that
	// leaves them as they were gets no answer, so the wait for it is
	// short (unchangedWait) and its end is no sign of a slow server.
	SilentWhenUnchanged bool
	// Exact says the server resolves names by type over the whole project
	// (gopls), so its cross-file answers are not checked against the
	// text (verdict.go).
	Exact bool
	// LinksOpenFiles says the server links across files only what it has
	// open (clangd without a compilation database, tsserver's inferred
	// project): before a references or incoming_calls answer, the files
	// where the name occurs are opened (verdict.go, openOccurrences).
	LinksOpenFiles bool
	// CompileCommandsDir, when set, is the flag that names the directory
	// of a compilation database ("--compile-commands-dir="): before the
	// server starts, berth looks for its root's database (compdb.go) and
	// passes the flag with its directory when the server would not look
	// there by itself; status names the database.
	CompileCommandsDir string
	// ByName says the server links references by name inference (pylsp's
	// jedi): a references answer says that it may list uses of other
	// symbols of the same name.
	ByName bool
}

// MaxOpenedFiles caps the files of a root opened for a server that
// searches only open files (Server.OpenRoot).
const MaxOpenedFiles = 200

// args returns the arguments sv starts with, on the host or in a
// container.
func (sv Server) args(host bool) []string {
	if host {
		return append(slices.Clone(sv.Args), sv.HostArgs...)
	}
	return sv.Args
}

// initOptions returns the initializationOptions sv starts with, on the
// host or in a container.
func (sv Server) initOptions(host bool) any {
	if host && sv.HostInitOptions != nil {
		return sv.HostInitOptions
	}
	return sv.InitOptions
}

// pyrightSettle is pyright's quiet period after a change (Server.Settle):
// it re-checks the files that import a changed one after publishing the
// changed file's own diagnostics.
const pyrightSettle = time.Second

// tsSettle is typescript-language-server's quiet period after a change:
// it publishes the changed file's diagnostics and its importers' as
// tsserver finishes each, not in one batch.
const tsSettle = 500 * time.Millisecond

// DefaultServers returns the built-in server table. In each language the
// first usable server answers.
func DefaultServers() []Server {
	py := map[string]string{".py": "python", ".pyi": "python"}
	pyMarkers := []string{"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt"}
	ts := map[string]string{".ts": "typescript", ".tsx": "typescriptreact", ".mts": "typescript", ".cts": "typescript",
		".js": "javascript", ".jsx": "javascriptreact", ".mjs": "javascript", ".cjs": "javascript"}
	c := map[string]string{".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp"}
	return []Server{
		{ID: "gopls", Languages: map[string]string{".go": "go"}, Markers: []string{"go.work", "go.mod"}, Binaries: []string{"gopls"}, Args: []string{"serve"},
			// An agent's write is finished, not a keystroke: diagnose the
			// whole workspace at once instead of after gopls's 1s typing
			// delay, and keep links to pkg.go.dev out of hovers.
			InitOptions: map[string]any{"diagnosticsDelay": "0s", "linksInHover": false},
			// gopls type-checks the whole module: its cross-file answers
			// are not checked against the text.
			Exact: true},
		// pyright before pylsp: where both are installed, pyright answers
		// (a configured table that lists pylsp alone keeps pylsp). It
		// checks the whole workspace, not only open files, so a write that
		// breaks a caller in another file is reported.
		{ID: "pyright", Languages: py, Markers: pyMarkers, MarkerOptional: true, Binaries: []string{"pyright-langserver", "basedpyright-langserver"}, Args: []string{"--stdio"}, Local: []string{".venv/bin", "venv/bin", "node_modules/.bin"},
			Settings: map[string]any{"python": map[string]any{"analysis": map[string]any{
				"diagnosticMode":         "workspace",
				"autoSearchPaths":        true,
				"useLibraryCodeForTypes": true,
			}}},
			// A workspace package named like a standard module (email/)
			// is resolved to the workspace's code, not to the stub.
			Typeshed: "dist/typeshed-fallback", TypeshedSetting: "python.analysis.typeshedPaths",
			FindsFilesLate: true, Settle: pyrightSettle},
		{ID: "pylsp", Languages: py, Markers: pyMarkers, MarkerOptional: true, Binaries: []string{"pylsp"}, Local: []string{".venv/bin", "venv/bin"}, ByName: true,
			// Style checkers drown real problems: keep pyflakes (undefined
			// names, unused imports), drop pycodestyle and mccabe.
			Settings: map[string]any{"pylsp": map[string]any{"plugins": map[string]any{
				"pycodestyle": map[string]any{"enabled": false},
				"mccabe":      map[string]any{"enabled": false},
				"pydocstyle":  map[string]any{"enabled": false},
			}}}},
		// tsserver puts a loose file in an inferred project, and clangd
		// compiles one with its fallback flags: both work without a marker.
		// tsserver loads the project (tsconfig.json) before it answers
		// across files, and reports the load as progress.
		{ID: "typescript-language-server", Languages: ts, Markers: []string{"tsconfig.json", "jsconfig.json", "package.json"}, MarkerOptional: true, Binaries: []string{"typescript-language-server"}, Args: []string{"--stdio"}, Local: []string{"node_modules/.bin"},
			HostRefuse: []string{"node_modules/typescript"}, HostModule: "typescript/lib/tsserver.js", HostModuleOption: "tsserver.path",
			BackgroundIndex: true, OpenRoot: true, LinksOpenFiles: true, SilentWhenUnchanged: true, Settle: tsSettle,
			// lsp_rename renames the symbol: at an imported name's use,
			// tsserver would otherwise rename only the local binding
			// (import { hello as sayHello }) in that one file.
			InitOptions: map[string]any{"preferences": map[string]any{"providePrefixAndSuffixTextForRename": false}},
			// On the host tsserver acquires no typings: its installer
			// would run npm on berth's machine for the packages the
			// workspace's package.json names.
			HostInitOptions: map[string]any{"preferences": map[string]any{"providePrefixAndSuffixTextForRename": false}, "disableAutomaticTypingAcquisition": true}},
		// clangd indexes the project in the background: references wait
		// for it. --query-driver is never passed, so clangd runs no
		// compiler a compile_commands.json names; on the host a workspace
		// .clangd is not read either (it could add flags or name a remote
		// index to connect to). A database in out/, build-debug/ … is
		// passed with --compile-commands-dir (compdb.go): the same data
		// clangd reads from the root's compile_commands.json.
		{ID: "clangd", Languages: c, Markers: []string{"compile_commands.json", "CMakeLists.txt", ".clangd"}, MarkerOptional: true, Binaries: []string{"clangd", "clangd-*"},
			Args: []string{"--background-index", "--log=error", "--pch-storage=memory"}, HostArgs: []string{"--enable-config=false"}, BackgroundIndex: true, LinksOpenFiles: true,
			CompileCommandsDir: "--compile-commands-dir="},
		{ID: "bash-language-server", Languages: map[string]string{".sh": "shellscript", ".bash": "shellscript"}, MarkerOptional: true, Binaries: []string{"bash-language-server"}, Args: []string{"start"}, Local: []string{"node_modules/.bin"}, AnalyzeOnOpen: true,
			// shellcheck, when installed, is its linter; without it the
			// server reports nothing.
			Settings: map[string]any{"bashIde": map[string]any{"backgroundAnalysisMaxFiles": 500}}},
		{ID: "rust-analyzer", Languages: map[string]string{".rs": "rust"}, Markers: []string{"Cargo.toml"}, Binaries: []string{"rust-analyzer"},
			HostInitOptions: map[string]any{
				"cargo":       map[string]any{"buildScripts": map[string]any{"enable": false}},
				"procMacro":   map[string]any{"enable": false},
				"checkOnSave": false,
			}},
		{ID: "dart", Languages: map[string]string{".dart": "dart"}, Markers: []string{"pubspec.yaml"}, Binaries: []string{"dart"}, Args: []string{"language-server", "--protocol=lsp"}},
	}
}

// MergeServers returns table with extra servers added; an extra server with
// the ID of a table entry replaces it.
func MergeServers(table, extra []Server) []Server {
	out := slices.Clone(table)
	for _, e := range extra {
		if i := slices.IndexFunc(out, func(s Server) bool { return s.ID == e.ID }); i >= 0 {
			out[i] = e
		} else {
			out = append(out, e)
		}
	}
	return out
}

// probeTimeout bounds one binary probe in the sandbox.
const probeTimeout = 20 * time.Second

// probeScript prints "bin PATH" for every executable named in the
// arguments (a name ending in "-*" matches versioned names) found first in
// the directories listed before "--", then on PATH, in that order.
const probeScript = `dirs=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do dirs="$dirs
$1"; shift; done
shift
pathdirs=""
IFS=:
for d in $PATH; do pathdirs="$pathdirs
$d"; done
IFS='
'
for d in $dirs $pathdirs; do
  case "$d" in /*) ;; *) continue ;; esac
  for n in "$@"; do
    for f in "$d"/$n; do
      [ -f "$f" ] && [ -x "$f" ] && echo "bin $f"
    done
  done
done
exit 0
`

// probeBinaries returns, in search order, every executable matching names
// in localDirs (absolute) and then on the sandbox's PATH.
func probeBinaries(ctx context.Context, sb sandbox.Sandbox, localDirs, names []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	args := append([]string{"/bin/sh", "-c", probeScript, "berth-lsp-probe"}, localDirs...)
	args = append(args, "--")
	for _, n := range names {
		if p, ok := strings.CutSuffix(n, "*"); ok {
			args = append(args, p+"[0-9]*")
		} else {
			args = append(args, n)
		}
	}
	var out, errb bytes.Buffer
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: args, Stdout: &out, Stderr: &errb})
	if err != nil {
		return nil, fmt.Errorf("lsp: cannot look for language servers in the sandbox: %w", err)
	}
	st, err := p.Wait()
	if err != nil {
		return nil, fmt.Errorf("lsp: looking for language servers in the sandbox failed: %w", err)
	}
	if !st.Success() {
		return nil, fmt.Errorf("lsp: looking for language servers in the sandbox failed (%v): %s", st, proc.Clip(errb.String(), 400))
	}
	var found []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if f, ok := strings.CutPrefix(sc.Text(), "bin "); ok && !slices.Contains(found, f) {
			found = append(found, f)
		}
	}
	return found, nil
}

// findRoot returns the nearest directory from dir (workspace-relative) up
// to the workspace root that holds one of markers, and the marker; both are
// empty when none does.
func findRoot(ctx context.Context, ws sandbox.FS, dir string, markers []string) (root, marker string, err error) {
	for {
		for _, m := range markers {
			_, err := ws.Stat(ctx, path.Join(dir, m))
			if err == nil {
				return dir, m, nil
			}
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sandbox.ErrEscape) && !errors.Is(err, syscall.ENOTDIR) {
				return "", "", err
			}
		}
		if dir == "." {
			return "", "", nil
		}
		dir = path.Dir(dir)
	}
}
