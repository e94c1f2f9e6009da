// Package vibe is vibe mode (docs/tools.md §10): background workers the lead
// agent starts with a brief and collects later. Five read-level tools
// drive them — vibe_spawn, vibe_send, vibe_wait, vibe_kill and
// vibe_list; the gate belongs on the workers' own tools, where the editing
// happens.
//
// A [Supervisor] holds one run's worker table. Each worker runs its brief
// through a pluggable [Runner]: [Command] runs a configured agent command in
// the run's sandbox, [OpenAI] runs berth's own agent loop against an
// OpenAI-compatible endpoint with a sub-run's tools, and [Platform] hands
// the work to a hosting platform's agent loop through published events and
// takes its progress and result back through [Supervisor.Report].
//
// vibe_send on a worker that is still running queues the message: the
// current attempt finishes undisturbed (it may be halfway through edits),
// then the worker runs again with every queued message appended to its
// brief. vibe_wait waits for that last run. vibe_send on a worker that has
// ended runs it again at once.
//
// vibe_kill and the run's close cancel a worker's attempt; the runner stops
// everything it started (the command runner's whole process group goes)
// before the worker counts as killed.
package vibe

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/tools"
)

// Tiers (VIBE-1).
const (
	// TierFast is for mechanical work with a clear specification.
	TierFast = "fast"
	// TierGood is for design, judgement, or reviewing a fast worker's output.
	TierGood = "good"
)

// Worker statuses.
const (
	StatusRunning = "running"
	StatusDone    = "done"
	StatusFailed  = "failed"
	StatusKilled  = "killed"
)

// Defaults and caps.
const (
	// DefaultMaxWorkers bounds the workers running at once in one run.
	DefaultMaxWorkers = 8
	// MaxWorkers bounds the worker table of a run, ended workers included.
	MaxWorkers = 64
	// DefaultWaitTimeout is how long vibe_wait waits without timeout_seconds.
	DefaultWaitTimeout = 10 * time.Minute
	// MaxWaitTimeout bounds timeout_seconds.
	MaxWaitTimeout = 30 * time.Minute
	// MaxResultChars bounds the result kept of an attempt; head and tail are kept.
	MaxResultChars = 20_000
	// MaxListResultChars bounds the result vibe_list shows per worker.
	MaxListResultChars = 300
	// MaxBriefChars bounds a brief and each follow-up message.
	MaxBriefChars = 100_000
	// MaxLabelChars bounds a label.
	MaxLabelChars = 80
	// stopTimeout bounds waiting for a cancelled attempt to end: the
	// sandbox's TERM, WaitDelay, KILL and the output drain.
	stopTimeout = 30 * time.Second
)

// Options configure a [Supervisor].
type Options struct {
	// Runner runs the workers' attempts. Required.
	Runner Runner
	// MaxRunning bounds the workers running at once (default
	// DefaultMaxWorkers).
	MaxRunning int
	// Notify, when set, is called after every change of a worker's status
	// or progress, with a snapshot, for an event stream or a card. It runs
	// with no lock held and must not block for long.
	Notify func(WorkerInfo)
}

// WorkerInfo is a snapshot of one worker.
type WorkerInfo struct {
	ID       string        `json:"id"`
	Label    string        `json:"label"`
	Tier     string        `json:"tier"`
	Status   string        `json:"status"`
	Attempt  int           `json:"attempt"`
	Queued   int           `json:"queued"`             // vibe_send messages waiting for the current attempt to end
	Elapsed  time.Duration `json:"elapsed"`            // of the current or last attempt
	Progress string        `json:"progress,omitempty"` // the platform's last progress note while running
	Result   string        `json:"result,omitempty"`   // the last attempt's result or failure
}

// Supervisor owns the workers of one run. It is safe for concurrent use.
type Supervisor struct {
	opts   Options
	ctx    context.Context // the run's; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per attempt goroutine

	mu       sync.Mutex // guards the fields below; never held across a Run
	workers  map[string]*worker
	nextID   int
	closed   bool
	detached bool   // Detach: berth let go of the run; the table stays as it was
	gen      uint64 // counts changes of the table (Generation)
}

