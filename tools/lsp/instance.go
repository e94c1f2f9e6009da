package lsp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
	"berth.dev/berth/tools/internal/watch"
)

// errStarting reports a server that is still starting when the caller's
// wait ran out.
var errStarting = errors.New("lsp: the language server is still starting")

// instance is one server of the table at one root, across restarts.
type instance struct {
	s    *Supervisor
	key  key
	spec Server

	mu       sync.Mutex // guards the fields below; held across I/O only in ensureLocked's spawn bookkeeping
	start    startSpec  // how the server starts, as last decided (Supervisor.instance)
	gen      *generation
	restarts int         // starts after the first
	crashes  []time.Time // unexpected exits within CrashWindow
	gaveUp   bool
	lastErr  string
	lastUsed time.Time
	inflight int
	// pending are workspace files written while the server was starting:
	// they are left out of the journal's baseline, so what the write did to
	// them is reported by the next write.
	pending map[string]bool
	// replaced is the last generation a start replaced, until the next
	// start made sure its process is gone (endReplaced): one whose stream
	// broke may run on in the sandbox.
	replaced *generation
}

// startSpec is how a server starts beyond its table entry: on the host,
// the environment that pins the toolchain managers and the initialization
// options that name its runtime outside the workspace (Supervisor.hostStart).
type startSpec struct {
	decided bool     // set by hostStart; a host start without it is refused
	env     []string // added to the sandbox's environment
	init    any      // replaces the table's initialization options when set
}

// generation is one process of an instance's server.
type generation struct {
	binary  string
	start   startSpec
	started time.Time
	ready   chan struct{} // closed when the start finished
	err     error         // why the start failed; set before ready closes
	client  *lspc.Client
	stream  *sandbox.PipeStream
	ctx     context.Context // the process's lifetime; cancel ends it
	cancel  context.CancelFunc
	stderr  *proc.Tail
	stopped string // why it was stopped on purpose; "" while wanted
	// compDB is the compilation database the server started with
	// (Server.CompileCommandsDir), set before ready closes;
	// compDBSearched says the search ran and did not fail.
	compDB         compDB
	compDBSearched bool
	// typeshed is what the start made of the workspace's packages named
	// like standard modules (typeshed.go); nil when there were none. Set
	// before ready closes.
	typeshed *typeshedState

	// stamps are the size and mtime of the root's files as last seen, for
	// telling the server about changes made behind its back; sub says
	// which paths changed since (watch), so that only those are looked at.
	syncMu sync.Mutex
	stamps map[string]stamp
	// stampsVer counts the changes to stamps, so that a reader can tell
	// its copy is current.
	stampsVer uint64
	sub       atomic.Pointer[watch.Sub]
	// words are the identifier filters of the files under the root, for
	// the completeness verdict (verdict.go), and occOpened counts the
	// files opened to show a server where a name occurs.
	words     wordIndex
	occOpened atomic.Int64

	// indexChecked says whether a cross-file answer has looked for the
	// server's background indexing (Server.BackgroundIndex), and indexing
	// whether it had begun by then.
	indexMu      sync.Mutex
	indexChecked bool
	indexing     bool

	// syms are the symbol trees of files asked for, while they last.
	syms symCache
}

type stamp struct {
	size  int64
	mtime time.Time
}

// alive reports whether the current generation is starting or running.
func (in *instance) alive() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.aliveLocked()
}

func (in *instance) aliveLocked() bool {
	g := in.gen
	if g == nil || g.stopped != "" {
		return false
	}
	select {
	case <-g.ready:
		if g.err != nil {
			return false
		}
		select {
		case <-g.client.Done():
			return false
		default:
			return true
		}
	default:
		return true
	}
}

