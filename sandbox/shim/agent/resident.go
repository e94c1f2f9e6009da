package agent

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The resident mode: "berth-shim resident [--grace=D] DIR" is a run's
// resident supervisor. Its keeper (keeper.go) starts "resident-serve" below
// it and outlives the exec that started it; the resident reads the run's
// secret from its stdin (one TypeHello frame), claims DIR, listens on
// DIR/sock, answers with a TypeResponse frame (its pid, or why it cannot
// run) and lets go of the exec's stdio. Every connection on the socket
// starts with a TypeHello frame holding the secret and one TypeRequest
// frame (a ResidentRequest); the resident answers with a TypeResponse
// frame (a ResidentResponse). A start or attach connection then carries
// the process's run protocol (frame.go): TypeStdin, TypeStdinEOF and
// TypeSignal from berth; TypeStdout, TypeStderr, TypeStdinAck and TypeExit
// from the resident, which closes the connection after TypeExit.
//
// Each program runs under a supervisor of its own ("run-supervised", the
// same as "run" mode's, with its process group, credentials, limits, wait
// delay and sweep), whose stdio the resident holds: berth going away
// closes nothing of the program's.
const (
	modeResident      = "resident"
	modeResidentServe = "resident-serve"
)

// TypeHello carries the resident's secret, berth to resident: the first
// frame of the stream that starts it and of every connection.
const TypeHello byte = 'h'

// TypePing is berth's sign of life on a hold connection, every
// ResidentPing; its payload is empty.
const TypePing byte = 'k'

// ResidentPing is how often berth pings on its hold connection, and
// ResidentHoldTimeout how long a hold connection may be silent before the
// resident counts that berth as gone and closes it. An engine may keep an
// exec's stdin open after its client died (containerd's shim holds the
// write side of the stdin FIFO), so the relay of a killed berth's
// connection never sees the end: silence is what tells.
const (
	ResidentPing        = 5 * time.Second
	ResidentHoldTimeout = 4 * ResidentPing
	// ProcessPing and ProcessPingTimeout are the same for a program berth
	// runs directly ("run --ping-timeout"), and FSIdleExit is how long a
	// file server waits for a request before it exits ("fs --idle-exit").
	ProcessPing        = ResidentPing
	ProcessPingTimeout = ResidentHoldTimeout
	FSIdleExit         = 30 * time.Second
)

// Operations of a ResidentRequest.
const (
	ResidentStart  = "start"  // start a program under Name
	ResidentAttach = "attach" // reconnect to the program Name
	ResidentList   = "list"   // list the programs
	ResidentSignal = "signal" // send Signal to the program Name's group
	ResidentClose  = "close"  // end everything, remove the directory, exit
	ResidentHold   = "hold"   // only keep the resident attached
)

// ResidentSocket is the name of the resident's socket in its directory.
const ResidentSocket = "sock"

// These mirror package sandbox's (the agent uses only the standard
// library); package shim checks that they agree.
const (
	DefaultResidentGrace = 10 * time.Minute
	MinResidentSecret    = 32
	ResidentBuffer       = 1 << 20
)

// KindStart is the error kind of a program that could not start.
const KindStart = "start"

// residentHelloTimeout bounds how long a connection may take to
// authenticate and send its request.
const residentHelloTimeout = 5 * time.Second

// residentSecretTimeout bounds how long the starting resident waits for
// its secret.
const residentSecretTimeout = 30 * time.Second

// acceptRetry is the pause after a failed accept.
const acceptRetry = 50 * time.Millisecond

// residentSupervisorWait bounds how long the resident waits for a program's
// supervisor to end once its stdin closed, before it kills it.
const residentSupervisorWait = 5 * time.Second

// ResidentRequest is what a connection asks of the resident.
type ResidentRequest struct {
	Op   string   `json:"op"`
	Name string   `json:"name,omitempty"`
	Args []string `json:"args,omitempty"` // start: the program and its arguments
	Env  []string `json:"env,omitempty"`  // start: added to the resident's environment
	Dir  string   `json:"dir,omitempty"`  // start: working directory
	User string   `json:"user,omitempty"` // start: "name", "uid" or "uid:gid"
	// Flags are "run" flags for the program's supervisor: --wait-delay,
	// --user, --nproc, --cgroup.
	Flags  []string `json:"flags,omitempty"`
	Signal int      `json:"signal,omitempty"`
}

