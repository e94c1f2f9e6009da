// Package eval is the eval tool (docs/tools.md §8): persistent Python and
// JavaScript kernels inside the run's sandbox, spoken to over Jupyter's
// ZeroMQ protocol (package kernel) through the sandbox's Dial.
//
// A [Supervisor] keeps one kernel per language for a run, started on the
// first cell. Python runs in ipykernel when the sandbox's python (a project
// .venv/bin/python or venv/bin/python first, then python3 on PATH) can
// import it; otherwise, and for JavaScript (node), in berth's own kernels
// (package kernel/bundled), which need nothing but the interpreter
// (EVAL-6). The kernel's sockets are unix sockets in a private directory
// of the sandbox's /tmp — no port is bound at all — and its key is fresh
// per kernel.
//
// Every cell is rewritten first (EVAL-3: %pip, %cd, !cmd, %%bash,
// %%timeit become calls of helpers a prelude defines), runs under an
// inactivity budget that any output resets and a bridge call pauses
// (EVAL-5), and may call the run's tools with tool(name, args) over the
// kernel's own stdin channel (EVAL-4).
package eval

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"berth.dev/berth/kernel"
	"berth.dev/berth/kernel/bundled"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
)

// Defaults and caps.
const (
	// DefaultBudget is the inactivity budget of a cell (EVAL-5).
	DefaultBudget = 5 * time.Minute
	// DefaultInterruptWait is how long an interrupted cell may take to end
	// before the kernel is restarted.
	DefaultInterruptWait = 5 * time.Second
	// DefaultStartTimeout bounds a kernel's start (process, sockets,
	// kernel_info, prelude).
	DefaultStartTimeout = 90 * time.Second
	// MaxOutputChars bounds the text of one result; the head and the tail
	// are kept.
	MaxOutputChars = 20_000
	// MaxImages bounds the images of one result.
	MaxImages = 8
	// MaxImageBytes bounds one image.
	MaxImageBytes = 4 << 20
	// ShutdownWait is how long stopping a live kernel waits for its
	// shutdown_reply, and then for its process to end, before TERM and
	// KILL. Both waits end early when the process ends.
	ShutdownWait = 2 * time.Second
	// stopTimeout bounds stopping a kernel (shutdown_request, TERM, KILL,
	// and hearing of its exit). It is only reached by a kernel that does
	// not die; through containerd on a loaded machine (two busy loops on
	// two cores) hearing of a killed kernel's exit took more than 10 s.
	stopTimeout = 30 * time.Second
	// probeTimeout bounds the discovery probe.
	probeTimeout = 30 * time.Second
)

// Languages.
const (
	Python     = "python"
	JavaScript = "javascript"
)

//go:embed prelude/prelude.py
var preludePython string

//go:embed prelude/prelude.js
var preludeJS string

// Options configure a [Supervisor].
type Options struct {
	// Budget is a cell's inactivity budget (default DefaultBudget).
	Budget time.Duration
	// WallLimit, when set, bounds a cell's whole run regardless of output.
	WallLimit time.Duration
	// InterruptWait overrides DefaultInterruptWait.
	InterruptWait time.Duration
	// StartTimeout overrides DefaultStartTimeout.
	StartTimeout time.Duration
	// Resident, when set, returns the run's resident supervisor
	// (sandbox.Residence), starting it on first use: kernels then run
	// under it and outlive berth, so that a restarted berth adopts them
	// (Adopt) with their state. It returns nil and no error when the run
	// keeps nothing across restarts; kernels then run as any process.
	Resident func(ctx context.Context) (sandbox.Resident, error)
	// Host says the sandbox is the host (also implied by a sandbox whose
	// Ref is "host"): no interpreter from the workspace runs there, not
	// even to probe it. A project .venv/bin/python or venv/bin/python is
	// used only when it resolves (symbolic links followed, nothing
	// executed) to an interpreter outside the workspace, and the result
	// then names it.
	Host bool
}