// serverState is an instance as it was at one moment, read under its
// lock: what status, the console's resources and reload report.
type serverState struct {
	gaveUp   bool
	started  bool   // a generation exists: a start was begun at least once
	stopped  string // why the current generation was stopped on purpose
	ready    bool   // the current generation's start finished
	startErr error  // why that start failed
	alive    bool   // starting or running (aliveLocked)
	pid      int
	binary   string
	up       time.Time // when the start finished, for a ready generation
	restarts int
	lastErr  string
	progress []lspc.ProgressState // what a running server reports it is doing
	typeshed *typeshedState       // of a ready generation (typeshed.go)
}

// state returns what the instance is doing now.
func (in *instance) state() serverState {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := serverState{gaveUp: in.gaveUp, alive: in.aliveLocked(), restarts: in.restarts, lastErr: in.lastErr}
	g := in.gen
	if g == nil {
		return st
	}
	st.started, st.stopped, st.pid, st.binary = true, g.stopped, g.pid(), g.binary
	select {
	case <-g.ready:
		st.ready, st.startErr, st.up, st.typeshed = true, g.err, g.started, g.typeshed
		if st.alive {
			st.progress = g.client.Progress()
		}
	default:
	}
	return st
}

// notePending records a workspace file written while the server was
// starting (see pending).
func (in *instance) notePending(name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.pending == nil {
		in.pending = map[string]bool{}
	}
	in.pending[name] = true
}

// takePending returns the files notePending recorded, and forgets them.
func (in *instance) takePending() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	names := make([]string, 0, len(in.pending))
	for name := range in.pending {
		names = append(names, name)
	}
	in.pending = nil
	return names
}

// ensure is ensureLocked under the instance's lock; sp, when not nil,
// becomes how the server starts from now on.
func (in *instance) ensure(binary string, sp *startSpec) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if sp != nil {
		in.start = *sp
	}
	return in.ensureLocked(binary)
}

// ensureLocked starts a server unless one is starting or running. A dead
// one counts as a crash, and the restart waits out the backoff.
func (in *instance) ensureLocked(binary string) error {
	if in.aliveLocked() {
		return nil
	}
	if g := in.gen; g != nil && g.stopped == "" {
		if g.streamLost() {
			in.noteLostLocked(g)
		} else {
			in.noteCrashLocked(g)
		}
	}
	if in.gaveUp {
		return in.gaveUpErrorLocked()
	}
	var delay time.Duration
	if n := len(in.crashes); n > 0 {
		delay = min(time.Duration(250<<uint(n))*time.Millisecond, maxBackoff)
		delay -= time.Since(in.crashes[n-1])
	}
	if in.gen != nil {
		in.restarts++
	}
	if binary == "" && in.gen != nil {
		binary = in.gen.binary
	}
	g := &generation{binary: binary, start: in.start, ready: make(chan struct{}), stderr: proc.NewTail(stderrKeep)}
	if old := in.gen; old != nil && old.stream != nil {
		in.replaced = old
	}
	in.gen = g
	in.lastUsed = time.Now()
	go in.spawn(g, max(delay, 0))
	return nil
}

// noteCrashLocked records an unexpected end of g.
func (in *instance) noteCrashLocked(g *generation) {
	g.stopped = "crashed"
	why := "the start failed"
	select {
	case <-g.ready:
		if g.err != nil {
			why = g.err.Error()
		} else {
			why = "it exited unexpectedly"
			if g.stream != nil {
				select {
				case <-g.stream.Done():
					if st, err := g.stream.ExitStatus(); err == nil {
						why += " (" + st.String() + ")"
					}
				default:
				}
			}
			if t := g.stderr.String(); t != "" {
				why += "; its last stderr: " + proc.Clip(t, 600)
			}
		}
	default:
	}
	in.lastErr = why
	now := time.Now()
	in.crashes = append(in.crashes, now)
	for len(in.crashes) > 0 && now.Sub(in.crashes[0]) > CrashWindow {
		in.crashes = in.crashes[1:]
	}
	if len(in.crashes) >= MaxCrashes {
		in.gaveUp = true
	}
	// Release the dead generation's process and stream.
	go g.kill()
}

