package e2e

import (
	"testing"

	"berth.dev/berth/tools/lsp/lsptest"
)

// TestLSPNpmInContainer runs the npm language servers inside
// berth-test-node through exec streams, each on its own project in a
// fresh container: pyright (preferred to pylsp), typescript-language-server
// on a TypeScript and on a JavaScript project, and bash-language-server
// with shellcheck. Each closes its run and leaves no server behind.
func TestLSPNpmInContainer(t *testing.T) {
	const image = "berth-test-node"
	needImage(t, image, false)
	for _, tc := range []struct {
		name, proc string
		c          lsptest.LangCase
	}{
		{"pyright", "pyright", lsptest.Pyright},
		{"typescript", "typescript-language-server", lsptest.TypeScript},
		{"javascript", "typescript-language-server", lsptest.JavaScript},
		{"bash", "bash-language-server", lsptest.Bash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctr := startContainer(t, image)
			a := newAPI(t)
			run, _ := a.open(ctr.conv)
			lsptest.CheckLang(t, lspEnv(a, run, ctr), tc.c)
			if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
				t.Fatalf("close run: %s", r)
			}
			noLeftovers(t, ctr, tc.proc)
		})
	}
}