// worker is one row of the table; its fields are guarded by Supervisor.mu.
type worker struct {
	id, label, tier string
	token           string        // the worker's secret (Job.Token); never in WorkerInfo
	surface         tools.Surface // the narrowest surface that spawned or sent to it
	brief           string
	messages        []string // follow-ups that have been run or are running
	queued          []string // follow-ups waiting for the current attempt to end
	status          string
	attempt         int
	started, ended  time.Time // of the current or last attempt
	progress        string
	result          string
	killed          bool
	cancel          context.CancelFunc // ends the current attempt
	detach          func()             // ends it for a berth that lets go of the run (cause ErrDetached)
	reports         chan Report        // the current attempt's platform reports
	attemptDone     chan struct{}      // closed when the current attempt's goroutine has finished
	changed         chan struct{}      // closed and replaced on every change
}

// New returns a supervisor whose workers live at most as long as runCtx.
// Call [Supervisor.Close] when the run closes.
func New(runCtx context.Context, opts Options) *Supervisor {
	if opts.Runner == nil {
		panic("vibe: Options.Runner is required")
	}
	if opts.MaxRunning <= 0 {
		opts.MaxRunning = DefaultMaxWorkers
	}
	ctx, cancel := context.WithCancel(runCtx)
	return &Supervisor{opts: opts, ctx: ctx, cancel: cancel, workers: map[string]*worker{}}
}

// Register adds vibe_spawn, vibe_send, vibe_wait, vibe_kill and vibe_list
// to r, bound to a new supervisor, and returns the supervisor; the caller
// closes it when the run closes.
func Register(r *tools.Registry, runCtx context.Context, opts Options) *Supervisor {
	s := New(runCtx, opts)
	t := Tools()
	tools.Register(r, t[0], s.spawn)
	tools.Register(r, t[1], s.send)
	tools.Register(r, t[2], s.wait)
	tools.Register(r, t[3], s.kill)
	tools.Register(r, t[4], s.list)
	return s
}

// Tools returns the vibe_* tools as a registry lists them: vibe_spawn,
// vibe_send, vibe_wait, vibe_kill and vibe_list, in that order.
func Tools() []tools.Tool {
	return []tools.Tool{
		{Name: "vibe_spawn", Level: tools.LevelRead, Description: spawnDescription},
		{Name: "vibe_send", Level: tools.LevelRead, Description: sendDescription},
		{Name: "vibe_wait", Level: tools.LevelRead, Description: waitDescription},
		{Name: "vibe_kill", Level: tools.LevelRead, Description: killDescription},
		{Name: "vibe_list", Level: tools.LevelRead, Description: listDescription},
	}
}

const (
	spawnDescription = "Start a background worker on a self-contained task and return its id at once; the worker keeps running while you do other work. " +
		"Write the brief as a complete specification: goal, files, constraints, how to verify, what to report. " +
		"tier: fast (default) for mechanical work with a clear specification, good for design, judgement, or reviewing a fast worker's output. " +
		"Collect the result with vibe_wait."
	sendDescription = "Append a follow-up message to a worker's brief and run it again with its previous result. " +
		"If the worker is still running, the message is queued and the worker runs again when its current attempt ends."
	waitDescription = "Block until a worker is done (including runs queued by vibe_send) and return its result. " +
		"timeout_seconds (default 600, at most 1800) returns the current status when it passes; that is not an error — wait again or do other work."
	killDescription = "Stop a worker and every process it started. Its edits so far stay in the workspace."
	listDescription = "List this run's workers: id, label, tier, status, elapsed time and the start of the last result."
)

