package kube

import (
	"context"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// Sandbox is a container of a running pod used as a [sandbox.Sandbox]:
// processes, files and Dial go through berth's agent over pod exec
// sessions ([shim.Sandbox] over a [Transport]).
type Sandbox struct {
	*shim.Sandbox

	tr *Transport
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

func newSandbox(tr *Transport, o options) *Sandbox {
	return &Sandbox{
		Sandbox: shim.New(tr, shim.Options{Name: sandbox.PodScheme + "://" + tr.Ref(), Binary: o.agent, FSReplyTimeout: o.fsReply}),
		tr:      tr,
	}
}

// Ref returns "kube://NAMESPACE/POD/CONTAINER".
func (s *Sandbox) Ref() string { return sandbox.PodScheme + "://" + s.tr.Ref() }

// Check asks the API server for the pod: nil while it and the container run
// as when the sandbox was opened, otherwise an error wrapping
// sandbox.ErrGone that says what happened (the pod stopped, is being
// deleted or was replaced, the container restarted, or the API server
// cannot be reached).
func (s *Sandbox) Check(ctx context.Context) error { return s.tr.check(ctx) }

// Close kills the processes started through s that still run and ends its
// file and Dial sessions. The pod keeps running.
func (s *Sandbox) Close() error { return s.Sandbox.Close() }
