package security

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// plant writes an executable shell script at dir/name that records in
// markers/<tag> that it ran, then exits 0: a program a hostile repository
// ships in the hope that a tool runs it.
func plant(t *testing.T, dir, name, markers, tag string) {
	t.Helper()
	writeFile(t, dir, name, "#!/bin/sh\necho \"$0 $*\" >> "+filepath.Join(markers, tag)+"\nexit 0\n", 0o755)
}

// hostileWorkspace is a repository that ships its own checkers and
// interpreters: node_modules/.bin/tsc, .venv/bin/{python,pyright,mypy},
// venv/bin/python and bin/python3, each leaving a marker in markers when
// run, with the root markers that make berth's tools want them.
func hostileWorkspace(t *testing.T, markers string) string {
	t.Helper()
	ws := t.TempDir()
	writeFile(t, ws, "pyproject.toml", "[project]\nname = \"hostile\"\nversion = \"0\"\n", 0o644)
	writeFile(t, ws, "app.py", "def f(x):\n    return x + 1\n", 0o644)
	writeFile(t, ws, "tsconfig.json", "{}\n", 0o644)
	writeFile(t, ws, "package.json", `{"name":"hostile","scripts":{"postinstall":"sh -c 'touch /tmp/never'"}}`+"\n", 0o644)
	writeFile(t, ws, "index.ts", "export const x: number = 1;\n", 0o644)
	for _, p := range []struct{ name, tag string }{
		{"node_modules/.bin/tsc", "tsc"},
		{"node_modules/.bin/pyright", "node-pyright"},
		{".venv/bin/python", "venv-python"},
		{".venv/bin/python3", "venv-python3"},
		{".venv/bin/pyright", "venv-pyright"},
		{".venv/bin/mypy", "venv-mypy"},
		{".venv/bin/pyflakes", "venv-pyflakes"},
		{"venv/bin/python", "venv2-python"},
		{"bin/python3", "bin-python3"},
	} {
		plant(t, ws, p.name, markers, p.tag)
	}
	return ws
}

// markersLeft lists the markers planted programs left.
func markersLeft(t *testing.T, markers string) []string {
	t.Helper()
	ents, err := os.ReadDir(markers)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(markers, e.Name()))
		out = append(out, fmt.Sprintf("%s (%s)", e.Name(), strings.TrimSpace(string(b))))
	}
	return out
}

// TestRepositoryCodeDoesNotRunOnTheHost: every tool that looks for a
// checker or an interpreter, called on a workspace that ships its own,
// runs none of them on the host — not in a plan run, and not in a local
// run where every level is allowed either.
func TestRepositoryCodeDoesNotRunOnTheHost(t *testing.T) {
	tok := newToken(t)
	s := startServe(t, serveOpts{args: []string{"--mode", "local"}, env: []string{"BERTH_TOKEN=" + tok}})
	markers := t.TempDir()
	ws := hostileWorkspace(t, markers)

	plan := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"plan"}`, ws))
	res, r := s.call(tok, plan, "lsp", `{"action":"diagnostics","file":"*"}`)
	if r.status != 200 {
		t.Fatalf("plan run: lsp diagnostics *: %s", r)
	}
	t.Logf("plan run, diagnostics *: %s", res.Text())

	run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"conversation_id":"c-trust"}`, ws))
	for _, c := range []struct{ tool, args string }{
		{"lsp", `{"action":"diagnostics","file":"*"}`},
		{"lsp", `{"action":"hover","file":"app.py","line":1,"symbol":"f"}`},
		{"debug", `{"op":"adapters"}`},
		{"eval", `{"code":"import sys; print('EXE=' + sys.executable)","description":"print which python interpreter runs the cells"}`},
	} {
		res, r := s.call(tok, run, c.tool, c.args)
		if r.status != 200 {
			t.Fatalf("%s %s: %s", c.tool, c.args, r)
		}
		t.Logf("%s %s: %s", c.tool, c.args, res.Text())
		if c.tool == "eval" {
			_, exe, ok := strings.Cut(res.Text(), "EXE=")
			if !ok || strings.HasPrefix(exe, ws) {
				t.Errorf("the cell ran under the workspace's own interpreter (or not at all): %s", res.Text())
			}
		}
	}
	if left := markersLeft(t, markers); len(left) > 0 {
		t.Errorf("programs shipped in the workspace ran on the host: %s", strings.Join(left, "; "))
	}
}

