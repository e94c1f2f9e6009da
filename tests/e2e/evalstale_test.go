package e2e

import (
	"testing"

	"berth.dev/berth/tools/eval/evaltest"
)

// TestEvalStaleModulesInContainer: the pre-cell check of workspace modules
// changed since import, and reload: true, in a container, through ipykernel
// (berth-test-python) and berth's own kernels (berth-test-minimal).
func TestEvalStaleModulesInContainer(t *testing.T) {
	for _, tc := range []struct {
		image string
		langs []string
	}{
		{"berth-test-python", []string{"python"}},
		{"berth-test-minimal", []string{"python", "javascript"}},
	} {
		t.Run(tc.image, func(t *testing.T) {
			needImage(t, tc.image, false)
			ctr := startContainer(t, tc.image)
			a := newAPI(t)
			run, _ := a.open(ctr.conv)
			e := evalEnv(a, run, ctr)
			for _, lang := range tc.langs {
				if lang == "python" {
					evaltest.CheckStalePython(t, e)
				} else {
					evaltest.CheckStaleJavaScript(t, e)
				}
			}
			if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
				t.Fatalf("close run: %s", r)
			}
		})
	}
}
