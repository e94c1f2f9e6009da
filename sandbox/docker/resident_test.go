package docker

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/client"

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

// TestResidentContainerRestarted: a resident's process whose container
// stops reports sandbox.ErrGone, and after the container's restart the
// resident is not found (its directory stayed, nobody answers there); a
// new resident may take the directory.
func TestResidentContainerRestarted(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{image: testImage(t, cli)})
	p := newProvider(t)
	sb := open(t, p, id)
	spec := sandbox.ResidentSpec{Dir: "/tmp/berth-run-" + randomID(), Secret: []byte(randomID() + randomID() + randomID() + randomID()), Grace: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Resident(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Detach()
	var out bytes.Buffer
	proc, err := res.Start(ctx, "sleeper", &sandbox.Cmd{Args: []string{"sleep", "1000"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	stopContainer(t, cli, id)
	if _, err := proc.Wait(); !errors.Is(err, sandbox.ErrGone) {
		t.Errorf("Wait after the container stopped = %v, want an error wrapping sandbox.ErrGone", err)
	}
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("restart the container: %v", err)
	}
	sb2 := open(t, newProvider(t), id)
	adopt := spec
	adopt.Adopt = true
	if r, err := sb2.Resident(ctx, adopt); !errors.Is(err, sandbox.ErrNotFound) {
		if err == nil {
			r.Detach()
		}
		t.Fatalf("adopt after the restart = %v, want sandbox.ErrNotFound", err)
	}
	again, err := sb2.Resident(ctx, spec)
	if err != nil {
		t.Fatalf("a new resident on the restarted container's stale directory: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}
