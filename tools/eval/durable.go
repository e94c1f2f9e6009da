package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"berth.dev/berth/kernel"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools/internal/proc"
)

// handle is what a restarted berth needs to adopt one kernel: its
// process under the run's resident supervisor and its connection file
// (with the key, so the snapshot is as secret as the store it goes to).
type handle struct {
	Lang      string                `json:"lang"`
	Kind      string                `json:"kind"`
	Binary    string                `json:"binary"`
	Dir       string                `json:"dir"`
	Resident  string                `json:"resident"`
	Interrupt string                `json:"interrupt"`
	Started   time.Time             `json:"started"`
	Cells     int                   `json:"cells"`
	Conn      kernel.ConnectionInfo `json:"conn"`
}

// snapshot is the supervisor's durable state.
type snapshot struct {
	Seq     int      `json:"seq"`
	Kernels []handle `json:"kernels"`
}

// Generation changes whenever the set of kernels does, so that the owner
// of the run's store rewrites the Snapshot only then.
func (s *Supervisor) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Snapshot returns the handles of the kernels that run under the run's
// resident supervisor, for Adopt in a restarted berth. Kernels that run
// as plain processes end with berth and are not in it.
func (s *Supervisor) Snapshot() ([]byte, error) {
	s.mu.Lock()
	snap := snapshot{Seq: s.seq, Kernels: []handle{}}
	for _, k := range s.kernels {
		if k.resident == "" || k.client == nil {
			continue
		}
		snap.Kernels = append(snap.Kernels, handle{Lang: k.lang, Kind: k.kind, Binary: k.binary, Dir: k.dir,
			Resident: k.resident, Interrupt: k.interrupt, Started: k.started, Cells: k.cells, Conn: k.conn})
	}
	s.mu.Unlock()
	return json.Marshal(snap)
}

// Adopt takes over the kernels of a Snapshot taken by an earlier berth for
// this run: each is reattached under res, the run's resident supervisor,
// and connected to again, with its state (variables, imports, loaded
// data) as it was. A kernel that cannot be adopted is left for res to end
// and its language starts afresh on its next cell, with a note saying
// that its state was lost and why; so is every kernel when data is
// unreadable. Adopt is called once, before the first call.
func (s *Supervisor) Adopt(ctx context.Context, res sandbox.Resident, data []byte) error {
	var snap snapshot
	if err := json.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("eval: the stored kernels of this run are unreadable (%v); their state is lost and the next cell starts a new kernel", err)
	}
	s.mu.Lock()
	s.seq = max(s.seq, snap.Seq)
	s.mu.Unlock()
	var errs []error
	for _, h := range snap.Kernels {
		k, err := s.adopt(ctx, res, h)
		s.mu.Lock()
		if err != nil {
			s.notes[h.Lang] = append(s.notes[h.Lang], fmt.Sprintf("berth restarted and could not take over the %s kernel (%v): all its state (variables, imports, loaded data) was lost; this cell ran on a new kernel, so run the setup cells again", h.Lang, err))
			errs = append(errs, err)
		} else {
			s.notes[h.Lang] = append(s.notes[h.Lang], fmt.Sprintf("berth restarted; the %s kernel (pid %d) was kept with its state", h.Lang, k.proc.Pid()))
			s.kernels[h.Lang] = k
			s.gen++
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// adopt reattaches one kernel.
//
// Connecting waits as long as the kernel's heartbeat answers, bounded only
// by ctx: a kernel running a cell answers kernel_info only once the cell
// ends, which may be long after berth restarted (kernel.Config.Busy).
// Before, a 20 s bound gave such a kernel up and lost its state.
func (s *Supervisor) adopt(ctx context.Context, res sandbox.Resident, h handle) (*kern, error) {
	k := &kern{lang: h.Lang, kind: h.Kind, binary: h.Binary, dir: h.Dir, resident: h.Resident, interrupt: h.Interrupt,
		started: h.Started, cells: h.Cells, conn: h.Conn, stderr: proc.NewTail(8192), exited: make(chan struct{}), sb: s.sb}
	pctx, pcancel := context.WithCancel(s.runCtx)
	p, err := res.Attach(pctx, h.Resident, &sandbox.Cmd{Stdout: k.stderr, Stderr: k.stderr, WaitDelay: 2 * time.Second})
	if err != nil {
		pcancel()
		return nil, fmt.Errorf("its process is gone: %w", err)
	}
	k.proc, k.cancel = p, pcancel
	go func() {
		p.Wait()
		close(k.exited)
	}()
	select {
	case <-k.exited:
		pcancel()
		st, _ := p.Wait()
		msg := "it ended while berth was away (" + st.String() + ")"
		if t := strings.TrimSpace(k.stderr.String()); t != "" {
			msg += "; its last output: " + proc.Clip(t, 600)
		}
		return nil, errors.New(msg)
	default:
	}
	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-k.exited:
			ccancel()
		case <-cctx.Done():
		}
	}()
	client, err := s.connectKernel(cctx, h.Conn, true)
	ccancel()
	if err != nil {
		pcancel()
		return nil, fmt.Errorf("it does not answer: %w", err)
	}
	k.client = client
	return k, nil
}

