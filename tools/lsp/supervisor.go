// Package lsp is the lsp and lsp_rename tools (docs/tools.md §2–3) and
// diagnostics on write (LSP-3, LSP-4), over language servers placed in the
// run's sandbox.
//
// A [Supervisor] owns one run's servers, keyed by (server id, project
// root). Which server answers for a file is discovered at call time inside
// the sandbox: a root marker AND a binary that resolves there (LSP-1). A
// server starts lazily, over the sandbox's exec stream ([sandbox.Pipe]), is
// restarted after a crash with backoff (and given up on after
// [MaxCrashes] crashes in [CrashWindow]), is stopped when idle, and is killed
// when the run closes. Before a query answers, files changed behind the
// server's back are re-synced, so answers are never about stale text.
package lsp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
	"berth.dev/berth/tools/internal/watch"
)

// Supervision limits and defaults.
const (
	// MaxCrashes crashes within CrashWindow make the supervisor give up on a
	// server until reload.
	MaxCrashes  = 5
	CrashWindow = 3 * time.Minute
	// DefaultIdleTimeout stops a server nobody used for this long.
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultMaxColdStarts is how many servers may start at once.
	DefaultMaxColdStarts = 2
	// DefaultStartWait is how long a write waits for a starting server
	// before answering that diagnostics follow on the next write.
	DefaultStartWait = 5 * time.Second
	// DefaultQueryWait is how long a query waits for a starting server.
	DefaultQueryWait = 90 * time.Second
	// DefaultRequestTimeout bounds each request to a running server
	// (lsp.ConnOptions.RequestTimeout): one that does not answer within it
	// is told to cancel, and the call says the server may be stuck.
	DefaultRequestTimeout = 60 * time.Second
	// DefaultDiagnosticsWait bounds waiting for diagnostics of the text just
	// sent.
	DefaultDiagnosticsWait = 10 * time.Second
	// DefaultSettle is the quiet period, after the diagnostics of every
	// changed file came in, after which no more are expected for the
	// change. gopls publishes the callers' diagnostics in the same batch
	// as the changed file's (bench/lsp_test.go measures it); a publish that
	// comes later still is not lost: the next write reports it.
	DefaultSettle = 25 * time.Millisecond
	// maxSettle bounds the whole settle phase after the first diagnostics.
	maxSettle = 4 * time.Second
	// maxBackoff caps the delay before restarting a crashed server.
	maxBackoff = 8 * time.Second
	// stopTimeout bounds stopping one server (shutdown, exit, TERM, KILL).
	stopTimeout = 10 * time.Second
	// waitDelay is the time between closing a server's stdin and TERM, and
	// between TERM and KILL.
	waitDelay = 2 * time.Second
	// stderrKeep is how much of a server's stderr is kept for messages.
	stderrKeep = 4096
	// MaxWatchedFiles caps the files tracked per root for changes made
	// behind the server's back.
	MaxWatchedFiles = 50_000
)

// skipDirs are never walked for changed files.
var skipDirs = []string{".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache", ".pytest_cache", "target", ".dart_tool", "build", ".cache"}

// Options configure a [Supervisor]. The zero value uses the defaults.
type Options struct {
	// Servers is the server table (default DefaultServers()).
	Servers []Server
	// IdleTimeout stops a server unused for this long (default
	// DefaultIdleTimeout; negative never stops one).
	IdleTimeout time.Duration
	// MaxColdStarts caps concurrent server starts (default
	// DefaultMaxColdStarts).
	MaxColdStarts int
	// StartWait, QueryWait, DiagnosticsWait and Settle override the
	// defaults of the same names.
	StartWait, QueryWait, DiagnosticsWait, Settle time.Duration
	// RequestTimeout overrides DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Host says the sandbox is the host (also implied by a sandbox whose
	// Ref is "host"): no program of the workspace runs there — neither
	// project-local binaries (.venv/bin, node_modules/.bin) nor a PATH
	// program that resolves into the workspace — servers and go commands
	// get GOTOOLCHAIN=local, and a project check that executes project code
	// needs an approved exec-level step.
	Host bool
}

