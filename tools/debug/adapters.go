package debug

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

// Adapter ids, as the tool's adapter argument and the adapters operation name
// them (TOOLS.md §7).
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
}

// adapterTable is the adapter table of TOOLS.md §7.
var adapterTable = []adapterSpec{
	{id: AdapterDart, markers: []string{"pubspec.yaml"}, binary: "dart", names: []string{"dart"}, exts: []string{".dart"}},
	{id: AdapterDebugpy, markers: []string{"pyproject.toml", "setup.py", "requirements.txt"}, binary: "python3 with the debugpy module", names: []string{"python3"}, exts: []string{".py"}},
	{id: AdapterLLDB, markers: []string{"Cargo.toml", "CMakeLists.txt"}, binary: "lldb-dap (or lldb-vscode)", names: []string{"lldb-dap", "lldb-dap-*", "lldb-vscode", "lldb-vscode-*"}},
	{id: AdapterDelve, markers: []string{"go.mod"}, binary: "dlv", names: []string{"dlv"}, exts: []string{".go"}},
}

func specFor(id string) (adapterSpec, bool) {
	for _, a := range adapterTable {
		if a.id == id {
			return a, true
		}
	}
	return adapterSpec{}, false
}

func adapterIDs() string {
	var ids []string
	for _, a := range adapterTable {
		ids = append(ids, a.id)
	}
	return strings.Join(ids, ", ")
}

// Availability is what discovery found for one adapter.
type Availability struct {
	Adapter string `json:"adapter"`
	Usable  bool   `json:"usable"`
	// Root is the project root (workspace-relative, "." for the workspace)
	// where the marker was found.
	Root string `json:"root,omitempty"`
	// Marker is the marker file found in Root.
	Marker string `json:"marker,omitempty"`
	// Binary is the adapter program (or the python for debugpy) as the
	// sandbox sees it.
	Binary string `json:"binary,omitempty"`
	// Reason says why the adapter is not usable, and what would fix it.
	Reason string `json:"reason,omitempty"`

	absRoot string
}

// probe is what one discovery run in the sandbox found.
type probe struct {
	bins   map[string]string // adapter id → chosen binary
	python pythonProbe
}

type pythonProbe struct {
	path     string // the python chosen by DBG-4 preference, "" when none
	venv     bool   // path is a project venv's python
	importOK bool
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
for py in "$@" "$(command -v python3 2>/dev/null)"; do
  [ -n "$py" ] || continue
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
	args := []string{"/bin/sh", "-c", probeScript, "berth-debug-probe"}
	for _, r := range venvRoots {
		for _, v := range venvPythons {
			args = append(args, path.Join(r, v))
		}
	}
	var out, errb bytes.Buffer
	p, err := s.sb.Start(ctx, &sandbox.Cmd{Args: args, Stdout: &out, Stderr: &errb})
	if err != nil {
		return probe{}, fmt.Errorf("debug: cannot look for debug adapters in the sandbox: %w", err)
	}
	st, err := p.Wait()
	if err != nil {
		return probe{}, fmt.Errorf("debug: looking for debug adapters in the sandbox failed: %w", err)
	}
	if !st.Success() {
		return probe{}, fmt.Errorf("debug: looking for debug adapters in the sandbox failed (%v): %s", st, proc.Clip(errb.String(), 400))
	}
	return s.parseProbe(out.String()), nil
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
		} else {
			av.Binary = pr.bins[a.id]
		}
		var why []string
		if av.Marker == "" {
			where := "the workspace root"
			if dir != "." {
				where = dir + " or any parent up to the workspace root"
			}
			why = append(why, fmt.Sprintf("marker missing: none of %s in %s", strings.Join(a.markers, ", "), where))
		}
		switch {
		case a.id == AdapterDebugpy && pr.python.path == "":
			why = append(why, "binary missing: no .venv/bin/python or venv/bin/python in the project and no python3 on the sandbox's PATH")
		case a.id == AdapterDebugpy && !pr.python.importOK:
			fix := "install debugpy into that environment (" + pr.python.path + " -m pip install debugpy, or the distribution's python3-debugpy package)"
			why = append(why, fmt.Sprintf("module missing: %s cannot import debugpy; %s", pr.python.path, fix))
		case a.id != AdapterDebugpy && av.Binary == "":
			why = append(why, fmt.Sprintf("binary missing: no %s on the sandbox's PATH", a.binary))
		}
		if len(why) == 0 {
			av.Usable = true
		} else {
			av.Reason = strings.Join(why, "; ")
		}
	}
	return out, nil
}