// Supervisor owns the kernels of one run.
type Supervisor struct {
	sb     sandbox.Sandbox
	ws     sandbox.FS
	root   string
	runCtx context.Context
	opts   Options
	reg    *tools.Registry

	bg     context.Context // the run's, cancelled by Close and Detach: bounds prewarms
	stopBg context.CancelFunc
	wg     sync.WaitGroup // prewarms under way

	mu       sync.Mutex // guards the fields below; never held across I/O
	kernels  map[string]*kern
	starting map[string]chan struct{} // prewarms under way, by language; closed when done
	notes    map[string][]string      // per language, shown with the next result
	closed   bool
	gen      uint64 // bumped when the kernels change (Generation)
	seq      int    // numbers the names of resident kernels
}

// New returns a supervisor whose tool() bridge calls into reg.
func New(sb sandbox.Sandbox, ws sandbox.FS, runCtx context.Context, reg *tools.Registry, opts Options) *Supervisor {
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	if opts.InterruptWait <= 0 {
		opts.InterruptWait = DefaultInterruptWait
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if sb.Ref() == "host" {
		opts.Host = true
	}
	bg, stopBg := context.WithCancel(runCtx)
	return &Supervisor{sb: sb, ws: ws, root: path.Clean(ws.Root()), runCtx: runCtx, opts: opts, reg: reg, bg: bg, stopBg: stopBg,
		kernels: map[string]*kern{}, starting: map[string]chan struct{}{}, notes: map[string][]string{}}
}

// Register adds the eval tool to r and returns its supervisor; the caller
// closes it when the run closes.
func Register(r *tools.Registry, sb sandbox.Sandbox, ws sandbox.FS, runCtx context.Context, opts Options) *Supervisor {
	s := New(sb, ws, runCtx, r, opts)
	tools.Register(r, tools.Tool{Name: "eval", Level: tools.LevelExec, Serial: true, Description: description}, s.call)
	return s
}

// Close shuts every kernel down and refuses later calls.
func (s *Supervisor) Close() error {
	ks := s.takeKernels()
	var errs []error
	for _, k := range ks {
		errs = append(errs, k.stop(context.Background()))
	}
	return errors.Join(errs...)
}

// takeKernels refuses later calls, stops the prewarms under way and
// returns the kernels, which the caller ends or lets go of.
func (s *Supervisor) takeKernels() []*kern {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopBg()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := make([]*kern, 0, len(s.kernels))
	for _, k := range s.kernels {
		ks = append(ks, k)
	}
	s.kernels = map[string]*kern{}
	return ks
}

// kern is one running kernel.
type kern struct {
	lang      string
	kind      string // "ipykernel", "berth's Python kernel", "berth's JavaScript kernel"
	binary    string
	dir       string // private directory in the sandbox: connection file, sockets
	client    *kernel.Client
	proc      sandbox.Process
	cancel    context.CancelFunc
	exited    chan struct{}
	stderr    *proc.Tail
	started   time.Time
	interrupt string   // "signal" or "message"
	notes     []string // what choosing the interpreter skipped or resolved, shown with the first result
	// settling is open while a cell an earlier call abandoned is being
	// interrupted (Supervisor.abandon); guarded by the supervisor's mu.
	settling chan struct{}
	cells    int
	sb       sandbox.Sandbox
	// conn is the kernel's connection file; resident names the process
	// under the run's resident supervisor ("" when it runs as a plain
	// process and ends with berth).
	conn     kernel.ConnectionInfo
	resident string
}

// dead says why the kernel cannot be used, or "" when it can.
func (k *kern) dead() string {
	select {
	case <-k.exited:
		msg := "its process exited"
		if st, err := k.proc.Wait(); err == nil {
			msg += " (" + st.String() + ")"
		} else if k.resident != "" {
			msg = "berth's stream to its process broke (" + proc.Clip(err.Error(), 300) + ")"
		}
		if t := strings.TrimSpace(k.stderr.String()); t != "" {
			msg += "; its last stderr: " + proc.Clip(t, 600)
		}
		return msg
	default:
	}
	select {
	case <-k.client.Dead():
		return "it stopped answering its heartbeat (" + k.client.Err().Error() + ")"
	default:
		return ""
	}
}

// stop asks the kernel to shut down, then kills its process group, and
// removes its directory.
func (k *kern) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if k.dead() == "" {
		// The run's end may have sent SIGTERM already: a kernel whose
		// process ends sends no shutdown_reply, so stop waiting for one.
		sctx, scancel := context.WithTimeout(ctx, ShutdownWait)
		go func() {
			select {
			case <-k.exited:
				scancel()
			case <-sctx.Done():
			}
		}()
		k.client.Shutdown(sctx, false)
		scancel()
		t := time.NewTimer(ShutdownWait)
		select {
		case <-k.exited:
		case <-t.C:
		}
		t.Stop()
	}
	k.client.Close()
	k.cancel() // TERM, then KILL, to the kernel's process group
	var err error
	select {
	case <-k.exited:
	case <-ctx.Done():
		err = fmt.Errorf("eval: the %s kernel (pid %d) did not exit after it was killed", k.lang, k.proc.Pid())
	}
	// The private directory goes with the kernel.
	if p, perr := k.sb.Start(ctx, &sandbox.Cmd{Args: []string{"rm", "-rf", "--", k.dir}}); perr == nil {
		p.Wait()
	}
	return err
}

