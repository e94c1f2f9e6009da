package vibe

import (
	"context"
	"fmt"
	"strings"

	"berth.dev/berth/tools"
)

// Runner runs one attempt of a worker: the worker's brief as it stands,
// until the agent behind it answers. Run blocks; ctx is the attempt's
// lifetime, and when it is done (vibe_kill, the run's close) Run must stop
// everything it started and return. The returned text is the worker's
// result; an error marks the attempt failed and is shown to the lead agent
// as the result, so write it as an instruction. Run may be called for
// several workers at once.
//
// Three runners ship with the package: [Command] (an agent command in the
// sandbox), [OpenAI] (a built-in agent loop against a chat-completions
// endpoint) and [Platform] (a hosting platform's own agent loop, driven by
// events and [Supervisor.Report]).
type Runner interface {
	Run(ctx context.Context, job Job) (string, error)
}

// RunnerFunc adapts a function to [Runner].
type RunnerFunc func(ctx context.Context, job Job) (string, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, job Job) (string, error) { return f(ctx, job) }

// Job is what a [Runner] gets for one attempt of a worker.
type Job struct {
	// WorkerID is the worker's id ("w1"), Label the lead agent's label.
	WorkerID, Label string
	// Token is the worker's secret, the same for all its attempts: a tool
	// call presenting it with WorkerID runs as this worker, at most at
	// Surface ([Supervisor.Authorize]). [Platform] publishes it in
	// EventSpawn and nowhere else; the other runners keep it to themselves.
	Token string
	// Tier is TierFast or TierGood.
	Tier string
	// Surface is the narrowest surface the lead agent spawned or sent to
	// this worker from (tools.SurfaceOf of the vibe_spawn and vibe_send
	// calls). A runner must not give the worker more than it allows: a
	// plan-mode lead gets read-only workers.
	Surface tools.Surface
	// Attempt counts the worker's runs from 1: a vibe_send makes the next.
	Attempt int
	// Brief is the brief given to vibe_spawn.
	Brief string
	// Messages are the follow-ups given to vibe_send, oldest first; the
	// last is the one this attempt was started for (none on attempt 1).
	Messages []string
	// Previous is the result of the worker's previous attempt, if any.
	Previous string
	// Reports carries what the platform reports through
	// [Supervisor.Report] for this attempt: progress first, then at most
	// one final report. Only [Platform] reads it; it is never closed.
	Reports <-chan Report
}

// Prompt is the whole brief as one text: the brief, then the previous
// result and the follow-up messages when there are any. Runners that take
// a single text (a command's stdin, a first user message) send this.
func (j Job) Prompt() string {
	if len(j.Messages) == 0 {
		return j.Brief
	}
	var b strings.Builder
	b.WriteString(j.Brief)
	if j.Previous != "" {
		b.WriteString("\n\n## Your previous result\n\n")
		b.WriteString(j.Previous)
	}
	for i, m := range j.Messages {
		fmt.Fprintf(&b, "\n\n## Follow-up %d from the lead\n\n%s", i+1, m)
	}
	return b.String()
}

// Report is a platform's word on a worker, given to [Supervisor.Report].
type Report struct {
	// Status is StatusRunning for progress, or StatusDone or StatusFailed
	// for the end of the attempt.
	Status string
	// Result is the progress note, the result, or why it failed.
	Result string
}
