// Command rustup is a stand-in for rustup on machines without it
// (Debian 12 packages none): the part of rustup the toolchain tests
// exercise, following rustup's own rules and file formats. Linked as
// another name (cargo, rust-analyzer) it is a proxy: it runs that program
// of the active toolchain. The active toolchain is RUSTUP_TOOLCHAIN, else
// the nearest rust-toolchain.toml or rust-toolchain from the working
// directory up ([toolchain] path = "…" or channel = "…", or a bare
// channel), else settings.toml's default_toolchain in RUSTUP_HOME. As
// rustup it knows "show active-toolchain", "toolchain link NAME DIR" and
// "default NAME".
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	home := os.Getenv("RUSTUP_HOME")
	if home == "" {
		fail("RUSTUP_HOME is not set")
	}
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name != "rustup" {
		dir := toolchainDir(home)
		prog := filepath.Join(dir, "bin", name)
		if err := syscall.Exec(prog, append([]string{prog}, args...), os.Environ()); err != nil {
			fail(fmt.Sprintf("cannot run %s: %v", prog, err))
		}
	}
	switch strings.Join(args[:min(2, len(args))], " ") {
	case "show active-toolchain":
		tc, why := active(home)
		if tc == "" {
			fail("no active toolchain")
		}
		fmt.Printf("%s (%s)\n", tc, why)
	case "toolchain link":
		if len(args) != 4 {
			fail("usage: rustup toolchain link NAME DIR")
		}
		must(os.MkdirAll(filepath.Join(home, "toolchains"), 0o755))
		must(os.Symlink(args[3], filepath.Join(home, "toolchains", args[2])))
	default:
		if len(args) == 2 && args[0] == "default" {
			must(os.MkdirAll(home, 0o755))
			must(os.WriteFile(filepath.Join(home, "settings.toml"), []byte(fmt.Sprintf("default_toolchain = %q\n", args[1])), 0o644))
			return
		}
		fail("the stand-in knows no " + strings.Join(args, " "))
	}
}

// active returns the active toolchain (a name or, from a toolchain file,
// a path) and why it is active.
func active(home string) (string, string) {
	if tc := os.Getenv("RUSTUP_TOOLCHAIN"); tc != "" {
		return tc, "overridden by environment variable RUSTUP_TOOLCHAIN"
	}
	wd, _ := os.Getwd()
	for d := wd; ; d = filepath.Dir(d) {
		for _, f := range []string{"rust-toolchain.toml", "rust-toolchain"} {
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			s := strings.TrimSpace(string(b))
			if !strings.Contains(s, "=") {
				return s, "overridden by " + filepath.Join(d, f)
			}
			for _, l := range strings.Split(s, "\n") {
				k, v, ok := strings.Cut(l, "=")
				k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
				if ok && (k == "path" || k == "channel") {
					return v, "overridden by " + filepath.Join(d, f)
				}
			}
		}
		if d == "/" {
			break
		}
	}
	b, _ := os.ReadFile(filepath.Join(home, "settings.toml"))
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && strings.TrimSpace(k) == "default_toolchain" {
			return strings.Trim(strings.TrimSpace(v), `"`), "default"
		}
	}
	return "", ""
}

// toolchainDir is the active toolchain's directory.
func toolchainDir(home string) string {
	tc, _ := active(home)
	switch {
	case tc == "":
		fail("no active toolchain")
	case strings.Contains(tc, "/"):
		return tc
	}
	return filepath.Join(home, "toolchains", tc)
}

func must(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "error: "+msg)
	os.Exit(1)
}
