package shim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// source is the agent's own source, built into berth so that a machine with
// a Go toolchain can build the agent on demand.
//
//go:embed agent/*.go cmd/berth-shim/main.go
var source embed.FS

// BinaryName is the agent's file name.
const BinaryName = "berth-shim"

// EnvBinary names the environment variable that points at a prebuilt agent.
const EnvBinary = "BERTH_SHIM"

// buildTimeout bounds building the agent; the build outlives the ctx of
// the call that started it so that a short-lived call does not waste it.
const buildTimeout = 10 * time.Minute

// Arches are the sandbox architectures (GOARCH names) berth has an agent
// for: a release embeds a prebuilt agent for each.
var Arches = []string{"amd64", "arm64"}

var (
	locateMu sync.Mutex
	// locateCalls holds, per architecture, the running or successful
	// lookup.
	locateCalls = map[string]*locateResult{}
)

type locateResult struct {
	arch     string
	started  time.Time
	building chan struct{} // closed when no prebuilt agent was found and a build began
	done     chan struct{}
	bin      *Binary
	err      error
}

// Locate finds the agent binary for linux/arch (a GOARCH name: "amd64" or
// "arm64"; empty means berth's own), in this order: the absolute path in
// $BERTH_SHIM, when its ELF header says arch; berth-shim-linux-ARCH, then
// berth-shim (when its ELF header says arch), next to the running
// executable; the agent embedded in berth by a release build (see
// [Embedded]), written once to a cache directory; a copy built from berth's
// embedded agent source into $XDG_CACHE_HOME/berth/shim/<hash>/ (or
// ~/.cache/…), with the Go toolchain on PATH. A success is cached for the
// life of the process. ctx bounds the wait; a build, once started, runs to
// its end (at most ten minutes) for the next caller.
func Locate(ctx context.Context, arch string) (*Binary, error) {
	c, err := start(arch)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		return c.bin, c.err
	case <-ctx.Done():
		if c.isBuilding() {
			return nil, fmt.Errorf("shim: berth is building its sandbox agent for linux/%s (started %s ago; a first build takes about a minute, later ones are cached); call again shortly: %w",
				c.arch, time.Since(c.started).Round(time.Second), ctx.Err())
		}
		return nil, fmt.Errorf("shim: wait for the agent binary for linux/%s: %w", c.arch, ctx.Err())
	}
}

// Prepare starts looking for the agent for linux/arch in the background,
// so that a build, when berth has no prebuilt agent (a developer's `go
// run`), starts now and not at the first tool call. report, when not nil,
// is called from the lookup's goroutine with a line for the operator: at
// [slog.LevelWarn] when a build starts, [slog.LevelInfo] when it ends, and
// [slog.LevelError] when the agent cannot be had.
func Prepare(arch string, report func(level slog.Level, msg string)) {
	c, err := start(arch)
	if err != nil {
		if report != nil {
			report(slog.LevelError, err.Error())
		}
		return
	}
	if report == nil {
		return
	}
	go func() { // owned by the lookup: it ends when the lookup does
		select {
		case <-c.building:
			report(slog.LevelWarn, fmt.Sprintf("berth is building its sandbox agent for linux/%s with the Go toolchain (this berth carries no prebuilt agent; release/build makes one that does); the first tool calls wait for it", c.arch))
			<-c.done
			if c.err != nil {
				report(slog.LevelError, fmt.Sprintf("berth could not build its sandbox agent for linux/%s: %v", c.arch, c.err))
			} else {
				report(slog.LevelInfo, fmt.Sprintf("berth built its sandbox agent for linux/%s in %s", c.arch, time.Since(c.started).Round(100*time.Millisecond)))
			}
		case <-c.done:
			if c.err != nil {
				report(slog.LevelError, c.err.Error())
			}
		}
	}()
}

// Building describes a build of the agent in progress, for progress
// messages, or returns "" when none runs.
func Building() string {
	locateMu.Lock()
	defer locateMu.Unlock()
	for _, a := range Arches {
		c := locateCalls[a]
		if c == nil || !c.isBuilding() {
			continue
		}
		select {
		case <-c.done:
			continue
		default:
		}
		return fmt.Sprintf("berth is building its sandbox agent for linux/%s (%s so far)", a, time.Since(c.started).Round(time.Second))
	}
	return ""
}

// start returns the lookup for arch, starting it when none runs or
// succeeded.
func start(arch string) (*locateResult, error) {
	if arch == "" {
		arch = runtime.GOARCH
	}
	if !slices.Contains(Arches, arch) {
		return nil, fmt.Errorf("shim: berth has no agent for linux/%s; it supports sandboxes on %s", arch, strings.Join(Arches, " and "))
	}
	locateMu.Lock()
	defer locateMu.Unlock()
	if c := locateCalls[arch]; c != nil {
		return c, nil
	}
	c := &locateResult{arch: arch, started: time.Now(), building: make(chan struct{}), done: make(chan struct{})}
	locateCalls[arch] = c
	go func() { // owned by locateCalls: it ends within buildTimeout
		bctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		c.bin, c.err = locate(bctx, arch, func() { close(c.building) })
		if c.err != nil {
			locateMu.Lock()
			delete(locateCalls, arch) // the next call tries again
			locateMu.Unlock()
		}
		close(c.done)
	}()
	return c, nil
}

// isBuilding reports whether the lookup found no prebuilt agent and builds
// one (or built it).
func (c *locateResult) isBuilding() bool {
	select {
	case <-c.building:
		return true
	default:
		return false
	}
}

