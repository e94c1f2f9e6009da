package eval

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
)

// BenchmarkStaleCheck measures the pre-cell check's cost: one user
// expression through ipykernel with numpy loaded (about 1,000 entries in
// sys.modules) and 200 workspace modules imported, none changed.
//
//	go test ./tools/eval -run '^$' -bench StaleCheck
func BenchmarkStaleCheck(b *testing.B) {
	for _, m := range []string{"ipykernel", "numpy"} {
		if exec.Command("/usr/bin/python3", "-c", "import "+m).Run() != nil {
			b.Skipf("Debian's python3-%s is missing", m)
		}
	}
	dir := b.TempDir()
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("wsmod%d.py", i)), []byte("X = 1\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	sb := host.New(host.Options{Env: []string{"PATH=/usr/bin:/bin", "HOME=" + os.Getenv("HOME")}})
	defer sb.Close()
	ws, err := sb.FS(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	s := New(sb, ws, context.Background(), tools.NewRegistry(), Options{})
	defer s.Close()
	k, _, err := s.kernelFor(b.Context(), Python, false)
	if err != nil {
		b.Fatal(err)
	}
	res, err := s.run(b.Context(), k, "import numpy\nfor i in range(200): __import__('wsmod%d' % i)\nimport sys\nlen(sys.modules)")
	if err != nil || res.IsError {
		b.Fatalf("%v %v", err, res.AllText())
	}
	b.Logf("%s (%s): sys.modules has %s entries", k.kind, k.binary, res.AllText())
	res, err = s.run(b.Context(), k, fmt.Sprintf("import timeit\n'%%.0f µs in the kernel' %% (timeit.timeit(lambda: __berth_stale(%q), number=200) / 200 * 1e6)", dir))
	if err != nil || res.IsError {
		b.Fatalf("%v %v", err, res.AllText())
	}
	b.Logf("__berth_stale: %s", res.AllText())
	b.ResetTimer()
	for b.Loop() {
		if _, r := s.staleCheck(b.Context(), k, false); r == nil {
			b.Fatal("the kernel did not answer the check")
		}
	}
}