func (o *Options) fill() {
	if o.Servers == nil {
		o.Servers = DefaultServers()
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxColdStarts <= 0 {
		o.MaxColdStarts = DefaultMaxColdStarts
	}
	if o.StartWait <= 0 {
		o.StartWait = DefaultStartWait
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.QueryWait <= 0 {
		o.QueryWait = DefaultQueryWait
	}
	if o.DiagnosticsWait <= 0 {
		o.DiagnosticsWait = DefaultDiagnosticsWait
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
}

// Supervisor owns the language servers of one run.
type Supervisor struct {
	sb     sandbox.Sandbox
	ws     sandbox.FS
	root   string // the workspace's absolute path, cleaned
	runCtx context.Context
	opts   Options
	cold   chan struct{} // semaphore of concurrent starts

	mu      sync.Mutex // guards the fields below; never held across I/O
	insts   map[key]*instance
	closed  bool
	sysFS   sandbox.FS // the sandbox's "/", for source lines outside the workspace
	journal map[key]*journal
	edits   int             // writes diagnosed so far: a write's result names its number ("edit #3")
	told    map[string]bool // why no server applied, as diagnostics on write said it
	// kept marks journals Restore brought back: the server's first
	// baseline leaves them as they are.
	kept      map[key]bool
	restarted bool   // Restore ran and no result has said so yet
	gen       uint64 // bumped when a journal changes (Generation)
	// prewarmStop cancels the prewarms (Prewarm); prewarmNotes say which
	// failed, for the next result.
	prewarmStop  context.CancelFunc
	prewarmNotes []string
	// restartNotes say which servers were ended and started again after
	// berth's connection to them broke (instance.endReplaced), once.
	restartNotes []string
	// watch follows the workspace's changes (berth's agent's inotify), so
	// that a query reports what changed behind the servers' backs without
	// walking the tree; walkNote is the next result's note when a query
	// had to walk after all, and walkWhy the reason last noted.
	watch    *watch.Hub
	walkNote string
	walkWhy  string

	// pinMu serializes asking the host's toolchain managers for their
	// toolchains (hostPins), and is held while they answer; pinned are
	// their answers by program, pathManagers the managers on PATH.
	pinMu        sync.Mutex
	pinned       map[string]*proc.Pin
	pathManagers []string

	// warmMu guards the word warmer's queue (warmLater): warming says
	// its goroutine runs, warmClosed that Close stopped it.
	warmMu     sync.Mutex
	warmQ      []warmJob
	warming    bool
	warmClosed bool
	warmCtx    context.Context
	warmStop   context.CancelFunc
	warmers    sync.WaitGroup

	stopReaper context.CancelFunc
	reaperDone chan struct{}
	prewarms   sync.WaitGroup // the prewarms' goroutines
}

// key names one server instance: a server of the table at a project root
// (workspace-relative).
type key struct{ id, root string }

func (k key) String() string { return k.id + " at " + showRoot(k.root) }

func showRoot(r string) string {
	if r == "." {
		return "the workspace root"
	}
	return r + "/"
}

// New returns a supervisor for a run: sb is its sandbox, ws the workspace
// FS, runCtx lives as long as the run. Call [Supervisor.Close] when the run
// closes.
func New(sb sandbox.Sandbox, ws sandbox.FS, runCtx context.Context, opts Options) *Supervisor {
	opts.fill()
	if sb.Ref() == "host" {
		opts.Host = true
	}
	s := &Supervisor{
		sb: sb, ws: ws, root: path.Clean(ws.Root()), runCtx: runCtx, opts: opts,
		cold:    make(chan struct{}, opts.MaxColdStarts),
		insts:   map[key]*instance{},
		journal: map[key]*journal{},
		told:    map[string]bool{},
		kept:    map[key]bool{},
		watch:   watch.New(ws, skipDirs),
	}
	s.warmCtx, s.warmStop = context.WithCancel(runCtx)
	if opts.IdleTimeout > 0 {
		ctx, cancel := context.WithCancel(runCtx)
		s.stopReaper, s.reaperDone = cancel, make(chan struct{})
		go s.reap(ctx)
	}
	return s
}

// Close stops every server (shutdown, then TERM and KILL) and refuses
// later calls.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	s.closed = true
	insts := make([]*instance, 0, len(s.insts))
	for _, in := range s.insts {
		insts = append(insts, in)
	}
	s.insts = map[key]*instance{}
	s.mu.Unlock()
	s.stopPrewarm()
	s.stopWarm()
	if s.stopReaper != nil {
		s.stopReaper()
		<-s.reaperDone
	}
	var wg sync.WaitGroup
	errs := make([]error, len(insts))
	for i, in := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.stop(context.Background(), "the run closed")
		}()
	}
	wg.Wait()
	errs = append(errs, s.watch.Close())
	return errors.Join(errs...)
}