// noteLostLocked records the end of g's stream without its exit status:
// the stream to the server broke (the engine's connections cut), which is
// not the server's crash, and the server may run on in the sandbox until
// the next start ends it (endReplaced).
func (in *instance) noteLostLocked(g *generation) {
	g.stopped = "its connection broke"
	_, err := g.stream.ExitStatus()
	in.lastErr = fmt.Sprintf("berth's connection to the server (pid %d) broke: %v", g.pid(), err)
	go g.kill() // releases the client and the stream; reaches nothing in the sandbox
}

func (in *instance) gaveUpErrorLocked() error {
	return fmt.Errorf("lsp: gave up on %s after %d crashes within %v (last: %s); fix the cause, then call lsp with action reload to try again",
		in.key, MaxCrashes, CrashWindow, in.lastErr)
}

// spawn starts g's process and initializes it, after delay.
func (in *instance) spawn(g *generation, delay time.Duration) {
	s := in.s
	err := func() error {
		if delay > 0 {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.runCtx.Done():
				return s.runCtx.Err()
			}
		}
		select {
		case s.cold <- struct{}{}:
			defer func() { <-s.cold }()
		case <-s.runCtx.Done():
			return s.runCtx.Err()
		}
		if s.opts.Host && !g.start.decided {
			return fmt.Errorf("lsp: %s was not started: its start on the host was never checked for the toolchain it would run; call lsp again", in.key)
		}
		// One server per instance: one whose stream broke goes first.
		if err := in.endReplaced(s.runCtx); err != nil {
			return err
		}
		pctx, cancel := context.WithCancel(s.runCtx)
		absRoot := path.Join(s.root, in.key.root)
		args := append([]string{g.binary}, in.spec.args(s.opts.Host)...)
		if in.spec.CompileCommandsDir != "" {
			// A failed search starts the server without a database; status
			// and the verdict's note search again.
			if d, err := findCompDB(pctx, s.ws, in.key.root); err == nil {
				g.compDB, g.compDBSearched = d, true
				args = append(args, in.spec.compDBArgs(d, s.root)...)
			}
		}
		// On the host g.start.env pins every toolchain manager (GOTOOLCHAIN
		// for gopls's go list, RUSTUP_TOOLCHAIN for a rustup proxy …).
		env := g.start.env
		init := in.spec.initOptions(s.opts.Host)
		if g.start.init != nil {
			init = g.start.init
		}
		// A private typeshed, when the root has packages named like
		// standard modules, goes when the server ends, whoever ends it.
		settings := in.spec.Settings
		var remove []string
		if ts := in.makeTypeshed(pctx, g.binary); ts != nil {
			in.mu.Lock()
			g.typeshed = ts
			in.mu.Unlock()
			if ts.dir != "" {
				settings, _ = withOption(settings, in.spec.TypeshedSetting, []any{ts.dir}).(map[string]any)
				remove = []string{ts.dir}
			}
		}
		stream, err := sandbox.Pipe(pctx, s.sb, &sandbox.Cmd{Args: args, Env: env, Dir: absRoot, Stderr: g.stderr, WaitDelay: waitDelay, Remove: remove})
		if err != nil {
			cancel()
			for _, d := range remove {
				removeSandboxDir(s.runCtx, s.sb, d)
			}
			return fmt.Errorf("starting %s in %s failed: %w", strings.Join(args, " "), absRoot, err)
		}
		rootURI, _ := lspc.FileURI(absRoot)
		client := lspc.NewClient(stream, lspc.ConnOptions{Settings: settings, RequestTimeout: s.opts.RequestTimeout})
		in.mu.Lock()
		g.client, g.stream, g.ctx, g.cancel = client, stream, pctx, cancel
		in.mu.Unlock()
		ictx, icancel := context.WithTimeout(s.runCtx, lspc.InitializeTimeout)
		defer icancel()
		if _, err := client.Initialize(ictx, lspc.InitOptions{RootURI: rootURI, InitializationOptions: init, Capabilities: capabilities()}); err != nil {
			msg := fmt.Sprintf("initializing %s failed: %v", g.binary, err)
			if t := g.stderr.String(); t != "" {
				msg += "; its stderr: " + proc.Clip(t, 600)
			}
			return errors.New(msg)
		}
		if settings != nil {
			if err := client.Notify(ictx, "workspace/didChangeConfiguration", map[string]any{"settings": settings}); err != nil {
				return fmt.Errorf("configuring %s failed: %w", g.binary, err)
			}
		}
		// Record the tree as the server saw it at start (the watch, or later
		// walks, report what changed behind its back), and the diagnostics
		// it starts with. The watch is subscribed first, so that nothing
		// changed during the walk is missed.
		g.sub.Store(s.watch.Subscribe(ictx))
		g.stamps, _ = in.walk(ictx)
		if in.spec.OpenRoot {
			if err := in.openRoot(ictx, client, g.stamps); err != nil {
				return fmt.Errorf("opening the files of %s in %s failed: %w", showRoot(in.key.root), g.binary, err)
			}
		}
		s.baseline(ictx, in, client)
		g.started = time.Now()
		return nil
	}()
	in.mu.Lock()
	g.err = err
	close(g.ready)
	stopped := g.stopped != ""
	in.mu.Unlock()
	if err != nil || stopped {
		g.kill()
		return
	}
	// The first verdict then reads only the files that may hold its name.
	s.warmLater(in, g)
}

