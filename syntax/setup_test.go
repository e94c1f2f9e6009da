package syntax

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestImportHasNoSideEffects runs itself in a fresh process of the test
// binary, where nothing has parsed yet, and checks that the parse regions'
// address space (BERTH_REGIONS × BERTH_REGION_SIZE, 32 GiB) is reserved by
// the first parse and not before: importing the package reserves nothing,
// swaps no allocator and starts no goroutine (all three happen together in
// setup). It compares VmSize before and after, so it also holds under the
// race detector, whose shadow memory makes VmSize large from the start.
func TestImportHasNoSideEffects(t *testing.T) {
	if os.Getenv("BERTH_SYNTAX_FRESH") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestImportHasNoSideEffects$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "BERTH_SYNTAX_FRESH=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fresh process: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "SKIP") {
			t.Skipf("fresh process skipped:\n%s", out)
		}
		return
	}
	const reserved = regionCount * 512 << 20
	before := vmSize(t)
	if _, err := Parse(context.Background(), mustLang(t, "go"), []byte("package p\n")); err != nil {
		t.Fatal(err)
	}
	after := vmSize(t)
	cp := getParser()
	defer putParser(cp)
	if cp.region == nil {
		t.Skip("no parse regions (address space reservation refused)")
	}
	if after-before < reserved {
		t.Fatalf("VmSize grew by %d bytes on the first parse, want at least %d: the parse regions were reserved before anything parsed (at import?)", after-before, int64(reserved))
	}
}

// vmSize returns the process's VmSize from /proc/self/status, in bytes.
func vmSize(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmSize %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmSize in /proc/self/status")
	return 0
}
