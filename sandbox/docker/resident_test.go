package docker

import (
	"context"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
)

var _ sandbox.Residence = (*Sandbox)(nil)

// TestResident runs the resident conformance checks in a container whose
// PID 1 (sleep) never reaps: every sandbox the suite opens is a new
// Sandbox object on the same container, as a restarted berth opens.
func TestResident(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{image: testImage(t, cli)})
	scratch := "/tmp/berth-resident-" + randomID()
	sh(t, cli, id, "mkdir -p "+scratch)
	p := newProvider(t)
	sandboxtest.RunResident(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		sb, err := p.Open(context.Background(), id)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return sb, sandboxtest.Config{Scratch: scratch}
	})
}