// ResidentResponse answers a ResidentRequest, and the resident's start.
type ResidentResponse struct {
	Err *Error `json:"err,omitempty"`
	Pid int    `json:"pid,omitempty"` // start, attach: the program; the resident's own start: the resident
	// Inflight is, for attach, how many stdin bytes the program's
	// supervisor has not acknowledged yet: the attaching berth starts its
	// stdin window with them, and their acknowledgements come to it.
	Inflight int                  `json:"inflight,omitempty"`
	Procs    []ResidentProcStatus `json:"procs,omitempty"`
}

// ResidentProcStatus describes one program of the resident.
type ResidentProcStatus struct {
	Name   string   `json:"name"`
	Pid    int      `json:"pid"`
	Args   []string `json:"args"`
	Exited bool     `json:"exited,omitempty"`
}

// parseResident reads "[--grace=D] DIR".
func parseResident(args []string) (time.Duration, string, error) {
	grace := DefaultResidentGrace
	for len(args) > 1 {
		v, ok := strings.CutPrefix(args[0], "--grace=")
		if !ok {
			return 0, "", fmt.Errorf("unknown flag %q", args[0])
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, "", fmt.Errorf("bad --grace %q: want a positive duration such as 10m", v)
		}
		grace, args = d, args[1:]
	}
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		return 0, "", errors.New("want [--grace=D] DIR, DIR an absolute path")
	}
	return grace, filepath.Clean(args[0]), nil
}

// resident is the state of "resident-serve".
type resident struct {
	dir, sock string
	grace     time.Duration
	secret    []byte
	self      string // the agent's executable

	starts chan func() // run on the starter thread (see starter)

	reapMu sync.Mutex
	bySup  map[int]*resProc // supervisor pid to program

	mu      sync.Mutex
	procs   map[string]*resProc
	open    int  // hold connections: berths attached
	ending  bool // no new connections or programs
	idle    *time.Timer
	end     chan struct{} // closed by requestEnd
	endOnce sync.Once
	ended   chan struct{} // closed once everything ended and DIR is gone
	closers sync.WaitGroup
}

