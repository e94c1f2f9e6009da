package debug

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
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
			fmt.Fprintf(&b, "%s: usable (%s; project root %s, marker %s)\n", av.Adapter, bin, av.Root, av.Marker)
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
		s.mu.Lock()
		if s.cur == cur {
			s.cur = nil
		}
		s.mu.Unlock()
		cur.stop(ctx)
		return fmt.Sprintf("closed the previous session, whose program %s had ended", cur.program), nil
	}
	status, _ := s.status(ctx, Input{}, cur)
	return "", tools.Fail("a debug session is already running, and only one is allowed: terminate it first (op terminate), or keep using it.\n%s", status.text)
}

// launch starts in.Program under its adapter, unless cur lives (DBG-3).
func (s *Supervisor) launch(ctx context.Context, in Input, cur *session) (reply, error) {
	note, err := s.refuse(ctx, cur)
	if err != nil {
		return reply{}, err
	}
	name, dir, isDir, err := s.program(ctx, in.Program)
	if err != nil {
		return reply{}, err
	}
	id := in.Adapter
	if id == "" {
		if id, err = adapterFor(name, isDir); err != nil {
			return reply{}, err
		}
	} else if _, ok := specFor(id); !ok {
		return reply{}, tools.Fail("unknown adapter %q: use one of %s", id, adapterIDs())
	}
	if isDir && id != AdapterDelve {
		return reply{}, tools.Fail("%s is a directory: %s launches a file; give the program file", name, id)
	}
	av, err := s.available(ctx, id, dir)
	if err != nil {
		return reply{}, err
	}
	prog := s.abs(name)
	args := map[string]any{"program": prog, "cwd": av.absRoot}
	if len(in.Args) > 0 {
		args["args"] = in.Args
	} else {
		args["args"] = []string{}
	}
	if in.StopOnEntry {
		args["stopOnEntry"] = true
	}
	switch id {
	case AdapterDebugpy:
		args["console"] = "internalConsole"
		args["justMyCode"] = true
		args["python"] = []string{av.Binary}
		args["env"] = map[string]string{"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
	case AdapterDelve:
		args["mode"] = "debug"
		if !isDir && path.Ext(name) != ".go" {
			args["mode"] = "exec"
		} else {
			args["output"] = "/tmp/berth-debug-" + randomHex() + "/__debug_bin"
		}
		args["outputMode"] = "remote"
	}
	return s.startSession(ctx, av, "launch", name, args, note, 0)
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
	case AdapterDelve:
		args["mode"] = "remote"
	}
	return s.startSession(ctx, av, "attach", fmt.Sprintf("the debuggee on port %d", in.Port), args, note, in.Port)
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

func randomHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startSession starts the adapter, runs launch or attach, installs the
// session and waits for the first stop. attachPort > 0 dials the port
// directly: a debuggee under debugpy --listen or a headless dlv serves DAP.
func (s *Supervisor) startSession(ctx context.Context, av Availability, command, program string, args map[string]any, note string, attachPort int) (reply, error) {
	var ap *adapterProc
	var err error
	if attachPort > 0 {
		conn, derr := s.sb.Dial(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", attachPort))
		if derr != nil {
			return reply{}, tools.Fail("cannot connect to 127.0.0.1:%d inside the sandbox: %v; is the debuggee listening there? start it with python3 -m debugpy --listen 127.0.0.1:%d --wait-for-client PROGRAM (or dlv --headless --listen 127.0.0.1:%d --accept-multiclient)", attachPort, derr, attachPort, attachPort)
		}
		// No process of ours: exited stays nil, the client's end is the end.
		ap = &adapterProc{stream: conn, cancel: func() {}, status: func() (sandbox.ExitStatus, error) { return sandbox.ExitStatus{}, nil }, stderr: proc.NewTail(stderrKeep)}
	} else if ap, err = s.startAdapter(ctx, av); err != nil {
		return reply{}, err
	}
	client := dap.NewClient(ap.stream, dap.Options{})
	opts := dap.SessionOptions{AdapterID: av.Adapter}
	if av.Adapter == AdapterDebugpy {
		opts.ExceptionFilters = []string{"uncaught"}
	}
	if av.Adapter == AdapterDelve {
		opts.AdapterID = "go"
	}
	ds := dap.NewSession(client, opts)
	s.mu.Lock()
	s.nextID++
	ss := &session{id: s.nextID, adapter: av.Adapter, command: command, program: program, root: av.Root,
		started: time.Now(), ds: ds, cancel: ap.cancel, exited: ap.exited, status: ap.status, pid: ap.pid, stderr: ap.stderr}
	ss.deadline = ss.started.Add(s.opts.TTL)
	want := make(map[string][]dap.Breakpoint, len(s.bps))
	for f, b := range s.bps {
		want[f] = b
	}
	s.mu.Unlock()
	for f, b := range want {
		ds.SetBreakpoints(ctx, f, b) // recorded; sent during launch
	}
	var lerr error
	if command == "launch" {
		lerr = ds.Launch(ctx, args)
	} else {
		lerr = ds.Attach(ctx, args)
	}
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
	ss.timer = time.AfterFunc(s.opts.TTL, func() { s.expire(ss) })
	s.mu.Unlock()

	head := fmt.Sprintf("%sed %s with %s (session %d; ends by itself after %v).", command, program, av.Adapter, ss.id, s.opts.TTL)
	if note != "" {
		head = note + "\n" + head
	}
	if bl := s.listBreakpoints(ss); len(want) > 0 {
		head += "\nbreakpoints:\n" + bl.text
	}
	rep, err := s.waitStop(ctx, ss, 0)
	if err != nil {
		return reply{}, err
	}
	rep.text = head + "\n" + rep.text
	return rep, nil
}
