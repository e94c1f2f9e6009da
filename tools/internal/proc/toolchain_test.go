package proc

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

func TestToolchainFile(t *testing.T) {
	rustup, pyenv := Managers[0], Managers[1]
	files := map[string]string{
		"/w/a/rust-toolchain.toml": "[toolchain]\npath = \"/proc/self/cwd/tc\"\n",
		"/w/rust-toolchain":        "nightly-2024-01-01\n",
		"/x/rust-toolchain.toml":   "[toolchain]\nchannel = \"stable\"\ncomponents = [\"rustfmt\"]\n",
		"/y/rust-toolchain":        "../../tc\n",
		"/w/.python-version":       "3.11.4\n",
	}
	read := func(p string) ([]byte, error) {
		if c, ok := files[p]; ok {
			return []byte(c), nil
		}
		return nil, fs.ErrNotExist
	}
	for _, c := range []struct {
		m          Manager
		dir        string
		file, name string
		isPath     bool
	}{
		{rustup, "/w/a/b", "/w/a/rust-toolchain.toml", "/proc/self/cwd/tc", true},
		{rustup, "/w/c", "/w/rust-toolchain", "nightly-2024-01-01", false},
		{rustup, "/x", "/x/rust-toolchain.toml", "stable", false},
		{rustup, "/y/z", "/y/rust-toolchain", "../../tc", true},
		{rustup, "/q", "", "", false},
		{pyenv, "/w/a/b", "/w/.python-version", "3.11.4", false},
	} {
		file, name, isPath := ToolchainFile(c.m, c.dir, read)
		if file != c.file || name != c.name || isPath != c.isPath {
			t.Errorf("%s from %s: %q %q %v, want %q %q %v", c.m.Program, c.dir, file, name, isPath, c.file, c.name, c.isPath)
		}
	}

	// A pinned manager ignores every file; one that cannot be pinned is
	// a step when a file chooses for it, and nothing when none does.
	pins := []Pin{{Manager: rustup, Program: "/r/rustup", Value: "stable"}, {Manager: pyenv, Program: "/p/pyenv", Err: errors.New("no pyenv")}}
	env, needs := HostToolchain(pins, "/w/a", read)
	if !slices.Equal(env, []string{"RUSTUP_TOOLCHAIN=stable"}) || len(needs) != 1 || !strings.Contains(needs[0], "/w/.python-version") {
		t.Errorf("env %q, needs %q", env, needs)
	}
	if env, needs := HostToolchain(pins, "/q", read); len(env) != 1 || len(needs) != 0 {
		t.Errorf("no files: env %q, needs %q", env, needs)
	}
}
