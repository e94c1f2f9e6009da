package debug

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools/internal/proc"
)

// Adapter ids, as the tool's adapter argument and the adapters operation name
// them (docs/tools.md §7).
const (
	AdapterDebugpy = "debugpy"
	AdapterDelve   = "delve"
	AdapterLLDB    = "lldb"
	AdapterDart    = "dart"
)

// discoverTimeout bounds one discovery probe in the sandbox.
const discoverTimeout = 20 * time.Second

// adapterSpec is one row of the adapter table.
type adapterSpec struct {
	id      string
	markers []string // root markers, any of them
	binary  string   // what must be on PATH, for messages
	// names are the executable names looked up on PATH, in order of
	// preference; a trailing "-*" also matches versioned names
	// (lldb-vscode-14), the highest version first.
	names []string
	// exts are program extensions this adapter debugs when no adapter is
	// named.
	exts []string
	// evaluates says what evaluate does beyond expressions, for the
	// description and for an evaluate that returns no value ("" when
	// nothing is known).
	evaluates string
	// noReturn says, when the adapter does not report the value a
	// step_out returned, what to do instead.
	noReturn string
	// markerOptional: the adapter debugs a program without a project
	// around it (debugpy runs any script); without a marker its root is
	// the workspace root, as pylsp's is for lsp.
	markerOptional bool
	// blindToDeath: the adapter does not notice its program killed from
	// outside while stopped (delve waits for the program it traces only
	// while running it): when the sandbox's /proc says the program is
	// dead, its word is taken without waiting for the adapter's
	// ([Supervisor.checkProgram]).
	blindToDeath bool
}

// adapterTable is the adapter table of docs/tools.md §7.
var adapterTable = []adapterSpec{
	{id: AdapterDart, markers: []string{"pubspec.yaml"}, binary: "dart", names: []string{"dart"}, exts: []string{".dart"}},
	{id: AdapterDebugpy, markers: []string{"pyproject.toml", "setup.py", "requirements.txt"}, binary: "python3 with the debugpy module", names: []string{"python3"}, exts: []string{".py"},
		evaluates: "runs statements too (x = 5, import os), which have no value", markerOptional: true},
	{id: AdapterLLDB, markers: []string{"Cargo.toml", "CMakeLists.txt"}, binary: "lldb-dap (or lldb-vscode)", names: []string{"lldb-dap", "lldb-dap-*", "lldb-vscode", "lldb-vscode-*"}},
	{id: AdapterDelve, markers: []string{"go.mod"}, binary: "dlv", names: []string{"dlv"}, exts: []string{".go"},
		evaluates:    "evaluates Go expressions (call f(1) calls a function, call x = 5 assigns)",
		noReturn:     "delve does not report the value step_out returned: step_over once and read the variable it is assigned to",
		blindToDeath: true},
}

func specFor(id string) (adapterSpec, bool) {
	for _, a := range adapterTable {
		if a.id == id {
			return a, true
		}
	}
	return adapterSpec{}, false
}

// adapterList lists the adapter ids in the table's order.
func adapterList() []string {
	ids := make([]string, len(adapterTable))
	for i, a := range adapterTable {
		ids[i] = a.id
	}
	return ids
}

func adapterIDs() string { return strings.Join(adapterList(), ", ") }

// Availability is what discovery found for one adapter.
type Availability struct {
	Adapter string `json:"adapter"`
	Usable  bool   `json:"usable"`
	// Root is the project root (workspace-relative, "." for the workspace)
	// where the marker was found.
	Root string `json:"root,omitempty"`
	// Marker is the marker file found in Root.
	Marker string `json:"marker,omitempty"`
	// NoMarker says the adapter found no marker and works without one:
	// Root is the workspace root.
	NoMarker bool `json:"no_marker,omitempty"`
	// Binary is the adapter program (or the python for debugpy) as the
	// sandbox sees it.
	Binary string `json:"binary,omitempty"`
	// Reason says why the adapter is not usable, and what would fix it.
	Reason string `json:"reason,omitempty"`
	// Interpreter names the project venv's python and the interpreter
	// outside the workspace it resolves to (".venv/bin/python →
	// /usr/bin/python3.11") when debugpy uses it on the host.
	Interpreter string `json:"interpreter,omitempty"`
	// Skipped says which of the workspace's own programs were passed over
	// on the host, where none is ever run.
	Skipped []string `json:"skipped,omitempty"`

	absRoot string
	// adapter is the python that runs debugpy's adapter when it is not
	// Binary: on the host, the interpreter a workspace venv's python
	// resolves to, run by that path (so outside the venv: neither its
	// site-packages nor a debugpy of the workspace is imported).
	adapter string
	// startup is set on the host when Binary is a workspace venv's python
	// whose site-packages run code at start (proc.VenvStartup): why
	// launching under it is an exec step of its own.
	startup string
}

