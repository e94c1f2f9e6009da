package e2e

import (
	"strings"
	"testing"
	"time"

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

// TestLSPPyrightStdlibNameInContainer: in berth-test-node, a workspace's
// own email package is what pyright resolves `from email.utils import …`
// to, not its bundled stub: the definition lands in the workspace file
// with no note. The private typeshed berth made for it lies in the
// container's /tmp, outside the workspace, and goes when the run closes.
func TestLSPPyrightStdlibNameInContainer(t *testing.T) {
	const image = "berth-test-node"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := lspEnv(a, run, ctr)
	e.PutAll(t, lsptest.StdlibNameProject)
	r := e.Call(t, "lsp", map[string]any{"action": "definition", "file": "main.py", "line": 3, "symbol": "_has_surrogates"})
	if r.IsError || !strings.Contains(r.Text, "email/utils.py\n  1:5  def _has_surrogates") || strings.Contains(r.Text, "note:") {
		t.Fatalf("definition of _has_surrogates at main.py:3, want email/utils.py 1:5 and no note:\n%s", r.Text)
	}
	dirs := strings.Fields(ctr.sh(t, "ls -d /tmp/berth-typeshed.* 2>/dev/null; true"))
	if len(dirs) != 1 {
		t.Fatalf("want one private typeshed in the container's /tmp, got %q", dirs)
	}
	if got := ctr.sh(t, "ls "+dirs[0]+"/stdlib | grep -c -x -e email -e email.pyi; true"); strings.TrimSpace(got) != "0" {
		t.Errorf("the private typeshed keeps the stub of email: %q", got)
	}
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
	noLeftovers(t, ctr, "pyright")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if left := strings.TrimSpace(ctr.sh(t, "ls -d /tmp/berth-typeshed.* 2>/dev/null; true")); left == "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the private typeshed outlived the run by 30s: %s", left)
		}
	}
}
