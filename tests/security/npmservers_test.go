package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// npmBin is the directory of the npm language servers tests/run installs
// (BERTH_LSP_NPM_BIN); without it the test skips, or fails under CI.
func npmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("BERTH_LSP_NPM_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("BERTH_LSP_NPM_BIN is not set; tests/run installs the npm language servers and sets it")
		}
		t.Skip("BERTH_LSP_NPM_BIN is not set (tests/run installs the npm language servers and sets it)")
	}
	return bin
}

// TestNpmServersRunNoRepositoryCode: pyright and bash-language-server on
// the host, in a workspace that names its own interpreter, virtualenv,
// start-up code and linter, run none of it — the second attack pass's
// "not tested" list. pyright is pointed at the workspace's .venv by its
// own pyrightconfig.json (whose python and .pth line leave markers) and
// a sitecustomize.py sits on its extraPaths; bash-language-server would
// find a shellcheck in node_modules/.bin and bin/. The servers must have
// answered, or the test proves nothing.
func TestNpmServersRunNoRepositoryCode(t *testing.T) {
	bin := npmBin(t)
	tok := newToken(t)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "local"},
		env:  []string{"BERTH_TOKEN=" + tok, "PATH=" + bin + ":" + os.Getenv("PATH")},
	})
	markers := t.TempDir()
	ws := t.TempDir()
	mark := func(tag string) string {
		return fmt.Sprintf("import os; open(%q, 'a').write('ran')", filepath.Join(markers, tag))
	}
	writeFile(t, ws, "pyproject.toml", "[project]\nname = \"hostile\"\nversion = \"0\"\n", 0o644)
	writeFile(t, ws, "pyrightconfig.json", `{"venvPath": ".", "venv": ".venv", "extraPaths": ["lib"]}`+"\n", 0o644)
	writeFile(t, ws, "app.py", "import helper\n\n\ndef f(x):\n    return helper.twice(x)\n", 0o644)
	writeFile(t, ws, "lib/helper.py", "def twice(x):\n    return 2 * x\n", 0o644)
	writeFile(t, ws, "lib/sitecustomize.py", mark("lib-sitecustomize")+"\n", 0o644)
	writeFile(t, ws, "sitecustomize.py", mark("root-sitecustomize")+"\n", 0o644)
	writeFile(t, ws, ".venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n", 0o644)
	writeFile(t, ws, ".venv/lib/python3.11/site-packages/evil.pth", mark("venv-pth")+"\n", 0o644)
	writeFile(t, ws, "run.sh", "#!/bin/bash\ngreet() {\n  echo \"hi $1\"\n}\ngreet $USER\n", 0o755)
	for _, p := range []struct{ name, tag string }{
		{".venv/bin/python", "venv-python"},
		{".venv/bin/python3", "venv-python3"},
		{"node_modules/.bin/pyright-langserver", "node-pyright"},
		{"node_modules/.bin/shellcheck", "node-shellcheck"},
		{"bin/shellcheck", "bin-shellcheck"},
		{"node_modules/.bin/bash-language-server", "node-bash-ls"},
	} {
		plant(t, ws, p.name, markers, p.tag)
	}

	run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	for _, c := range []struct{ args, want string }{
		{`{"action":"hover","file":"app.py","line":4,"symbol":"f"}`, "def f"},
		{`{"action":"definition","file":"app.py","line":5,"symbol":"twice"}`, "helper.py"},
		{`{"action":"diagnostics","file":"app.py"}`, ""},
		{`{"action":"hover","file":"run.sh","line":5,"symbol":"greet"}`, "greet"},
		{`{"action":"diagnostics","file":"run.sh"}`, "SC2086"},
	} {
		res, r := s.call(tok, run, "lsp", c.args)
		if r.status != 200 || res.IsError || !strings.Contains(res.Text(), c.want) {
			t.Errorf("lsp %s: %s %s, want it to mention %q", c.args, r, res.Text(), c.want)
		}
	}
	res, _ := s.call(tok, run, "lsp", `{"action":"status"}`)
	t.Logf("status: %s", res.Text())
	for _, server := range []string{"pyright", "bash-language-server"} {
		if !strings.Contains(res.Text(), server+": running") {
			t.Errorf("status does not show %s running, so the test proves nothing: %s", server, res.Text())
		}
	}
	if left := markersLeft(t, markers); len(left) > 0 {
		t.Errorf("code the workspace ships ran on the host: %s", strings.Join(left, "; "))
	}
}