// SpawnInput is vibe_spawn's arguments.
type SpawnInput struct {
	Brief string `json:"brief" jsonschema:"the complete task: goal, files, constraints, how to verify, what to report back"`
	Label string `json:"label" jsonschema:"a few words naming the task, shown in vibe_list"`
	Tier  string `json:"tier,omitempty" jsonschema:"fast (default: mechanical work with a clear specification) or good (design, judgement, review)"`
}

// SendInput is vibe_send's arguments.
type SendInput struct {
	WorkerID string `json:"worker_id" jsonschema:"the id vibe_spawn returned, e.g. w1"`
	Message  string `json:"message" jsonschema:"the follow-up to append to the worker's brief"`
}

// WaitInput is vibe_wait's arguments.
type WaitInput struct {
	WorkerID       string `json:"worker_id" jsonschema:"the id vibe_spawn returned, e.g. w1"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"how long to wait before returning the current status (default 600, at most 1800)"`
}

// KillInput is vibe_kill's arguments.
type KillInput struct {
	WorkerID string `json:"worker_id" jsonschema:"the id vibe_spawn returned, e.g. w1"`
}

// ListInput is vibe_list's (empty) arguments.
type ListInput struct{}

func (s *Supervisor) spawn(ctx context.Context, in SpawnInput) (*tools.Result, error) {
	tier := in.Tier
	if tier == "" {
		tier = TierFast
	}
	if tier != TierFast && tier != TierGood {
		return tools.Errorf("vibe_spawn: unknown tier %q: use fast (mechanical work with a clear specification) or good (design, judgement, review)", in.Tier), nil
	}
	if strings.TrimSpace(in.Brief) == "" {
		return tools.Errorf("vibe_spawn: the brief is empty: write the complete task — goal, files, constraints, how to verify, what to report"), nil
	}
	if len(in.Brief) > MaxBriefChars {
		return tools.Errorf("vibe_spawn: the brief has %d characters, more than %d: point the worker at files instead of pasting them", len(in.Brief), MaxBriefChars), nil
	}
	label := strings.Join(strings.Fields(in.Label), " ")
	if label == "" {
		return tools.Errorf("vibe_spawn: the label is empty: give a few words naming the task"), nil
	}
	if len(label) > MaxLabelChars {
		label = strings.ToValidUTF8(label[:MaxLabelChars], "")
	}

	s.mu.Lock()
	if msg := s.refuseLocked(); msg != "" {
		s.mu.Unlock()
		return tools.Errorf("vibe_spawn: %s", msg), nil
	}
	if len(s.workers) >= MaxWorkers {
		s.mu.Unlock()
		return tools.Errorf("vibe_spawn: this run already had %d workers, the most it may have: reuse one with vibe_send", MaxWorkers), nil
	}
	s.nextID++
	w := &worker{id: fmt.Sprintf("w%d", s.nextID), label: label, tier: tier, token: rand.Text(), brief: in.Brief, surface: tools.SurfaceOf(ctx), changed: make(chan struct{})}
	s.workers[w.id] = w
	s.startLocked(w)
	info := w.infoLocked(time.Now())
	s.mu.Unlock()
	s.notify(info)
	return tools.Textf("spawned %s (%s, tier %s); it runs in the background: collect it with vibe_wait worker_id=%s, or check vibe_list", w.id, w.label, w.tier, w.id), nil
}

// refuseLocked says why no worker may start now, or "".
func (s *Supervisor) refuseLocked() string {
	if s.closed {
		return "the run is closing; no worker can start"
	}
	running := 0
	for _, w := range s.workers {
		if w.status == StatusRunning {
			running++
		}
	}
	if running >= s.opts.MaxRunning {
		return fmt.Sprintf("%d workers are already running, the most at once: vibe_wait for one or vibe_kill one first", running)
	}
	return ""
}

// startLocked starts the worker's next attempt in a goroutine the
// supervisor owns.
func (s *Supervisor) startLocked(w *worker) {
	w.attempt++
	w.status = StatusRunning
	w.killed = false
	w.progress = ""
	w.started, w.ended = time.Now(), time.Time{}
	s.changedLocked(w)
	s.goLocked(w, s.opts.Runner.Run)
}

