package e2e

import (
	"os"
	"testing"

	"berth.dev/berth/tests/berthtest"
)

// TestMain removes the berth binaries that tests running the real berth
// serve built (berthtest.Build).
func TestMain(m *testing.M) {
	code := m.Run()
	berthtest.Remove()
	os.Exit(code)
}
