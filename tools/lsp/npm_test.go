package lsp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

// npmRun is a host run whose PATH starts with the npm language servers
// that tests/run installs (BERTH_LSP_NPM_BIN: pyright-langserver,
// typescript-language-server, tsc, bash-language-server); shellcheck and
// node come from the machine's PATH.
func npmRun(t *testing.T, server string) (*hostRun, string) {
	t.Helper()
	bin := os.Getenv("BERTH_LSP_NPM_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("BERTH_LSP_NPM_BIN is not set; tests/run installs the npm language servers and sets it")
		}
		t.Skip("BERTH_LSP_NPM_BIN is not set (tests/run installs the npm language servers and sets it)")
	}
	if _, err := os.Stat(filepath.Join(bin, server)); err != nil {
		t.Fatalf("BERTH_LSP_NPM_BIN=%s has no %s: %v", bin, server, err)
	}
	need(t, "node")
	h := newHostRunIn(t, t.TempDir(), []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, lsp.Options{})
	return h, bin
}

func TestPyrightOnHost(t *testing.T) {
	h, _ := npmRun(t, "pyright-langserver")
	lsptest.CheckLang(t, h.env(), lsptest.Pyright)
}

// TestPyrightPreferredOverPylsp: with both installed pyright answers.
func TestPyrightPreferredOverPylsp(t *testing.T) {
	need(t, "pylsp")
	h, _ := npmRun(t, "pyright-langserver")
	e := h.env()
	e.PutAll(t, lsptest.PythonProject)
	if r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.py", "line": 3, "symbol": "hello"}); r.IsError || !strings.Contains(r.Text, "Greet name.") {
		t.Fatalf("hover: %s", r.Text)
	}
	st := status(t, e, "main.py")
	if st["pyright"].State != "running" || st["pylsp"].State == "running" {
		t.Fatalf("want pyright running and pylsp not: %+v %+v", st["pyright"], st["pylsp"])
	}
}

func TestTypeScriptOnHost(t *testing.T) {
	h, _ := npmRun(t, "typescript-language-server")
	lsptest.CheckLang(t, h.env(), lsptest.TypeScript)
}

func TestTypeScriptJavaScriptOnHost(t *testing.T) {
	h, _ := npmRun(t, "typescript-language-server")
	lsptest.CheckLang(t, h.env(), lsptest.JavaScript)
}

func TestBashOnHost(t *testing.T) {
	need(t, "shellcheck")
	h, _ := npmRun(t, "bash-language-server")
	lsptest.CheckLang(t, h.env(), lsptest.Bash)
}