// goLocked runs w's current attempt with attempt (a runner's Run, or its
// Resume for an attempt an earlier berth started) in a goroutine the
// supervisor owns.
func (s *Supervisor) goLocked(w *worker, attempt func(context.Context, Job) (string, error)) {
	ctx, cancel := context.WithCancelCause(s.ctx)
	w.cancel = func() { cancel(context.Canceled) }
	w.detach = func() { cancel(ErrDetached) }
	w.reports = make(chan Report, 1)
	w.attemptDone = make(chan struct{})
	job := w.jobLocked()
	s.wg.Add(1)
	go s.run(ctx, w.cancel, w, job, w.attemptDone, attempt)
}

// jobLocked is the current attempt of w as its runner gets it.
func (w *worker) jobLocked() Job {
	return Job{
		WorkerID: w.id, Token: w.token, Label: w.label, Tier: w.tier, Surface: w.surface, Attempt: w.attempt,
		Brief: w.brief, Messages: append([]string(nil), w.messages...),
		Previous: w.result, Reports: w.reports,
	}
}

// run is one attempt's goroutine: attempt is the runner's Run (or Resume).
func (s *Supervisor) run(ctx context.Context, cancel context.CancelFunc, w *worker, job Job, done chan struct{}, attempt func(context.Context, Job) (string, error)) {
	defer s.wg.Done()
	defer close(done)
	res, err := attempt(ctx, job)
	cancel()

	s.mu.Lock()
	if s.detached {
		// berth let go of the run: the stored table says the attempt
		// runs, for the next berth to take up.
		s.mu.Unlock()
		return
	}
	now := time.Now()
	switch {
	case w.killed || s.closed || s.ctx.Err() != nil:
		w.status = StatusKilled
		w.result = clip(strings.TrimSpace(res), MaxResultChars)
		if w.result == "" {
			w.result = "stopped before it gave a result"
		}
	case err != nil:
		w.status = StatusFailed
		msg := err.Error()
		if r := strings.TrimSpace(res); r != "" {
			msg += "\noutput:\n" + r
		}
		w.result = clip(msg, MaxResultChars)
	default:
		w.status = StatusDone
		w.result = clip(strings.TrimSpace(res), MaxResultChars)
	}
	w.ended = now
	w.cancel = nil
	s.changedLocked(w)
	if len(w.queued) > 0 && w.status != StatusKilled {
		w.messages = append(w.messages, w.queued...)
		w.queued = nil
		s.startLocked(w)
	}
	info := w.infoLocked(now)
	s.mu.Unlock()
	s.notify(info)
}

func (s *Supervisor) send(ctx context.Context, in SendInput) (*tools.Result, error) {
	if strings.TrimSpace(in.Message) == "" {
		return tools.Errorf("vibe_send: the message is empty: say what the worker should do next"), nil
	}
	if len(in.Message) > MaxBriefChars {
		return tools.Errorf("vibe_send: the message has %d characters, more than %d: point the worker at files instead", len(in.Message), MaxBriefChars), nil
	}
	s.mu.Lock()
	w, res := s.lookupLocked("vibe_send", in.WorkerID)
	if w == nil {
		s.mu.Unlock()
		return res, nil
	}
	w.surface = narrower(w.surface, tools.SurfaceOf(ctx))
	if w.status == StatusRunning {
		if w.killed {
			s.mu.Unlock()
			return tools.Errorf("vibe_send: %s is being killed; spawn a new worker", w.id), nil
		}
		w.queued = append(w.queued, in.Message)
		n := len(w.queued)
		info := w.infoLocked(time.Now())
		s.mu.Unlock()
		s.notify(info)
		return tools.Textf("queued for %s (%d waiting): it is still running attempt %d; when that ends it runs again with the message appended. vibe_wait worker_id=%s waits for that run", w.id, n, w.attempt, w.id), nil
	}
	if msg := s.refuseLocked(); msg != "" {
		s.mu.Unlock()
		return tools.Errorf("vibe_send: %s", msg), nil
	}
	w.messages = append(w.messages, in.Message)
	s.startLocked(w)
	info := w.infoLocked(time.Now())
	s.mu.Unlock()
	s.notify(info)
	return tools.Textf("%s runs again (attempt %d) with the message appended to its brief; collect it with vibe_wait worker_id=%s", w.id, w.attempt, w.id), nil
}

