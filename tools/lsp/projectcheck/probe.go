package projectcheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools/internal/proc"
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
//	mypyplugins FILE    a mypy configuration file of the root that names plugins (mypy then imports them)
//	dartplugins         analysis_options.yaml names analyzer plugins (dart analyze then runs them)
//
// It uses shell builtins only, and starts no program inside the workspace
// but the project's own .venv/bin/python — and with PC_HOST set (the
// sandbox is the host) no python at all: the host's pythons are checked
// with modsScript once [Find] has resolved them.
const probeScript = `cd "$PC_ROOT" 2>/dev/null || { echo noroot; exit 0; }
inws() { [ "$PC_WS" = / ] && return 0; case "$1" in "$PC_WS"|"$PC_WS"/*) return 0 ;; esac; return 1; }
set -f
for m in $PC_MARKERS; do [ -f "$m" ] && echo "marker $m"; done
for f in $PC_LOCALS; do [ -f "$f" ] && [ -x "$f" ] && echo "local $f"; done
haspy=
for m in $PC_PYMARKERS; do [ -f "$m" ] && haspy=1; done
printf 'path %s\n' "$PATH"
mods() {
  [ -n "$haspy" ] && [ -z "$PC_HOST" ] || return 0
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
mypyplug() {
  sec=
  while IFS= read -r l || [ -n "$l" ]; do
    l=${l#"${l%%[![:space:]]*}"}
    case "$l" in
      '['*) sec=$l ;;
      *mypy.plugins*) return 0 ;;
      plugins*|'"plugins"'*|"'plugins'"*) case "$sec" in *mypy*) return 0 ;; esac ;;
    esac
  done < "$1"
  return 1
}
for f in mypy.ini .mypy.ini setup.cfg pyproject.toml; do
  [ -f "$f" ] && mypyplug "$f" 2>/dev/null && echo "mypyplugins $f"
done
if [ -f analysis_options.yaml ]; then
  while IFS= read -r l || [ -n "$l" ]; do
    l=${l#"${l%%[![:space:]]*}"}
    case "$l" in plugins:*|'"plugins":'*) echo dartplugins; break ;; esac
  done < analysis_options.yaml
fi
if [ -f Cargo.toml ]; then
  d=$PC_ROOT
  while :; do
    if [ -f "$d/Cargo.toml" ] && hasws "$d/Cargo.toml" 2>/dev/null; then echo "cargows $d"; break; fi
    if [ "$d" = "$PC_WS" ] || [ "$d" = / ]; then break; fi
    d=${d%/*}; [ -n "$d" ] || d=/
  done
fi
`

// modsScript prints, for each python given as an argument, "py
// PY<TAB>MODS": the modules of $PC_MODULES it can import. On the host it
// runs only pythons [Find] resolved outside the workspace.
const modsScript = `for py in "$@"; do
  printf 'py %s\t%s\n' "$py" "$("$py" -c 'import sys, importlib.util as u; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m)))' $PC_MODULES 2>/dev/null)"
done
`

// probe is what the probe found.
type probe struct {
	host           bool // the sandbox is the host: nothing from the workspace runs
	noRoot         bool
	markers        map[string]bool
	locals         map[string]bool     // root-relative programs
	path           string              // the sandbox's PATH
	venvPython     string              // root/.venv/bin/python, when present
	bins           []string            // programs on PATH outside the workspace, in PATH order
	pythons        []string            // pythons whose modules were checked, venv first
	modules        map[string][]string // python → importable modules
	cargoWorkspace string
	mypyPlugins    string // the mypy configuration file that names plugins
	dartPlugins    bool

	// On the host only:
	venvReal string            // what venvPython resolves to, outside the workspace
	venvSkip string            // why the venv's python is not used
	venvRuns string            // what the venv's python would execute at startup (a .pth import line, sitecustomize)
	venvSys  bool              // the venv's python also sees its base interpreter's modules
	binSkip  map[string]string // program name → why a PATH program of that name was not used
	pinEnv   []string          // pins every toolchain manager found (proc.HostToolchain)
	pinNeeds []string          // why the workspace's toolchain files would still decide what runs
}

