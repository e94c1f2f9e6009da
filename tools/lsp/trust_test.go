package lsp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/questions"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/files"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/permission"
)

// gatedHostRun is a host run whose registry has a permission gate with
// policy and port (nil: no approver), as the controller installs it.
func gatedHostRun(t *testing.T, dir string, env []string, policy permission.Policy, port *questions.Port) *tools.Registry {
	t.Helper()
	sb := host.New(host.Options{Env: env})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	files.Register(reg, ws)
	sup := lsp.Register(reg, sb, ws, runCtx, lsp.Options{}) // Host comes from sb.Ref()
	reg.Use(permission.New(policy, port, permission.Options{}).Wrap)
	t.Cleanup(func() {
		sup.Close()
		cancel()
		sb.Close()
	})
	return reg
}

func projectCheck(t *testing.T, reg *tools.Registry, s tools.Surface) *tools.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	res, err := reg.Call(ctx, s, "lsp", json.RawMessage(`{"action":"diagnostics","file":"*"}`))
	if err != nil {
		t.Fatalf("lsp diagnostics *: call error %v", err)
	}
	return res
}

// writeTree writes files under dir; content starting with "#!" is made
// executable.
func writeTree(t *testing.T, dir string, tree map[string]string) {
	t.Helper()
	for name, content := range tree {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(content, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// spy is a program that leaves a file named after itself in marks, outside
// the workspace, and succeeds. It uses shell builtins only, so it leaves
// its mark whatever PATH it runs with.
func spy(marks string) string {
	return "#!/bin/sh\np=$0; n=${p##*/}; d=${p%/*}; d=${d%/*}; d=${d##*/}\n: > \"" + marks + "/ran-$d-$n\"\nexit 0\n"
}

func noMarks(t *testing.T, marks string) {
	t.Helper()
	if ran, _ := filepath.Glob(filepath.Join(marks, "ran-*")); len(ran) > 0 {
		t.Errorf("workspace programs were run on the host: %q", ran)
	}
}

// envWithPath is berth's environment with PATH replaced.
func envWithPath(p string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+p)
}

// TestProjectCheckRunsNoWorkspaceProgramOnHost plants node_modules/.bin/tsc,
// .venv/bin/pyright, .venv/bin/mypy, .venv/bin/pyflakes, .venv/bin/python
// and venv/bin/python, and a python3 on PATH that links into the workspace:
// diagnostics "*" on the host runs none of them and says what it skipped.
func TestProjectCheckRunsNoWorkspaceProgramOnHost(t *testing.T) {
	find, err := exec.LookPath("find")
	if err != nil {
		t.Skipf("no find: %v", err)
	}
	dir, marks, bin := t.TempDir(), t.TempDir(), t.TempDir()
	s := spy(marks)
	writeTree(t, dir, map[string]string{
		"tsconfig.json": "{}\n", "index.ts": "let x: number = 1;\n",
		"pyproject.toml": "[project]\nname = \"x\"\n", "app.py": "import os\n",
		"node_modules/.bin/tsc": s, ".venv/bin/pyright": s, ".venv/bin/mypy": s, ".venv/bin/pyflakes": s,
		".venv/bin/python": s, "venv/bin/python": s,
	})
	for name, target := range map[string]string{"find": find, "python3": filepath.Join(dir, ".venv/bin/python")} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	reg := gatedHostRun(t, dir, envWithPath(bin), permission.DefaultPolicy(permission.ModeLocal), nil)
	res := projectCheck(t, reg, tools.SurfacePlan)
	noMarks(t, marks)
	text := res.AllText()
	t.Log(text)
	if !res.IsError {
		t.Errorf("a check ran: %s", text)
	}
	for _, want := range []string{
		"node_modules/.bin/tsc is the workspace's own program; on the host berth runs only programs from outside the workspace: install typescript globally",
		".venv/bin/pyright is the workspace's own program",
		".venv/bin/mypy is the workspace's own program",
		".venv/bin/python is the workspace's own program",
		filepath.Join(bin, "python3") + " on PATH resolves to " + filepath.Join(dir, ".venv/bin/python") + ", inside the workspace",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the result does not say %q", want)
		}
	}
}

// TestProjectCheckUsesVenvLinkedOutsideOnHost: a .venv/bin/python that
// links to the system's python3 is used on the host, and named.
func TestProjectCheckUsesVenvLinkedOutsideOnHost(t *testing.T) {
	const system = "/usr/bin/python3" // Debian's, with python3-pyflakes
	if exec.Command(system, "-c", "import pyflakes").Run() != nil {
		t.Skip("/usr/bin/python3 cannot import pyflakes: apt-get install python3-pyflakes to run this test")
	}
	if exec.Command(system, "-c", "import mypy").Run() == nil {
		t.Skip("/usr/bin/python3 has mypy, which this test does not expect")
	}
	find, err := exec.LookPath("find")
	if err != nil {
		t.Skipf("no find: %v", err)
	}
	dir, bin := t.TempDir(), t.TempDir()
	writeTree(t, dir, map[string]string{"pyproject.toml": "[project]\nname = \"x\"\n", "app.py": "import os\n"})
	os.MkdirAll(filepath.Join(dir, ".venv/bin"), 0o755)
	if err := os.Symlink(system, filepath.Join(dir, ".venv/bin/python")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(find, filepath.Join(bin, "find")); err != nil {
		t.Fatal(err)
	}
	reg := gatedHostRun(t, dir, envWithPath(bin), permission.DefaultPolicy(permission.ModeLocal), nil)
	res := projectCheck(t, reg, tools.SurfacePlan)
	text := res.AllText()
	t.Log(text)
	real, _ := filepath.EvalSymlinks(system)
	if res.IsError || !strings.Contains(text, "interpreter .venv/bin/python → "+real) || !strings.Contains(text, "'os' imported but unused") {
		t.Errorf("want pyflakes run by .venv/bin/python → %s, named, finding the unused import; got %s", real, text)
	}
}

// TestCargoBuildScriptNeedsApprovalOnHost: a crate whose build.rs writes a
// marker. A plan call refuses without running cargo (no marker, no
// Cargo.lock, no target/); a default call under the hosted policy with no
// approver refuses and names the command; with an approver who approves
// the card (which shows the command), cargo runs.
func TestCargoBuildScriptNeedsApprovalOnHost(t *testing.T) {
	if _, err := exec.LookPath("cargo"); err != nil {
		t.Skipf("no cargo on PATH (%v): the refusals need none, but this test checks the approved run too", err)
	}
	dir, marks := t.TempDir(), t.TempDir()
	marker := filepath.Join(marks, "build-rs-ran")
	writeTree(t, dir, map[string]string{
		"Cargo.toml":  "[package]\nname = \"trap\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"build.rs":    "fn main() { std::fs::write(" + strconvQuote(marker) + ", b\"ran\").unwrap(); }\n",
		"src/main.rs": "fn main() { let unused = 1; }\n",
	})
	untouched := func(t *testing.T) {
		t.Helper()
		for _, p := range []string{marker, filepath.Join(dir, "Cargo.lock"), filepath.Join(dir, "target")} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s exists: cargo ran", p)
			}
		}
	}
	hosted := permission.DefaultPolicy(permission.ModeHosted)

	t.Run("plan surface", func(t *testing.T) {
		res := projectCheck(t, gatedHostRun(t, dir, nil, permission.DefaultPolicy(permission.ModeLocal), nil), tools.SurfacePlan)
		untouched(t)
		text := res.AllText()
		if !res.IsError || !strings.Contains(text, "build scripts") || !strings.Contains(text, "plan surface") || !strings.Contains(text, "cargo check --all-targets") {
			t.Errorf("want a refusal naming the command and why; got %s", text)
		}
	})
	t.Run("hosted, no approver", func(t *testing.T) {
		res := projectCheck(t, gatedHostRun(t, dir, nil, hosted, nil), tools.SurfaceDefault)
		untouched(t)
		text := res.AllText()
		if !res.IsError || !strings.Contains(text, "no approver") || !strings.Contains(text, "cd "+dir+" && CARGO_TERM_COLOR=never ") || !strings.Contains(text, "cargo check --all-targets") {
			t.Errorf("want a refusal naming the command; got %s", text)
		}
	})
	t.Run("hosted, approved", func(t *testing.T) {
		port := questions.New()
		defer port.Close()
		reg := gatedHostRun(t, dir, nil, hosted, port)
		sub := port.Subscribe(0)
		defer sub.Close()
		go func() {
			for {
				if _, err := sub.Next(t.Context()); err != nil {
					return
				}
				for _, c := range port.Cards() {
					if c.Kind == questions.KindPermission && strings.Contains(c.Summary, "cargo check --all-targets") && c.Level == "exec" {
						port.Answer(c.N, questions.Answer{Decision: questions.Approve}, questions.Operator)
					}
				}
			}
		}()
		res := projectCheck(t, reg, tools.SurfaceDefault)
		text := res.AllText()
		t.Log(text)
		if res.IsError || !strings.Contains(text, "unused") {
			t.Errorf("want cargo's findings after approval; got %s", text)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("build.rs did not run after approval: %v", err)
		}
	})
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestVenvStartupCodeNeedsApprovalOnHost: a venv linked to the system's
// python3 whose site-packages hold a .pth import line (python runs it at
// startup) is project code: a plan call refuses to start that python and
// names the file, without running it even to probe it; a default call in
// local mode (allowed by policy) runs the check, and the .pth with it.
func TestVenvStartupCodeNeedsApprovalOnHost(t *testing.T) {
	const system = "/usr/bin/python3"
	if exec.Command(system, "-c", "import pyflakes").Run() != nil {
		t.Skip("/usr/bin/python3 cannot import pyflakes: apt-get install python3-pyflakes to run this test")
	}
	if exec.Command(system, "-c", "import mypy").Run() == nil {
		t.Skip("/usr/bin/python3 has mypy, which this test does not expect")
	}
	ver, err := exec.Command(system, "-c", "import sys; print('python%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		t.Fatal(err)
	}
	find, err := exec.LookPath("find")
	if err != nil {
		t.Skipf("no find: %v", err)
	}
	dir, marks, bin := t.TempDir(), t.TempDir(), t.TempDir()
	mark := filepath.Join(marks, "pth-ran")
	site := ".venv/lib/" + strings.TrimSpace(string(ver)) + "/site-packages/"
	writeTree(t, dir, map[string]string{
		"pyproject.toml":   "[project]\nname = \"x\"\n",
		"app.py":           "import os\n",
		".venv/pyvenv.cfg": "home = /usr/bin\ninclude-system-site-packages = true\n",
		site + "evil.pth":  "import os; open(" + strconvQuote(mark) + ", 'w').close()\n",
	})
	os.MkdirAll(filepath.Join(dir, ".venv/bin"), 0o755)
	if err := os.Symlink(system, filepath.Join(dir, ".venv/bin/python")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(find, filepath.Join(bin, "find")); err != nil {
		t.Fatal(err)
	}
	reg := gatedHostRun(t, dir, envWithPath(bin), permission.DefaultPolicy(permission.ModeLocal), nil)
	res := projectCheck(t, reg, tools.SurfacePlan)
	text := res.AllText()
	t.Log(text)
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the venv's .pth ran in a plan call")
	}
	if !res.IsError || !strings.Contains(text, "evil.pth (import line)") || !strings.Contains(text, "plan surface") {
		t.Errorf("want a refusal naming evil.pth; got %s", text)
	}
	res = projectCheck(t, reg, tools.SurfaceDefault)
	t.Log(res.AllText())
	if _, err := os.Stat(mark); err != nil || res.IsError {
		t.Errorf("after approval (local policy) the check did not run with the venv (mark: %v): %s", err, res.AllText())
	}
}

// TestServerLinkedIntoWorkspaceNeverRunsOnHost: a pylsp on PATH, outside
// the workspace, that is a link to a program inside it is not a server
// berth starts on the host; the system's pylsp after it is.
func TestServerLinkedIntoWorkspaceNeverRunsOnHost(t *testing.T) {
	need(t, "pylsp")
	real, _ := exec.LookPath("pylsp")
	dir, marks, bin := t.TempDir(), t.TempDir(), t.TempDir()
	writeTree(t, dir, map[string]string{"setup.py": "", "main.py": "x = 1\n", "tools/pylsp": spy(marks)})
	if err := os.Symlink(filepath.Join(dir, "tools/pylsp"), filepath.Join(bin, "pylsp")); err != nil {
		t.Fatal(err)
	}
	h := newHostRunIn(t, dir, envWithPath(bin+":"+filepath.Dir(real)+":/usr/bin:/bin"), lsp.Options{})
	e := h.env()
	st := status(t, e, "main.py")
	if b := st["pylsp"].Binary; b == filepath.Join(bin, "pylsp") || b == "" {
		t.Errorf("pylsp binary = %q; want the one outside the workspace (%s)", b, real)
	}
	e.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.py", "line": 1, "symbol": "x"})
	noMarks(t, marks)
}

// TestServerLoadingWorkspaceCodeNotStartedOnHost: typescript-language-server
// prefers the project's own node_modules/typescript to its bundled one, so
// on the host a workspace that ships one does not get the server (which
// would run the workspace's tsserver); without it the same server on PATH
// is chosen. The server here is a spy on PATH, outside the workspace, that
// leaves a marker if it is ever started, installed as npm installs it:
// bin/typescript-language-server links to its package's lib/cli.mjs, with
// typescript beside the package (which berth hands it on the host).
func TestServerLoadingWorkspaceCodeNotStartedOnHost(t *testing.T) {
	bin, markers := t.TempDir(), t.TempDir()
	spy := filepath.Join(bin, "typescript-language-server")
	nm := filepath.Join(t.TempDir(), "node_modules")
	writeTree(t, nm, map[string]string{
		"typescript-language-server/lib/cli.mjs": "#!/bin/sh\necho started >> " + filepath.Join(markers, "tsls") + "\nexit 1\n",
		"typescript/lib/tsserver.js":             "// berth's own\n",
	})
	if err := os.Symlink(filepath.Join(nm, "typescript-language-server/lib/cli.mjs"), spy); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))

	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.Put(t, "tsconfig.json", "{}\n")
	e.Put(t, "index.ts", "export const x: number = 1;\n")
	if st := status(t, e, "index.ts")["typescript-language-server"]; st.Binary != spy {
		t.Fatalf("without node_modules/typescript: binary %q, want the one on PATH %s (missing: %s)", st.Binary, spy, st.Missing)
	}

	e.Put(t, "node_modules/typescript/package.json", `{"name":"typescript","version":"0.0.0"}`+"\n")
	e.Put(t, "node_modules/typescript/lib/tsserver.js", "require('child_process').execSync('touch /tmp/pwned');\n")
	st := status(t, e, "index.ts")["typescript-language-server"]
	if st.Binary != "" || !strings.Contains(st.Missing, "node_modules/typescript") {
		t.Errorf("with the workspace's own typescript: binary %q, missing %q; want not started, naming node_modules/typescript", st.Binary, st.Missing)
	}
	r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "index.ts", "line": 1, "symbol": "x"})
	if !r.IsError || !strings.Contains(r.Text, "node_modules/typescript") {
		t.Errorf("hover: want an error naming node_modules/typescript, got %s", r.Text)
	}

	// A node_modules/typescript above the workspace (above a host root)
	// is found by Node's resolution just the same.
	if err := os.RemoveAll(filepath.Join(h.dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	writeTree(t, filepath.Dir(h.dir), map[string]string{"node_modules/typescript/lib/tsserver.js": "require('child_process').execSync('touch /tmp/pwned');\n"})
	above := filepath.Join(filepath.Dir(h.dir), "node_modules/typescript")
	st = status(t, e, "index.ts")["typescript-language-server"]
	if st.Binary != "" || !strings.Contains(st.Missing, above) {
		t.Errorf("with a typescript above the workspace: binary %q, missing %q; want not started, naming %s", st.Binary, st.Missing, above)
	}
	if _, err := os.Stat(filepath.Join(markers, "tsls")); err == nil {
		t.Error("typescript-language-server was started on the host for a workspace that ships its own typescript")
	}
}
