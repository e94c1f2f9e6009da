package lsp

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
)

// What a server's start on the host may run besides the server itself.
// A toolchain manager's shim or proxy chooses its toolchain from files in
// the server's root and every directory above it, and Node resolves
// modules from every node_modules above it: on the host neither may
// reach into the workspace. The managers are pinned (proc.Managers), the
// module a server would resolve from node_modules is given to it from
// beside its own installation (Server.HostModule), and a refusal that
// looks for a directory (Server.HostRefuse) looks from the root up to "/".

// StepTool is the tool named on the permission card of a server start
// that needs approval.
const StepTool = "lsp"

// hostPins returns the pins of the toolchain managers a start of binary
// goes through: those on the sandbox's PATH (outside the workspace), and
// binary's own when it is a manager's proxy (a rust-analyzer that is a
// link to rustup). One pin per manager, binary's own first. Managers are
// asked once per supervisor; pinMu serializes the asking.
func (s *Supervisor) hostPins(ctx context.Context, binary string) ([]proc.Pin, error) {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	if s.pinned == nil {
		var names []string
		for _, m := range proc.Managers {
			names = append(names, m.Program)
		}
		found, err := probeBinaries(ctx, s.sb, nil, names)
		if err != nil {
			return nil, err
		}
		s.pinned = map[string]*proc.Pin{}
		for _, f := range found {
			real, inside := proc.HostProgram(s.root, f)
			if real == "" || inside {
				continue // never run; a PATH that leads into the workspace is the operator's to fix
			}
			if _, ok := proc.ManagerOf(f); ok && !slices.ContainsFunc(s.pathManagers, func(p string) bool { return path.Base(p) == path.Base(f) }) {
				s.pathManagers = append(s.pathManagers, f) // the first on PATH, as a shim's lookup finds it
			}
		}
	}
	var progs []string
	if real, inside := proc.HostProgram(s.root, binary); real != "" && !inside {
		if _, ok := proc.ManagerOf(real); ok {
			progs = append(progs, real)
		}
	}
	progs = append(progs, s.pathManagers...)
	var out []proc.Pin
	for _, prog := range progs {
		m, _ := proc.ManagerOf(prog)
		if slices.ContainsFunc(out, func(p proc.Pin) bool { return p.Manager.Program == m.Program }) {
			continue
		}
		pin := s.pinned[prog]
		if pin == nil {
			p := proc.ResolvePin(ctx, s.sb, m, prog)
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("lsp: asking %s for its toolchain: %w", prog, err)
			}
			pin = &p
			s.pinned[prog] = pin
		}
		out = append(out, *pin)
	}
	return out, nil
}

// hostStart decides how c's server starts on the host: the environment
// that pins every toolchain manager, and the initialization options that
// name its module outside the workspace. When a manager cannot be pinned
// and a toolchain file at or above the root chooses its toolchain, the
// start runs what the workspace chose: an exec-level step, asked of the
// call's permission gate (refused in plan and readonly runs, and in a
// prewarm, which has no gate to ask).
func (s *Supervisor) hostStart(ctx context.Context, c Choice) (*startSpec, error) {
	sp := &startSpec{decided: true, env: slices.Clone(proc.HostPinEnv)}
	pins, err := s.hostPins(ctx, c.Binary)
	if err != nil {
		return nil, err
	}
	absRoot := path.Join(s.root, c.Root)
	env, needs := proc.HostToolchain(pins, absRoot, proc.ReadHostFile)
	sp.env = append(sp.env, env...)
	if c.hostModule != "" {
		sp.init = withOption(c.Server.initOptions(true), c.Server.HostModuleOption, c.hostModule)
	}
	if len(needs) > 0 {
		cmd := []string{"cd", absRoot, "&&"}
		cmd = append(cmd, sp.env...)
		cmd = append(cmd, c.Binary)
		cmd = append(cmd, c.Server.args(true)...)
		step := tools.Step{Tool: StepTool, Level: tools.LevelExec, Command: strings.Join(cmd, " "),
			Why: strings.Join(needs, "; ") + "; on the host that is running code the workspace chose"}
		if err := tools.ApproveStep(ctx, step); err != nil {
			return nil, fmt.Errorf("lsp: %s was not started: %w; use a container for this project, or pin the toolchain on the host (%s)", c.key(), err, pinAdvice(pins))
		}
	}
	return sp, nil
}

// pinAdvice says how an operator pins the managers that could not be.
func pinAdvice(pins []proc.Pin) string {
	var out []string
	for _, p := range pins {
		switch {
		case p.Err == nil:
		case len(p.Manager.Active) == 0:
			out = append(out, fmt.Sprintf("take %s and its shims off the PATH of berth's host processes", p.Program))
		default:
			out = append(out, fmt.Sprintf("give %s a default toolchain, or set %s and pass --host-env %s", p.Program, p.Manager.Env, p.Manager.Env))
		}
	}
	return strings.Join(out, "; ")
}

// withOption returns opts (a JSON object, or nil) with the dotted key set
// to v, copying every map it changes.
func withOption(opts any, dotted string, v any) any {
	m, _ := opts.(map[string]any)
	m = maps.Clone(m)
	if m == nil {
		m = map[string]any{}
	}
	k, rest, nested := strings.Cut(dotted, ".")
	if !nested {
		m[k] = v
		return m
	}
	m[k] = withOption(m[k], rest, v)
	return m
}

// hostModule finds sv.HostModule beside binary's installation: binary is
// followed to its real file, and the module is looked for in the
// node_modules directories of that file's package (its own, then the one
// it is installed in), as Node would resolve it from there, but stopping
// at the installation. The module must resolve outside the workspace.
// why says what was found instead when it returns "".
func (s *Supervisor) hostModule(sv Server, binary string) (mod, why string) {
	real, inside := proc.HostProgram(s.root, binary)
	if real == "" || inside {
		return "", fmt.Sprintf("%s does not resolve outside the workspace", binary)
	}
	for d := filepath.Dir(real); d != "/" && d != "."; d = filepath.Dir(d) {
		cands := []string{filepath.Join(d, "node_modules", sv.HostModule)}
		if filepath.Base(d) == "node_modules" {
			cands = []string{filepath.Join(d, sv.HostModule)}
		}
		for _, c := range cands {
			r, inside := proc.HostProgram(s.root, c)
			if r == "" || inside {
				continue
			}
			if fi, err := os.Stat(r); err == nil && fi.Mode().IsRegular() {
				return r, ""
			}
		}
		if filepath.Base(d) == "node_modules" {
			break // the installation ends here
		}
	}
	return "", fmt.Sprintf("no %s beside %s (its installation)", sv.HostModule, real)
}

// shipsCode returns the first of c's HostRefuse paths that exists under
// its root or any directory above it up to "/", "" when none does. Node
// resolves a module from every node_modules above the root, inside the
// workspace and above it.
func (s *Supervisor) shipsCode(c *Choice) string {
	for d := path.Join(s.root, c.Root); ; d = path.Dir(d) {
		for _, r := range c.Server.HostRefuse {
			p := path.Join(d, r)
			if _, err := os.Lstat(p); err == nil {
				if name, ok := s.rel(p); ok {
					return name
				}
				return p
			}
		}
		if d == "/" || d == "." {
			return ""
		}
	}
}