// probe is what discovery found in the sandbox.
type probe struct {
	python    string
	ipykernel bool
	node      string
	dir       string
	notes     []string // on the host: interpreters skipped, and what a venv python resolves to
	// startup is set on the host when python is a workspace venv's whose
	// site-packages run code at start (proc.VenvStartup): why starting it
	// is an exec step of its own.
	startup string
}

// probeScript finds the python (project venv first) and whether it imports
// ipykernel, finds node, and makes the kernel's private directory.
const probeScript = `ws=$1
for py in "$ws/.venv/bin/python" "$ws/venv/bin/python" "$(command -v python3 2>/dev/null)"; do
  [ -n "$py" ] && [ -f "$py" ] && [ -x "$py" ] || continue
  if "$py" -c 'import ipykernel' >/dev/null 2>&1; then echo "py ipykernel $py"; else echo "py plain $py"; fi
  break
done
n=$(command -v node 2>/dev/null || command -v nodejs 2>/dev/null)
[ -n "$n" ] && echo "node $n"
umask 077
d=$(mktemp -d /tmp/berth-kernel.XXXXXX) && echo "dir $d"
exit 0
`

// hostProbeScript is probeScript for the host: it runs no interpreter. It
// drops the workspace's directories from PATH, then reports every python3
// and node in PATH order ("cand python3 P", "cand node N") and makes the
// kernel's private directory; [Supervisor.hostProbe] resolves what it
// found.
const hostProbeScript = `ws=$1
p=; oldifs=$IFS; IFS=:
for d in $PATH; do
  case "$d" in "$ws"|"$ws"/*|"") continue ;; /*) ;; *) continue ;; esac
  p=${p:+$p:}$d
  for n in python3 node nodejs; do
    [ -f "$d/$n" ] && [ -x "$d/$n" ] && echo "cand $n $d/$n"
  done
done
IFS=$oldifs; PATH=$p
umask 077
d=$(mktemp -d /tmp/berth-kernel.XXXXXX) && echo "dir $d"
exit 0
`

// ipykernelScript reports whether the python $1 imports ipykernel. It runs
// in / so that python's -c path entry (the current directory) is not the
// workspace.
const ipykernelScript = `cd / && if "$1" -c 'import ipykernel' >/dev/null 2>&1; then echo "py ipykernel $1"; else echo "py plain $1"; fi`

// ipykernelLauncher starts ipykernel as python -m ipykernel_launcher would,
// from a file in the kernel's private directory: python -m would put the
// current directory (the workspace) first on the path, and a workspace
// ipykernel_launcher.py or ipykernel/ would be the kernel. Its name keeps
// "ipykernel_launcher" in the kernel's command line, where process tables
// look for it.
const ipykernelLauncher = `import runpy
runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
`

