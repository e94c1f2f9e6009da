package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestHostEnv(t *testing.T) {
	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"FROM_BERTH": "inherited", "EMPTY": ""}[name]
		return v, ok
	}
	got, err := hostEnv([]string{"FROM_BERTH", "SET=a=b", "EMPTY"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"FROM_BERTH=inherited", "SET=a=b", "EMPTY="}; !reflect.DeepEqual(got, want) {
		t.Fatalf("hostEnv = %q, want %q", got, want)
	}
	for _, bad := range []string{EnvToken, "BERTH_TOKEN=x", "berth_shim", "NOT_SET", "1X=y", "=y", "A B"} {
		if env, err := hostEnv([]string{bad}, lookup); err == nil {
			t.Errorf("hostEnv(%q) = %q, want a refusal", bad, env)
		}
	}
}

// TestHostOptions: the flags reach host.Options, and a host user is
// refused without root.
func TestHostOptions(t *testing.T) {
	t.Setenv("BERTH_HOST_OPTIONS_TEST", "v")
	g := &globalFlags{hostEnv: []string{"OP=1"}, hostPidsMax: 77, hostMemoryMax: "1G"}
	opts, err := hostOptions(g)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(opts.Env, []string{"OP=1"}) || opts.PidsMax != 77 || opts.MemoryMax != 1<<30 || opts.User != nil {
		t.Fatalf("hostOptions = %+v", opts)
	}
	g.hostUser = "nobody"
	opts, err = hostOptions(g)
	switch {
	case os.Geteuid() != 0 && err == nil:
		t.Fatalf("--host-user as uid %d accepted", os.Geteuid())
	case os.Geteuid() == 0 && err != nil:
		t.Skipf("no user nobody: %v", err)
	case os.Geteuid() == 0 && (opts.User == nil || opts.User.Name != "nobody"):
		t.Fatalf("--host-user nobody: %+v", opts.User)
	}
	g.hostUser = "root"
	if _, err := hostOptions(g); err == nil {
		t.Fatal("--host-user root accepted")
	}
}

// TestProtectProcess: after protectProcess the process is not dumpable
// (what hides /proc/PID/environ from berth's user; the effect on a real
// host process is TestUndumpableParent in sandbox/host).
func TestProtectProcess(t *testing.T) {
	const prGetDumpable = 3
	defer syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 1, 0)
	protectProcess(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	v, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
	if e != 0 || v != 0 {
		t.Fatalf("PR_GET_DUMPABLE = %d (%v), want 0", v, e)
	}
}

func TestCheckTokenFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "token")
	if err := os.WriteFile(f, []byte("t\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := checkTokenFile(f, ""); err != nil {
		t.Fatalf("without a host user: %v", err)
	}
	if err := checkTokenFile(f, "nobody"); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a group-readable token file with a host user: %v, want a refusal", err)
	}
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkTokenFile(f, "nobody"); err != nil {
		t.Fatalf("a 0600 token file: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "1024": 1024, "4G": 4 << 30, "512M": 512 << 20, "2GiB": 2 << 30, "8k": 8 << 10, "-1": -1} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "4X", "G", "99999999999T"} {
		if got, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, got)
		}
	}
}
