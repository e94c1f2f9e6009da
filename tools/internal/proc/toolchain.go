package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"berth.dev/berth/sandbox"
)

// Toolchain managers. A version manager's shims or proxies on PATH (a
// rustup proxy named cargo or rust-analyzer, pyenv's and nodenv's shims)
// choose the toolchain they run from a file in the working directory or
// any directory above it: rust-toolchain.toml's `path = "…"` makes a
// trusted rustup proxy exec the workspace's own rust-analyzer. On the
// host berth pins each manager it finds, as it pins Go with
// GOTOOLCHAIN=local: the toolchain the manager chooses from "/" is put
// in the manager's variable, which every file gives way to.

// Manager is a toolchain manager whose shims choose a toolchain from files.
type Manager struct {
	// Program is the manager's program on PATH ("rustup").
	Program string
	// Active are the arguments after Program that print the active
	// toolchain's name as the first word of their first line.
	Active []string
	// Env is the variable that pins the toolchain over every file.
	Env string
	// Files are the files a directory names its toolchain in, nearest
	// directory first.
	Files []string
	// Key, when set, is what a file must contain to name a toolchain
	// (volta's "volta" key in package.json).
	Key string
}

// Managers are the toolchain managers berth knows on the host. rustup,
// pyenv and nodenv are pinned. asdf, mise and volta have no one variable
// that overrides every file for every tool, so berth does not pin them:
// with one of them on PATH, a file of theirs at or above a server's root
// makes its start an exec step. SDKMAN and nvm choose a version only in
// an interactive shell (sdk env, nvm use), which berth never runs, and a
// Gradle or Maven wrapper is the workspace's own program, never run on
// the host.
var Managers = []Manager{
	{Program: "rustup", Active: []string{"show", "active-toolchain"}, Env: "RUSTUP_TOOLCHAIN", Files: []string{"rust-toolchain.toml", "rust-toolchain"}},
	{Program: "pyenv", Active: []string{"version-name"}, Env: "PYENV_VERSION", Files: []string{".python-version"}},
	{Program: "nodenv", Active: []string{"version-name"}, Env: "NODENV_VERSION", Files: []string{".node-version"}},
	{Program: "asdf", Files: []string{".tool-versions"}},
	{Program: "mise", Files: []string{"mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml", ".tool-versions", ".config/mise.toml", ".config/mise/config.toml", ".mise/config.toml", "mise/config.toml"}},
	{Program: "volta", Files: []string{"package.json"}, Key: `"volta"`},
}

// CorepackEnv keeps corepack from downloading the package manager a
// package.json's packageManager names (which may be a URL) and from
// writing one into it.
var CorepackEnv = []string{"COREPACK_ENABLE_NETWORK=0", "COREPACK_ENABLE_AUTO_PIN=0"}

// HostPinEnv is set for every language server on the host besides the
// managers' pins.
var HostPinEnv = append([]string{HostEnv}, CorepackEnv...)

// pinTimeout bounds asking one manager for its active toolchain.
const pinTimeout = 20 * time.Second

// Pin is what one manager found on the host chooses outside any
// workspace.
type Pin struct {
	Manager Manager
	// Program is the manager's program, resolved outside the workspace.
	Program string
	// Value is the toolchain it chooses from "/"; "" when Err says why
	// it chooses none.
	Value string
	Err   error
}

// ManagerOf returns the manager whose program real (a resolved path) is.
func ManagerOf(real string) (Manager, bool) {
	base := path.Base(real)
	for _, m := range Managers {
		if base == m.Program || base == m.Program+"-init" {
			return m, true
		}
	}
	return Manager{}, false
}

