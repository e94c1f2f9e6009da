package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/syntax/grammars"
)

// berthProcess runs berth with args in a fresh process (this test binary,
// re-entered in TestGrammarsHelperProcess) with env added, as a user runs
// it: grammars are loaded once per process, so each step gets its own.
func berthProcess(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return berthProcessAt(t, os.Args[0], env, args...)
}

// berthProcessAt is berthProcess with the executable at exe.
func berthProcessAt(t *testing.T, exe string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestGrammarsHelperProcess$", "--")
	cmd.Args = append(cmd.Args, args...)
	// The environment without the grammar settings, then env.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "BERTH_GRAMMARS" && k != "BERTH_GRAMMAR_DIR" && k != "XDG_CACHE_HOME" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "BERTH_TEST_HELPER_PROCESS=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("berth %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// TestGrammarsHelperProcess is berth's main when run by berthProcess.
func TestGrammarsHelperProcess(t *testing.T) {
	if os.Getenv("BERTH_TEST_HELPER_PROCESS") != "1" {
		return
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	root := newRoot()
	root.SetArgs(args)
	os.Exit(report(os.Stderr, root.ExecuteContext(context.Background())))
}

const dartStop = `class Player {
  void stop() {
    if (sub != null) sub.dispose();
    if (timer != null) other.dispose();
  }
}
`

// TestGrammarsInstallThenDart is the check from a fresh clone:
// `berth grammars install dart --dir D`, then `ast-grep --lang dart` with the
// spec's example finds the guard that disposes what it tested and not the
// other one; without the grammar the error names the install command.
func TestGrammarsInstallThenDart(t *testing.T) {
	reg := grammars.Registry(context.Background())
	u, err := grammars.TarballURL(reg, "tree-sitter-dart", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	resp, err := http.DefaultClient.Do(req)
	cancel()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("npm registry %s unreachable: %v", reg, err)
		}
		t.Skipf("npm registry %s unreachable: %v", reg, err)
	}
	resp.Body.Close()

	gdir := filepath.Join(t.TempDir(), "g")
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "player.dart"), []byte(dartStop), 0o644); err != nil {
		t.Fatal(err)
	}
	// No configured grammars anywhere but the directory under test.
	clean := []string{"XDG_CACHE_HOME=" + t.TempDir()}
	pattern := "if ($X != null) $X.dispose()"

	_, stderr, code := berthProcess(t, append(clean, "BERTH_GRAMMAR_DIR="+gdir), "ast-grep", "--pattern", pattern, "--lang", "dart", work)
	if code != exitTrouble || !strings.Contains(stderr, "berth grammars install dart") {
		t.Errorf("ast-grep --lang dart before the install: exit %d, stderr %q; want exit 2 naming `berth grammars install dart`", code, stderr)
	}

	out, stderr, code := berthProcess(t, clean, "grammars", "install", "dart", "--dir", gdir)
	if code != 0 || !strings.Contains(out, "installed") {
		t.Fatalf("grammars install: exit %d\n%s\n%s", code, out, stderr)
	}
	out, _, code = berthProcess(t, clean, "grammars", "install", "dart", "--dir", gdir)
	if code != 0 || !strings.Contains(out, "already installed") {
		t.Errorf("a second install: exit %d, %q; want it to say the grammar is already installed", code, out)
	}
	out, _, code = berthProcess(t, clean, "grammars", "list", "--dir", gdir)
	if code != 0 || !strings.Contains(out, filepath.Join(gdir, "libtree-sitter-dart.so")) || !strings.Contains(out, "berth grammars install swift") {
		t.Errorf("grammars list: exit %d\n%s", code, out)
	}

	out, stderr, code = berthProcess(t, append(clean, "BERTH_GRAMMAR_DIR="+gdir), "ast-grep", "--pattern", pattern, "--lang", "dart", work)
	if code != exitMatched || !strings.Contains(out, "if (sub != null) sub.dispose();") || strings.Contains(out, "other.dispose") {
		t.Errorf("ast-grep after the install: exit %d\nstdout %s\nstderr %s\nwant only the guard that disposes what it tested", code, out, stderr)
	}

	// Shipped next to the executable (bin/berth → lib/berth/grammars, as
	// berth's image lays it out): found with nothing configured.
	root := t.TempDir()
	exe := filepath.Join(root, "bin", "berth")
	shipped := filepath.Join(root, "lib", "berth", "grammars")
	for _, d := range []string{filepath.Dir(exe), shipped} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(os.Args[0], exe); err != nil {
		copyFile(t, os.Args[0], exe, 0o755)
	}
	for _, f := range []string{"dart.json", "libtree-sitter-dart.so"} {
		copyFile(t, filepath.Join(gdir, f), filepath.Join(shipped, f), 0o644)
	}
	out, stderr, code = berthProcessAt(t, exe, append(clean, "BERTH_GRAMMAR_DIR="+filepath.Join(root, "none")), "ast-grep", "--pattern", pattern, "--lang", "dart", work)
	if code != exitMatched || !strings.Contains(out, "if (sub != null) sub.dispose();") {
		t.Errorf("ast-grep with the grammar shipped in ../lib/berth/grammars: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	out, _, _ = berthProcessAt(t, exe, append(clean, "BERTH_GRAMMAR_DIR="+filepath.Join(root, "none")), "grammars", "list")
	if !strings.Contains(out, filepath.Join(shipped, "libtree-sitter-dart.so")) {
		t.Errorf("grammars list does not show the shipped grammar:\n%s", out)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}
