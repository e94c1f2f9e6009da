package shim

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox/shim/agent"
)

// writeELF writes an ELF header for machine at p: enough for the agent's
// architecture to be read from it.
func writeELF(t *testing.T, p string, machine elf.Machine) {
	t.Helper()
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS], h[elf.EI_DATA], h[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le := binary.LittleEndian
	le.PutUint16(h[16:], uint16(elf.ET_EXEC))
	le.PutUint16(h[18:], uint16(machine))
	le.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	le.PutUint16(h[52:], 64) // e_ehsize
	le.PutUint16(h[54:], 56) // e_phentsize
	le.PutUint16(h[58:], 64) // e_shentsize
	if err := os.WriteFile(p, h, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestFindByArch: the agent for a sandbox's architecture is chosen from
// $BERTH_SHIM, then berth-shim-linux-ARCH and berth-shim beside berth, by
// the architecture in each file's ELF header.
func TestFindByArch(t *testing.T) {
	dir := t.TempDir()
	amd, arm := filepath.Join(dir, "env-amd64"), filepath.Join(dir, "env-arm64")
	writeELF(t, amd, elf.EM_X86_64)
	writeELF(t, arm, elf.EM_AARCH64)
	beside := t.TempDir()
	writeELF(t, filepath.Join(beside, "berth-shim-linux-arm64"), elf.EM_AARCH64)
	writeELF(t, filepath.Join(beside, "berth-shim"), elf.EM_X86_64)
	mixed := t.TempDir() // only berth-shim, an arm64 agent
	writeELF(t, filepath.Join(mixed, "berth-shim"), elf.EM_AARCH64)
	notELF := filepath.Join(dir, "text")
	os.WriteFile(notELF, []byte("not really"), 0o755)
	riscv := filepath.Join(dir, "riscv")
	writeELF(t, riscv, elf.EM_RISCV)

	tests := []struct {
		name, env, exeDir, arch string
		want, wantErr           string // want: the file chosen; "" for none
	}{
		{"env amd64", amd, beside, "amd64", amd, ""},
		{"env arm64", arm, beside, "arm64", arm, ""},
		{"env of the other arch, beside by arch", amd, beside, "arm64", filepath.Join(beside, "berth-shim-linux-arm64"), ""},
		{"env of the other arch, plain beside", arm, beside, "amd64", filepath.Join(beside, "berth-shim"), ""},
		{"beside arm64", "", beside, "arm64", filepath.Join(beside, "berth-shim-linux-arm64"), ""},
		{"beside amd64", "", beside, "amd64", filepath.Join(beside, "berth-shim"), ""},
		{"plain beside of the other arch", "", mixed, "amd64", "", ""},
		{"plain beside arm64", "", mixed, "arm64", filepath.Join(mixed, "berth-shim"), ""},
		{"nothing", "", t.TempDir(), "arm64", "", ""},
		{"relative env", "berth-shim", beside, "amd64", "", "not an absolute path"},
		{"missing env", amd + "-missing", beside, "amd64", "", "no such file"},
		{"env not ELF", notELF, beside, "amd64", "", "is not a linux agent binary"},
		{"env of an unsupported arch", riscv, beside, "amd64", "", "does not support"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvBinary, tc.env)
			b, err := find(tc.arch, tc.exeDir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if Embedded(tc.arch) != nil {
				t.Skip("this test binary embeds prebuilt agents")
			}
			switch {
			case tc.want == "" && b != nil:
				t.Fatalf("found %+v, want none", b)
			case tc.want != "" && (b == nil || b.Path != tc.want || b.Arch != tc.arch || len(b.Hash) != 64):
				t.Fatalf("found %+v, want %s for %s", b, tc.want, tc.arch)
			}
		})
	}
}

func TestUnameArch(t *testing.T) {
	for in, want := range map[string]string{"x86_64\n": "amd64", "aarch64\n": "arm64", "arm64": "arm64", "riscv64\n": "riscv64"} {
		if got := UnameArch(in); got != want {
			t.Errorf("UnameArch(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLocateUnsupportedArch: an architecture without an agent is refused
// with the ones berth supports, and nothing is built.
func TestLocateUnsupportedArch(t *testing.T) {
	_, err := Locate(context.Background(), "riscv64")
	if err == nil || !strings.Contains(err.Error(), "amd64 and arm64") {
		t.Fatalf("Locate(riscv64) = %v", err)
	}
}

func TestEmbeddedSource(t *testing.T) {
	names, err := sourceFiles()
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(names, " ")
	if !strings.Contains(joined, "cmd/berth-shim/main.go") || !strings.Contains(joined, "agent/run.go") || strings.Contains(joined, "_test.go") {
		t.Fatalf("embedded files: %s", joined)
	}
}

// TestBuild builds the agent into a fresh cache and runs it.
func TestBuild(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	if testing.Short() {
		t.Skip("builds the agent")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := build(ctx, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(b.Path, "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != agent.Version {
		t.Fatalf("%s version = %q, %v", b.Path, out, err)
	}
	// The agent for the other architecture is built too: a developer's
	// berth serves arm64 sandboxes.
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	ob, err := build(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := elfArch(ob.Path); err != nil || a != other || ob.Arch != other {
		t.Fatalf("build(%s) = %+v, ELF arch %s, %v", other, ob, a, err)
	}
	// A second build finds the cached binary.
	b2, err := build(ctx, runtime.GOARCH)
	if err != nil || b2.Path != b.Path || b2.Hash != b.Hash {
		t.Fatalf("second build = %+v, %v; want %+v", b2, err, b)
	}
}

func TestCheckDialAddress(t *testing.T) {
	tests := []struct {
		network, address string
		ok               bool
	}{
		{"tcp", "127.0.0.1:80", true},
		{"tcp", "[::1]:80", true},
		{"tcp", "localhost:80", true},
		{"tcp", "10.0.0.1:80", false},
		{"tcp", "example.com:80", false},
		{"tcp", "127.0.0.1", false},
		{"unix", "/run/x.sock", true},
		{"unix", "x.sock", false},
		{"udp", "127.0.0.1:53", false},
	}
	for _, tc := range tests {
		if err := CheckDialAddress(tc.network, tc.address); (err == nil) != tc.ok {
			t.Errorf("CheckDialAddress(%s, %s) = %v, want ok=%v", tc.network, tc.address, err, tc.ok)
		}
	}
}

// TestPrepareBuilds: with no prebuilt agent, Prepare starts the build at
// once and says so; Building describes it while it runs; Locate then
// returns what it built.
func TestPrepareBuilds(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	if testing.Short() {
		t.Skip("builds the agent")
	}
	if Embedded(runtime.GOARCH) != nil {
		t.Skip("this test binary embeds prebuilt agents")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(EnvBinary, "")
	forget := func() {
		locateMu.Lock()
		delete(locateCalls, runtime.GOARCH)
		locateMu.Unlock()
	}
	forget() // a lookup of an earlier test
	// The agent this test builds goes with its temporary cache: the
	// package's later tests must look again, not exec a removed file.
	t.Cleanup(forget)

	type report struct {
		level    slog.Level
		msg      string
		building string
	}
	reports := make(chan report, 4)
	Prepare(runtime.GOARCH, func(level slog.Level, msg string) {
		reports <- report{level, msg, Building()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	next := func() report {
		select {
		case r := <-reports:
			return r
		case <-ctx.Done():
			t.Fatal("no report from Prepare")
			return report{}
		}
	}
	r := next()
	if r.level != slog.LevelWarn || !strings.Contains(r.msg, "berth is building its sandbox agent for linux/"+runtime.GOARCH) {
		t.Fatalf("first report = %v %q, want a warning that berth builds its agent", r.level, r.msg)
	}
	if !strings.Contains(r.building, "berth is building its sandbox agent") {
		t.Errorf("Building() during the build = %q", r.building)
	}
	r = next()
	if r.level != slog.LevelInfo || !strings.Contains(r.msg, "berth built its sandbox agent") {
		t.Fatalf("second report = %v %q, want that the build ended", r.level, r.msg)
	}
	if got := Building(); got != "" {
		t.Errorf("Building() after the build = %q, want empty", got)
	}
	b, err := Locate(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Arch != runtime.GOARCH || !strings.HasPrefix(b.Path, os.Getenv("XDG_CACHE_HOME")) {
		t.Fatalf("Locate after Prepare = %+v", b)
	}
}

// archTransport is a local transport that reports an architecture.
type archTransport struct {
	localTransport
	arch string
}

func (a archTransport) Arch(ctx context.Context) (string, error) { return a.arch, nil }

// TestSandboxArch: the agent's architecture comes from an Archer
// transport, else from `uname -m` run through the transport, else (no
// uname) berth's own.
func TestSandboxArch(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		t    Transport
		want string
	}{
		{"archer", archTransport{arch: "arm64"}, "arm64"},
		{"uname through the transport", localTransport{}, runtime.GOARCH},
		{"no uname", failingTransport{}, runtime.GOARCH},
	}
	for _, tc := range tests {
		got, err := New(tc.t, Options{Name: "local"}).arch(ctx)
		if err != nil || got != tc.want {
			t.Errorf("%s: arch = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
