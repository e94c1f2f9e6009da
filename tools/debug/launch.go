package debug

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/dap"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
	"berth.dev/berth/tools/workspace"
)

// adapters reports which adapters can debug in.Program, or the workspace.
func (s *Supervisor) adapters(ctx context.Context, in Input, _ *session) (reply, error) {
	dir := "."
	if in.Program != "" {
		var err error
		if _, dir, _, err = s.program(ctx, in.Program); err != nil {
			return reply{}, err
		}
	}
	avs, err := s.discover(ctx, dir)
	if err != nil {
		return reply{}, err
	}
	var b strings.Builder
	for _, av := range avs {
		if av.Usable {
			bin := av.Binary
			if av.Interpreter != "" {
				bin = av.Interpreter
			}
			if av.NoMarker {
				fmt.Fprintf(&b, "%s: usable (%s; project root the workspace root: no marker found, %s works without one)\n", av.Adapter, bin, av.Adapter)
			} else {
				fmt.Fprintf(&b, "%s: usable (%s; project root %s, marker %s)\n", av.Adapter, bin, av.Root, av.Marker)
			}
			for _, sk := range av.Skipped {
				fmt.Fprintf(&b, "%s: skipped %s\n", av.Adapter, sk)
			}
		} else {
			fmt.Fprintf(&b, "%s: not usable: %s\n", av.Adapter, av.Reason)
		}
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"adapters": avs}}, nil
}

// program resolves and stats the program p names: dir is where its
// adapter's project root is looked for, the program itself when it is a
// directory (a Go package) and its parent otherwise.
func (s *Supervisor) program(ctx context.Context, p string) (name, dir string, isDir bool, err error) {
	if name, err = s.resolve(p, "program"); err != nil {
		return "", "", false, err
	}
	fi, err := s.ws.Stat(ctx, name)
	if err != nil {
		return "", "", false, workspace.Explain(s.root, name, err)
	}
	if fi.IsDir() {
		return name, name, true, nil
	}
	return name, path.Dir(name), false, nil
}

// adapterFor picks the adapter for a program by its kind.
func adapterFor(name string, isDir bool) (string, error) {
	ext := path.Ext(name)
	for _, a := range adapterTable {
		if slices.Contains(a.exts, ext) {
			return a.id, nil
		}
	}
	if isDir {
		return AdapterDelve, nil
	}
	if ext == "" || ext == ".out" || ext == ".bin" || ext == ".exe" {
		return AdapterLLDB, nil
	}
	return "", tools.Fail("cannot tell which debugger runs %s: set adapter to one of %s", name, adapterIDs())
}

// refuse says why a new session cannot start while cur lives (DBG-3); it
// ends cur when its program is over.
func (s *Supervisor) refuse(ctx context.Context, cur *session) (string, error) {
	if cur == nil {
		return "", nil
	}
	st := cur.ds.State()
	if st.Ended() {
		how := "ended"
		if e := s.finish(cur); e != nil {
			how = e.how()
		}
		return fmt.Sprintf("closed the previous session, whose program %s had %s", cur.program, how), nil
	}
	status, _ := s.status(ctx, Input{}, cur)
	return "", tools.Fail("a debug session is already running, and only one is allowed: terminate it first (op terminate), or keep using it.\n%s", status.text)
}

// pyModule is a Python module name as python -m takes it.
var pyModule = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// target is what a launch runs: a program in the workspace or a Python
// module, under which adapter, where its project root is looked for,
// and the working directory it gets ("" for the project root).
type target struct {
	program string // workspace-relative; "" for a module
	module  string
	isDir   bool
	adapter string
	dir     string // workspace-relative directory the root search starts from
	cwd     string // absolute, or ""
	// test says delve debugs the tests of the package program (its test
	// mode); testRun is the -test.run it was given or chose, and testOf
	// the _test.go file whose tests testRun names, when it was chosen
	// from one. args are the test binary's arguments.
	test    bool
	testRun string
	testOf  string
	args    []string
}

// label is how messages name the target.
func (tg target) label() string {
	if tg.module != "" {
		return "module " + tg.module
	}
	if tg.test {
		return "the tests of " + tg.program
	}
	return tg.program
}

