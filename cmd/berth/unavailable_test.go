package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/sandbox"
)

// TestUnconfiguredProviderIsUnavailable: a provider berth could not set
// up at start (containerd's socket missing while it restarts) answers
// sandbox.ErrUnavailable, so that adoption keeps its stored runs instead
// of taking them for gone (issue 33, finding 1).
func TestUnconfiguredProviderIsUnavailable(t *testing.T) {
	u := unavailable{scheme: "containerd", err: errors.New("no containerd socket at /run/containerd/containerd.sock")}
	_, err := u.Open(context.Background(), "default/ctr")
	_, lerr := u.Locate(context.Background(), sandbox.Owner{Conversation: "c-1"})
	for _, e := range []error{err, lerr} {
		if !errors.Is(e, sandbox.ErrUnavailable) || !errors.Is(e, sandbox.ErrGone) || !strings.Contains(e.Error(), "restart berth") {
			t.Errorf("an unconfigured provider answers %v; want sandbox.ErrUnavailable (and ErrGone) saying to restart berth", e)
		}
	}
}
