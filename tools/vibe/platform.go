package vibe

import (
	"context"
	"errors"
	"strings"
)

// Events [Platform] publishes.
const (
	// EventSpawn asks the platform to start a worker: data is a [SpawnEvent].
	EventSpawn = "vibe.spawn"
	// EventSend asks the platform to run a worker again with a follow-up:
	// data is a [SendEvent].
	EventSend = "vibe.send"
	// EventKill asks the platform to stop a worker and everything it
	// started: data is a [KillEvent].
	EventKill = "vibe.kill"
)

// Publisher is where [Platform] publishes its events, e.g. the run's event
// stream. Publish must not block for long.
type Publisher interface {
	Publish(eventType string, data any)
}

// SpawnEvent is the data of EventSpawn. WorkerToken is the worker's
// secret: the platform sends it with WorkerID on each of the worker's tool
// calls ("worker", "worker_token" of POST /v1/runs/{id}/tools/{name}), so
// that berth runs them at most at Surface.
type SpawnEvent struct {
	WorkerID    string `json:"worker_id"`
	WorkerToken string `json:"worker_token"`
	Label       string `json:"label"`
	Tier        string `json:"tier"`
	Surface     string `json:"surface"` // the worker's tools must stay within it (Job.Surface)
	Brief       string `json:"brief"`
}

// SendEvent is the data of EventSend.
type SendEvent struct {
	WorkerID string   `json:"worker_id"`
	Attempt  int      `json:"attempt"`
	Surface  string   `json:"surface"`
	Messages []string `json:"messages"` // every follow-up so far, oldest first; the last ones are new
	Prompt   string   `json:"prompt"`   // the whole brief with every follow-up and the previous result
}

// KillEvent is the data of EventKill.
type KillEvent struct {
	WorkerID string `json:"worker_id"`
}

// Platform returns a runner for a hosting platform that has its own agent
// loop. Each attempt publishes EventSpawn (the first) or EventSend (after a
// vibe_send) and then waits for the platform to call [Supervisor.Report]
// with StatusDone or StatusFailed; progress reports (StatusRunning) show in
// vibe_list meanwhile. When the attempt is cancelled it publishes EventKill
// and returns at once: the platform is then responsible for stopping what
// the worker started.
func Platform(p Publisher) Runner {
	if p == nil {
		panic("vibe: Platform needs a Publisher")
	}
	return &platformRunner{p: p}
}

type platformRunner struct{ p Publisher }

func (r *platformRunner) Run(ctx context.Context, job Job) (string, error) {
	if job.Attempt <= 1 || len(job.Messages) == 0 {
		r.p.Publish(EventSpawn, SpawnEvent{WorkerID: job.WorkerID, WorkerToken: job.Token, Label: job.Label, Tier: job.Tier, Surface: string(job.Surface), Brief: job.Brief})
	} else {
		r.p.Publish(EventSend, SendEvent{WorkerID: job.WorkerID, Attempt: job.Attempt, Surface: string(job.Surface), Messages: job.Messages, Prompt: job.Prompt()})
	}
	return r.wait(ctx, job)
}

// wait waits for the platform's final report on job's attempt. Cancelled,
// it tells the platform to stop the worker — unless berth only let go of
// the run (ErrDetached): then the worker goes on, and the next berth waits
// for its report (Resume).
func (r *platformRunner) wait(ctx context.Context, job Job) (string, error) {
	select {
	case rep := <-job.Reports:
		if rep.Status == StatusFailed {
			msg := strings.TrimSpace(rep.Result)
			if msg == "" {
				msg = "the platform reported the worker failed without saying why"
			}
			return "", errors.New(msg)
		}
		return rep.Result, nil
	case <-ctx.Done():
		if !errors.Is(context.Cause(ctx), ErrDetached) {
			r.p.Publish(EventKill, KillEvent{WorkerID: job.WorkerID})
		}
		return "", ctx.Err()
	}
}