// reap stops servers idle for longer than the idle timeout.
func (s *Supervisor) reap(ctx context.Context) {
	defer close(s.reaperDone)
	every := min(s.opts.IdleTimeout/4, time.Minute)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var idle []*instance
		s.mu.Lock()
		for _, in := range s.insts {
			if in.idleFor() > s.opts.IdleTimeout {
				idle = append(idle, in)
			}
		}
		s.mu.Unlock()
		for _, in := range idle {
			in.stop(ctx, fmt.Sprintf("it was idle for more than %v", s.opts.IdleTimeout))
		}
	}
}

// Choice is what discovery found for one server of the table for one file
// or directory.
type Choice struct {
	Server Server
	// Root is the workspace-relative root ("." for the workspace root) where
	// Marker was found; empty when no marker was found, or "." with
	// Fallback.
	Root, Marker string
	// Fallback says no marker was found and the server, which works
	// without one, serves from the workspace root.
	Fallback bool
	// Binary is the server's program as the sandbox sees it; empty when it
	// does not resolve.
	Binary string
	// Missing says which half is missing ("" when the server is usable).
	Missing string
	// hostModule is, on the host, the Server.HostModule found beside the
	// server's installation.
	hostModule string
}

// Usable reports whether both the marker and the binary were found.
func (c Choice) Usable() bool { return c.Missing == "" }

func (c Choice) key() key { return key{c.Server.ID, c.Root} }