// probeNames are the programs looked up on PATH.
func probeNames() []string {
	names := []string{"python3", "find"}
	for _, m := range proc.Managers {
		names = append(names, m.Program) // pinned on the host (pinToolchains)
	}
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

// maxHostPythons bounds the pythons on the host's PATH whose modules are
// checked.
const maxHostPythons = 4

// runProbe runs probeScript in the sandbox. On the host it then resolves
// every program the probe found (no program of the workspace, nor one
// that resolves into it, is kept) and only then asks the remaining
// pythons for their modules.
func runProbe(ctx context.Context, sb sandbox.Sandbox, workspace, root string, host bool) (*probe, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	env := probeEnv(workspace, root)
	if host {
		env = append(env, "PC_HOST=1")
	}
	out, err := runScript(ctx, sb, probeScript, env)
	if err != nil {
		return nil, err
	}
	pr := parseProbe(out, workspace, root)
	if !host || pr.noRoot {
		return pr, nil
	}
	pr.trustHost(workspace, root)
	pr.pinToolchains(ctx, sb, root)
	env = append(env, pr.pinEnv...)
	if pr.venvPython != "" {
		// Not asked: its site-packages are the workspace's, and python
		// runs their .pth import lines at startup. Looked at instead.
		pr.venvSite(root)
	}
	var pys []string
	if pr.venvSys {
		pys = append(pys, pr.venvReal) // outside the workspace, run without the venv
	}
	for _, b := range pr.bins {
		if path.Base(b) == "python3" && len(pys) < maxHostPythons+1 {
			pys = append(pys, b)
		}
	}
	if len(pys) == 0 || !pr.pythonProject() {
		return pr, nil
	}
	out, err = runScript(ctx, sb, modsScript, env, pys...)
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "py "); ok {
			py, mods, _ := strings.Cut(rest, "\t")
			switch {
			case pr.venvSys && py == pr.venvReal:
				for _, m := range strings.Fields(mods) {
					if !slices.Contains(pr.modules[pr.venvPython], m) {
						pr.modules[pr.venvPython] = append(pr.modules[pr.venvPython], m)
					}
				}
			case slices.Contains(pys, py):
				pr.pythons = append(pr.pythons, py)
				pr.modules[py] = strings.Fields(mods)
			}
		}
	}
	return pr, nil
}

// runScript runs a probe script with args in the sandbox and returns its
// stdout.
func runScript(ctx context.Context, sb sandbox.Sandbox, script string, env []string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	p, err := sb.Start(ctx, &sandbox.Cmd{
		Args:   append([]string{"/bin/sh", "-c", script, "berth-projectcheck-probe"}, args...),
		Env:    env,
		Stdout: &out,
		Stderr: &errb,
	})
	if err != nil {
		return "", fmt.Errorf("projectcheck: cannot look for checkers in the sandbox: %w", err)
	}
	st, err := p.Wait()
	if err != nil {
		return "", fmt.Errorf("projectcheck: looking for checkers in the sandbox failed: %w", err)
	}
	if !st.Success() {
		return "", fmt.Errorf("projectcheck: looking for checkers in the sandbox failed (%v; the sandbox needs a POSIX /bin/sh): %s", st, clip(errb.String(), 400))
	}
	return out.String(), nil
}

// pythonProject reports whether a python root marker is in the root.
func (pr *probe) pythonProject() bool {
	for _, l := range table {
		if l.lang == "python" {
			return slices.ContainsFunc(l.markers, func(m string) bool { return pr.markers[m] })
		}
	}
	return false
}