// lookupLocked finds a worker, or returns the tool error naming the ids there are.
func (s *Supervisor) lookupLocked(tool, id string) (*worker, *tools.Result) {
	if w, ok := s.workers[strings.TrimSpace(id)]; ok {
		return w, nil
	}
	if len(s.workers) == 0 {
		return nil, tools.Errorf("%s: no worker %q: this run has no workers; start one with vibe_spawn", tool, id)
	}
	return nil, tools.Errorf("%s: no worker %q: this run's workers are %s", tool, id, strings.Join(s.idsLocked(), ", "))
}

func (s *Supervisor) idsLocked() []string {
	ids := make([]string, 0, len(s.workers))
	for id := range s.workers {
		ids = append(ids, id)
	}
	sortIDs(ids)
	return ids
}

func (s *Supervisor) wait(ctx context.Context, in WaitInput) (*tools.Result, error) {
	timeout := DefaultWaitTimeout
	if in.TimeoutSeconds < 0 {
		return tools.Errorf("vibe_wait: timeout_seconds is %d: give a positive number of seconds, at most %d", in.TimeoutSeconds, int(MaxWaitTimeout/time.Second)), nil
	}
	if in.TimeoutSeconds > 0 {
		timeout = min(time.Duration(in.TimeoutSeconds)*time.Second, MaxWaitTimeout)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		w, res := s.lookupLocked("vibe_wait", in.WorkerID)
		if w == nil {
			s.mu.Unlock()
			return res, nil
		}
		info := w.infoLocked(time.Now())
		changed := w.changed
		s.mu.Unlock()
		if info.Status != StatusRunning {
			return finalResult(info), nil
		}
		select {
		case <-changed:
		case <-timer.C:
			// The status as it is now, not as it was before the wait.
			s.mu.Lock()
			info = w.infoLocked(time.Now())
			s.mu.Unlock()
			if info.Status != StatusRunning {
				return finalResult(info), nil
			}
			return tools.Text(fmt.Sprintf("%s is still running after waiting %s (not an error):\n", info.ID, timeout) + formatInfo(info, MaxResultChars) +
				"\nwait again with vibe_wait, do other work, or vibe_kill it"), nil
		case <-ctx.Done():
			return nil, fmt.Errorf("vibe_wait: waiting for %s: %w", info.ID, ctx.Err())
		}
	}
}

// finalResult is vibe_wait's answer for an ended worker.
func finalResult(info WorkerInfo) *tools.Result {
	head := fmt.Sprintf("%s (%s, tier %s) %s after %s, attempt %d", info.ID, info.Label, info.Tier, info.Status, round(info.Elapsed), info.Attempt)
	body := info.Result
	if body == "" {
		body = "(no output)"
	}
	switch info.Status {
	case StatusFailed:
		return tools.Errorf("%s:\n%s\nfix the brief and vibe_send, or spawn another worker", head, body)
	case StatusKilled:
		return tools.Textf("%s:\n%s", head, body)
	}
	return tools.Textf("%s:\n%s", head, body)
}