// cargoPath finds cargo: on PATH, or rustup's default place.
func cargoPath() string {
	if p, err := exec.LookPath("cargo"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	if p := filepath.Join(home, ".cargo", "bin", "cargo"); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestBuildScriptNeedsExecApproval: a crate whose build.rs writes a
// marker. A plan run's project check refuses to run cargo at all (no
// marker, no Cargo.lock, no target/), because cargo check runs the
// crate's build scripts; a run whose level allows exec (local mode, where
// every level is allowed without a card) runs it, so the refusal is the
// trust rule and not a missing cargo. The permission card a hosted run
// draws for the step is tested in tools/permission and tools/lsp.
func TestBuildScriptNeedsExecApproval(t *testing.T) {
	cargo := cargoPath()
	if cargo == "" {
		t.Skip("no cargo on this machine: the crate's build script cannot run either way")
	}
	tok := newToken(t)
	home, _ := os.UserHomeDir()
	s := startServe(t, serveOpts{
		args: []string{"--mode", "local"},
		env: []string{"BERTH_TOKEN=" + tok, "PATH=" + filepath.Dir(cargo) + ":" + os.Getenv("PATH"),
			"CARGO_HOME=" + filepath.Join(home, ".cargo"), "RUSTUP_HOME=" + filepath.Join(home, ".rustup"),
			"CARGO_NET_OFFLINE=true"},
		hostEnv: []string{"CARGO_HOME", "RUSTUP_HOME", "CARGO_NET_OFFLINE"},
	})
	markers := t.TempDir()
	ws := t.TempDir()
	writeFile(t, ws, "Cargo.toml", "[package]\nname = \"hostile\"\nversion = \"0.1.0\"\nedition = \"2021\"\nbuild = \"build.rs\"\n", 0o644)
	writeFile(t, ws, "build.rs", fmt.Sprintf("fn main() { std::fs::write(%q, \"build.rs ran\").unwrap(); }\n", filepath.Join(markers, "build-rs")), 0o644)
	writeFile(t, ws, "src/lib.rs", "pub fn f() -> i32 { 1 }\n", 0o644)

	plan := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"plan"}`, ws))
	res, r := s.call(tok, plan, "lsp", `{"action":"diagnostics","file":"*"}`)
	if r.status != 200 || !res.IsError || !strings.Contains(res.Text(), "cargo") {
		t.Errorf("plan run: want a tool error naming cargo, got %s / %s", r, res.Text())
	}
	for _, p := range []string{"Cargo.lock", "target"} {
		if fileExists(filepath.Join(ws, p)) {
			t.Errorf("plan run: cargo wrote %s into the workspace", p)
		}
	}
	if left := markersLeft(t, markers); len(left) > 0 {
		t.Fatalf("plan run: the crate's build script ran: %s", strings.Join(left, "; "))
	}

	run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	res, r = s.call(tok, run, "lsp", `{"action":"diagnostics","file":"*"}`)
	t.Logf("local run: %d / %s", r.status, res.Text())
	if !fileExists(filepath.Join(markers, "build-rs")) {
		t.Errorf("a local run allows exec, so cargo check should have run the build script; result: %s", res.Text())
	}
}

// callAsync is call for goroutines: it reports instead of failing.
func (s *server) callAsync(tok, run, tool, args string) (result, error) {
	r, err := s.request("POST", "/v1/runs/"+run+"/tools/"+tool, tok, `{"args":`+args+`}`)
	var res result
	if err == nil && r.status == 200 {
		err = json.Unmarshal(r.body, &res)
	} else if err == nil {
		err = fmt.Errorf("%s", r)
	}
	return res, err
}
