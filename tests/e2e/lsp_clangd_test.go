package e2e

import (
	"testing"

	"berth.dev/berth/tools/lsp/lsptest"
)

// TestLSPClangdInContainer runs clangd inside berth-test-go through exec
// streams: on a project with a compile_commands.json (its -Iinclude
// -DVOLUME=3 applied), the same with it in out/ (found and passed with
// --compile-commands-dir), on 300 sources whose first references waits for
// the background index, and on a loose .c file with clangd's fallback
// flags.
func TestLSPClangdInContainer(t *testing.T) {
	const image = "berth-test-go"
	needImage(t, image, false)
	t.Run("compile_commands", func(t *testing.T) {
		ctr := startContainer(t, image)
		a := newAPI(t)
		run, _ := a.open(ctr.conv)
		lsptest.CheckLang(t, lspEnv(a, run, ctr), lsptest.Clangd(workspace))
		if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
			t.Fatalf("close run: %s", r)
		}
		noLeftovers(t, ctr, "clangd")
	})
	t.Run("compile_commands in out", func(t *testing.T) {
		ctr := startContainer(t, image)
		a := newAPI(t)
		run, _ := a.open(ctr.conv)
		lsptest.CheckLang(t, lspEnv(a, run, ctr), lsptest.ClangdOut(workspace))
	})
	t.Run("index", func(t *testing.T) {
		ctr := startContainer(t, image)
		a := newAPI(t)
		run, _ := a.open(ctr.conv)
		e := lspEnv(a, run, ctr)
		const n = 300
		e.PutAll(t, lsptest.CManySources(workspace, n))
		lsptest.CheckCIndexWait(t, e, n)
	})
	t.Run("no compile_commands", func(t *testing.T) {
		ctr := startContainer(t, image)
		a := newAPI(t)
		run, _ := a.open(ctr.conv)
		lsptest.CheckCLoose(t, lspEnv(a, run, ctr))
	})
}
