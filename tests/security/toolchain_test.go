package security

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 31, findings 2 and 3: a toolchain file or a node_modules above
// the server's root makes a trusted program on PATH run the workspace's
// code. Each rustup test runs twice: with the real rustup when the
// machine has one (rustup-init's; Debian 12 packages none), and with a
// stand-in built from testdata/rustup that follows rustup's rules and
// file formats, so that it never depends on the machine. The proxies are
// links to either.

// prewarmWait bounds waiting for a prewarm's server to start; it asserts
// nothing about speed.
const prewarmWait = 2 * time.Minute

// rustupPath finds rustup: on PATH, or rustup-init's default place.
func rustupPath() string {
	if p, err := exec.LookPath("rustup"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	if p := filepath.Join(home, ".cargo", "bin", "rustup"); fileExists(p) {
		return p
	}
	return ""
}

// rustupHost is a rustup of its own (RUSTUP_HOME, CARGO_HOME) whose
// proxies rust-analyzer, cargo and rustc are links in bin. Its toolchain
// "neutral", the default when withDefault, has programs that append
// "neutral <argv0>" to mark; rust-analyzer then exits.
type rustupHost struct {
	bin, rustupHome, cargoHome, mark string
}

func newRustupHost(t *testing.T, withDefault bool, rustup string) rustupHost {
	t.Helper()
	d := t.TempDir()
	h := rustupHost{bin: filepath.Join(d, "bin"), rustupHome: filepath.Join(d, "rustup"), cargoHome: filepath.Join(d, "cargo"), mark: filepath.Join(d, "mark")}
	tc := filepath.Join(d, "neutral")
	for _, p := range []string{"rustc", "cargo", "rust-analyzer"} {
		writeFile(t, tc, "bin/"+p, "#!/bin/sh\necho \"neutral $0\" >> "+h.mark+"\nexit 1\n", 0o755)
		os.MkdirAll(h.bin, 0o755)
		if err := os.Symlink(rustup, filepath.Join(h.bin, p)); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(tc, "lib"), 0o755)
	if err := os.Symlink(rustup, filepath.Join(h.bin, "rustup")); err != nil {
		t.Fatal(err)
	}
	cmds := [][]string{{"toolchain", "link", "neutral", tc}}
	if withDefault {
		cmds = append(cmds, []string{"default", "neutral"})
	}
	for _, args := range cmds {
		c := exec.Command(filepath.Join(h.bin, "rustup"), args...)
		c.Env = append(os.Environ(), h.env()...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("rustup %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return h
}

// eachRustup runs f as a subtest with the real rustup ("rustup", skipped
// when the machine has none) and with the stand-in ("stand-in").
func eachRustup(t *testing.T, f func(t *testing.T, rustup string)) {
	t.Run("rustup", func(t *testing.T) {
		rustup := rustupPath()
		if rustup == "" {
			t.Skip("no rustup on this machine (Debian 12 packages none; rustup-init installs it in ~/.cargo/bin); the stand-in runs instead")
		}
		f(t, rustup)
	})
	t.Run("stand-in", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		out := filepath.Join(dir, "rustup")
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		if b, err := exec.CommandContext(ctx, "go", "build", "-o", out, "./testdata/rustup").CombinedOutput(); err != nil {
			t.Fatalf("go build testdata/rustup: %v: %s", err, b)
		}
		f(t, out)
	})
}

func (h rustupHost) env() []string {
	return []string{"RUSTUP_HOME=" + h.rustupHome, "CARGO_HOME=" + h.cargoHome, "RUST_BACKTRACE=0"}
}

// serve starts berth serve in local mode with h's proxies first on PATH.
func (h rustupHost) serve(t *testing.T, tok string) *server {
	return startServe(t, serveOpts{
		args:    []string{"--mode", "local"},
		env:     append([]string{"BERTH_TOKEN=" + tok, "PATH=" + h.bin + ":/usr/local/bin:/usr/bin:/bin"}, h.env()...),
		hostEnv: []string{"RUSTUP_HOME", "CARGO_HOME", "RUST_BACKTRACE"},
	})
}

// toolchainCrate is a crate whose rust-toolchain.toml names the toolchain
// at tc/ in the crate (through /proc/self/cwd, the proxy's working
// directory), whose programs leave a marker in markers.
func toolchainCrate(t *testing.T, markers string) string {
	t.Helper()
	ws := t.TempDir()
	writeFile(t, ws, "Cargo.toml", "[package]\nname = \"tc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n", 0o644)
	writeFile(t, ws, "src/main.rs", "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n", 0o644)
	writeFile(t, ws, "rust-toolchain.toml", "[toolchain]\npath = \"/proc/self/cwd/tc\"\n", 0o644)
	os.MkdirAll(filepath.Join(ws, "tc", "lib"), 0o755)
	for _, p := range []string{"rustc", "cargo", "rust-analyzer"} {
		plant(t, ws, "tc/bin/"+p, markers, "tc-"+p)
	}
	return ws
}

// waitFile waits for p to exist, up to d.
func waitFile(t *testing.T, p string, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if fileExists(p) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// TestRustToolchainPathDoesNotRunOnTheHost: rust-analyzer is a rustup
// proxy on PATH, outside the workspace; the workspace's
// rust-toolchain.toml names its own toolchain. A read-level lsp call and
// a plan run's prewarm start the rust-analyzer of the toolchain rustup
// chooses outside the workspace (berth pins RUSTUP_TOOLCHAIN), never the
// workspace's.
func TestRustToolchainPathDoesNotRunOnTheHost(t *testing.T) {
	eachRustup(t, func(t *testing.T, rustup string) {
		h := newRustupHost(t, true, rustup)
		tok := newToken(t)
		s := h.serve(t, tok)
		markers := t.TempDir()
		ws := toolchainCrate(t, markers)

		run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"readonly"}`, ws))
		res, r := s.call(tok, run, "lsp", `{"action":"hover","file":"src/main.rs","line":2,"symbol":"x"}`)
		t.Logf("readonly run, hover: %s / %s", r, res.Text())
		if left := markersLeft(t, markers); len(left) > 0 {
			t.Errorf("a read-level lsp call ran the workspace's toolchain: %s", strings.Join(left, "; "))
		}
		if !fileExists(h.mark) {
			t.Errorf("the pinned toolchain's rust-analyzer did not run either, so the test proves nothing: %s", res.Text())
		}

		// The prewarm alone, in a plan run, on a crate of its own.
		os.Remove(h.mark)
		markers2 := t.TempDir()
		ws2 := toolchainCrate(t, markers2)
		s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"plan","prewarm":["lsp:rust"]}`, ws2))
		if !waitFile(t, h.mark, prewarmWait) && len(markersLeft(t, markers2)) == 0 {
			t.Errorf("the prewarm started no rust-analyzer of the pinned toolchain within %v", prewarmWait)
		}
		if left := markersLeft(t, markers2); len(left) > 0 {
			t.Errorf("a plan run's prewarm ran the workspace's toolchain: %s", strings.Join(left, "; "))
		}
	})
}

// TestUnpinnableRustupIsAnExecStep: a rustup with no default toolchain
// cannot be pinned, so the workspace's rust-toolchain.toml would decide
// what runs: in a plan run the server is not started, and the error says
// why; nothing of the workspace's toolchain runs.
func TestUnpinnableRustupIsAnExecStep(t *testing.T) {
	eachRustup(t, func(t *testing.T, rustup string) {
		h := newRustupHost(t, false, rustup)
		tok := newToken(t)
		s := h.serve(t, tok)
		markers := t.TempDir()
		ws := toolchainCrate(t, markers)

		run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"plan"}`, ws))
		res, r := s.call(tok, run, "lsp", `{"action":"hover","file":"src/main.rs","line":2,"symbol":"x"}`)
		t.Logf("plan run, hover: %s / %s", r, res.Text())
		if r.status != 200 || !res.IsError || !strings.Contains(res.Text(), "rust-toolchain.toml") {
			t.Errorf("want a tool error naming rust-toolchain.toml, got %s / %s", r, res.Text())
		}
		if left := markersLeft(t, markers); len(left) > 0 {
			t.Fatalf("the workspace's toolchain ran: %s", strings.Join(left, "; "))
		}
	})
}

// TestParentNodeModulesTypescriptDoesNotRun: the workspace's root holds
// node_modules/typescript, and app/tsconfig.json makes app/ the server's
// root. Node's resolution walks from app/ up to the root's node_modules,
// so typescript-language-server would run its tsserver.js; a read-level
// call in a readonly run must not.
func TestParentNodeModulesTypescriptDoesNotRun(t *testing.T) {
	npmBin := os.Getenv("BERTH_LSP_NPM_BIN")
	if npmBin == "" || !fileExists(filepath.Join(npmBin, "typescript-language-server")) {
		if os.Getenv("CI") == "true" {
			t.Fatal("BERTH_LSP_NPM_BIN has no typescript-language-server (tests/run installs it)")
		}
		t.Skip("BERTH_LSP_NPM_BIN has no typescript-language-server (tests/run installs it)")
	}
	tok := newToken(t)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "local"},
		env:  []string{"BERTH_TOKEN=" + tok, "PATH=" + npmBin + ":/usr/local/bin:/usr/bin:/bin"},
	})
	markers := t.TempDir()
	mark := filepath.Join(markers, "tsserver")
	ws := t.TempDir()
	writeFile(t, ws, "app/tsconfig.json", "{}\n", 0o644)
	writeFile(t, ws, "app/x.ts", "export const x: number = 1;\n", 0o644)
	writeFile(t, ws, "node_modules/typescript/package.json", `{"name":"typescript","version":"5.9.3"}`+"\n", 0o644)
	writeFile(t, ws, "node_modules/typescript/lib/tsserver.js", fmt.Sprintf("require('fs').appendFileSync(%q, 'ran\\n');\n", mark), 0o644)
	writeFile(t, ws, "node_modules/typescript/lib/typescript.js", fmt.Sprintf("require('fs').appendFileSync(%q, 'ran\\n');\n", mark), 0o644)

	run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"readonly"}`, ws))
	res, r := s.call(tok, run, "lsp", `{"action":"hover","file":"app/x.ts","line":1,"symbol":"x"}`)
	t.Logf("readonly run, hover: %s / %s", r, res.Text())
	noMarker(t, mark, "the workspace's node_modules/typescript/lib/tsserver.js")
	if r.status != 200 {
		t.Fatalf("hover: %s", r)
	}

	// typescript-language-server also takes a tsserver from a Yarn SDK
	// directory above its root, which no refusal names: on the host it is
	// given its own tsserver instead, and answers.
	ws2 := t.TempDir()
	writeFile(t, ws2, "app/tsconfig.json", "{}\n", 0o644)
	writeFile(t, ws2, "app/x.ts", "export const x: number = 1;\n", 0o644)
	writeFile(t, ws2, ".yarn/sdks/typescript/package.json", `{"name":"typescript","version":"5.9.3"}`+"\n", 0o644)
	writeFile(t, ws2, ".yarn/sdks/typescript/lib/tsserver.js", fmt.Sprintf("require('fs').appendFileSync(%q, 'ran\\n');\n", mark), 0o644)
	run2 := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"readonly"}`, ws2))
	res, r = s.call(tok, run2, "lsp", `{"action":"hover","file":"app/x.ts","line":1,"symbol":"x"}`)
	t.Logf("readonly run, .yarn/sdks: hover: %s / %s", r, res.Text())
	noMarker(t, mark, "the workspace's .yarn/sdks/typescript/lib/tsserver.js")
	if r.status != 200 || res.IsError || !strings.Contains(res.Text(), "number") {
		t.Errorf("hover with berth's own tsserver: want the type of x, got %s / %s", r, res.Text())
	}
}

// TestProjectCheckPinsRustup: in a local run, where exec is allowed, the
// project check's cargo check runs with rustup pinned: the cargo of the
// toolchain rustup chooses outside the workspace, not the one the
// workspace's rust-toolchain.toml names.
func TestProjectCheckPinsRustup(t *testing.T) {
	eachRustup(t, func(t *testing.T, rustup string) {
		h := newRustupHost(t, true, rustup)
		tok := newToken(t)
		s := h.serve(t, tok)
		markers := t.TempDir()
		ws := toolchainCrate(t, markers)

		run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
		res, r := s.call(tok, run, "lsp", `{"action":"diagnostics","file":"*"}`)
		t.Logf("local run, diagnostics *: %s / %s", r, res.Text())
		if left := markersLeft(t, markers); len(left) > 0 {
			t.Errorf("the project check ran the workspace's toolchain: %s", strings.Join(left, "; "))
		}
		if b, _ := os.ReadFile(h.mark); !strings.Contains(string(b), "cargo") {
			t.Errorf("the pinned toolchain's cargo did not run either (its marks: %q), so the test proves nothing: %s", b, res.Text())
		}
	})
}