// serveResident is the resident below its keeper; it returns its exit code.
func serveResident(dir string, grace time.Duration) int {
	// Nobody of the run's, not even a process of the same user, may read
	// the secret from its memory.
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	answer := func(resp ResidentResponse) {
		b, _ := json.Marshal(resp)
		WriteFrame(os.Stdout, TypeResponse, b)
	}
	fail := func(kind, format string, a ...any) int {
		answer(ResidentResponse{Err: &Error{Op: modeResident, Path: dir, Kind: kind, Msg: fmt.Sprintf(format, a...)}})
		return 1
	}
	secret, err := readSecret(os.Stdin)
	if err != nil {
		return fail(KindOther, "%v", err)
	}
	lock, err := claimDir(dir)
	if err != nil {
		kind := KindOther
		if errors.Is(err, errResidentRuns) {
			kind = KindExist
		}
		return fail(kind, "%v", err)
	}
	defer syscall.Close(lock)
	sock := filepath.Join(dir, ResidentSocket)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(KindOther, "remove the stale socket %s: %v", sock, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fail(KindOther, "listen on %s: %v", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return fail(KindOther, "chmod %s: %v", sock, err)
	}
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	r := &resident{
		dir: dir, sock: sock, grace: grace, secret: secret, self: self,
		starts: make(chan func()),
		bySup:  make(map[int]*resProc),
		procs:  make(map[string]*resProc),
		end:    make(chan struct{}),
		ended:  make(chan struct{}),
	}
	go r.starter() // ends with the process
	go r.reap()    // ends with the process
	r.idle = time.AfterFunc(grace, r.expire)
	answer(ResidentResponse{Pid: os.Getpid()})
	// The exec's stream ends here; the resident runs on.
	releaseStdio()

	go r.accept(ln) // ends when ln closes
	select {
	case <-r.end:
	case <-sigs:
	}
	r.mu.Lock()
	r.ending = true
	r.idle.Stop()
	r.mu.Unlock()
	ln.Close()
	r.endAll()
	os.RemoveAll(dir)
	close(r.ended)
	// Let the connections that asked to close hear that it is done.
	done := make(chan struct{})
	go func() { r.closers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	return 0
}

// readSecret reads the one TypeHello frame the resident's secret comes in.
func readSecret(in io.Reader) ([]byte, error) {
	type res struct {
		b   []byte
		err error
	}
	c := make(chan res, 1)
	go func() { // ends with the read, or with the process
		typ, p, err := NewReader(in).Next()
		switch {
		case err != nil:
			c <- res{nil, fmt.Errorf("read the secret on stdin: %v", err)}
		case typ != TypeHello:
			c <- res{nil, fmt.Errorf("read the secret on stdin: frame %q, want %q", typ, TypeHello)}
		default:
			c <- res{append([]byte(nil), p...), nil}
		}
	}()
	select {
	case r := <-c:
		if r.err == nil && len(r.b) < MinResidentSecret {
			return nil, fmt.Errorf("the secret has %d bytes, want at least %d", len(r.b), MinResidentSecret)
		}
		return r.b, r.err
	case <-time.After(residentSecretTimeout):
		return nil, fmt.Errorf("no secret on stdin within %v", residentSecretTimeout)
	}
}

// errResidentRuns marks a directory another resident holds.
var errResidentRuns = errors.New("a resident already runs there")

// claimDir makes dir (0700), or takes over a stale one — a directory (not
// a symbolic link) owned by the resident's user, whose resident is gone —
// and locks it for the resident's life. It returns the locked descriptor.
func claimDir(dir string) (int, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return -1, fmt.Errorf("create %s: %v", dir, err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %v; it must be a directory, not a symbolic link", dir, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("stat %s: %v", dir, err)
	}
	if int(st.Uid) != os.Geteuid() {
		syscall.Close(fd)
		return -1, fmt.Errorf("%s belongs to uid %d, not to the resident's uid %d; choose another directory", dir, st.Uid, os.Geteuid())
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		syscall.Close(fd)
		if err == syscall.EWOULDBLOCK {
			return -1, fmt.Errorf("%s: %w; adopt it, or close it first", dir, errResidentRuns)
		}
		return -1, fmt.Errorf("lock %s: %v", dir, err)
	}
	if err := syscall.Fchmod(fd, 0o700); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("chmod %s: %v", dir, err)
	}
	return fd, nil
}

// removeDeadResidentDir removes the directory of a resident that did not
// end by itself (killed: it removes its directory when it ends), as its
// keeper does once the resident and its programs are gone: a directory
// of the keeper's user, not a symbolic link, and locked by no other
// resident (one that took it over keeps it). Its socket and anything a
// program left there go with it.
func removeDeadResidentDir(dir string) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return // gone already, or not a directory to remove
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || int(st.Uid) != os.Geteuid() {
		return
	}
	if syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // another resident holds it
	}
	os.RemoveAll(dir)
}

// starter starts the programs' supervisors, all from one thread kept for
// the resident's life: a child's parent-death signal is tied to the
// thread that started it.
func (r *resident) starter() {
	runtime.LockOSThread()
	for f := range r.starts {
		f()
	}
}

// reap collects the supervisors as they end.
func (r *resident) reap() {
	reapLoop(func(pid int, _ syscall.WaitStatus) {
		r.reapMu.Lock()
		p := r.bySup[pid]
		delete(r.bySup, pid)
		r.reapMu.Unlock()
		if p != nil {
			close(p.supDone)
		}
	})
}

// expire ends the resident when no berth held it during its grace.
func (r *resident) expire() {
	r.mu.Lock()
	idle := r.open == 0
	r.mu.Unlock()
	if idle {
		r.requestEnd()
	}
}

func (r *resident) requestEnd() { r.endOnce.Do(func() { close(r.end) }) }

// touch counts a hold connection opening (+1) or closing (-1) and runs
// the grace period while none is open.
func (r *resident) touch(d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open += d
	switch {
	case r.ending:
	case r.open == 0:
		r.idle.Reset(r.grace)
	case d > 0:
		r.idle.Stop()
	}
}

