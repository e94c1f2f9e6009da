package host

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
	"berth.dev/berth/sandbox/shim"
)

// agentSandbox is the generic shim sandbox over the host transport: FS and
// Dial go through the agent's file server and relay, as in a container.
type agentSandbox struct{ *shim.Sandbox }

func (agentSandbox) Ref() string                     { return "host-agent" }
func (agentSandbox) Check(ctx context.Context) error { return nil }

// TestConformanceThroughAgent runs the suite with every call going through
// berth-shim, which is what container backends do.
func TestConformanceThroughAgent(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		sb := shim.New(&transport{env: BaseEnv(nil)}, shim.Options{Name: "host"})
		return agentSandbox{sb}, sandboxtest.Config{Scratch: t.TempDir(), WithFSReplyTimeout: func(t *testing.T, reply time.Duration) sandbox.Sandbox {
			return agentSandbox{shim.New(&transport{env: BaseEnv(nil)}, shim.Options{Name: "host", FSReplyTimeout: reply})}
		}}
	})
}