// discover reports every server of the table that handles ext (every
// server when ext is empty), for a file in dir (workspace-relative).
func (s *Supervisor) discover(ctx context.Context, dir, ext string, probeAlways bool) ([]Choice, error) {
	var out []Choice
	for _, sv := range s.opts.Servers {
		if ext != "" {
			if _, ok := sv.Languages[ext]; !ok {
				continue
			}
		}
		c := Choice{Server: sv}
		root, marker, err := findRoot(ctx, s.ws, dir, sv.Markers)
		if err != nil {
			return nil, fmt.Errorf("lsp: looking for %s's root markers: %w", sv.ID, err)
		}
		c.Root, c.Marker = root, marker
		if root == "" && sv.MarkerOptional {
			c.Root, c.Fallback = ".", true
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, nil
	}
	if !probeAlways && !slices.ContainsFunc(out, func(c Choice) bool { return c.Root != "" }) {
		// No marker anywhere: nothing can start, and the binaries do not
		// matter (a write to a loose file costs no exec).
		for i := range out {
			out[i].Missing = s.markerMissing(out[i].Server, dir)
		}
		return out, nil
	}
	// One probe for every binary of every candidate, project-local first.
	var local, names []string
	for _, c := range out {
		if c.Root == "" || s.opts.Host {
			continue
		}
		for _, l := range c.Server.Local {
			d := path.Join(s.root, c.Root, l)
			if !slices.Contains(local, d) {
				local = append(local, d)
			}
		}
	}
	for _, c := range out {
		for _, b := range c.Server.Binaries {
			if !slices.Contains(names, b) {
				names = append(names, b)
			}
		}
	}
	found, err := probeBinaries(ctx, s.sb, local, names)
	if err != nil {
		return nil, err
	}
	for i := range out {
		c := &out[i]
		var allowed []string
		for _, f := range found {
			if !s.inWorkspace(f) {
				if s.opts.Host {
					if real, inside := proc.HostProgram(s.root, f); real == "" || inside {
						continue // a link from outside into the workspace
					}
				}
				allowed = append(allowed, f)
				continue
			}
			// Inside the workspace only the project's own tool directories
			// count, and never on the host.
			for _, l := range c.Server.Local {
				if !s.opts.Host && c.Root != "" && path.Dir(f) == path.Join(s.root, c.Root, l) {
					allowed = append(allowed, f)
				}
			}
		}
		// Prefer the project-local directories, then PATH order.
		slices.SortStableFunc(allowed, func(a, b string) int {
			return boolInt(!s.inWorkspace(a)) - boolInt(!s.inWorkspace(b))
		})
		c.Binary = proc.PickBinary(allowed, c.Server.Binaries)
		var why []string
		refused := false
		if s.opts.Host && c.Binary != "" {
			if r := s.shipsCode(c); r != "" {
				why = append(why, fmt.Sprintf("not started on the host: %s exists at or above the server's root, %s would load and run it, and on the host berth runs no code from the workspace or a directory above it; use a container for this project", r, c.Server.ID))
				c.Binary, refused = "", true
			}
		}
		if s.opts.Host && c.Binary != "" && c.Server.HostModule != "" {
			mod, missing := s.hostModule(c.Server, c.Binary)
			if mod == "" {
				why = append(why, fmt.Sprintf("not started on the host: %s; on the host berth gives %s the %s of its own installation, so that it never loads one from the project's node_modules or above it: install it beside the server (npm install -g %s)", missing, c.Server.ID, c.Server.HostModule, strings.SplitN(c.Server.HostModule, "/", 2)[0]))
				c.Binary, refused = "", true
			}
			c.hostModule = mod
		}
		if c.Root == "" {
			why = append(why, s.markerMissing(c.Server, dir))
		}
		if c.Binary == "" && !refused {
			where := "on the sandbox's PATH"
			if len(c.Server.Local) > 0 && !s.opts.Host {
				where = "in the project's " + strings.Join(c.Server.Local, ", ") + " or on the sandbox's PATH"
			}
			why = append(why, fmt.Sprintf("binary missing: no %s %s", strings.Join(c.Server.Binaries, " or "), where))
		}
		c.Missing = strings.Join(why, "; ")
	}
	return out, nil
}

func (s *Supervisor) markerMissing(sv Server, dir string) string {
	where := "the workspace root"
	if dir != "." {
		where = dir + "/ or any parent up to the workspace root"
	}
	return fmt.Sprintf("marker missing: none of %s in %s", strings.Join(sv.Markers, ", "), where)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Supervisor) inWorkspace(p string) bool {
	p = path.Clean(p)
	return p == s.root || s.root == "/" || strings.HasPrefix(p, s.root+"/")
}

// errClosed answers a call, or a server start, after the run closed.
var errClosed = errors.New("lsp: the run is closed; open a new run")

// ErrNoServer means no language server applies to a file; its message says
// which half is missing for each candidate.
var ErrNoServer = errors.New("lsp: no language server applies")

// serverFor returns the running (or starting) instance that answers for a
// workspace file, starting one when needed. wait bounds waiting for a
// starting server; when it passes, the instance is returned with
// errStarting.
func (s *Supervisor) serverFor(ctx context.Context, name string, wait time.Duration) (*instance, error) {
	ext := path.Ext(name)
	dir := path.Dir(name)
	// A running server whose root holds the file answers without a probe.
	if in := s.runningFor(ctx, dir, ext); in != nil {
		return in, in.waitReady(ctx, wait)
	}
	choices, err := s.discover(ctx, dir, ext, false)
	if err != nil {
		return nil, err
	}
	if len(choices) == 0 {
		return nil, &noServerError{
			msg: fmt.Sprintf("%v: no server of the table handles %s files (%s); the servers are %s", ErrNoServer, extOrName(name), name, s.serverIDs()),
			why: fmt.Sprintf("no language server handles %s files", extOrName(name)),
		}
	}
	for _, c := range choices {
		if c.Usable() {
			in, err := s.instance(ctx, c)
			if err != nil {
				return nil, err
			}
			return in, in.waitReady(ctx, wait)
		}
	}
	var why []string
	for _, c := range choices {
		why = append(why, c.Server.ID+": "+c.Missing)
	}
	return nil, &noServerError{
		msg: fmt.Sprintf("%v to %s: %s. Add the marker or install the server in the sandbox, then call again; lsp status shows what was found", ErrNoServer, name, strings.Join(why, "; ")),
		why: strings.Join(why, "; "),
	}
}

// noServerError is [ErrNoServer] with why, the reason without the advice:
// for each candidate server the half that is missing, or that no server
// handles the file's language. Diagnostics on write name it.
type noServerError struct{ msg, why string }

func (e *noServerError) Error() string        { return e.msg }
func (e *noServerError) Is(target error) bool { return target == ErrNoServer }

func extOrName(name string) string {
	if e := path.Ext(name); e != "" {
		return e
	}
	return "extension-less"
}

func (s *Supervisor) serverIDs() string {
	var ids []string
	for _, sv := range s.opts.Servers {
		ids = append(ids, sv.ID)
	}
	return strings.Join(ids, ", ")
}

// runningFor returns a live instance for a file in dir with extension ext
// whose root is the file's nearest root for that server.
func (s *Supervisor) runningFor(ctx context.Context, dir, ext string) *instance {
	s.mu.Lock()
	var cands []*instance
	for _, in := range s.insts {
		if _, ok := in.spec.Languages[ext]; ok && in.alive() && within(dir, in.key.root) {
			cands = append(cands, in)
		}
	}
	s.mu.Unlock()
	// The file's root must be this instance's root: no nearer marker.
	for _, in := range cands {
		root, _, err := findRoot(ctx, s.ws, dir, in.spec.Markers)
		if root == "" && in.spec.MarkerOptional {
			root = "."
		}
		if err == nil && root == in.key.root {
			return in
		}
	}
	return nil
}

// within reports whether workspace-relative dir is root or below it.
func within(dir, root string) bool {
	return root == "." || dir == root || strings.HasPrefix(dir, root+"/")
}

// instance returns the instance for a usable choice, creating it (and
// starting its server) when there is none or it died. On the host a
// server that is not running is first decided by hostStart, with ctx's
// permission gate.
func (s *Supervisor) instance(ctx context.Context, c Choice) (*instance, error) {
	s.mu.Lock()
	in := s.insts[c.key()]
	s.mu.Unlock()
	var sp *startSpec
	if s.opts.Host && (in == nil || !in.alive()) {
		var err error
		if sp, err = s.hostStart(ctx, c); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	k := c.key()
	in = s.insts[k]
	if in == nil {
		in = &instance{s: s, key: k, spec: c.Server}
		s.insts[k] = in
	}
	// sp is nil when the server was running a moment ago: should it have
	// died since, its restart reuses the start last decided, as a restart
	// after a crash does.
	if err := in.ensure(c.Binary, sp); err != nil {
		return nil, err
	}
	return in, nil
}

// instances returns every instance, sorted by key.
func (s *Supervisor) instances() []*instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*instance, 0, len(s.insts))
	for _, in := range s.insts {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b *instance) int { return strings.Compare(a.key.String(), b.key.String()) })
	return out
}

