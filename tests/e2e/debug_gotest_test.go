package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"berth.dev/berth/tools/debug/debugtest"
)

// TestDebugGoTestInContainer debugs the tests of container/list from the
// Go source tree of the machine running the test, made a module of its
// own in berth-test-go's workspace, with delve's test mode
// (debugtest.CheckGoTest). It skips when the image was not built.
func TestDebugGoTestInContainer(t *testing.T) {
	const image = "berth-test-go"
	needImage(t, image, true)
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	files := debugtest.GoListFiles(t, strings.TrimSpace(string(out)), "list")
	ctr := startContainer(t, image)
	for name, content := range files {
		ctr.put(t, name, content)
	}
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := debugEnv(a, run, ctr, "dlv", "dlv", "__debug_bin")
	debugtest.CheckGoTest(t, e, "list", files["list/list_test.go"])
	noLeftovers(t, ctr, "dlv", "__debug_bin")
}
