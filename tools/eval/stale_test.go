package eval_test

import (
	"os"
	"os/exec"
	"testing"

	"berth.dev/berth/tools/eval"
	"berth.dev/berth/tools/eval/evaltest"
)

func TestStaleModuleIPykernel(t *testing.T) {
	debianPython(t, "ipykernel")
	h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
	h.env().Cell(t, "python", "", "ipykernel")
	evaltest.CheckStalePython(t, h.env())
}

func TestStaleModuleBundledPython(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	need(t, "/usr/bin/python3", err == nil)
	h := newHostRun(t, noIPykernelPython(t), eval.Options{})
	h.env().Cell(t, "python", "", "berth's Python kernel")
	evaltest.CheckStalePython(t, h.env())
}

func TestStaleModuleJavaScript(t *testing.T) {
	_, err := exec.LookPath("node")
	need(t, "node", err == nil)
	evaltest.CheckStaleJavaScript(t, newHostRun(t, "/usr/bin:/bin", eval.Options{}).env())
}