// rootFS returns an FS of the sandbox's "/", for showing source lines of
// files outside the workspace (a standard library definition).
func (s *Supervisor) rootFS(ctx context.Context) (sandbox.FS, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sysFS != nil {
		return s.sysFS, nil
	}
	f, err := s.sb.FS(ctx, "/")
	if err != nil {
		return nil, err
	}
	s.sysFS = f
	return f, nil
}

// rel returns the workspace name of an absolute sandbox path, and whether
// it lies in the workspace.
func (s *Supervisor) rel(p string) (string, bool) {
	p = path.Clean(p)
	if p == s.root {
		return ".", true
	}
	if r, ok := strings.CutPrefix(p, strings.TrimSuffix(s.root, "/")+"/"); ok {
		return r, true
	}
	return p, false
}

// readAny reads a file by absolute sandbox path, through the workspace FS
// when it lies there.
func (s *Supervisor) readAny(ctx context.Context, abs string) ([]byte, error) {
	if name, ok := s.rel(abs); ok {
		return s.ws.ReadFile(ctx, name)
	}
	f, err := s.rootFS(ctx)
	if err != nil {
		return nil, err
	}
	return f.ReadFile(ctx, strings.TrimPrefix(path.Clean(abs), "/"))
}

// isNotExist reports a file that is not there (or not a file).
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}

// languageID returns the LSP language id of a file for spec.
func languageID(spec Server, name string) string {
	if id, ok := spec.Languages[path.Ext(name)]; ok {
		return id
	}
	return "plaintext"
}

// uriOf returns the file URI of a workspace name.
func (s *Supervisor) uriOf(name string) string {
	u, _ := lspc.FileURI(path.Join(s.root, name))
	return u
}

// Resources reports each language server instance of the run for the
// operator console: its state, pid and binary.
func (s *Supervisor) Resources() []tools.Resource {
	var out []tools.Resource
	for _, in := range s.instances() {
		r := tools.Resource{Kind: "language server", Name: in.key.String(), State: "not running"}
		switch st := in.state(); {
		case st.gaveUp:
			r.State = "given up after crashes"
		case !st.started: // never started: "not running"
		case st.stopped != "":
			r.State = "stopped: " + st.stopped
		case st.alive && st.ready:
			r.State = "running"
			r.Detail = fmt.Sprintf("pid %d, %s, up %s, %d restarts", st.pid, st.binary, time.Since(st.up).Round(time.Second), st.restarts)
		case st.alive:
			r.State, r.Detail = "starting", st.binary
		default:
			r.State, r.Detail = "exited or failed", st.lastErr
		}
		out = append(out, r)
	}
	return out
}