// hostProbe is discovery on the host: nothing from the workspace runs.
// The project's venv pythons are resolved here without running them and
// kept only when they resolve outside the workspace; python3 and node from
// PATH likewise. A venv python is never asked about ipykernel (asking
// would run its startup code, and its ipykernel would be the workspace's
// own): it runs berth's Python kernel, and what its site-packages run at
// start is pr.startup, an exec step [Supervisor.start] asks for. Only a
// PATH python is asked about ipykernel.
func (s *Supervisor) hostProbe(ctx context.Context) (probe, error) {
	var out, errb bytes.Buffer
	p, err := s.sb.Start(ctx, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", hostProbeScript, "berth-eval-probe", s.root}, Stdout: &out, Stderr: &errb})
	if err != nil {
		return probe{}, fmt.Errorf("eval: cannot look for interpreters in the sandbox: %w", err)
	}
	if st, err := p.Wait(); err != nil || !st.Success() {
		return probe{}, fmt.Errorf("eval: looking for interpreters in the sandbox failed (%v %v): %s", st, err, proc.Clip(errb.String(), 400))
	}
	var pr probe
	for _, rel := range []string{".venv/bin/python", "venv/bin/python"} {
		v := path.Join(s.root, rel)
		if _, err := os.Lstat(v); err != nil {
			continue
		}
		switch real, inside := proc.HostProgram(s.root, v); {
		case real == "":
			pr.notes = append(pr.notes, "skipped "+rel+": it does not resolve to a program")
		case inside:
			pr.notes = append(pr.notes, fmt.Sprintf("skipped %s: it is the workspace's own program (it resolves to %s), and on the host berth runs only interpreters from outside the workspace; make the venv with a python from outside it (python3 -m venv links bin/python to it) or use a container", rel, real))
		case pr.python == "":
			pr.python = v
			pr.notes = append(pr.notes, fmt.Sprintf("python: %s → %s", rel, real))
			if runs := proc.VenvStartup(s.root, v); len(runs) > 0 {
				pr.startup = proc.VenvStartupWhy(s.root, v, runs)
			}
		}
	}
	venvPy := pr.python != ""
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "cand":
			name, prog, _ := strings.Cut(rest, " ")
			isPy := name == "python3"
			if isPy && pr.python != "" || !isPy && pr.node != "" {
				continue
			}
			if real, inside := proc.HostProgram(s.root, prog); real == "" || inside {
				pr.notes = append(pr.notes, fmt.Sprintf("skipped %s on PATH: it resolves to %s, inside the workspace, and on the host berth runs only interpreters from outside it", prog, real))
				continue
			}
			if isPy {
				pr.python = prog
			} else {
				pr.node = prog
			}
		case "dir":
			pr.dir = rest
		}
	}
	if pr.dir == "" {
		return probe{}, fmt.Errorf("eval: cannot make a private directory under /tmp in the sandbox: %s", proc.Clip(errb.String(), 400))
	}
	if pr.python == "" {
		return pr, nil
	}
	if venvPy {
		if m, _ := filepath.Glob(filepath.Join(path.Dir(path.Dir(pr.python)), "lib*", "python*", "site-packages", "ipykernel")); len(m) > 0 {
			pr.notes = append(pr.notes, "the venv's ipykernel is not used on the host (it is the workspace's code): berth's Python kernel runs with the venv's packages")
		}
		return pr, nil
	}
	out.Reset()
	errb.Reset()
	p, err = s.sb.Start(ctx, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", ipykernelScript, "berth-eval-probe", pr.python}, Stdout: &out, Stderr: &errb})
	if err != nil {
		return probe{}, fmt.Errorf("eval: cannot ask %s about ipykernel: %w", pr.python, err)
	}
	if st, err := p.Wait(); err != nil || !st.Success() {
		return probe{}, fmt.Errorf("eval: asking %s about ipykernel failed (%v %v): %s", pr.python, st, err, proc.Clip(errb.String(), 400))
	}
	pr.ipykernel = strings.HasPrefix(out.String(), "py ipykernel ")
	return pr, nil
}

