package host_test

import (
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/sandbox/sandboxtest"
)

var _ sandbox.Residence = (*host.Sandbox)(nil)

// TestResident runs the resident conformance checks on this machine. Each
// sandbox the suite opens is a new host sandbox, as a restarted berth
// opens; they share one scratch directory. The sandboxes have no control
// group of their own: closing a host sandbox kills its group, and a
// resident's processes must outlive the sandbox that started them.
func TestResident(t *testing.T) {
	scratch := t.TempDir()
	sandboxtest.RunResident(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		return host.New(host.Options{PidsMax: -1, MemoryMax: -1}), sandboxtest.Config{Scratch: scratch}
	})
}