// probe is what one discovery run in the sandbox found.
type probe struct {
	bins    map[string]string // adapter id → chosen binary
	python  pythonProbe
	skipped []string // on the host: the workspace's programs passed over
}

type pythonProbe struct {
	path     string // the python chosen by DBG-4 preference, "" when none
	venv     bool   // path is a project venv's python
	importOK bool
	real     string // on the host: what a venv path resolves to; debugpy runs from it
	startup  string // on the host: what the venv runs at start (Availability.startup)
}

// probeScript lists the adapter binaries on PATH, in PATH order, one
// "bin PATH" line each, then checks the pythons given as arguments (venv
// candidates, then python3 from PATH): the first that exists is the one
// debugpy uses (DBG-4), reported as "py ok PATH" or "py nomod PATH".
const probeScript = `IFS=:
for d in $PATH; do
  case "$d" in /*) ;; *) continue ;; esac
  for f in "$d"/dlv "$d"/lldb-dap "$d"/lldb-dap-[0-9]* "$d"/lldb-vscode "$d"/lldb-vscode-[0-9]* "$d"/dart "$d"/python3; do
    [ -f "$f" ] && [ -x "$f" ] && echo "bin $f"
  done
done
unset IFS
[ -n "$BERTH_PROBE_NO_PYTHON" ] && exit 0
for py in "$@" "$(command -v python3 2>/dev/null)"; do
  [ -n "$py" ] || continue
  if [ -f "$py" ] && [ -x "$py" ]; then
    if "$py" -c 'import debugpy' >/dev/null 2>&1; then echo "py ok $py"; else echo "py nomod $py"; fi
    exit 0
  fi
done
echo "py none"
`

// hostPyScript checks the pythons given as arguments, and only those, as
// probeScript does: on the host they are the ones [Supervisor.discover]
// resolved outside the workspace, and nothing else is executed. It runs in
// / so that python's -c path entry (the current directory) is not the
// workspace.
const hostPyScript = `cd / || exit 1
for py in "$@"; do
  if [ -f "$py" ] && [ -x "$py" ]; then
    if "$py" -c 'import debugpy' >/dev/null 2>&1; then echo "py ok $py"; else echo "py nomod $py"; fi
    exit 0
  fi
done
echo "py none"
`

// venvPythons are the project-local pythons debugpy prefers, relative to
// the project root (DBG-4).
var venvPythons = []string{".venv/bin/python", "venv/bin/python"}

// runProbe runs the discovery script in the sandbox. venvRoots are the
// absolute directories whose venvs are candidates, nearest first.
func (s *Supervisor) runProbe(ctx context.Context, venvRoots []string) (probe, error) {
	ctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	var venvs []string
	for _, r := range venvRoots {
		for _, v := range venvPythons {
			venvs = append(venvs, path.Join(r, v))
		}
	}
	if s.opts.Host {
		return s.runHostProbe(ctx, venvs)
	}
	out, err := s.script(ctx, probeScript, nil, venvs)
	if err != nil {
		return probe{}, err
	}
	return s.parseProbe(out), nil
}

