package lsp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox/dirfs"
)

// verdictQuery is a query over the files of dir as a Python server's
// generation tracks them, with no server: what textOccurrences needs.
func verdictQuery(t testing.TB, dir string) *query {
	t.Helper()
	ws, err := dirfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := &generation{stamps: map[string]stamp{}}
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		g.stamps[filepath.ToSlash(rel)] = stamp{fi.Size(), fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{s: &Supervisor{ws: ws}, spec: Server{ID: "pylsp", Languages: map[string]string{".py": "python"}}}
	return &query{in: in, g: g}
}

// TestTextOccurrences: whole words only (not inside longer identifiers),
// counted per file; a warm check reads only the files its filters allow
// and still counts right; a file changed since its filter is read again.
func TestTextOccurrences(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.py":     "def fetch_all():\n    return fetch_all_rows()\n",
		"b.py":     "from a import fetch_all\nfetch_all()\nfetch_all()  # again\n",
		"c.py":     "prefetch_all = 1\n_fetch_all = 2\n",
		"d.txt":    "fetch_all\n",
		"pkg/e.py": "x = 'fetch_all'\n",
	}
	for name, text := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
	}
	q := verdictQuery(t, dir)
	want := map[string]int{"a.py": 1, "b.py": 3, "pkg/e.py": 1}
	for round := range 2 {
		occ := q.textOccurrences(context.Background(), "fetch_all")
		if fmt.Sprint(occ.files) != fmt.Sprint(want) || occ.scanned != 4 || occ.unread != 0 {
			t.Fatalf("round %d: %+v, want files %v of 4 scanned", round, occ, want)
		}
	}
	if got := q.textOccurrences(context.Background(), "absent_name"); len(got.files) != 0 || got.scanned != 4 {
		t.Fatalf("an absent name: %+v", got)
	}
	// c.py changes: its stamp moves, so its filter is not trusted.
	os.WriteFile(filepath.Join(dir, "c.py"), []byte("fetch_all = 3\n"), 0o644)
	fi, _ := os.Stat(filepath.Join(dir, "c.py"))
	q.g.stamps["c.py"] = stamp{fi.Size(), fi.ModTime().Add(time.Second)}
	q.g.stampsVer++ // as the sync does
	want["c.py"] = 1
	if occ := q.textOccurrences(context.Background(), "fetch_all"); fmt.Sprint(occ.files) != fmt.Sprint(want) {
		t.Fatalf("after c.py changed: %v, want %v", occ.files, want)
	}
}

// TestVerdictCost measures what the verdict adds to a cross-file answer on
// a large workspace: MaxWatchedFiles Python files (the most a server's
// generation tracks), cold (every file read once) and warm (the filters
// answer), for a name in 10 files. bench/run sets BERTH_BENCH=1; the goal
// is under 5 ms warm. It asserts the counts, never the time.
func TestVerdictCost(t *testing.T) {
	if os.Getenv("BERTH_BENCH") != "1" {
		t.Skip("set BERTH_BENCH=1 to measure the verdict on a large workspace (writes 50,000 files)")
	}
	dir := t.TempDir()
	n := MaxWatchedFiles
	for i := range n {
		d := filepath.Join(dir, "d"+strconv.Itoa(i/500))
		if i%500 == 0 {
			os.MkdirAll(d, 0o755)
		}
		text := fmt.Sprintf("import os\n\n\ndef helper_%d(path, mode='r'):\n    with open(path, mode) as f:\n        return f.read().splitlines()\n\n\nclass Thing%d:\n    def run(self):\n        return helper_%d(os.getcwd())\n", i, i, i)
		if i%(n/10) == 0 {
			text += "\nfetch_all_rows = None\n"
		}
		os.WriteFile(filepath.Join(d, fmt.Sprintf("m%d.py", i)), []byte(text), 0o644)
	}
	q := verdictQuery(t, dir)
	start := time.Now()
	occ := q.textOccurrences(context.Background(), "fetch_all_rows")
	cold := time.Since(start)
	if len(occ.files) != 10 || occ.unread != 0 {
		t.Fatalf("cold: %d files, %d unread", len(occ.files), occ.unread)
	}
	var warm []time.Duration
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for i := range 20 {
		start := time.Now()
		occ := q.textOccurrences(context.Background(), fmt.Sprintf("helper_%d", i*997))
		warm = append(warm, time.Since(start))
		if len(occ.files) != 1 {
			t.Fatalf("warm: helper_%d in %v", i*997, occ.files)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / 20
	slicesSort(warm)
	t.Logf("verdict on %d Python files: cold %v (every file read once), warm median %v, max %v, CPU %v a check (filters; the candidates read)", n, cold.Round(time.Millisecond), warm[len(warm)/2].Round(10*time.Microsecond), warm[len(warm)-1].Round(10*time.Microsecond), cpu.Round(10*time.Microsecond))

	// A new generation, warmed in the background when its server became
	// ready (warmWords), as the supervisor does: its first check costs
	// what a warm one does.
	q = verdictQuery(t, dir)
	start = time.Now()
	read := q.g.warmWords(context.Background(), q.in.s.ws, q.in.spec.Languages)
	background := time.Since(start)
	if read != n {
		t.Fatalf("the warm read %d files, want %d", read, n)
	}
	start = time.Now()
	occ = q.textOccurrences(context.Background(), "fetch_all_rows")
	first := time.Since(start)
	if len(occ.files) != 10 || occ.unread != 0 {
		t.Fatalf("first check after the warm: %d files, %d unread", len(occ.files), occ.unread)
	}
	t.Logf("first check after a background warm: %v (the warm took %v off the call's path); cold first check %v: %.0fx", first.Round(10*time.Microsecond), background.Round(time.Millisecond), cold.Round(time.Millisecond), float64(cold)/float64(max(first, time.Microsecond)))
}

func slicesSort(d []time.Duration) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}
