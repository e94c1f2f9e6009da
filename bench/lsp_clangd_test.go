package bench

import (
	"testing"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

// TestLSPClangdReport compares clangd through berth's exec stream in
// berth-test-go with clangd started directly on the host, on
// lsptest.CProject. Run it with BERTH_BENCH=1 (bench/run).
func TestLSPClangdReport(t *testing.T) {
	measureServers(t, "clangd", []serverBench{
		{id: "clangd", image: "berth-test-go", host: pathBin("clangd"), files: lsptest.CProject,
			file: "src/main.c", pos: lspc.Position{Line: 3, Character: 2}, refs: 4},
	})
}