// capabilities are the client capabilities the servers are started with:
// lspc.DefaultCapabilities without pull diagnostics. The tools read only
// published diagnostics, and a server told the client pulls (pyright)
// publishes none.
func capabilities() map[string]any {
	caps := lspc.DefaultCapabilities(false)
	if td, ok := caps["textDocument"].(map[string]any); ok {
		delete(td, "diagnostic")
	}
	if ws, ok := caps["workspace"].(map[string]any); ok {
		delete(ws, "diagnostics")
	}
	return caps
}

// waitReady waits up to wait for the current generation's start. It
// returns errStarting when the wait passes first.
func (in *instance) waitReady(ctx context.Context, wait time.Duration) error {
	in.mu.Lock()
	g := in.gen
	gaveUp := in.gaveUp
	in.mu.Unlock()
	if g == nil {
		if gaveUp {
			in.mu.Lock()
			defer in.mu.Unlock()
			return in.gaveUpErrorLocked()
		}
		return fmt.Errorf("lsp: %s is not running; call again", in.key)
	}
	select {
	case <-g.ready:
	default:
		tools.Progress(ctx, fmt.Sprintf("starting the language server %s (%s)", in.key, g.binary))
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-g.ready:
		case <-t.C:
			return fmt.Errorf("%w: %s (%s) began starting %v ago", errStarting, in.key, g.binary, time.Since(in.lastUsedOr()).Round(time.Millisecond))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if g.err != nil {
		return fmt.Errorf("lsp: %s could not start: %w. lsp status shows details; fix the cause and call lsp with action reload", in.key, g.err)
	}
	return nil
}

func (in *instance) lastUsedOr() time.Time {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lastUsed
}

// client returns the current generation's client once it is ready, or an
// error saying what happened to it; the caller must hold a use (acquire).
func (in *instance) client() (*lspc.Client, *generation, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	g := in.gen
	if g == nil {
		return nil, nil, fmt.Errorf("lsp: %s is not running; call again to start it", in.key)
	}
	select {
	case <-g.ready:
	default:
		return nil, nil, fmt.Errorf("%w: %s", errStarting, in.key)
	}
	if g.err != nil {
		return nil, nil, fmt.Errorf("lsp: %s could not start: %w", in.key, g.err)
	}
	select {
	case <-g.client.Done():
		return nil, nil, fmt.Errorf("%w: %s exited (%v); call again and it is restarted", errDied, in.key, g.client.Err())
	default:
	}
	return g.client, g, nil
}

// acquire marks the instance in use (not idle) until release.
func (in *instance) acquire() func() {
	in.mu.Lock()
	in.inflight++
	in.lastUsed = time.Now()
	in.mu.Unlock()
	return func() {
		in.mu.Lock()
		in.inflight--
		in.lastUsed = time.Now()
		in.mu.Unlock()
	}
}

func (in *instance) idleFor() time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	g := in.gen
	if in.inflight > 0 || g == nil || g.stopped != "" {
		return 0
	}
	select {
	case <-g.ready:
	default:
		return 0 // starting is not idling
	}
	if g.started.After(in.lastUsed) {
		return time.Since(g.started)
	}
	return time.Since(in.lastUsed)
}

