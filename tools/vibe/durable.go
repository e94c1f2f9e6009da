package vibe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"berth.dev/berth/tools"
)

// Workers that outlive berth: a Supervisor's table is a persister
// (Generation, Snapshot) that the run's store keeps, and Restore hands it
// to the supervisor of the next berth. An ended worker comes back as it
// was (its result for vibe_wait and vibe_list). A worker that was running
// when berth went away comes back running when its runner can take the
// attempt up again ([Resumer]: the platform runner, whose agent loop runs
// outside berth and reports when it is done); otherwise its attempt ended
// with that berth, and it comes back failed, saying so.

// ErrDetached is the cause with which a worker's attempt is cancelled when
// berth shuts down and the run lives on ([Supervisor.Detach]): a runner
// whose work goes on outside berth must not stop it then.
var ErrDetached = errors.New("vibe: berth let go of the run; the next berth takes its workers up")

// Resumer is a [Runner] that can take up an attempt an earlier berth
// started: Resume is Run without starting anything anew.
type Resumer interface {
	Resume(ctx context.Context, job Job) (string, error)
}

// snapshot is a Supervisor's table as stored.
type snapshot struct {
	NextID  int           `json:"next_id"`
	Workers []workerState `json:"workers"`
}

// workerState is one worker as stored.
type workerState struct {
	ID       string        `json:"id"`
	Label    string        `json:"label"`
	Tier     string        `json:"tier"`
	Token    string        `json:"token"`
	Surface  tools.Surface `json:"surface"`
	Brief    string        `json:"brief"`
	Messages []string      `json:"messages,omitempty"`
	Queued   []string      `json:"queued,omitempty"`
	Status   string        `json:"status"`
	Attempt  int           `json:"attempt"`
	Started  time.Time     `json:"started"`
	Ended    time.Time     `json:"ended,omitzero"`
	Progress string        `json:"progress,omitempty"`
	Result   string        `json:"result,omitempty"`
}

// Generation changes whenever the table does.
func (s *Supervisor) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Snapshot returns the table, for a restarted berth's Restore. It holds
// each worker's token: store it as a secret.
func (s *Supervisor) Snapshot() ([]byte, error) {
	s.mu.Lock()
	snap := snapshot{NextID: s.nextID}
	for _, id := range s.idsLocked() {
		w := s.workers[id]
		snap.Workers = append(snap.Workers, workerState{
			ID: w.id, Label: w.label, Tier: w.tier, Token: w.token, Surface: w.surface, Brief: w.brief,
			Messages: w.messages, Queued: w.queued, Status: w.status, Attempt: w.attempt,
			Started: w.started, Ended: w.ended, Progress: w.progress, Result: w.result,
		})
	}
	s.mu.Unlock()
	return json.Marshal(snap)
}

// Restore takes over the table of a Snapshot an earlier berth took, before
// the run's first call: ended workers as they were, running ones resumed
// (a [Resumer] runner) or failed with why. It returns what could not be
// taken up.
func (s *Supervisor) Restore(b []byte) ([]string, error) {
	var snap snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("vibe: the stored worker table does not decode: %w", err)
	}
	resumer, canResume := s.opts.Runner.(Resumer)
	var lost []string
	s.mu.Lock()
	if len(s.workers) > 0 {
		s.mu.Unlock()
		return nil, errors.New("vibe: Restore after workers started")
	}
	s.nextID = snap.NextID
	var notes []WorkerInfo
	for _, st := range snap.Workers {
		if st.ID == "" || len(s.workers) >= MaxWorkers {
			continue
		}
		w := &worker{id: st.ID, label: st.Label, tier: st.Tier, token: st.Token, surface: st.Surface, brief: st.Brief,
			messages: st.Messages, queued: st.Queued, status: st.Status, attempt: st.Attempt,
			started: st.Started, ended: st.Ended, progress: st.Progress, result: st.Result, changed: make(chan struct{})}
		s.workers[w.id] = w
		if w.status != StatusRunning {
			continue
		}
		if canResume {
			s.goLocked(w, resumer.Resume)
			continue
		}
		// Its attempt ran in the berth that went away (an agent loop, or
		// a command on that berth's exec stream).
		w.status = StatusFailed
		w.ended = time.Now()
		w.result = clip(fmt.Sprintf("berth restarted during attempt %d, and this worker's runner ended with it; its edits so far stay in the workspace: vibe_send it to run again", w.attempt), MaxResultChars)
		lost = append(lost, fmt.Sprintf("vibe worker %s (%s): its attempt %d ended with the earlier berth", w.id, w.label, w.attempt))
		if len(w.queued) > 0 {
			w.messages = append(w.messages, w.queued...)
			w.queued = nil
			s.startLocked(w)
		}
		notes = append(notes, w.infoLocked(time.Now()))
	}
	s.gen++
	s.mu.Unlock()
	for _, n := range notes { // the event stream hears what changed
		s.notify(n)
	}
	return lost, nil
}

// Resume waits for the platform's report on an attempt an earlier berth
// published: the platform's agent loop went on without berth.
func (r *platformRunner) Resume(ctx context.Context, job Job) (string, error) {
	return r.wait(ctx, job)
}

// Detach stops the attempts that run in berth, for a berth that shuts down
// while the run lives on: each attempt is cancelled with ErrDetached (a
// platform's worker goes on), nothing is marked killed, and the table as
// it was stays for the next berth's Restore.
func (s *Supervisor) Detach() error {
	s.mu.Lock()
	s.closed = true
	s.detached = true
	for _, w := range s.workers {
		if w.detach != nil {
			w.detach()
		}
	}
	s.mu.Unlock()
	return s.waitAttempts()
}