// target resolves in's program or module, cwd and adapter.
func (s *Supervisor) target(ctx context.Context, in Input) (target, error) {
	var tg target
	if in.Adapter != "" {
		if _, ok := specFor(in.Adapter); !ok {
			return tg, tools.Fail("unknown adapter %q: use one of %s", in.Adapter, adapterIDs())
		}
	}
	if in.Cwd != "" {
		name, err := s.resolve(in.Cwd, "cwd")
		if err != nil {
			return tg, err
		}
		fi, err := s.ws.Stat(ctx, name)
		if err != nil {
			return tg, workspace.Explain(s.root, name, err)
		}
		if !fi.IsDir() {
			return tg, tools.Fail("cwd: %s is not a directory", name)
		}
		tg.cwd, tg.dir = s.abs(name), name
	}
	switch {
	case in.Module != "" && in.Program != "":
		return tg, tools.Fail("give program or module, not both: module runs as python -m MODULE, program is a path in the workspace")
	case in.Module != "":
		if in.Adapter != "" && in.Adapter != AdapterDebugpy {
			return tg, tools.Fail("module is python -m's, which only debugpy runs; %s launches a program: give its path (for delve, the package directory) as program", in.Adapter)
		}
		if !pyModule.MatchString(in.Module) {
			return tg, tools.Fail("module %q is not a Python module name (such as pkg.tool): for a file, give its path as program", in.Module)
		}
		tg.module, tg.adapter = in.Module, AdapterDebugpy
		if tg.dir == "" {
			tg.dir = "."
		}
		return tg, nil
	case in.Program == "":
		return tg, tools.Fail("program is empty: give a path relative to the workspace %s, or for debugpy a module to run as python -m", s.root)
	}
	name, dir, isDir, err := s.program(ctx, in.Program)
	if err != nil {
		return tg, err
	}
	tg.program, tg.isDir, tg.adapter = name, isDir, in.Adapter
	if tg.dir == "" {
		tg.dir = dir
	}
	if tg.adapter == "" {
		if tg.adapter, err = adapterFor(name, isDir); err != nil {
			return tg, err
		}
	}
	if isDir && tg.adapter != AdapterDelve {
		return tg, tools.Fail("%s is a directory: %s launches a file; give the program file", name, tg.adapter)
	}
	if tg.adapter == AdapterDelve {
		if err := s.goTarget(ctx, in, &tg); err != nil {
			return tg, err
		}
	} else if in.Test || in.TestRun != "" {
		return tg, tools.Fail("test and test_run debug a Go package's tests, with delve; %s runs a program: run the test runner as the program (for debugpy, module pytest with args [\"-k\", \"NAME\"])", tg.adapter)
	}
	return tg, nil
}

// launch starts in.Program or in.Module under its adapter, unless cur
// lives (DBG-3).
func (s *Supervisor) launch(ctx context.Context, in Input, cur *session) (reply, error) {
	note, err := s.refuse(ctx, cur)
	if err != nil {
		return reply{}, err
	}
	tg, err := s.target(ctx, in)
	if err != nil {
		return reply{}, err
	}
	names, err := s.environment(in.Env)
	if err != nil {
		return reply{}, err
	}
	switch {
	case in.File != "" && len(in.Lines) > 0:
		// The breakpoints come with the launch: one call, as if
		// breakpoints had been called first (they stay for later launches).
		if _, err := s.breakpoints(ctx, Input{File: in.File, Lines: in.Lines}, nil); err != nil {
			return reply{}, err
		}
	case in.File != "" || len(in.Lines) > 0:
		return reply{}, tools.Fail("launch sets breakpoints when given both file and lines (at least one line); to clear a file's breakpoints, call breakpoints")
	}
	av, err := s.available(ctx, tg.adapter, tg.dir)
	if err != nil {
		return reply{}, err
	}
	if av.startup != "" {
		// The venv's startup code is the project's: an exec step of its
		// own, on its own card, refused where exec is not allowed.
		step := tools.Step{Tool: "debug", Level: tools.LevelExec, Why: av.startup,
			Command: fmt.Sprintf("%s (the debuggee's python, under debugpy)", av.Binary)}
		if err := tools.ApproveStep(ctx, step); err != nil {
			return reply{}, tools.Fail("%s was not launched: %w; remove that startup code from the venv, or use a container", tg.label(), err)
		}
	}
	cwd := tg.cwd
	if cwd == "" {
		cwd = av.absRoot
	}
	args := map[string]any{"cwd": cwd}
	if tg.program != "" {
		args["program"] = s.abs(tg.program)
	}
	switch {
	case tg.test:
		args["args"] = tg.args
	case len(in.Args) > 0:
		args["args"] = in.Args
	default:
		args["args"] = []string{}
	}
	if in.StopOnEntry {
		args["stopOnEntry"] = true
	}
	env := maps.Clone(in.Env)
	if env == nil {
		env = map[string]string{}
	}
	// busy is the progress note while the launch request runs; head
	// adds to the launch's first line.
	busy, head := fmt.Sprintf("%s is starting %s", av.Adapter, tg.label()), ""
	switch tg.adapter {
	case AdapterDebugpy:
		if tg.module != "" {
			args["module"] = tg.module
		}
		args["console"] = "internalConsole"
		args["justMyCode"] = true
		args["showReturnValue"] = true
		args["python"] = []string{av.Binary}
		env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
		args["env"] = env
	case AdapterDelve:
		args["mode"] = "debug"
		switch {
		case tg.test:
			args["mode"] = "test" // go test -c, run in the package's directory
			args["output"] = "/tmp/berth-debug-" + randomHex() + "/__debug_bin"
			busy = buildNote(tg)
			if tg.testRun != "" {
				head = "-test.run " + tg.testRun
				if tg.testOf != "" {
					head += " (the tests of " + tg.testOf + ")"
				}
			}
		case !tg.isDir && path.Ext(tg.program) != ".go":
			args["mode"] = "exec"
		default:
			args["output"] = "/tmp/berth-debug-" + randomHex() + "/__debug_bin"
			busy = buildNote(tg)
		}
		args["outputMode"] = "remote"
		if len(env) > 0 {
			args["env"] = env // dlv sets it on itself: the build sees it too
		}
	case AdapterLLDB:
		if len(env) > 0 {
			args["env"] = envList(env, names)
		}
	default:
		if len(env) > 0 {
			args["env"] = env
		}
	}
	return s.startSession(ctx, av, "launch", tg.label(), args, note, 0, busy, head)
}