// stop ends the current generation on purpose.
func (in *instance) stop(ctx context.Context, why string) error {
	in.mu.Lock()
	g := in.gen
	if g == nil || g.stopped != "" {
		in.mu.Unlock()
		return nil
	}
	g.stopped = why
	in.mu.Unlock()
	select {
	case <-g.ready:
	case <-ctx.Done():
	}
	return g.shutdown(ctx)
}

// reload stops the current server and starts a new one, forgetting the
// crash history.
func (in *instance) reload(ctx context.Context) error {
	if err := in.stop(ctx, "reload"); err != nil {
		in.mu.Lock()
		in.lastErr = "stopping for reload: " + err.Error()
		in.mu.Unlock()
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.crashes, in.gaveUp = nil, false
	if in.s.isClosed() {
		return errClosed
	}
	return in.ensureLocked("")
}

func (s *Supervisor) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// shutdown stops g politely, then by force, each step bounded.
func (g *generation) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	var err error
	if g.client != nil && g.err == nil && !g.dead() {
		err = g.client.Shutdown(ctx)
		if errors.Is(err, lspc.ErrServerExited) || errors.Is(err, lspc.ErrClosed) {
			err = nil
		}
	}
	return errors.Join(err, g.kill())
}

// kill closes g's stream — stdin, then TERM, then KILL, waitDelay apart —
// and ends its process context.
func (g *generation) kill() error {
	var err error
	if sub := g.sub.Swap(nil); sub != nil {
		sub.Close()
	}
	if g.client != nil {
		g.client.Close() // closes the stream too
	}
	if g.stream != nil {
		if cerr := g.stream.Close(); errors.Is(cerr, sandbox.ErrGone) {
			err = fmt.Errorf("lsp: the server (pid %d) did not exit after SIGKILL: %w", g.pid(), cerr)
		}
	}
	if g.cancel != nil {
		g.cancel()
	}
	return err
}

// streamLost reports whether g's stream ended without the server's exit
// status: it broke (the engine's connections cut, an engine that dropped
// the exec), which says nothing of the server, which may run on.
func (g *generation) streamLost() bool {
	if g.stream == nil {
		return false
	}
	select {
	case <-g.stream.Done():
		_, err := g.stream.ExitStatus()
		return err != nil
	default:
		return false
	}
}