func (s *Supervisor) probe(ctx context.Context) (probe, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if s.opts.Host {
		return s.hostProbe(ctx)
	}
	var out, errb bytes.Buffer
	p, err := s.sb.Start(ctx, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", probeScript, "berth-eval-probe", s.root}, Stdout: &out, Stderr: &errb})
	if err != nil {
		return probe{}, fmt.Errorf("eval: cannot look for interpreters in the sandbox: %w", err)
	}
	if st, err := p.Wait(); err != nil || !st.Success() {
		return probe{}, fmt.Errorf("eval: looking for interpreters in the sandbox failed (%v %v): %s", st, err, proc.Clip(errb.String(), 400))
	}
	var pr probe
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		switch {
		case len(f) == 3 && f[0] == "py":
			pr.python, pr.ipykernel = f[2], f[1] == "ipykernel"
		case len(f) >= 2 && f[0] == "node":
			pr.node = strings.Join(f[1:], " ")
		case len(f) >= 2 && f[0] == "dir":
			pr.dir = strings.Join(f[1:], " ")
		}
	}
	if pr.dir == "" {
		return probe{}, fmt.Errorf("eval: cannot make a private directory under /tmp in the sandbox: %s", proc.Clip(errb.String(), 400))
	}
	return pr, nil
}

// kernelFor returns the language's running kernel, starting one when there
// is none or it died (with a note that state was lost).
func (s *Supervisor) kernelFor(ctx context.Context, lang string, reset bool) (*kern, []string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, errors.New("the run is closed; open a new run")
	}
	if starting := s.starting[lang]; starting != nil {
		// Prewarmed as the run opened: wait for that kernel rather than
		// start a second.
		s.mu.Unlock()
		select {
		case <-starting:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("eval: waited for the %s kernel the run prewarms: %w", lang, ctx.Err())
		}
		return s.kernelFor(ctx, lang, reset)
	}
	k := s.kernels[lang]
	if k != nil && k.settling != nil {
		// An earlier call's abandoned cell is still being interrupted:
		// wait for the verdict (the kernel kept, or replaced) rather than
		// run this cell into it and be blamed for what it does.
		settling := k.settling
		s.mu.Unlock()
		select {
		case <-settling:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("eval: waited for the %s kernel to end a cell an earlier call left running (abandoned, or cut short while the sandbox was unavailable): %w", lang, ctx.Err())
		}
		return s.kernelFor(ctx, lang, reset)
	}
	notes := s.notes[lang]
	delete(s.notes, lang)
	s.mu.Unlock()
	if k != nil {
		why := k.dead()
		switch {
		case reset:
			s.end(ctx, k)
			notes = append(notes, fmt.Sprintf("reset: the %s kernel was restarted clean; all variables and imports are gone", lang))
			k = nil
		case why != "":
			var note string
			var err error
			if k, note, err = s.revive(ctx, k, why); err != nil {
				return nil, notes, err
			}
			notes = append(notes, note)
		}
	}
	if k == nil {
		var err error
		k, err = s.start(ctx, lang)
		if err != nil {
			return nil, notes, err
		}
		notes = append(notes, k.notes...)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			k.stop(ctx)
			return nil, nil, errors.New("the run is closed; open a new run")
		}
		s.kernels[lang] = k
		s.gen++
		s.mu.Unlock()
	}
	return k, notes, nil
}