func (s *Supervisor) kill(ctx context.Context, in KillInput) (*tools.Result, error) {
	s.mu.Lock()
	w, res := s.lookupLocked("vibe_kill", in.WorkerID)
	if w == nil {
		s.mu.Unlock()
		return res, nil
	}
	if w.status != StatusRunning {
		st := w.status
		s.mu.Unlock()
		return tools.Textf("%s had already ended (%s); nothing to stop", w.id, st), nil
	}
	w.killed = true
	w.queued = nil
	w.cancel()
	done := w.attemptDone
	info := w.infoLocked(time.Now())
	s.mu.Unlock()
	s.notify(info)

	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return tools.Errorf("vibe_kill: %s did not stop within %s of being cancelled; its processes may still run — check vibe_list later", w.id, stopTimeout), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("vibe_kill: waiting for %s to stop: %w", w.id, ctx.Err())
	}
	return tools.Textf("killed %s (%s) and every process it started; its edits so far stay in the workspace", w.id, w.label), nil
}

func (s *Supervisor) list(ctx context.Context, in ListInput) (*tools.Result, error) {
	infos := s.Workers()
	if len(infos) == 0 {
		return tools.Text("no workers in this run; start one with vibe_spawn"), nil
	}
	var b strings.Builder
	for i, info := range infos {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(formatInfo(info, MaxListResultChars))
	}
	return tools.Text(b.String()), nil
}

// Workers returns a snapshot of the worker table, in spawn order.
func (s *Supervisor) Workers() []WorkerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]WorkerInfo, 0, len(s.workers))
	for _, id := range s.idsLocked() {
		out = append(out, s.workers[id].infoLocked(now))
	}
	return out
}

// Report is the platform's side of a [Platform] worker: progress
// (status StatusRunning, result a progress note) or the end of the current
// attempt (StatusDone with the result, StatusFailed with why). It fails
// when the worker is unknown, not running, or already has a final report
// pending for this attempt.
func (s *Supervisor) Report(workerID, status, result string) error {
	s.mu.Lock()
	w, ok := s.workers[workerID]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("vibe: report for unknown worker %q: %w", workerID, ErrNotFound)
	}
	if w.status != StatusRunning {
		st := w.status
		s.mu.Unlock()
		return fmt.Errorf("vibe: report for worker %s, which is %s, not running: %w", workerID, st, ErrNotRunning)
	}
	switch status {
	case StatusRunning:
		w.progress = clip(strings.TrimSpace(result), MaxListResultChars)
		s.changedLocked(w)
		info := w.infoLocked(time.Now())
		s.mu.Unlock()
		s.notify(info)
		return nil
	case StatusDone, StatusFailed:
		select {
		case w.reports <- Report{Status: status, Result: result}:
			s.mu.Unlock()
			return nil
		default:
			s.mu.Unlock()
			return fmt.Errorf("vibe: worker %s already has a final report for attempt %d", workerID, w.attempt)
		}
	}
	s.mu.Unlock()
	return fmt.Errorf("vibe: report status %q: use %s, %s or %s", status, StatusRunning, StatusDone, StatusFailed)
}

// Authorize checks a worker identity presented with a tool call: the
// worker's id and the secret token its runner was given (Job.Token). It
// returns the surface the worker may call at — the narrowest its lead
// spawned or sent to it from — so the caller runs the call at most there.
// It fails with ErrNotFound for an unknown id, ErrWorkerToken for a wrong
// token and ErrNotRunning when the worker has ended: an ended worker's
// token calls nothing. Tokens are compared in constant time.
func (s *Supervisor) Authorize(workerID, token string) (tools.Surface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[workerID]
	if !ok {
		return "", fmt.Errorf("vibe: no worker %q in this run: call as a worker only with the worker_id of its vibe.spawn event: %w", workerID, ErrNotFound)
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(w.token)) != 1 {
		return "", fmt.Errorf("vibe: the worker_token is not worker %s's: send the worker_token of its vibe.spawn event: %w", workerID, ErrWorkerToken)
	}
	if w.status != StatusRunning {
		return "", fmt.Errorf("vibe: worker %s is %s, not running, so it may not call tools; the lead can run it again with vibe_send: %w", workerID, w.status, ErrNotRunning)
	}
	return w.surface, nil
}