// ResolvePin asks prog, the program of m, for the toolchain it chooses
// in "/" — a directory no workspace names a toolchain in — running it in
// sb as the host's processes run.
func ResolvePin(ctx context.Context, sb sandbox.Sandbox, m Manager, prog string) Pin {
	pin := Pin{Manager: m, Program: prog}
	if len(m.Active) == 0 {
		pin.Err = fmt.Errorf("berth does not pin %s, which has no variable that overrides every file", m.Program)
		return pin
	}
	ctx, cancel := context.WithTimeout(ctx, pinTimeout)
	defer cancel()
	var out bytes.Buffer
	errb := NewTail(600)
	// A pin the operator passed to host processes (--host-env) applies
	// here too, and so is what this returns.
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: append([]string{prog}, m.Active...), Dir: "/", Stdout: &out, Stderr: errb})
	if err != nil {
		pin.Err = fmt.Errorf("cannot run %s %s: %w", prog, strings.Join(m.Active, " "), err)
		return pin
	}
	st, err := p.Wait()
	switch {
	case err != nil:
		pin.Err = fmt.Errorf("%s %s: %w", prog, strings.Join(m.Active, " "), err)
		return pin
	case !st.Success():
		pin.Err = fmt.Errorf("%s %s in / failed (%v): %s", prog, strings.Join(m.Active, " "), st, Clip(errb.String(), 400))
		return pin
	}
	line, _, _ := strings.Cut(out.String(), "\n")
	if f := strings.Fields(line); len(f) > 0 {
		pin.Value = f[0]
		return pin
	}
	pin.Err = fmt.Errorf("%s %s in / printed no toolchain", prog, strings.Join(m.Active, " "))
	return pin
}

// ToolchainFile returns the nearest of m's files from dir (absolute) up
// to "/", read with read, and what it names: a toolchain path when path
// is set (rustup's `path = "…"`, or a channel that is a path), else the
// channel. file is "" when there is none.
func ToolchainFile(m Manager, dir string, read func(abs string) ([]byte, error)) (file, name string, isPath bool) {
	for d := path.Clean(dir); ; d = path.Dir(d) {
		for _, f := range m.Files {
			p := path.Join(d, f)
			b, err := read(p)
			if err != nil || (m.Key != "" && !bytes.Contains(b, []byte(m.Key))) {
				continue
			}
			name, isPath = toolchainName(m, f, b)
			return p, name, isPath
		}
		if d == "/" {
			return "", "", false
		}
	}
}

// toolchainName is what a manager's file f with content b names.
func toolchainName(m Manager, f string, b []byte) (name string, isPath bool) {
	s := strings.TrimSpace(string(b))
	if len(m.Active) == 0 {
		return "", false // a configuration, not a toolchain's name
	}
	if m.Program != "rustup" {
		line, _, _ := strings.Cut(s, "\n")
		return strings.TrimSpace(line), strings.Contains(line, "/")
	}
	// rust-toolchain.toml, or a legacy rust-toolchain file that is TOML or
	// a bare channel. Keys are read loosely: any path key or any channel
	// with a slash counts as a path, whatever its section.
	if !strings.Contains(s, "=") {
		return s, strings.Contains(s, "/")
	}
	var channel string
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		k = strings.Trim(strings.TrimSpace(k), `"'`)
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch k {
		case "path":
			return v, true
		case "channel":
			channel = v
		}
	}
	return channel, strings.Contains(channel, "/")
}

// HostToolchain decides a start on the host in dir (absolute) given the
// pins of the managers found: env pins every manager that chooses a
// toolchain outside the workspace. needs says, for each manager that
// cannot be pinned while a file at or above dir chooses its toolchain,
// that the workspace's file would decide what runs: such a start is an
// exec step.
func HostToolchain(pins []Pin, dir string, read func(abs string) ([]byte, error)) (env, needs []string) {
	for _, p := range pins {
		if p.Err == nil && p.Value != "" {
			env = append(env, p.Manager.Env+"="+p.Value)
			continue
		}
		file, name, isPath := ToolchainFile(p.Manager, dir, read)
		if file == "" {
			continue // nothing chooses a toolchain: the manager fails on its own
		}
		what := "the toolchain " + name
		switch {
		case isPath:
			what = "the toolchain at " + name
		case name == "":
			what = "the toolchains"
		}
		needs = append(needs, fmt.Sprintf("%s chooses %s whose programs the shims of %s would run (berth could not pin %s outside the workspace: %v)", file, what, p.Program, p.Manager.Program, p.Err))
	}
	return env, needs
}

// ReadHostFile reads a file of the host, for ToolchainFile.
func ReadHostFile(abs string) ([]byte, error) {
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxToolchainFile {
		return nil, fmt.Errorf("proc: %s is not a toolchain file", abs)
	}
	return os.ReadFile(filepath.Clean(abs))
}

// maxToolchainFile bounds a toolchain file read.
const maxToolchainFile = 64 << 10