// accept serves connections until ln closes.
func (r *resident) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of descriptors, or an aborted connection: try again.
			time.Sleep(acceptRetry)
			continue
		}
		go r.serve(c) // ends with the connection
	}
}

// serve authenticates one connection and answers its request.
func (r *resident) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(residentHelloTimeout))
	fr := NewReader(c)
	respond := func(resp ResidentResponse) error {
		b, _ := json.Marshal(resp)
		return WriteFrame(c, TypeResponse, b)
	}
	typ, p, err := fr.Next()
	if err != nil || typ != TypeHello || subtle.ConstantTimeCompare(p, r.secret) != 1 {
		if err == nil {
			// The caller sends its request right behind the hello: read it
			// before answering, so that closing with it unread cannot
			// reset the connection (or fail a relay's write) under the
			// refusal, which the caller must get to say why.
			fr.Next()
			respond(ResidentResponse{Err: &Error{Op: "hello", Path: r.dir, Kind: KindPermission, Msg: "the resident refused the secret"}})
		}
		return
	}
	typ, p, err = fr.Next()
	if err != nil || typ != TypeRequest {
		return
	}
	var req ResidentRequest
	if err := json.Unmarshal(p, &req); err != nil {
		respond(ResidentResponse{Err: &Error{Op: "request", Kind: KindOther, Msg: err.Error()}})
		return
	}
	c.SetDeadline(time.Time{})
	// Only a berth's hold connection keeps the resident from its grace:
	// the connections of a berth that died may linger (see TypePing).
	hold := req.Op == ResidentHold
	r.mu.Lock()
	ending := r.ending
	if !ending {
		if hold {
			r.open++
			r.idle.Stop()
		}
		if req.Op == ResidentClose {
			r.closers.Add(1) // before ending can be set: the end waits for it
		}
	}
	r.mu.Unlock()
	if ending {
		respond(ResidentResponse{Err: &Error{Op: req.Op, Path: r.dir, Kind: KindNotExist, Msg: "the resident is ending"}})
		return
	}
	if hold {
		defer r.touch(-1)
	}

	fail := func(kind, format string, a ...any) {
		respond(ResidentResponse{Err: &Error{Op: req.Op, Path: req.Name, Kind: kind, Msg: fmt.Sprintf(format, a...)}})
	}
	switch req.Op {
	case ResidentHold:
		if respond(ResidentResponse{Pid: os.Getpid()}) != nil {
			return
		}
		// Held while berth pings; silence or the end of the stream lets go.
		for {
			c.SetReadDeadline(time.Now().Add(ResidentHoldTimeout))
			if _, _, err := fr.Next(); err != nil {
				return
			}
		}
	case ResidentList:
		respond(ResidentResponse{Procs: r.list()})
	case ResidentClose:
		defer r.closers.Done()
		r.requestEnd()
		<-r.ended
		respond(ResidentResponse{Pid: os.Getpid()})
	case ResidentSignal:
		proc := r.lookup(req.Name)
		if proc == nil {
			fail(KindNotExist, "no process named %q", req.Name)
			return
		}
		if !proc.exited() {
			proc.toSup(TypeSignal, PutUint32s(uint32(req.Signal)))
		}
		respond(ResidentResponse{Pid: proc.pid})
	case ResidentAttach:
		proc := r.lookup(req.Name)
		if proc == nil {
			fail(KindNotExist, "no process named %q", req.Name)
			return
		}
		proc.attach(c, fr, respond)
	case ResidentStart:
		proc, kind, err := r.start(&req)
		if err != nil {
			fail(kind, "%v", err)
			return
		}
		proc.attach(c, fr, respond)
	default:
		fail(KindOther, "unknown operation %q", req.Op)
	}
}

// lookup returns the program name, nil when there is none (or it was
// collected).
func (r *resident) lookup(name string) *resProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[name]
	if p == nil || p.pid == 0 {
		return nil
	}
	return p
}