// revive handles a kernel found unusable for why: a broken stream is not
// a dead kernel, so one under the run's resident supervisor is first
// reattached there, with its state. Only when that fails is it ended —
// through a fresh attach when its own stream broke, so that its process
// group goes before another kernel starts — and nil returned: the caller
// starts a new one. The note says which happened.
//
// A sandbox that is unavailable now (paused, its engine out of reach)
// says nothing of the kernel: it is kept, untouched, and the error (which
// wraps sandbox.ErrUnavailable) asks for the call again.
func (s *Supervisor) revive(ctx context.Context, k *kern, why string) (*kern, string, error) {
	nk, err := s.reattach(ctx, k)
	if err == nil {
		return nk, fmt.Sprintf("berth lost its connection to the %s kernel (%s) and re-attached to it (pid %d): its state is kept", k.lang, why, nk.proc.Pid()), nil
	}
	if cerr := sandbox.CheckWithin(ctx, s.sb); errors.Is(cerr, sandbox.ErrUnavailable) {
		return nil, "", fmt.Errorf("eval: berth lost its connection to the %s kernel (%s) and cannot re-attach while the sandbox is unavailable: %w; the kernel is kept, call again once the sandbox answers", k.lang, why, cerr)
	}
	s.end(ctx, k)
	return nil, fmt.Sprintf("the %s kernel had died (%s; re-attaching failed: %v) and was restarted: all state (variables, imports, loaded data) was lost; run the setup cells again", k.lang, why, err), nil
}

// end stops k and forgets it. A kernel under the run's resident whose own
// stream broke is ended through a fresh attach, since stopping it through
// its handle would reach nothing.
func (s *Supervisor) end(ctx context.Context, k *kern) {
	s.mu.Lock()
	if s.kernels[k.lang] == k {
		delete(s.kernels, k.lang)
		s.gen++
	}
	s.mu.Unlock()
	lost := k.streamLost()
	k.stop(ctx)
	if !lost {
		return
	}
	if res, err := s.resident(ctx); err == nil && res != nil {
		endResident(ctx, res, k.resident)
	}
}

