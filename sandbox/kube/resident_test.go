package kube

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
)

var _ sandbox.Residence = (*Sandbox)(nil)

// TestResident runs the resident conformance checks in a pod reached
// through the API server, each sandbox a new Sandbox object on it, as a
// restarted berth opens: the resident's keeper, started by a pod exec,
// must outlive that exec's stream.
func TestResident(t *testing.T) {
	c := need(t)
	ns := c.namespace(t)
	c.pod(t, ns, "resident", podSpec{})
	p := newProvider(t)
	ref := "kube://" + ns + "/resident"
	scratch := "/tmp/berth-resident-" + randomID()
	sb, err := p.Open(ctxT(t, time.Minute), ref)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, "mkdir", "-p", scratch)
	sb.Close()
	sandboxtest.RunResident(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		sb, err := p.Open(context.Background(), ref)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return sb, sandboxtest.Config{Scratch: scratch}
	})
}