// runHostProbe is discovery on the host, where no program of the
// workspace runs: the adapters on PATH are listed without running any
// python, every program found (and every venv candidate) is resolved, and
// only a python that resolves outside the workspace is then asked whether
// it imports debugpy. A venv's python is never run for that: the
// interpreter it resolves to is asked, by its own path (outside the venv),
// since that is what runs debugpy's adapter; the venv's own debugpy is the
// workspace's code and never imported. What the venv runs at start is
// looked at instead (proc.VenvStartup).
func (s *Supervisor) runHostProbe(ctx context.Context, venvs []string) (probe, error) {
	out, err := s.script(ctx, probeScript, []string{"BERTH_PROBE_NO_PYTHON=1"}, nil)
	if err != nil {
		return probe{}, err
	}
	var skipped, bins []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		b, ok := strings.CutPrefix(sc.Text(), "bin ")
		if !ok || s.inWorkspace(b) {
			continue
		}
		if real, inside := proc.HostProgram(s.root, b); real == "" || inside {
			skipped = append(skipped, fmt.Sprintf("%s on PATH resolves to %s, inside the workspace; on the host berth runs only programs from outside the workspace", b, real))
			continue
		}
		bins = append(bins, b)
	}
	var pys []string
	venvPy, venvReal := "", ""
	for _, v := range venvs {
		rel := strings.TrimPrefix(strings.TrimPrefix(v, s.root), "/")
		if _, err := os.Lstat(v); err != nil {
			continue
		}
		real, inside := proc.HostProgram(s.root, v)
		switch {
		case real == "":
			skipped = append(skipped, rel+" does not resolve to a program")
		case inside:
			skipped = append(skipped, fmt.Sprintf("%s is the workspace's own program (it resolves to %s); on the host berth runs only interpreters from outside the workspace: make the venv with a python from outside it (python3 -m venv links bin/python to it) or use a container", rel, real))
		case venvPy == "":
			venvPy, venvReal = v, real
		}
	}
	if venvPy != "" {
		pys = append(pys, venvReal)
	} else if py := proc.PickBinary(bins, []string{"python3"}); py != "" {
		pys = append(pys, py)
	}
	out, err = s.script(ctx, hostPyScript, nil, pys)
	if err != nil {
		return probe{}, err
	}
	var lines []string
	for _, b := range bins {
		lines = append(lines, "bin "+b)
	}
	pr := s.parseProbe(strings.Join(lines, "\n") + "\n" + out)
	pr.skipped = skipped
	if venvPy != "" && pr.python.path == venvReal {
		pr.python = pythonProbe{path: venvPy, venv: true, importOK: pr.python.importOK, real: venvReal}
		if runs := proc.VenvStartup(s.root, venvPy); len(runs) > 0 {
			pr.python.startup = proc.VenvStartupWhy(s.root, venvPy, runs)
		}
	}
	return pr, nil
}

// script runs a discovery script with args in the sandbox and returns its
// stdout.
func (s *Supervisor) script(ctx context.Context, script string, env, args []string) (string, error) {
	var out, errb bytes.Buffer
	p, err := s.sb.Start(ctx, &sandbox.Cmd{Args: append([]string{"/bin/sh", "-c", script, "berth-debug-probe"}, args...), Env: env, Stdout: &out, Stderr: &errb})
	if err != nil {
		return "", fmt.Errorf("debug: cannot look for debug adapters in the sandbox: %w", err)
	}
	st, err := p.Wait()
	if err != nil {
		return "", fmt.Errorf("debug: looking for debug adapters in the sandbox failed: %w", err)
	}
	if !st.Success() {
		return "", fmt.Errorf("debug: looking for debug adapters in the sandbox failed (%v): %s", st, proc.Clip(errb.String(), 400))
	}
	return out.String(), nil
}

// parseProbe picks one binary per adapter from the script's output.
// Binaries under the workspace are ignored: adapters come from the
// sandbox's PATH, never from the project (only debugpy's venv python does).
func (s *Supervisor) parseProbe(out string) probe {
	pr := probe{bins: map[string]string{}}
	var found []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "bin "):
			p := strings.TrimPrefix(line, "bin ")
			if !s.inWorkspace(p) {
				found = append(found, p)
			}
		case strings.HasPrefix(line, "py ok "):
			pr.python = pythonProbe{path: strings.TrimPrefix(line, "py ok "), importOK: true}
		case strings.HasPrefix(line, "py nomod "):
			pr.python = pythonProbe{path: strings.TrimPrefix(line, "py nomod ")}
		}
	}
	if pr.python.path != "" {
		base := path.Base(path.Dir(path.Dir(pr.python.path)))
		pr.python.venv = (base == ".venv" || base == "venv") && s.inWorkspace(pr.python.path)
		if !pr.python.venv && s.inWorkspace(pr.python.path) {
			pr.python = pythonProbe{} // a python3 on PATH inside the workspace is not used
		}
	}
	for _, a := range adapterTable {
		if a.id == AdapterDebugpy {
			continue
		}
		if b := proc.PickBinary(found, a.names); b != "" {
			pr.bins[a.id] = b
		}
	}
	return pr
}

