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