// start starts a kernel for lang in the sandbox and connects to it.
func (s *Supervisor) start(ctx context.Context, lang string) (*kern, error) {
	tools.Progress(ctx, "starting the "+lang+" kernel")
	pr, err := s.probe(ctx)
	if err != nil {
		return nil, err
	}
	k := &kern{lang: lang, dir: pr.dir, stderr: proc.NewTail(8192), exited: make(chan struct{}), sb: s.sb, interrupt: "message"}
	if lang == Python {
		k.notes = pr.notes
	}
	cleanup := func() {
		if p, err := s.sb.Start(context.WithoutCancel(ctx), &sandbox.Cmd{Args: []string{"rm", "-rf", "--", pr.dir}}); err == nil {
			p.Wait()
		}
	}
	dfs, err := s.sb.FS(ctx, pr.dir)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("eval: cannot use the kernel's directory %s: %w", pr.dir, err)
	}
	// Needed only to write the kernel's files: its file server goes at
	// once, not with the run (a restarted kernel would leave one each).
	if c, ok := dfs.(io.Closer); ok {
		defer c.Close()
	}
	conn, err := kernel.NewConnectionInfo(kernel.ConnectionConfig{Transport: "ipc", IP: path.Join(pr.dir, "k"), KernelName: lang})
	if err != nil {
		cleanup()
		return nil, err
	}
	file, err := conn.MarshalFile()
	if err != nil {
		cleanup()
		return nil, err
	}
	if err := dfs.WriteFile(ctx, "conn.json", file, 0o600); err != nil {
		cleanup()
		return nil, fmt.Errorf("eval: cannot write the kernel's connection file: %w", err)
	}
	connPath := path.Join(pr.dir, "conn.json")
	var args []string
	switch {
	case lang == Python && pr.python == "":
		cleanup()
		msg := "eval: no Python in the sandbox: no .venv/bin/python or venv/bin/python in the workspace and no python3 on PATH. Install python3 in the sandbox, or use language javascript"
		if len(pr.notes) > 0 {
			msg = "eval: no Python in the sandbox that berth may run: " + strings.Join(pr.notes, "; ") + ". Install python3 outside the workspace, or use language javascript"
		}
		return nil, errors.New(msg)
	case lang == Python && pr.ipykernel:
		k.kind, k.binary, k.interrupt = "ipykernel", pr.python, "signal"
		if err := dfs.WriteFile(ctx, "berth_ipykernel_launcher.py", []byte(ipykernelLauncher), 0o600); err != nil {
			cleanup()
			return nil, fmt.Errorf("eval: cannot write ipykernel's launcher into the sandbox: %w", err)
		}
		args = []string{pr.python, path.Join(pr.dir, "berth_ipykernel_launcher.py"), "-f", connPath}
	case lang == Python:
		k.kind, k.binary, k.interrupt = "berth's Python kernel", pr.python, "signal"
		src, _ := bundled.Source(bundled.Python)
		if err := dfs.WriteFile(ctx, "berth_kernel.py", src, 0o600); err != nil {
			cleanup()
			return nil, fmt.Errorf("eval: cannot write berth's Python kernel into the sandbox: %w", err)
		}
		args = []string{pr.python, path.Join(pr.dir, "berth_kernel.py"), "-f", connPath}
	case lang == JavaScript && pr.node == "":
		cleanup()
		return nil, errors.New("eval: no node in the sandbox's PATH, so JavaScript cells cannot run. Install Node.js in the sandbox, or use language python")
	case lang == JavaScript:
		k.kind, k.binary = "berth's JavaScript kernel", pr.node
		src, _ := bundled.Source(bundled.JavaScript)
		if err := dfs.WriteFile(ctx, "berth_kernel.js", src, 0o600); err != nil {
			cleanup()
			return nil, fmt.Errorf("eval: cannot write berth's JavaScript kernel into the sandbox: %w", err)
		}
		args = []string{pr.node, path.Join(pr.dir, "berth_kernel.js"), "-f", connPath}
	default:
		cleanup()
		return nil, fmt.Errorf("eval: unknown language %q: use python or javascript", lang)
	}
	if lang == Python && pr.startup != "" {
		// The venv's startup code is the project's: an exec step of its
		// own, on its own card, refused where exec is not allowed.
		step := tools.Step{Tool: "eval", Level: tools.LevelExec, Why: pr.startup,
			Command: fmt.Sprintf("cd %s && %s (%s)", s.root, pr.python, k.kind)}
		if err := tools.ApproveStep(ctx, step); err != nil {
			cleanup()
			return nil, fmt.Errorf("eval: the python kernel was not started: %w; remove that startup code from the venv, or use a container", err)
		}
	}
	k.conn = conn
	pctx, cancel := context.WithCancel(s.runCtx)
	// The private directory holds the connection file and its key: it
	// goes with the kernel also when berth is not there to remove it.
	kcmd := &sandbox.Cmd{Args: args, Dir: s.root, Stdout: k.stderr, Stderr: k.stderr, WaitDelay: 2 * time.Second, Remove: []string{pr.dir}}
	var kp sandbox.Process
	res, err := s.resident(ctx)
	switch {
	case err != nil:
		// Said, not hidden: this kernel will not survive a restart.
		k.notes = append(k.notes, fmt.Sprintf("this kernel will not survive a restart of berth: %v", err))
		fallthrough
	case res == nil:
		kp, err = s.sb.Start(pctx, kcmd)
	default:
		// One kernel per run: whatever of lang's earlier kernels still
		// runs under the resident (its stream broke, its stop reached
		// nothing) ends first.
		if err := s.sweep(ctx, res, lang); err != nil {
			cancel()
			cleanup()
			return nil, fmt.Errorf("eval: cannot end the earlier %s kernel before starting another (%w); call again", lang, err)
		}
		s.mu.Lock()
		s.seq++
		k.resident = fmt.Sprintf("eval-%s-%d", lang, s.seq)
		s.mu.Unlock()
		kp, err = res.Start(pctx, k.resident, kcmd)
	}
	if err != nil {
		cancel()
		cleanup()
		return nil, fmt.Errorf("eval: starting %s failed: %w", k.kind, err)
	}
	k.proc, k.cancel = kp, cancel
	go func() {
		kp.Wait()
		close(k.exited)
	}()
	sctx, scancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer scancel()
	// Fail fast when the process dies before it answers.
	cctx, ccancel := context.WithCancel(sctx)
	go func() {
		select {
		case <-k.exited:
			ccancel()
		case <-cctx.Done():
		}
	}()
	client, err := s.connect(cctx, conn)
	ccancel()
	if err != nil {
		cancel()
		<-k.exited
		cleanup()
		msg := fmt.Sprintf("eval: %s (%s) did not come up: %v", k.kind, k.binary, err)
		if t := strings.TrimSpace(k.stderr.String()); t != "" {
			msg += "; its output: " + proc.Clip(t, 800)
		}
		return nil, errors.New(msg)
	}
	k.client = client
	prelude := preludePython
	if lang == JavaScript {
		prelude = preludeJS
	}
	if k.kind == "ipykernel" {
		prelude = bundled.IPythonToolShim() + "\n" + prelude // tool(), as berth's own kernels have it
	}
	rep, err := client.Execute(sctx, prelude, kernel.ExecuteOptions{Silent: true, NoHistory: true})
	if err == nil && rep.Status != "ok" {
		err = fmt.Errorf("%s", renderError(rep.Error))
	}
	if err != nil {
		k.stop(ctx)
		return nil, fmt.Errorf("eval: setting up %s failed: %v", k.kind, err)
	}
	k.started = time.Now()
	return k, nil
}

