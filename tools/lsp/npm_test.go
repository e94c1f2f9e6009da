package lsp_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	return npmRunWith(t, server, lsp.Options{})
}

// npmRunWith is npmRun with the supervisor's options.
func npmRunWith(t *testing.T, server string, opts lsp.Options) (*hostRun, string) {
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
	h := newHostRunIn(t, t.TempDir(), []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, opts)
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

// descendants lists the command lines of pid's descendants (from /proc).
func descendants(t *testing.T, pid int) []string {
	t.Helper()
	parent := map[int]int{}
	cmd := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so cut at the last ')'.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
		c, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmd[p] = strings.ReplaceAll(string(c), "\x00", " ")
	}
	var out []string
	for p := range parent {
		for a := parent[p]; a > 1; a = parent[a] {
			if a == pid {
				out = append(out, cmd[p])
				break
			}
		}
	}
	return out
}

// TestTypeScriptAcquiresNoTypingsOnHost: on the host tsserver's automatic
// typing acquisition is off, so no typings installer (which runs npm for
// the packages a workspace's package.json names) starts under the server.
func TestTypeScriptAcquiresNoTypingsOnHost(t *testing.T) {
	h, _ := npmRun(t, "typescript-language-server")
	e := h.env()
	e.PutAll(t, map[string]string{
		"package.json": `{"name":"app","dependencies":{"lodash":"4.17.21","express":"4.19.2"}}` + "\n",
		"index.js":     "const _ = require('lodash');\nfunction twice(x) { return 2 * x; }\nmodule.exports = { twice };\n",
	})
	if r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "index.js", "line": 2, "symbol": "twice"}); r.IsError {
		t.Fatalf("hover: %s", r.Text)
	}
	pid := status(t, e, "index.js")["typescript-language-server"].Pid
	if pid == 0 {
		t.Fatal("no typescript-language-server pid in status")
	}
	kids := descendants(t, pid)
	if !slices.ContainsFunc(kids, func(c string) bool { return strings.Contains(c, "tsserver.js") }) {
		t.Fatalf("no tsserver under the server, so the check proves nothing: %q", kids)
	}
	for _, c := range kids {
		f := strings.Fields(c)
		if strings.Contains(c, "typingsInstaller") || slices.ContainsFunc(f[:min(len(f), 2)], func(a string) bool {
			return filepath.Base(a) == "npm" || strings.HasSuffix(a, "npm-cli.js")
		}) {
			t.Errorf("the TypeScript server started %q on the host", c)
		}
	}
}
