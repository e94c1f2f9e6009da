package shim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

var (
	locateMu   sync.Mutex
	locateCall *locateResult // the running or successful lookup
)

type locateResult struct {
	done chan struct{}
	bin  *Binary
	err  error
}

// Locate finds the agent binary for linux/amd64, in this order: the
// absolute path in $BERTH_SHIM; berth-shim next to the running executable;
// a copy built from berth's embedded agent source into
// $XDG_CACHE_HOME/berth/shim/<hash>/berth-shim (or ~/.cache/…), with the Go
// toolchain on PATH. A success is cached for the life of the process. ctx
// bounds the wait; a build, once started, runs to its end (at most
// ten minutes) for the next caller.
func Locate(ctx context.Context) (*Binary, error) {
	locateMu.Lock()
	c := locateCall
	if c == nil {
		c = &locateResult{done: make(chan struct{})}
		locateCall = c
		go func() {
			bctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
			defer cancel()
			c.bin, c.err = locate(bctx)
			if c.err != nil {
				locateMu.Lock()
				locateCall = nil // the next call tries again
				locateMu.Unlock()
			}
			close(c.done)
		}()
	}
	locateMu.Unlock()
	select {
	case <-c.done:
		return c.bin, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("shim: wait for the agent binary (it may still be building): %w", ctx.Err())
	}
}

func locate(ctx context.Context) (*Binary, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("shim: $%s=%q is not an absolute path; set it to the full path of a berth-shim binary", EnvBinary, p)
		}
		return binaryAt(p)
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), BinaryName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return binaryAt(p)
		}
	}
	return build(ctx)
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
	return &Binary{Path: p, Hash: hex.EncodeToString(h.Sum(nil))}, nil
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

// build compiles the embedded agent into the cache unless it is there.
func build(ctx context.Context) (*Binary, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("shim: no berth-shim binary found and no Go toolchain to build one: set $%s to the absolute path of a berth-shim built with `CGO_ENABLED=0 go build ./sandbox/shim/cmd/berth-shim`, or put berth-shim next to the berth executable", EnvBinary)
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
	fmt.Fprintf(h, "%s\n%s", bytes.TrimSpace(goVersion), goMod)
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
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
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