// attach connects to a debuggee serving DAP on in.Port, unless cur lives.
func (s *Supervisor) attach(ctx context.Context, in Input, cur *session) (reply, error) {
	if in.Port <= 0 || in.Port > 65535 {
		return reply{}, tools.Fail("attach needs port: the TCP port (1-65535) the debuggee listens on at 127.0.0.1 inside the sandbox")
	}
	note, err := s.refuse(ctx, cur)
	if err != nil {
		return reply{}, err
	}
	id := in.Adapter
	if id == "" {
		id = AdapterDebugpy
	}
	if id != AdapterDebugpy && id != AdapterDelve {
		return reply{}, tools.Fail("attach by port works with debugpy (python -m debugpy --listen 127.0.0.1:PORT) and delve (dlv --headless --listen 127.0.0.1:PORT); %s cannot attach by port", id)
	}
	// A debuggee started with debugpy --listen (or a headless dlv) serves
	// DAP itself on that port: connect to it inside the sandbox, with no
	// adapter process of our own.
	av := Availability{Adapter: id, Root: "."}
	args := map[string]any{}
	switch id {
	case AdapterDebugpy:
		args["connect"] = map[string]any{"host": "127.0.0.1", "port": in.Port}
		args["justMyCode"] = true
		args["showReturnValue"] = true
	case AdapterDelve:
		args["mode"] = "remote"
	}
	return s.startSession(ctx, av, "attach", fmt.Sprintf("the debuggee on port %d", in.Port), args, note, in.Port, fmt.Sprintf("%s is attaching to 127.0.0.1:%d", id, in.Port), "")
}

// available discovers id for a program in dir and fails with the reason
// when it is not usable.
func (s *Supervisor) available(ctx context.Context, id, dir string) (Availability, error) {
	avs, err := s.discover(ctx, dir)
	if err != nil {
		return Availability{}, err
	}
	for _, av := range avs {
		if av.Adapter == id {
			if !av.Usable {
				return av, tools.Fail("the %s debug adapter is not usable here: %s", id, av.Reason)
			}
			return av, nil
		}
	}
	return Availability{}, tools.Fail("unknown adapter %q: use one of %s", id, adapterIDs())
}

// serverName is how messages name av's adapter program: debugpy, dlv,
// lldb-dap (or lldb-vscode-14), dart.
func serverName(av Availability) string {
	if av.Adapter == AdapterDebugpy || av.Binary == "" {
		return av.Adapter
	}
	return path.Base(av.Binary)
}

func randomHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startSession starts the adapter, runs launch or attach, installs the
// session and waits for the first stop. attachPort > 0 dials the port
// directly: a debuggee under debugpy --listen or a headless dlv serves DAP.
// busy is the progress note while the launch or attach request runs
// (delve builds then); what, when set, is added to the first line of the
// answer, after the program.
func (s *Supervisor) startSession(ctx context.Context, av Availability, command, program string, args map[string]any, note string, attachPort int, busy, what string) (reply, error) {
	release := func() {}
	if s.opts.Claim != nil {
		r, err := s.opts.Claim()
		if err != nil {
			return reply{}, tools.Fail("cannot %s here: only one debug session per conversation: %v", command, err)
		}
		release = r
	}
	var ap *adapterProc
	var err error
	if attachPort > 0 {
		conn, derr := s.sb.Dial(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", attachPort))
		if derr != nil {
			release()
			return reply{}, tools.Fail("cannot connect to 127.0.0.1:%d inside the sandbox: %v; is the debuggee listening there? start it with python3 -m debugpy --listen 127.0.0.1:%d --wait-for-client PROGRAM (or dlv --headless --listen 127.0.0.1:%d --accept-multiclient)", attachPort, derr, attachPort, attachPort)
		}
		// No process of ours: exited stays nil, the client's end is the end.
		ap = &adapterProc{stream: conn, cancel: func() {}, status: func() (sandbox.ExitStatus, error) { return sandbox.ExitStatus{}, nil }, stderr: proc.NewTail(stderrKeep)}
	} else if ap, err = s.startAdapter(ctx, av, scratchDir(args)); err != nil {
		release()
		return reply{}, err
	}
	client := dap.NewClient(ap.stream, dap.Options{RequestTimeout: s.opts.RequestTimeout})
	ds := dap.NewSession(client, sessionOptions(av.Adapter))
	s.mu.Lock()
	s.nextID++
	ss := &session{id: s.nextID, adapter: av.Adapter, server: serverName(av), host: s.opts.Host, command: command, program: program, root: av.Root,
		started: time.Now(), ds: ds, cancel: ap.cancel, exited: ap.exited, status: ap.status, pid: ap.pid, stderr: ap.stderr, release: release,
		resident: ap.resident, rs: ap.rs, res: ap.res}
	s.last = nil // a new session: the previous ending is old news
	if dir := scratchDir(args); dir != "" {
		ss.scratch, ss.sb = dir, s.sb
		if testScratch != nil {
			testScratch(dir)
		}
	}
	ss.deadline = ss.started.Add(s.opts.TTL)
	go s.watch(ss) // ends when the session stops
	want := make(map[string][]dap.Breakpoint, len(s.bps))
	for f, b := range s.bps {
		want[f] = b
	}
	s.mu.Unlock()
	for f, b := range want {
		ds.SetBreakpoints(ctx, f, b) // recorded; sent during launch
	}
	var lerr error
	stopNotes := reportWhile(ctx, busy)
	if command == "launch" {
		lerr = ds.Launch(ctx, args)
	} else {
		lerr = ds.Attach(ctx, args)
	}
	stopNotes()
	if lerr != nil {
		ss.stop(context.Background())
		if ctx.Err() != nil {
			return reply{}, ctx.Err()
		}
		msg := fmt.Sprintf("%s of %s with %s failed: %v", command, program, av.Adapter, lerr)
		if t := ap.stderr.String(); t != "" {
			msg += "\nadapter stderr: " + proc.Clip(t, 1500)
		}
		if out := outputText(ds, 0, 2000); out != "" {
			msg += "\noutput:\n" + out
		}
		return reply{}, tools.Fail("%s", msg)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.stop(context.Background())
		return reply{}, tools.Fail("the run closed while the debug session started")
	}
	s.cur = ss
	s.mu.Unlock()
	ss.setTimer(s.opts.TTL, func() { s.expire(ss) })

	if what != "" {
		what = ", " + what
	}
	head := fmt.Sprintf("%sed %s with %s (session %d%s; ends by itself after %v).", command, program, av.Adapter, ss.id, what, s.opts.TTL)
	if note != "" {
		head = note + "\n" + head
	}
	if bl := s.listBreakpoints(ss); len(want) > 0 {
		head += "\nbreakpoints:\n" + bl.text
	}
	stopNotes = reportWhile(ctx, fmt.Sprintf("%sed %s with %s; waiting for the first stop (a breakpoint, an exception or the end)", command, program, av.Adapter))
	rep, err := s.waitStop(ctx, ss, 0)
	stopNotes()
	if err != nil {
		return reply{}, err
	}
	rep.text = head + "\n" + rep.text
	return rep, nil
}

// scratchDir is the session's build directory in the sandbox (delve's
// output's), or "".
func scratchDir(args map[string]any) string {
	if out, ok := args["output"].(string); ok {
		return path.Dir(out)
	}
	return ""
}

// testScratch, set by the package's tests, learns each session's scratch
// directory, so that they look at their own sessions' build output and
// programs, not another test process's on the same machine.
var testScratch func(dir string)
