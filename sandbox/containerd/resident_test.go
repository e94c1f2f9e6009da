package containerd

import (
	"context"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
)

var _ sandbox.Residence = (*Sandbox)(nil)

// TestResident runs the resident conformance checks in a container whose
// PID 1 (sleep) never reaps, each sandbox a new Sandbox object on it, as a
// restarted berth opens.
func TestResident(t *testing.T) {
	need(t)
	id := startContainer(t, "resident-"+randomID())
	scratch := "/tmp/berth-resident-" + randomID()
	docker(t, "exec", id, "mkdir", "-p", scratch)
	p := newProvider(t)
	sandboxtest.RunResident(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		sb, err := p.Open(context.Background(), "containerd://"+testNamespace+"/"+id)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return sb, sandboxtest.Config{Scratch: scratch}
	})
}
