package shim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox/shim/agent"
)

func TestLocateEnv(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "berth-shim")
	if err := os.WriteFile(bin, []byte("not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env, wantErr string
	}{
		{"absolute", bin, ""},
		{"relative", "berth-shim", "not an absolute path"},
		{"missing", bin + "-missing", "no such file"},
	}
	for _, tc := range tests {
		t.Setenv(EnvBinary, tc.env)
		b, err := locate(context.Background())
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr == "" && (b.Path != bin || len(b.Hash) != 64):
			t.Errorf("%s: got %+v", tc.name, b)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
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
	b, err := build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(b.Path, "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != agent.Version {
		t.Fatalf("%s version = %q, %v", b.Path, out, err)
	}
	// A second build finds the cached binary.
	b2, err := build(ctx)
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