func (r *resident) list() []ResidentProcStatus {
	r.mu.Lock()
	procs := make([]*resProc, 0, len(r.procs))
	for _, p := range r.procs {
		if p.pid != 0 {
			procs = append(procs, p)
		}
	}
	r.mu.Unlock()
	out := make([]ResidentProcStatus, 0, len(procs))
	for _, p := range procs {
		out = append(out, ResidentProcStatus{Name: p.name, Pid: p.pid, Args: p.args, Exited: p.exited()})
	}
	return out
}

// remove deletes p from the table once an attach collected its exit.
func (r *resident) remove(p *resProc) {
	r.mu.Lock()
	if r.procs[p.name] == p {
		delete(r.procs, p.name)
	}
	r.mu.Unlock()
}

// start starts req's program under a supervisor of its own and returns it
// once the supervisor reported it started; on failure the error kind says
// why.
func (r *resident) start(req *ResidentRequest) (*resProc, string, error) {
	if req.Name == "" || len(req.Args) == 0 {
		return nil, KindOther, errors.New("start needs a name and a program")
	}
	flags := append([]string(nil), req.Flags...)
	o, _, err := parseRun(append(append([]string(nil), flags...), "--", req.Args[0]))
	if err != nil {
		return nil, KindOther, err
	}
	if req.User != "" {
		if o.cred != nil {
			return nil, KindOther, fmt.Errorf("user %q: the sandbox runs its processes as a user of its own (--user); leave Cmd.User empty", req.User)
		}
		flag, err := userFlag(req.User)
		if err != nil {
			return nil, KindOther, err
		}
		flags = append(flags, flag)
	}
	p := &resProc{r: r, name: req.Name, args: req.Args, delay: o.delay, supDone: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	r.mu.Lock()
	switch {
	case r.ending:
		r.mu.Unlock()
		return nil, KindNotExist, errors.New("the resident is ending")
	case r.procs[req.Name] != nil:
		r.mu.Unlock()
		return nil, KindExist, fmt.Errorf("a process named %q exists already; attach to it, or choose another name", req.Name)
	}
	r.procs[req.Name] = p // reserved; lookup skips it until it has a pid
	r.mu.Unlock()
	pid, err := p.launch(flags, req)
	if err != nil {
		r.remove(p)
		return nil, KindStart, err
	}
	r.mu.Lock()
	p.pid = pid
	r.mu.Unlock()
	return p, "", nil
}

// userFlag resolves "name", "uid", "name:group" or "uid:gid" in the
// sandbox's user database into a --user flag.
func userFlag(spec string) (string, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	var uid, gid string
	var groups []string
	u, err := user.Lookup(name)
	if err != nil {
		u, err = user.LookupId(name)
	}
	switch {
	case err == nil:
		uid, gid = u.Uid, u.Gid
		groups, _ = u.GroupIds()
	case isNumber(name):
		uid, gid = name, name
	default:
		return "", fmt.Errorf("user %q: %v", spec, err)
	}
	if hasGroup {
		if g, err := user.LookupGroup(group); err == nil {
			gid = g.Gid
		} else if isNumber(group) {
			gid = group
		} else {
			return "", fmt.Errorf("group %q: %v", group, err)
		}
		groups = nil
	}
	return fmt.Sprintf("--user=%s:%s:%s", uid, gid, strings.Join(groups, ",")), nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

// endAll ends every program: SIGTERM to each group, SIGKILL after its wait
// delay, then the supervisors' stdin closes (they end whatever is left of
// their trees) and every supervisor is reaped, each step bounded.
func (r *resident) endAll() {
	r.mu.Lock()
	procs := make([]*resProc, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	var delay time.Duration
	for _, p := range procs {
		if p.pid != 0 && !p.exited() {
			p.toSup(TypeSignal, PutUint32s(uint32(syscall.SIGTERM)))
			delay = max(delay, p.delay)
		}
	}
	waitUntil(delay, func() bool { return allExited(procs) })
	for _, p := range procs {
		if p.pid != 0 && !p.exited() {
			p.toSup(TypeSignal, PutUint32s(uint32(syscall.SIGKILL)))
		}
	}
	// After SIGKILL a supervisor collects output for up to its delay
	// twice before it exits.
	waitUntil(2*delay+time.Second, func() bool { return allExited(procs) })
	for _, p := range procs {
		p.closeSup()
	}
	awaitSups(procs)
	for _, p := range procs {
		p.mu.Lock()
		a := p.att
		p.att = nil
		p.cond.Broadcast()
		p.mu.Unlock()
		if a != nil {
			a.close()
		}
	}
}

func allExited(procs []*resProc) bool {
	for _, p := range procs {
		if p.pid != 0 && !p.exited() {
			return false
		}
	}
	return true
}

// waitUntil polls cond until it holds or d passed.
func waitUntil(d time.Duration, cond func() bool) {
	deadline := time.Now().Add(d)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// resProc is one program of the resident, with its supervisor.
type resProc struct {
	r     *resident
	name  string
	args  []string
	pid   int // the program's; 0 while starting; guarded by r.mu until set
	delay time.Duration

	supPid  int
	supDone chan struct{} // closed when the supervisor was reaped
	inMu    sync.Mutex
	in      *os.File // the supervisor's stdin; the resident holds it
	diag    tailBytes

	mu          sync.Mutex
	cond        *sync.Cond // broadcast when anything below changes
	out, errOut outBuf     // kept output, at most ResidentBuffer each
	dropped     int64      // output dropped while detached
	outstanding int        // stdin bytes the supervisor has not acknowledged
	acks        int        // acknowledged bytes not yet passed to att
	exit        []byte     // the exit frame's payload, once it came
	att         *attachment
	collected   bool // an attach received the exit
}

// attachment is a berth connection to a program.
type attachment struct {
	c    net.Conn
	once sync.Once
}

func (a *attachment) close() { a.once.Do(func() { a.c.Close() }) }

// launch starts the program's supervisor and waits for its first frame.
func (p *resProc) launch(flags []string, req *ResidentRequest) (int, error) {
	inR, inW, err1 := os.Pipe()
	outR, outW, err2 := os.Pipe()
	errR, errW, err3 := os.Pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeFiles(inR, inW, outR, outW, errR, errW)
		return 0, fmt.Errorf("create pipes: %v", err)
	}
	argv := append([]string{p.r.self, modeSupervise}, flags...)
	argv = append(append(argv, "--"), req.Args...)
	attr := &os.ProcAttr{
		Dir:   req.Dir,
		Env:   append(os.Environ(), req.Env...),
		Files: []*os.File{inR, outW, errW},
		// A resident killed outright takes the supervisors with it, which
		// end their programs; the keeper reaps and sweeps the rest.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM},
	}
	started := make(chan error, 1)
	p.r.starts <- func() {
		p.r.reapMu.Lock()
		defer p.r.reapMu.Unlock()
		proc, err := os.StartProcess(p.r.self, argv, attr)
		if err != nil {
			started <- err
			return
		}
		p.supPid = proc.Pid
		p.r.bySup[proc.Pid] = p
		proc.Release()
		started <- nil
	}
	err := <-started
	closeFiles(inR, outW, errW) // the supervisor's ends
	if err != nil {
		closeFiles(inW, outR, errR)
		if req.Dir != "" {
			if _, serr := os.Stat(req.Dir); serr != nil {
				return 0, fmt.Errorf("working directory: %v", serr)
			}
		}
		return 0, fmt.Errorf("start the supervisor: %v", err)
	}
	p.in = inW
	go func() { io.Copy(&p.diag, errR); errR.Close() }() // ends with the supervisor
	first := make(chan startResult, 1)
	go p.pump(outR, first) // ends with the supervisor's output
	var res startResult
	select {
	case res = <-first:
	case <-time.After(residentSecretTimeout):
		res.err = errors.New("the supervisor did not report the start")
	}
	if res.err != nil {
		p.closeSup()
		awaitSups([]*resProc{p})
		return 0, res.err
	}
	return res.pid, nil
}

// closeFiles closes each file that is not nil.
func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

type startResult struct {
	pid int
	err error
}

// pump reads the supervisor's frames: the start, then output, stdin
// acknowledgements and the exit.
func (p *resProc) pump(outR *os.File, first chan<- startResult) {
	defer outR.Close()
	fr := NewReader(outR)
	typ, payload, err := fr.Next()
	switch {
	case err != nil:
		select { // let the diagnostics come in
		case <-p.supDone:
		case <-time.After(time.Second):
		}
		first <- startResult{err: fmt.Errorf("the supervisor ended before it started the program: %s", strings.TrimSpace(p.diag.String()))}
		return
	case typ == TypeStartFail:
		first <- startResult{err: errors.New(string(payload))}
		return
	case typ != TypeStarted:
		first <- startResult{err: fmt.Errorf("unexpected first frame %q from the supervisor", typ)}
		return
	}
	v, err := Uint32s(payload, 1)
	if err != nil {
		first <- startResult{err: err}
		return
	}
	first <- startResult{pid: int(v[0])}
	for {
		typ, payload, err := fr.Next()
		if err != nil {
			p.mu.Lock()
			if p.exit == nil {
				p.errOut.b = append(p.errOut.b, "berth: the supervisor of this process ended without its exit status (killed?)\n"...)
				p.exit = PutUint32s(uint32(0xffffffff), uint32(syscall.SIGKILL))
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			return
		}
		switch typ {
		case TypeStdout:
			p.keep(&p.out, payload)
		case TypeStderr:
			p.keep(&p.errOut, payload)
		case TypeStdinAck:
			if v, err := Uint32s(payload, 1); err == nil {
				p.mu.Lock()
				p.outstanding -= int(v[0])
				if p.att != nil {
					p.acks += int(v[0])
				}
				p.cond.Broadcast()
				p.mu.Unlock()
			}
		case TypeExit:
			p.mu.Lock()
			p.exit = append([]byte(nil), payload...)
			p.cond.Broadcast()
			p.mu.Unlock()
		}
	}
}

// keep adds output to buf. While a berth is attached, a full buffer holds
// the supervisor back (as a pipe would); while none is, the oldest output
// is dropped and counted.
func (p *resProc) keep(buf *outBuf, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.att != nil && len(buf.b)+len(b) > ResidentBuffer {
		p.cond.Wait()
	}
	buf.b = append(buf.b, b...)
	if over := len(buf.b) - ResidentBuffer; over > 0 {
		buf.b = buf.b[over:]
		buf.front += int64(over)
		p.dropped += int64(over)
	}
	p.cond.Broadcast()
}

// outBuf is one output stream's kept bytes.
type outBuf struct {
	b     []byte
	front int64 // the stream offset of b[0]
}

// consume removes, once written, the n bytes that were at stream offset
// off, or what of them is still there.
func (o *outBuf) consume(off int64, n int) {
	if k := off + int64(n) - o.front; k > 0 {
		k = min(k, int64(len(o.b)))
		o.b = o.b[k:]
		o.front += k
	}
}

func (p *resProc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit != nil
}

// toSup writes one frame to the supervisor.
func (p *resProc) toSup(typ byte, payload []byte) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.in == nil {
		return os.ErrClosed
	}
	return WriteFrame(p.in, typ, payload)
}

// closeSup closes the supervisor's stdin: it ends what is left of its
// program's tree and exits.
func (p *resProc) closeSup() {
	p.inMu.Lock()
	if p.in != nil {
		p.in.Close()
		p.in = nil
	}
	p.inMu.Unlock()
}

// awaitSups waits (bounded) until the supervisors were reaped, and kills
// those that take too long: each step has one deadline for all of them.
func awaitSups(procs []*resProc) {
	for _, sig := range []syscall.Signal{0, syscall.SIGKILL} {
		deadline := time.NewTimer(residentSupervisorWait)
		for _, p := range procs {
			if p.supPid == 0 {
				continue
			}
			if sig != 0 {
				select {
				case <-p.supDone:
					continue
				default:
					syscall.Kill(p.supPid, sig)
				}
			}
			select {
			case <-p.supDone:
			case <-deadline.C:
				deadline.Reset(0) // passed: the rest are not waited for
			}
		}
		deadline.Stop()
	}
}

// attach makes c the program's connection, taking over from an earlier
// one, answers the request, and serves the connection until it ends: what
// was kept comes first (with a note of what was dropped), then the
// program's output as it comes, and its exit.
func (p *resProc) attach(c net.Conn, fr *Reader, respond func(ResidentResponse) error) {
	a := &attachment{c: c}
	p.mu.Lock()
	if p.collected {
		p.mu.Unlock()
		respond(ResidentResponse{Err: &Error{Op: ResidentAttach, Path: p.name, Kind: KindNotExist, Msg: fmt.Sprintf("no process named %q", p.name)}})
		return
	}
	old := p.att
	p.att = a
	inflight := p.outstanding
	p.acks = 0
	var note string
	if p.dropped > 0 {
		note = fmt.Sprintf("berth: %d bytes of output were dropped while no berth was attached\n", p.dropped)
		p.dropped = 0
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	if old != nil {
		old.close()
	}
	ok := respond(ResidentResponse{Pid: p.pid, Inflight: inflight}) == nil
	if ok && note != "" {
		ok = WriteFrame(c, TypeStderr, []byte(note)) == nil
	}
	done := make(chan struct{})
	if ok {
		go func() { p.write(a); close(done) }()
		p.read(a, fr)
	} else {
		close(done)
	}
	p.mu.Lock()
	if p.att == a {
		p.att = nil
		p.cond.Broadcast()
	}
	p.mu.Unlock()
	a.close()
	<-done
}

// read passes berth's frames on a to the supervisor until a ends.
func (p *resProc) read(a *attachment, fr *Reader) {
	for {
		typ, payload, err := fr.Next()
		if err != nil {
			return
		}
		switch typ {
		case TypeStdin:
			p.mu.Lock()
			current := p.att == a
			if current {
				p.outstanding += len(payload)
			}
			p.mu.Unlock()
			if !current {
				return
			}
			p.toSup(typ, payload)
		case TypeStdinEOF, TypeSignal:
			p.toSup(typ, payload)
		}
	}
}

// write sends the program's output, stdin acknowledgements and exit to a
// while it is the program's connection. Output leaves the buffer only once
// written, so that a connection taken over mid-write loses nothing.
func (p *resProc) write(a *attachment) {
	buf := make([]byte, HeaderSize+outputChunk)
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for p.att == a && len(p.out.b) == 0 && len(p.errOut.b) == 0 && p.acks == 0 && p.exit == nil {
			p.cond.Wait()
		}
		if p.att != a {
			return
		}
		var src *outBuf
		var frame []byte
		var off int64
		n := 0
		exit := false
		switch {
		case p.acks > 0:
			frame = append(buf[:0:0], 0, 0, 0, 0, 0)
			frame = append(frame, PutUint32s(uint32(p.acks))...)
			PutHeader(frame, TypeStdinAck, 4)
			p.acks = 0
		case len(p.out.b) > 0 || len(p.errOut.b) > 0:
			typ := byte(TypeStdout)
			src = &p.out
			if len(p.out.b) == 0 {
				typ, src = TypeStderr, &p.errOut
			}
			off = src.front
			n = copy(buf[HeaderSize:], src.b)
			PutHeader(buf, typ, n)
			frame = buf[:HeaderSize+n]
		default:
			frame = append(buf[:0:0], 0, 0, 0, 0, 0)
			frame = append(frame, p.exit...)
			PutHeader(frame, TypeExit, len(p.exit))
			exit = true
		}
		p.mu.Unlock()
		_, err := a.c.Write(frame)
		p.mu.Lock()
		if err != nil {
			if p.att == a {
				p.att = nil
				p.cond.Broadcast()
			}
			a.close()
			return
		}
		if src != nil {
			// Written is delivered, also when the connection was let go
			// meanwhile; a connection that took over may have sent it too.
			src.consume(off, n)
			p.cond.Broadcast()
		}
		if p.att != a {
			return
		}
		if exit {
			p.collected = true
			p.att = nil
			p.mu.Unlock()
			p.r.remove(p)
			a.close()
			p.mu.Lock()
			return
		}
	}
}

// tailBytes keeps the first bytes written to it, for diagnostics.
type tailBytes struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBytes) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4<<10 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (b *tailBytes) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// prSetPdeathsig and prSetDumpable are from linux/prctl.h.
const (
	prSetPdeathsig = 1
	prSetDumpable  = 4
)
