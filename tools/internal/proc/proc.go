// Package proc holds what the tools that run programs in a sandbox (debug
// adapters, language servers, kernels) share: a buffer that keeps the tail
// of a program's stderr for error messages, clipping for such messages, and
// choosing a program among those a probe found.
package proc

import (
	"path"
	"strings"
	"sync"
)

// Tail keeps the last Max bytes written to it. It is safe for concurrent
// use, so it can be a process's Stderr.
type Tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTail returns a Tail keeping max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// String returns what is kept, without surrounding white space.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Clip trims s and keeps its last n bytes, marking a cut with "…".
func Clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// PickBinary returns the first of found (paths, in search order) whose
// base name is one of names, trying names in order of preference. A name
// ending in "-*" matches versioned names ("clangd-16", "lldb-vscode-14",
// "clangd-16.0.1"), the highest version first.
func PickBinary(found, names []string) string {
	for _, n := range names {
		if prefix, ok := strings.CutSuffix(n, "*"); ok {
			best, bestV := "", ""
			for _, f := range found {
				v, ok := strings.CutPrefix(path.Base(f), prefix)
				if ok && v != "" && strings.Trim(v, "0123456789.") == "" && (best == "" || versionLess(bestV, v)) {
					best, bestV = f, v
				}
			}
			if best != "" {
				return best
			}
			continue
		}
		for _, f := range found {
			if path.Base(f) == n {
				return f
			}
		}
	}
	return ""
}

// versionLess compares dotted numeric versions.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, y := strings.TrimLeft(as[i], "0"), strings.TrimLeft(bs[i], "0")
		if len(x) != len(y) {
			return len(x) < len(y)
		}
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}
