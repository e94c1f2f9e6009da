package containerd

import (
	"context"

	"github.com/containerd/containerd/v2/client"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// Sandbox is a container with a running containerd task used as a
// [sandbox.Sandbox]: processes, files and Dial go through berth's agent
// over task exec streams ([shim.Sandbox] over a [Transport]).
type Sandbox struct {
	*shim.Sandbox

	cli *client.Client // owned; closed by Close
	tr  *Transport
	ref string
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// newSandbox returns the sandbox over tr, known as ref:
// "containerd://NAMESPACE/ID", or "kube://NAMESPACE/POD/CONTAINER" when
// opened through [Pods].
func newSandbox(cli *client.Client, tr *Transport, o options, ref string) *Sandbox {
	return &Sandbox{
		Sandbox: shim.New(tr, shim.Options{Name: ref, Binary: o.agent, FSReplyTimeout: o.fsReply}),
		cli:     cli,
		tr:      tr,
		ref:     ref,
	}
}

// Ref returns the reference the sandbox was opened by:
// "containerd://NAMESPACE/ID", or "kube://NAMESPACE/POD/CONTAINER" for a
// pod's container opened through [Pods].
func (s *Sandbox) Ref() string { return s.ref }

// Check asks containerd for the container's task: nil while it runs,
// otherwise an error wrapping sandbox.ErrGone that says what happened.
func (s *Sandbox) Check(ctx context.Context) error {
	_, err := s.tr.task(ctx)
	return err
}

// Close kills the processes started through s that still run, ends its
// file and Dial sessions and releases the client. The container keeps
// running.
func (s *Sandbox) Close() error {
	err := s.Sandbox.Close()
	s.cli.Close()
	return err
}
