package shim

import (
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// TestResidentConstants: the agent (standard library only) mirrors
// package sandbox's resident constants.
func TestResidentConstants(t *testing.T) {
	tests := []struct {
		name        string
		agent, want int64
	}{
		{"DefaultResidentGrace", int64(agent.DefaultResidentGrace), int64(sandbox.DefaultResidentGrace)},
		{"MinResidentSecret", agent.MinResidentSecret, sandbox.MinResidentSecret},
		{"ResidentBuffer", agent.ResidentBuffer, sandbox.ResidentBuffer},
	}
	for _, tc := range tests {
		if tc.agent != tc.want {
			t.Errorf("agent.%s = %d, sandbox.%s = %d", tc.name, tc.agent, tc.name, tc.want)
		}
	}
}