// endReplaced makes sure the process of the generation the current start
// replaced is gone before a new server starts: a server whose stream broke
// runs on in the sandbox (its supervisor ends it only once it misses
// berth's pings), indexing the workspace beside the new one. Its process
// group is ended through a fresh exec (endGroup). The first result after
// the new server is ready says it was restarted (Supervisor.restartNotes).
func (in *instance) endReplaced(ctx context.Context) error {
	in.mu.Lock()
	old := in.replaced
	in.mu.Unlock()
	if old == nil {
		return nil
	}
	// A stopped or crashed server's stream ends with it; wait for that,
	// within the time its stop takes.
	t := time.NewTimer(stopTimeout)
	select {
	case <-old.stream.Done():
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	t.Stop()
	if old.streamLost() {
		absRoot := path.Join(in.s.root, in.key.root)
		if err := endGroup(ctx, in.s.sb, old.pid(), absRoot); err != nil {
			return fmt.Errorf("lsp: %s was not started again: berth's connection to the one before (pid %d) broke, and ending it in the sandbox failed: %w; call again", in.key, old.pid(), err)
		}
		in.s.noteRestart(fmt.Sprintf("note: berth's connection to the language server %s (pid %d) broke, so berth ended it and started it again: its index is rebuilt (the first answers may take longer), and diagnostics on write start from a new baseline", in.key, old.pid()))
	}
	in.mu.Lock()
	if in.replaced == old {
		in.replaced = nil
	}
	in.mu.Unlock()
	return nil
}

// endGroupScript ends the process group $1 if its leader is still the
// server berth started: its own group's leader, working in $2, a child of
// a berth-shim supervisor. SIGTERM, then SIGKILL after up to 2 s. It is
// given to /bin/sh, which discovery needs already (probeScript).
const endGroupScript = `pg=$1
[ -r /proc/$pg/stat ] || exit 0
read -r st < /proc/$pg/stat || exit 0
set -- ${st##*) }
[ "$3" = "$pg" ] || exit 0
read -r parent < /proc/$2/comm 2>/dev/null || exit 0
[ "$parent" = berth-shim ] || exit 0
cwd=$(readlink /proc/$pg/cwd) || exit 0
[ "$cwd" = "$ROOT" ] || exit 0
kill -TERM -$pg 2>/dev/null || exit 0
i=0
while [ $i -lt 20 ] && kill -0 -$pg 2>/dev/null; do sleep 0.1; i=$((i+1)); done
kill -KILL -$pg 2>/dev/null
exit 0
`

// endGroup ends the process group pgid in sb (endGroupScript) through a
// fresh exec, within stopTimeout.
func endGroup(ctx context.Context, sb sandbox.Sandbox, pgid int, root string) error {
	if pgid <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	var errb strings.Builder
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", endGroupScript, "berth-lsp-end", strconv.Itoa(pgid)}, Env: []string{"ROOT=" + root}, Stderr: &errb})
	if err != nil {
		return err
	}
	st, err := p.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		return fmt.Errorf("%v: %s", st, proc.Clip(errb.String(), 400))
	}
	return nil
}

// dead reports whether g's connection has ended.
func (g *generation) dead() bool {
	if g.client == nil {
		return false
	}
	select {
	case <-g.client.Done():
		return true
	default:
		return false
	}
}

// pid is the server's pid in the sandbox, or 0.
func (g *generation) pid() int {
	if g.stream == nil {
		return 0
	}
	return g.stream.Process().Pid()
}

// walk stats the files of the instance's languages under its root.
func (in *instance) walk(ctx context.Context) (map[string]stamp, error) {
	out := map[string]stamp{}
	err := in.s.ws.Walk(ctx, in.key.root, sandbox.WalkOptions{SkipDirs: skipDirs}, func(name string, fi fs.FileInfo) error {
		if fi.IsDir() || !fi.Mode().IsRegular() {
			return nil
		}
		if !in.wants(name) {
			return nil
		}
		if len(out) >= MaxWatchedFiles {
			return fs.SkipAll
		}
		out[name] = stamp{fi.Size(), fi.ModTime()}
		return nil
	})
	return out, err
}

// openRoot opens the root's files of the server's languages (of stamps, the
// walk at start), at most MaxOpenedFiles in name order, for a server that
// searches only open files (Server.OpenRoot): its references then find
// the callers in them, and its diagnostics cover them.
func (in *instance) openRoot(ctx context.Context, c *lspc.Client, stamps map[string]stamp) error {
	names := make([]string, 0, len(stamps))
	for name := range stamps {
		if _, ok := in.spec.Languages[path.Ext(name)]; ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names[:min(len(names), MaxOpenedFiles)] {
		if _, _, err := in.open(ctx, c, name); err != nil && !isNotExist(err) {
			return err
		}
	}
	return nil
}

func isMarker(spec Server, name string) bool {
	base := path.Base(name)
	for _, m := range spec.Markers {
		if m == base {
			return true
		}
	}
	return base == "go.sum"
}