// locate finds or builds the agent for linux/arch; building, when not nil,
// is called before a build starts.
func locate(ctx context.Context, arch string, building func()) (*Binary, error) {
	exeDir := ""
	if exe, err := os.Executable(); err == nil {
		exeDir = filepath.Dir(exe)
	}
	if b, err := find(arch, exeDir); b != nil || err != nil {
		return b, err
	}
	if building != nil {
		building()
	}
	return build(ctx, arch)
}

// find returns a prebuilt agent for linux/arch, from $BERTH_SHIM, exeDir
// (berth's own directory) or berth's embedded agents, or nil when there is
// none.
func find(arch, exeDir string) (*Binary, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("shim: $%s=%q is not an absolute path; set it to the full path of a berth-shim binary", EnvBinary, p)
		}
		b, err := binaryAt(p)
		if err != nil {
			return nil, err
		}
		if b.Arch == arch {
			return b, nil
		}
		// An agent for another architecture serves those sandboxes;
		// this one looks further.
	}
	if exeDir != "" {
		for _, name := range []string{BinaryName + "-linux-" + arch, BinaryName} {
			p := filepath.Join(exeDir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				b, err := binaryAt(p)
				if err != nil {
					return nil, err
				}
				if b.Arch == arch {
					return b, nil
				}
			}
		}
	}
	return embedded(arch)
}

// elfArch reads the GOARCH name of the ELF executable at p.
func elfArch(p string) (string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("shim: %s is not a linux agent binary (%w); build one with `CGO_ENABLED=0 go build ./sandbox/shim/cmd/berth-shim`", p, err)
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("shim: %s is an agent for %s, which berth does not support; it supports %s", p, f.Machine, strings.Join(Arches, " and "))
}

// binaryAt hashes the file at p.
func binaryAt(p string) (*Binary, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("shim: open the agent binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("shim: read the agent binary %s: %w", p, err)
	}
	arch, err := elfArch(p)
	if err != nil {
		return nil, err
	}
	return &Binary{Path: p, Hash: hex.EncodeToString(h.Sum(nil)), Arch: arch}, nil
}

// sourceFiles lists the embedded non-test source files.
func sourceFiles() ([]string, error) {
	var names []string
	err := fs.WalkDir(source, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			names = append(names, name)
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

// modulePrefix is where the embedded files live in berth's module.
const modulePrefix = "sandbox/shim"

// goMod is the module file of the temporary build tree.
const goMod = "module berth.dev/berth\n\ngo 1.26\n"

// build compiles the embedded agent source for linux/arch into the cache
// unless it is there.
func build(ctx context.Context, arch string) (*Binary, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("shim: this berth carries no agent for linux/%s and there is no Go toolchain to build one: use a release build of berth (release/build embeds the agents), or put berth-shim-linux-%s (built with `CGO_ENABLED=0 GOARCH=%s go build ./sandbox/shim/cmd/berth-shim`) next to the berth executable, or set $%s to its absolute path", arch, arch, arch, EnvBinary)
	}
	goVersion, err := exec.CommandContext(ctx, goTool, "env", "GOVERSION").Output()
	if err != nil {
		return nil, fmt.Errorf("shim: run `go env GOVERSION` to build the agent: %w; set $%s to a prebuilt berth-shim instead", err, EnvBinary)
	}
	names, err := sourceFiles()
	if err != nil {
		return nil, fmt.Errorf("shim: read the embedded agent source: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s", bytes.TrimSpace(goVersion), arch, goMod)
	for _, n := range names {
		data, err := source.ReadFile(n)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(data))
		h.Write(data)
	}
	hash := hex.EncodeToString(h.Sum(nil))[:24]

	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("shim: find a cache directory to build the agent in: %w; set $XDG_CACHE_HOME or $%s", err, EnvBinary)
	}
	dir := filepath.Join(cache, "berth", "shim", hash)
	out := filepath.Join(dir, BinaryName)
	if _, err := os.Stat(out); err == nil {
		return binaryAt(out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("shim: create the agent build cache: %w", err)
	}
	// Parallel test processes build once: the lock holder builds, the
	// others find the result when they get the lock.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("shim: open the agent build lock: %w", err)
	}
	defer lock.Close()
	if err := flock(ctx, lock); err != nil {
		return nil, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(out); err == nil {
		return binaryAt(out)
	}

	tree, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return nil, fmt.Errorf("shim: create the agent build tree: %w", err)
	}
	defer os.RemoveAll(tree)
	if err := os.WriteFile(filepath.Join(tree, "go.mod"), []byte(goMod), 0o644); err != nil {
		return nil, err
	}
	for _, n := range names {
		data, _ := source.ReadFile(n)
		p := filepath.Join(tree, modulePrefix, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, err
		}
	}
	tmp := filepath.Join(tree, BinaryName)
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "./"+modulePrefix+"/cmd/berth-shim")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("shim: build the agent with %s: %w: %s; set $%s to a prebuilt berth-shim instead", goTool, err, bytes.TrimSpace(msg), EnvBinary)
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, fmt.Errorf("shim: store the built agent: %w", err)
	}
	return binaryAt(out)
}

// flock takes an exclusive lock on f, polling so that ctx can end the
// wait.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("shim: lock the agent build cache: %w", err)
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("shim: wait for another process building the agent: %w", ctx.Err())
		case <-t.C:
		}
	}
}
