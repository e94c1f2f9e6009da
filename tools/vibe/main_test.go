package vibe

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no worker goroutine outlives its supervisor.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
