package projectcheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"berth.dev/berth/sandbox"
)

// probeScript reports, for the project root $PC_ROOT in workspace $PC_WS:
//
//	noroot              the root is not a directory (nothing else follows)
//	marker NAME         a root marker ($PC_MARKERS) present as a file
//	local REL           a project-local program ($PC_LOCALS) present and executable
//	path PATH           the sandbox's PATH
//	venv PY             the project's .venv/bin/python
//	bin PATH            a program named in $PC_NAMES in a PATH directory outside the workspace, in PATH order
//	py PY<TAB>MODS      the python modules of $PC_MODULES that PY can import (only with a python marker, $PC_PYMARKERS)
//	cargows DIR         the nearest directory from the root up to the workspace whose Cargo.toml has [workspace]
//
// It uses shell builtins only, and starts no program inside the workspace
// but the project's own .venv/bin/python.
const probeScript = `cd "$PC_ROOT" 2>/dev/null || { echo noroot; exit 0; }
inws() { [ "$PC_WS" = / ] && return 0; case "$1" in "$PC_WS"|"$PC_WS"/*) return 0 ;; esac; return 1; }
set -f
for m in $PC_MARKERS; do [ -f "$m" ] && echo "marker $m"; done
for f in $PC_LOCALS; do [ -f "$f" ] && [ -x "$f" ] && echo "local $f"; done
haspy=
for m in $PC_PYMARKERS; do [ -f "$m" ] && haspy=1; done
printf 'path %s\n' "$PATH"
mods() {
  [ -n "$haspy" ] || return 0
  printf 'py %s\t%s\n' "$1" "$("$1" -c 'import sys, importlib.util as u; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m)))' $PC_MODULES 2>/dev/null)"
}
if [ -f .venv/bin/python ] && [ -x .venv/bin/python ]; then
  echo "venv $PC_ROOT/.venv/bin/python"
  mods "$PC_ROOT/.venv/bin/python"
fi
oldifs=$IFS; IFS=:; set -- $PATH; IFS=$oldifs
npy=0
for d in "$@"; do
  case "$d" in /*) ;; *) continue ;; esac
  inws "$d" && continue
  for n in $PC_NAMES; do
    f="$d/$n"
    [ -f "$f" ] && [ -x "$f" ] || continue
    echo "bin $f"
    if [ "$n" = python3 ] && [ $npy -lt 4 ]; then npy=$((npy+1)); mods "$f"; fi
  done
done
hasws() {
  while IFS= read -r l || [ -n "$l" ]; do
    l=${l#"${l%%[![:space:]]*}"}
    case "$l" in '[workspace]'*) return 0 ;; esac
  done < "$1"
  return 1
}
if [ -f Cargo.toml ]; then
  d=$PC_ROOT
  while :; do
    if [ -f "$d/Cargo.toml" ] && hasws "$d/Cargo.toml" 2>/dev/null; then echo "cargows $d"; break; fi
    if [ "$d" = "$PC_WS" ] || [ "$d" = / ]; then break; fi
    d=${d%/*}; [ -n "$d" ] || d=/
  done
fi
`

// probe is what the probe found.
type probe struct {
	noRoot         bool
	markers        map[string]bool
	locals         map[string]bool     // root-relative programs
	path           string              // the sandbox's PATH
	venvPython     string              // root/.venv/bin/python, when present
	bins           []string            // programs on PATH outside the workspace, in PATH order
	pythons        []string            // pythons whose modules were checked, venv first
	modules        map[string][]string // python → importable modules
	cargoWorkspace string
}

// probeNames are the programs looked up on PATH.
func probeNames() []string {
	names := []string{"python3", "find"}
	for _, l := range table {
		for _, t := range l.tools {
			for _, n := range t.names {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	return names
}

// probeEnv is the probe's environment: what to look for.
func probeEnv(workspace, root string) []string {
	var markers, pyMarkers, locals, modules []string
	for _, l := range table {
		markers = append(markers, l.markers...)
		for _, t := range l.tools {
			if t.python {
				pyMarkers = l.markers
			}
			for _, rel := range t.local {
				if !slices.Contains(locals, rel) {
					locals = append(locals, rel)
				}
			}
			if t.module != "" {
				modules = append(modules, t.module)
			}
		}
	}
	return []string{
		"PC_WS=" + workspace,
		"PC_ROOT=" + root,
		"PC_MARKERS=" + strings.Join(markers, " "),
		"PC_PYMARKERS=" + strings.Join(pyMarkers, " "),
		"PC_LOCALS=" + strings.Join(locals, " "),
		"PC_NAMES=" + strings.Join(probeNames(), " "),
		"PC_MODULES=" + strings.Join(modules, " "),
	}
}

// runProbe runs probeScript in the sandbox.
func runProbe(ctx context.Context, sb sandbox.Sandbox, workspace, root string) (*probe, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	p, err := sb.Start(ctx, &sandbox.Cmd{
		Args:   []string{"/bin/sh", "-c", probeScript, "berth-projectcheck-probe"},
		Env:    probeEnv(workspace, root),
		Stdout: &out,
		Stderr: &errb,
	})
	if err != nil {
		return nil, fmt.Errorf("projectcheck: cannot look for checkers in the sandbox: %w", err)
	}
	st, err := p.Wait()
	if err != nil {
		return nil, fmt.Errorf("projectcheck: looking for checkers in the sandbox failed: %w", err)
	}
	if !st.Success() {
		return nil, fmt.Errorf("projectcheck: looking for checkers in the sandbox failed (%v; the sandbox needs a POSIX /bin/sh): %s", st, clip(errb.String(), 400))
	}
	return parseProbe(out.String(), workspace, root), nil
}

// parseProbe reads the probe's output. Programs inside the workspace are
// dropped here too, whatever the script reported.
func parseProbe(out, workspace, root string) *probe {
	pr := &probe{markers: map[string]bool{}, locals: map[string]bool{}, modules: map[string][]string{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "noroot":
			pr.noRoot = true
		case "marker":
			pr.markers[rest] = true
		case "local":
			pr.locals[rest] = true
		case "path":
			pr.path = rest
		case "venv":
			if rest == path.Join(root, venvDir, "bin/python") {
				pr.venvPython = rest
			}
		case "bin":
			if path.IsAbs(rest) && !within(workspace, rest) {
				pr.bins = append(pr.bins, rest)
			}
		case "py":
			py, mods, _ := strings.Cut(rest, "\t")
			if py != pr.venvPython && within(workspace, py) {
				continue
			}
			pr.pythons = append(pr.pythons, py)
			pr.modules[py] = strings.Fields(mods)
		case "cargows":
			pr.cargoWorkspace = rest
		}
	}
	return pr
}

// find returns the first program named name on PATH, or "".
func (pr *probe) find(name string) string {
	for _, b := range pr.bins {
		if path.Base(b) == name {
			return b
		}
	}
	return ""
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