func (s *Supervisor) inWorkspace(p string) bool {
	p = path.Clean(p)
	return p == s.root || s.root == "/" || strings.HasPrefix(p, s.root+"/")
}

// findRoot returns the nearest directory from dir (workspace-relative) up
// to the workspace root that holds one of markers, and the marker.
func (s *Supervisor) findRoot(ctx context.Context, dir string, markers []string) (root, marker string, err error) {
	for {
		for _, m := range markers {
			fi, err := s.ws.Stat(ctx, path.Join(dir, m))
			if err == nil && !fi.IsDir() {
				return dir, m, nil
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, sandbox.ErrEscape) && !isNotDir(err) {
				return "", "", err
			}
		}
		if dir == "." {
			return "", "", nil
		}
		dir = path.Dir(dir)
	}
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

// discover reports every adapter's availability for a program in dir
// (workspace-relative), or for the workspace root when dir is ".".
func (s *Supervisor) discover(ctx context.Context, dir string) ([]Availability, error) {
	out := make([]Availability, 0, len(adapterTable))
	var venvRoots []string
	for _, a := range adapterTable {
		av := Availability{Adapter: a.id}
		root, marker, err := s.findRoot(ctx, dir, a.markers)
		if err != nil {
			return nil, fmt.Errorf("debug: looking for %s's root markers: %w", a.id, err)
		}
		if marker != "" {
			av.Root, av.Marker, av.absRoot = root, marker, path.Join(s.root, root)
			if a.id == AdapterDebugpy {
				venvRoots = append(venvRoots, av.absRoot)
			}
		} else if a.markerOptional {
			av.Root, av.NoMarker, av.absRoot = ".", true, s.root
		}
		out = append(out, av)
	}
	if !slices.Contains(venvRoots, s.root) {
		venvRoots = append(venvRoots, s.root)
	}
	pr, err := s.runProbe(ctx, venvRoots)
	if err != nil {
		return nil, err
	}
	for i := range out {
		av := &out[i]
		a, _ := specFor(av.Adapter)
		if a.id == AdapterDebugpy {
			av.Binary = pr.python.path
			if pr.python.real != "" {
				av.Interpreter = strings.TrimPrefix(strings.TrimPrefix(pr.python.path, s.root), "/") + " → " + pr.python.real
			}
			if s.opts.Host && pr.python.venv {
				av.adapter, av.startup = pr.python.real, pr.python.startup
			}
		} else {
			av.Binary = pr.bins[a.id]
		}
		var why []string
		if av.Marker == "" && !av.NoMarker {
			where := "the workspace root"
			if dir != "." {
				where = dir + " or any parent up to the workspace root"
			}
			why = append(why, fmt.Sprintf("marker missing: none of %s in %s", strings.Join(a.markers, ", "), where))
		}
		switch {
		case a.id == AdapterDebugpy && pr.python.path == "":
			why = append(why, "binary missing: no .venv/bin/python or venv/bin/python in the project and no python3 on the sandbox's PATH")
		case a.id == AdapterDebugpy && !pr.python.importOK && av.adapter != "":
			why = append(why, fmt.Sprintf("module missing: %s resolves to %s, which cannot import debugpy; on the host debugpy runs from that interpreter, never from the workspace's venv: install it there (the distribution's python3-debugpy package), or use a container", pr.python.path, pr.python.real))
		case a.id == AdapterDebugpy && !pr.python.importOK:
			fix := "install debugpy into that environment (" + pr.python.path + " -m pip install debugpy, or the distribution's python3-debugpy package)"
			why = append(why, fmt.Sprintf("module missing: %s cannot import debugpy; %s", pr.python.path, fix))
		case a.id != AdapterDebugpy && av.Binary == "":
			why = append(why, fmt.Sprintf("binary missing: no %s on the sandbox's PATH", a.binary))
		}
		for _, sk := range pr.skipped {
			if a.id == AdapterDebugpy && (strings.Contains(sk, "python") || strings.Contains(sk, "venv")) ||
				a.id != AdapterDebugpy && slices.ContainsFunc(a.names, func(n string) bool { return strings.Contains(sk, "/"+strings.TrimSuffix(n, "*")) }) {
				av.Skipped = append(av.Skipped, sk)
			}
		}
		if len(why) == 0 {
			av.Usable = true
		} else {
			av.Reason = strings.Join(append(why, av.Skipped...), "; ")
		}
	}
	return out, nil
}
