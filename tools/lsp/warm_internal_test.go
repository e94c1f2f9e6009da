package lsp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"berth.dev/berth/sandbox/host"
)

// TestWarmWords: warming reads every file of the languages once and keeps
// its filter, so that the first check after it reads only the candidates:
// a file changed behind the stamps' back (same size and mtime) is not
// read again, which shows it. A second warm reads nothing; a cancelled
// warm reads nothing.
func TestWarmWords(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.py":     "def fetch_all():\n    return 1\n",
		"b.py":     "from a import fetch_all\nfetch_all()\n",
		"c.py":     "other = 1  ########\n",
		"d.txt":    "fetch_all\n",
		"pkg/e.py": "x = 2\n",
	}
	for name, text := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
	}
	langs := map[string]string{".py": "python"}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if n := verdictQuery(t, dir).g.warmWords(cancelled, nil, langs); n != 0 {
		t.Fatalf("a cancelled warm read %d files", n)
	}

	q := verdictQuery(t, dir)
	if n := q.g.warmWords(context.Background(), q.in.s.ws, langs); n != 4 {
		t.Fatalf("warm read %d files, want the 4 Python files", n)
	}
	for _, e := range q.g.words.list {
		if e.f == nil || e.f.st != e.st {
			t.Errorf("%s has no current filter after the warm", e.name)
		}
	}
	if n := q.g.warmWords(context.Background(), q.in.s.ws, langs); n != 0 {
		t.Fatalf("a second warm read %d files", n)
	}
	// c.py now holds the name, with its size and mtime as they were: a
	// check that read it would count it.
	p := filepath.Join(dir, "c.py")
	fi, _ := os.Stat(p)
	os.WriteFile(p, []byte("other = fetch_all()\n"), 0o644)
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	if fi2, _ := os.Stat(p); fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("c.py's stamp moved: %v %v", fi2.Size(), fi2.ModTime())
	}
	occ := q.textOccurrences(context.Background(), "fetch_all")
	if len(occ.files) != 2 || occ.files["a.py"] != 1 || occ.files["b.py"] != 2 || occ.scanned != 4 {
		t.Fatalf("first check after the warm: %+v; want a.py and b.py, c.py passed over by its filter", occ)
	}
}

// TestWarmWordsOnReady: when a checked server (pylsp) becomes ready, the
// supervisor's warmer fills its generation's word index without any
// query; Close ends the warmer. gopls (Exact) is not warmed.
func TestWarmWordsOnReady(t *testing.T) {
	if _, err := exec.LookPath("pylsp"); err != nil {
		t.Skip("pylsp is not on PATH")
	}
	sb := host.New(host.Options{})
	t.Cleanup(func() { sb.Close() })
	dir := t.TempDir()
	for i, text := range []string{"def f():\n    return 1\n", "from a0 import f\nf()\n", "x = 1\n"} {
		os.WriteFile(filepath.Join(dir, "a"+string(rune('0'+i))+".py"), []byte(text), 0o644)
	}
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	s := New(sb, ws, t.Context(), Options{})
	defer s.Close()
	in, err := s.serverFor(t.Context(), "a0.py", DefaultQueryWait)
	if err != nil {
		t.Fatal(err)
	}
	if in.spec.ID != "pylsp" && in.spec.ID != "pyright" {
		t.Fatalf("a0.py is served by %s", in.spec.ID)
	}
	_, g, err := in.client()
	if err != nil {
		t.Fatal(err)
	}
	// The warm reads three small files once the server is ready; a
	// query would wait DefaultQueryWait for the server itself.
	deadline := time.After(DefaultQueryWait)
	warm := func() bool {
		g.words.mu.Lock()
		defer g.words.mu.Unlock()
		n := 0
		for _, e := range g.words.list {
			if e.f != nil && e.f.st == e.st {
				n++
			}
		}
		return g.words.built && n == 3
	}
	for !warm() {
		select {
		case <-deadline:
			t.Fatalf("the word index was not warmed within %v of the server's start", DefaultQueryWait)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.warmMu.Lock()
	running, closed := s.warming, s.warmClosed
	s.warmMu.Unlock()
	if running || !closed {
		t.Fatalf("after Close the warmer runs (%v) or is not closed (%v)", running, closed)
	}
	// An Exact server's generation is never queued.
	e := &Supervisor{}
	e.warmLater(&instance{spec: Server{ID: "gopls", Exact: true}}, &generation{})
	if len(e.warmQ) != 0 || e.warming {
		t.Fatal("an Exact server's generation was queued for warming")
	}
}