// Report and Authorize errors.
var (
	// ErrNotFound: no worker of that id in this run.
	ErrNotFound = errors.New("no such worker")
	// ErrNotRunning: the worker has ended.
	ErrNotRunning = errors.New("worker not running")
	// ErrWorkerToken: a call presented a worker id with the wrong token.
	ErrWorkerToken = errors.New("wrong worker token")
)

// Close kills every running worker, waits for their attempts to end, and
// refuses later spawns. It returns an error when an attempt did not end
// within the stop timeout.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, w := range s.workers {
		w.queued = nil
		if w.status == StatusRunning {
			w.killed = true
		}
	}
	s.mu.Unlock()
	s.cancel()
	return s.waitAttempts()
}

// waitAttempts waits, at most stopTimeout, for every attempt to end.
func (s *Supervisor) waitAttempts() error {
	done := make(chan struct{})
	go func() { // ends with the attempts, which are cancelled
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("vibe: workers still running %s after the run closed", stopTimeout)
	}
}

func (s *Supervisor) notify(info WorkerInfo) {
	if s.opts.Notify != nil {
		s.opts.Notify(info)
	}
}

// changedLocked wakes w's waiters and counts a change of the table.
func (s *Supervisor) changedLocked(w *worker) {
	s.gen++
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *worker) infoLocked(now time.Time) WorkerInfo {
	end := w.ended
	if end.IsZero() {
		end = now
	}
	return WorkerInfo{
		ID: w.id, Label: w.label, Tier: w.tier, Status: w.status, Attempt: w.attempt,
		Queued: len(w.queued), Elapsed: end.Sub(w.started), Progress: w.progress, Result: w.result,
	}
}

// formatInfo is one worker as text, its result clipped to n characters.
func formatInfo(info WorkerInfo, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s  tier=%s  %s  %s  attempt %d", info.ID, info.Label, info.Tier, info.Status, round(info.Elapsed), info.Attempt)
	if info.Queued > 0 {
		fmt.Fprintf(&b, "  (%d message(s) queued)", info.Queued)
	}
	if info.Progress != "" {
		fmt.Fprintf(&b, "\n  progress: %s", info.Progress)
	}
	if info.Result != "" {
		label := "result"
		if info.Status == StatusRunning {
			label = "previous result"
		}
		fmt.Fprintf(&b, "\n  %s: %s", label, strings.ReplaceAll(clip(info.Result, n), "\n", "\n    "))
	}
	return b.String()
}

// narrower returns the surface that allows less; a when both allow the same.
func narrower(a, b tools.Surface) tools.Surface {
	if b.MaxLevel() < a.MaxLevel() {
		return b
	}
	return a
}

func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// clip keeps the head and the tail of s within n bytes, on rune boundaries.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const marker = "\n… (%d characters cut) …\n"
	half := n / 2
	head, tail := s[:half], s[len(s)-half:]
	head = strings.ToValidUTF8(head, "")
	tail = strings.ToValidUTF8(tail, "")
	return head + fmt.Sprintf(marker, len(s)-len(head)-len(tail)) + tail
}

// sortIDs sorts "w1", "w2", …, "w10" in spawn order.
func sortIDs(ids []string) {
	sort.Slice(ids, func(i, j int) bool {
		if len(ids[i]) != len(ids[j]) {
			return len(ids[i]) < len(ids[j])
		}
		return ids[i] < ids[j]
	})
}

// Resources reports the run's workers for the operator console.
func (s *Supervisor) Resources() []tools.Resource {
	ws := s.Workers()
	out := make([]tools.Resource, 0, len(ws))
	for _, w := range ws {
		out = append(out, tools.Resource{Kind: "worker", Name: w.ID + " " + w.Label, State: w.Status,
			Detail: fmt.Sprintf("tier %s, attempt %d, %s", w.Tier, w.Attempt, w.Elapsed.Round(time.Second))})
	}
	return out
}