// venvSite learns, on the host, what the venv's python would import and
// run without running it: which of the checker modules its site-packages
// hold, whether it sees its base interpreter's too (no pyvenv.cfg, or
// include-system-site-packages = true: venvSys), and what python would
// execute from the workspace at startup (proc.VenvStartup: .pth import
// lines, sitecustomize or usercustomize, a pyvenv.cfg home inside the
// workspace), in venvRuns.
func (pr *probe) venvSite(root string) {
	pr.pythons = append(pr.pythons, pr.venvPython)
	pr.venvSys = true
	if cfg, err := os.ReadFile(filepath.Join(root, venvDir, "pyvenv.cfg")); err == nil {
		pr.venvSys = false
		for _, line := range strings.Split(string(cfg), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if ok && strings.TrimSpace(k) == "include-system-site-packages" && strings.EqualFold(strings.TrimSpace(v), "true") {
				pr.venvSys = true
			}
		}
	}
	sites, _ := filepath.Glob(filepath.Join(root, venvDir, "lib", "python*", "site-packages"))
	var mods []string
	for _, site := range sites {
		for _, l := range table {
			for _, t := range l.tools {
				if t.module == "" || slices.Contains(mods, t.module) {
					continue
				}
				if _, err := os.Stat(filepath.Join(site, t.module)); err == nil {
					mods = append(mods, t.module)
				} else if _, err := os.Stat(filepath.Join(site, t.module+".py")); err == nil {
					mods = append(mods, t.module)
				}
			}
		}
	}
	if runs := proc.VenvStartup(root, pr.venvPython); len(runs) > 0 {
		pr.venvRuns = strings.Join(runs, ", ")
	}
	pr.modules[pr.venvPython] = mods
}

// trustHost applies the host's rule to what the probe found: a program on
// PATH that resolves into the workspace is dropped, and the venv's python
// is kept only when it resolves to an interpreter outside the workspace.
// Nothing is executed to find out.
func (pr *probe) trustHost(workspace, root string) {
	pr.host = true
	pr.binSkip = map[string]string{}
	kept := pr.bins[:0]
	for _, b := range pr.bins {
		real, inside := proc.HostProgram(workspace, b)
		if real != "" && !inside {
			kept = append(kept, b)
			continue
		}
		if _, ok := pr.binSkip[path.Base(b)]; !ok {
			pr.binSkip[path.Base(b)] = fmt.Sprintf("%s on PATH resolves to %s, inside the workspace; on the host berth runs only programs from outside the workspace", b, real)
		}
	}
	pr.bins = kept
	if pr.venvPython == "" {
		return
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(pr.venvPython, root), "/")
	real, inside := proc.HostProgram(workspace, pr.venvPython)
	switch {
	case real == "":
		pr.venvSkip = rel + " does not resolve to a program"
		pr.venvPython = ""
	case inside:
		pr.venvSkip = fmt.Sprintf("%s is the workspace's own program (it resolves to %s); on the host berth runs only interpreters from outside the workspace: make the venv with a python from outside it (python3 -m venv .venv links bin/python to it) or use a container", rel, real)
		pr.venvPython = ""
	default:
		pr.venvReal = real
	}
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
		case "mypyplugins":
			pr.mypyPlugins = rest
		case "dartplugins":
			pr.dartPlugins = true
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

// pinToolchains pins, on the host, every toolchain manager among the
// programs found outside the workspace (rustup, also behind a cargo that
// is its proxy; pyenv and nodenv behind python3 and node shims) to what it
// chooses from "/", so that no toolchain file of the workspace or above
// it chooses what a checker or the probe's pythons run. A manager that
// cannot be pinned while such a file chooses for it is noted in pinNeeds:
// the check is then an exec step.
func (pr *probe) pinToolchains(ctx context.Context, sb sandbox.Sandbox, root string) {
	var pins []proc.Pin
	for _, b := range pr.bins {
		real, _ := proc.HostProgram(root, b)
		m, ok := proc.ManagerOf(b)
		prog := b
		if !ok {
			if m, ok = proc.ManagerOf(real); !ok {
				continue
			}
			prog = real
		}
		if slices.ContainsFunc(pins, func(p proc.Pin) bool { return p.Manager.Program == m.Program }) {
			continue
		}
		pins = append(pins, proc.ResolvePin(ctx, sb, m, prog))
	}
	env, needs := proc.HostToolchain(pins, root, proc.ReadHostFile)
	pr.pinEnv = append(slices.Clone(proc.CorepackEnv), env...)
	pr.pinNeeds = needs
}