// Detach lets go of the kernels without ending them, for a berth that
// shuts down while its runs live on: clients close, and the kernels run on
// under the run's resident supervisor for the next berth to Adopt. Later
// calls are refused as after Close.
func (s *Supervisor) Detach() error {
	var errs []error
	for _, k := range s.takeKernels() {
		if k.resident == "" {
			errs = append(errs, k.stop(context.Background())) // a plain process ends with berth anyway
			continue
		}
		k.client.Close()
	}
	return errors.Join(errs...)
}

// endWait bounds ending a resident kernel's process group through a fresh
// attach: TERM, KILL after the wait delay, and the exit's report.
const endWait = 15 * time.Second

// streamLost says whether k's process handle ended without the process's
// exit status: the stream to it broke (a `berth-shim dial` relay killed,
// the engine's connections cut), which says nothing of the kernel itself.
func (k *kern) streamLost() bool {
	if k.resident == "" {
		return false
	}
	select {
	case <-k.exited:
		_, err := k.proc.Wait()
		return err != nil
	default:
		return false
	}
}

// reattach takes k over again through the run's resident supervisor when
// its process still runs there: a fresh attach to its process and a fresh
// client on its connection file (as Adopt does after a restart), waiting
// for a busy kernel as long as its heartbeat answers. It returns the
// kernel that replaces k, with its state, and installs it; or why it
// cannot, in which case the process (if the attach reached it) has been
// ended. A kernel that runs as a plain process, or whose process really
// exited, cannot be reattached.
func (s *Supervisor) reattach(ctx context.Context, k *kern) (*kern, error) {
	if k.resident == "" {
		return nil, errors.New("it runs as a plain process, not under the run's resident supervisor")
	}
	select {
	case <-k.exited:
		if _, err := k.proc.Wait(); err == nil {
			return nil, errors.New("its process exited")
		}
	default:
	}
	res, err := s.resident(ctx)
	if err != nil || res == nil {
		return nil, fmt.Errorf("the run's resident supervisor cannot be reached: %v", err)
	}
	k.client.Close()
	nk, err := s.adopt(ctx, res, handle{Lang: k.lang, Kind: k.kind, Binary: k.binary, Dir: k.dir, Resident: k.resident,
		Interrupt: k.interrupt, Started: k.started, Cells: k.cells, Conn: k.conn})
	if err != nil {
		return nil, err
	}
	// The fresh attach took the process over: the old handle's stream
	// ends, and only then is its context let go (cancelling it while the
	// stream lived would signal the kernel).
	t := time.NewTimer(endWait)
	select {
	case <-k.exited:
	case <-t.C:
	}
	t.Stop()
	k.cancel()
	nk.notes = nil
	s.mu.Lock()
	if s.kernels[k.lang] == k {
		s.kernels[k.lang] = nk
		s.gen++
	}
	s.mu.Unlock()
	return nk, nil
}

// endResident ends the resident process name's process group through a
// fresh attach (SIGTERM, then SIGKILL), for a kernel whose own handle
// lost its stream: ending it there would signal nothing.
func endResident(ctx context.Context, res sandbox.Resident, name string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endWait)
	defer cancel()
	pctx, pcancel := context.WithCancel(ctx)
	p, err := res.Attach(pctx, name, &sandbox.Cmd{WaitDelay: 2 * time.Second})
	if err != nil {
		pcancel()
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil // gone already
		}
		return err
	}
	pcancel()
	done := make(chan struct{})
	go func() {
		p.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("eval: the kernel %s did not end after SIGKILL: %w", name, ctx.Err())
	}
}

// sweep ends every process of lang's kernels that still runs under the
// run's resident supervisor, before a new kernel of lang starts there:
// one kernel per run, even when an earlier one's stream broke and its
// stop could not reach it.
func (s *Supervisor) sweep(ctx context.Context, res sandbox.Resident, lang string) error {
	procs, err := res.Processes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range procs {
		if !strings.HasPrefix(p.Name, "eval-"+lang+"-") {
			continue
		}
		errs = append(errs, endResident(ctx, res, p.Name))
	}
	return errors.Join(errs...)
}