// connect connects a client to the kernel of conn through the sandbox.
func (s *Supervisor) connect(ctx context.Context, conn kernel.ConnectionInfo) (*kernel.Client, error) {
	return s.connectKernel(ctx, conn, false)
}

// connectKernel is connect; busy waits for a kernel that already runs as
// long as its heartbeat answers (kernel.Config.Busy).
func (s *Supervisor) connectKernel(ctx context.Context, conn kernel.ConnectionInfo, busy bool) (*kernel.Client, error) {
	return kernel.Connect(ctx, kernel.Config{
		Conn: conn,
		Busy: busy,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			return s.sb.Dial(ctx, network, address)
		},
		// A paused sandbox freezes the kernel too: its silence is not
		// death, and its state is kept for when the sandbox is back.
		// CheckWithin: an engine that does not answer in time is an
		// outage too, not the kernel's death.
		Suspended: func(ctx context.Context) bool {
			return errors.Is(sandbox.CheckWithin(ctx, s.sb), sandbox.ErrUnavailable)
		},
	})
}

// resident returns the run's resident supervisor, or nil when kernels run
// as plain processes.
func (s *Supervisor) resident(ctx context.Context) (sandbox.Resident, error) {
	if s.opts.Resident == nil {
		return nil, nil
	}
	return s.opts.Resident(ctx)
}

// interruptKernel interrupts the running cell: SIGINT to the kernel's
// process group for kernels that take a signal, interrupt_request on the
// control channel otherwise.
func (k *kern) interruptKernel(ctx context.Context) error {
	if k.interrupt == "signal" {
		return k.proc.Signal(ctx, syscall.SIGINT)
	}
	return k.client.Interrupt(ctx)
}

// Resources reports the run's kernels for the operator console: language,
// kind, pid and age.
func (s *Supervisor) Resources() []tools.Resource {
	s.mu.Lock()
	ks := make([]*kern, 0, len(s.kernels))
	for _, k := range s.kernels {
		ks = append(ks, k)
	}
	var starting []string
	for lang := range s.starting {
		starting = append(starting, lang)
	}
	s.mu.Unlock()
	slices.SortFunc(ks, func(a, b *kern) int { return strings.Compare(a.lang, b.lang) })
	slices.Sort(starting)
	out := make([]tools.Resource, 0, len(ks)+len(starting))
	for _, lang := range starting {
		out = append(out, tools.Resource{Kind: "kernel", Name: lang, State: "starting", Detail: "prewarmed as the run opened"})
	}
	for _, k := range ks {
		state := "running"
		if why := k.dead(); why != "" {
			state = "dead: " + why
		}
		out = append(out, tools.Resource{Kind: "kernel", Name: k.lang, State: state,
			Detail: fmt.Sprintf("%s, pid %d, started %s", k.kind, k.proc.Pid(), k.started.Format(time.TimeOnly))})
	}
	return out
}
