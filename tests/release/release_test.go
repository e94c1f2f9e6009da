// Package release tests release/build: it builds a release of this checkout
// into a temporary directory and checks what a user downloads — the
// binaries, their stamped version, SHA256SUMS, the SBOM — and that the
// release's berth serves a first tool call in a Docker container with no Go
// toolchain on PATH, placing the agent it carries.
//
// It builds for the host's architecture only; set
// BERTH_TEST_RELEASE_ARCHES="amd64 arm64" for the cross build too (tests/run
// does). Skips (or fails with CI=true) when git, a C compiler, the cross
// compiler or Docker is missing.
package release

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const version = "v0.0.0-test.1"

func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// build runs release/build into a temporary directory and returns it;
// image adds the image step.
func build(t *testing.T, arches []string, image bool) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a release")
	}
	tools := []string{"git", "go", "gcc", "sha256sum"}
	cross := map[string]string{"arm64": "aarch64-linux-gnu-gcc", "amd64": "x86_64-linux-gnu-gcc"}
	for _, a := range arches {
		if a != runtime.GOARCH {
			tools = append(tools, cross[a])
		}
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "no %s on PATH (for a cross build: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross): %v", tool, err)
		}
	}
	out := filepath.Join(t.TempDir(), version)
	args := []string{"--out", out}
	if !image {
		args = append(args, "--no-image")
	}
	for _, a := range arches {
		args = append(args, "--arch", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(moduleRoot(t), "release", "build"), append(args, version)...)
	cmd.Dir = moduleRoot(t)
	start := time.Now()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release/build %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	t.Logf("release/build for %s took %s", strings.Join(arches, ", "), time.Since(start).Round(time.Second))
	return out
}

func arches() []string {
	if a := strings.Fields(os.Getenv("BERTH_TEST_RELEASE_ARCHES")); len(a) > 0 {
		return a
	}
	return []string{runtime.GOARCH}
}

func TestRelease(t *testing.T) {
	archs := arches()
	out := build(t, archs, false)

	t.Run("binaries", func(t *testing.T) {
		machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
		for _, a := range archs {
			for _, name := range []string{"berth-linux-" + a, "berth-shim-linux-" + a} {
				f, err := elf.Open(filepath.Join(out, name))
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if f.Machine != machine[a] {
					t.Errorf("%s is for %s, want %s", name, f.Machine, machine[a])
				}
				f.Close()
			}
		}
	})

	t.Run("version", func(t *testing.T) {
		bin := filepath.Join(out, "berth-linux-"+runtime.GOARCH)
		got, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("berth version: %v", err)
		}
		head, err := exec.Command("git", "-C", moduleRoot(t), "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(got), "\n")
		if lines[0] != "berth "+version {
			t.Errorf("berth version's first line = %q, want %q", lines[0], "berth "+version)
		}
		if !strings.Contains(string(got), strings.TrimSpace(string(head))) {
			t.Errorf("berth version does not name commit %s:\n%s", head, got)
		}
	})

	t.Run("SHA256SUMS", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			if !ok {
				t.Fatalf("SHA256SUMS line %q is not sha256sum's", sc.Text())
			}
			content, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := sha256.Sum256(content); hex.EncodeToString(got[:]) != sum {
				t.Errorf("%s: sha256 %x, SHA256SUMS says %s", name, got, sum)
			}
			listed[name] = true
		}
		for _, a := range archs {
			for _, name := range []string{"berth-linux-" + a, "berth-shim-linux-" + a, "sbom.spdx.json"} {
				if !listed[name] {
					t.Errorf("SHA256SUMS does not list %s", name)
				}
			}
		}
		cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
		cmd.Dir = out
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, msg)
		}
	})

	t.Run("SBOM", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(out, "sbom.spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			SPDXVersion string `json:"spdxVersion"`
			Packages    []struct {
				Name    string `json:"name"`
				Version string `json:"versionInfo"`
			} `json:"packages"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("sbom.spdx.json: %v", err)
		}
		mod, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/tree-sitter/go-tree-sitter").Output()
		if err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSpace(string(mod))
		found := false
		for _, p := range doc.Packages {
			if p.Name == "github.com/tree-sitter/go-tree-sitter" {
				found = true
				if p.Version != want {
					t.Errorf("SBOM lists go-tree-sitter %s, go.mod says %s", p.Version, want)
				}
			}
		}
		if doc.SPDXVersion != "SPDX-2.3" || !found {
			t.Errorf("SBOM (%s) does not list github.com/tree-sitter/go-tree-sitter", doc.SPDXVersion)
		}
	})

	t.Run("no Go toolchain, first call in Docker", func(t *testing.T) {
		noGoFirstCall(t, out)
	})
}

// noGoFirstCall runs the release's berth with PATH stripped of Go: its first
// tool call in a fresh container of the Python test image must work with
// the agent it carries, building nothing.
func noGoFirstCall(t *testing.T, out string) {
	image := os.Getenv("BERTH_TEST_IMAGE_PYTHON")
	if image == "" {
		image = "berth-test-python:latest"
	}
	if _, err := exec.LookPath("docker"); err != nil {
		unavailable(t, "no docker CLI: %v", err)
	}
	if msg, err := exec.Command("docker", "image", "inspect", image).CombinedOutput(); err != nil {
		unavailable(t, "no image %s (images/build python): %v: %s", image, err, msg)
	}
	name := "berth-release-test-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	if msg, err := exec.Command("docker", "run", "-d", "--name", name, image, "sleep", "infinity").CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v: %s", err, msg)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	if msg, err := exec.Command("docker", "exec", name, "sh", "-c", "mkdir -p /workspace && echo 'x = 41' > /workspace/a.py").CombinedOutput(); err != nil {
		t.Fatalf("docker exec: %v: %s", err, msg)
	}

	bin := filepath.Join(out, "berth-linux-"+runtime.GOARCH)
	// A directory with berth alone: no berth-shim beside it, no go.
	dir := t.TempDir()
	exe := filepath.Join(dir, "berth")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	path := dir + ":/usr/sbin:/usr/bin:/sbin:/bin"
	for _, d := range filepath.SplitList(path) {
		if _, err := os.Stat(filepath.Join(d, "go")); err == nil {
			t.Fatalf("%s/go exists: the stripped PATH %s still has a Go toolchain", d, path)
		}
	}
	cache := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "XDG_CACHE_HOME", "HOME", "GOROOT", "BERTH_SHIM":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+path, "XDG_CACHE_HOME="+cache, "HOME="+t.TempDir())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "call", "--sandbox", "docker://"+name, "--workspace", "/workspace", "read", `{"path":"a.py"}`)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	got, err := cmd.Output()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("berth call read in %s without Go: %v\n%s%s", name, err, got, stderr.String())
	}
	if !strings.Contains(string(got), "x = 41") {
		t.Fatalf("berth call read: %s\n%s", got, stderr.String())
	}
	t.Logf("first tool call in a fresh container, without Go, took %s", took.Round(time.Millisecond))

	// No build: the cache holds the embedded agent written out, and no
	// berth-shim built from source (or its build tree).
	shimDir := filepath.Join(cache, "berth", "shim")
	entries, _ := filepath.Glob(filepath.Join(shimDir, "*", "*"))
	var agent string
	for _, e := range entries {
		switch filepath.Base(e) {
		case "berth-shim-linux-" + runtime.GOARCH:
			agent = e
		default:
			t.Errorf("%s: the agent cache has more than berth's embedded agent; was it built?", e)
		}
	}
	if agent == "" {
		t.Fatalf("no embedded agent written below %s: %v", shimDir, entries)
	}
	// The agent placed in the container is the release's berth-shim.
	shim, err := os.ReadFile(filepath.Join(out, "berth-shim-linux-"+runtime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(shim)
	placed := "/.berth/shim-" + hex.EncodeToString(sum[:])[:12] + "/berth-shim"
	if msg, err := exec.Command("docker", "exec", name, "test", "-x", placed).CombinedOutput(); err != nil {
		t.Errorf("the release's agent is not at %s in the container: %v: %s", placed, err, msg)
	}
}

// TestReleaseImage builds the release with its image (root, debootstrap and
// a Docker daemon, as images/build; set BERTH_TEST_RELEASE_IMAGE=1) and runs
// it: as user 65532 it serves /healthz, its healthcheck turns healthy, and
// it answers a tool call; its labels carry the version and the licence.
func TestReleaseImage(t *testing.T) {
	if os.Getenv("BERTH_TEST_RELEASE_IMAGE") != "1" {
		t.Skip("set BERTH_TEST_RELEASE_IMAGE=1 to build the image (root, debootstrap, docker)")
	}
	out := build(t, []string{runtime.GOARCH}, true)
	tag := "berth:" + version
	t.Cleanup(func() { exec.Command("docker", "rmi", tag).Run() })
	docker := func(args ...string) string {
		t.Helper()
		got, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, got)
		}
		return strings.TrimSpace(string(got))
	}
	if _, err := os.Stat(filepath.Join(out, "berth-"+version+"-linux-"+runtime.GOARCH+".image.tar.gz")); err != nil {
		t.Errorf("the saved image: %v", err)
	}
	labels := docker("image", "inspect", tag, "--format", `{{index .Config.Labels "org.opencontainers.image.version"}} {{index .Config.Labels "org.opencontainers.image.licenses"}} {{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Cmd}}`)
	if want := version + ` Apache-2.0 65532:65532 ["berth"] ["serve"]`; labels != want {
		t.Errorf("image config = %s, want %s", labels, want)
	}

	name := "berth-release-image-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	docker("run", "-d", "--name", name, tag)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	if uid := docker("exec", name, "id", "-u"); uid != "65532" {
		t.Errorf("berth runs as uid %s, want 65532", uid)
	}
	probe := `exec 3<>/dev/tcp/127.0.0.1/7450 && printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && cat <&3`
	// The healthcheck's own interval (30 s) and retries bound the wait.
	deadline := time.Now().Add(3 * time.Minute)
	var health, resp string
	for time.Now().Before(deadline) {
		got, _ := exec.Command("docker", "exec", name, "bash", "-c", probe).CombinedOutput()
		resp = string(got)
		health = docker("inspect", name, "--format", "{{.State.Health.Status}}")
		if strings.Contains(resp, " 200 ") && health == "healthy" {
			break
		}
		time.Sleep(time.Second)
	}
	if !strings.Contains(resp, " 200 ") || health != "healthy" {
		t.Fatalf("/healthz answered %q, health %q; logs:\n%s", resp, health, docker("logs", name))
	}
	docker("exec", name, "sh", "-c", "echo 'x = 41' > /tmp/a.py")
	if got := docker("exec", name, "berth", "call", "--sandbox", "host", "--workspace", "/tmp", "read", `{"path":"a.py"}`); !strings.Contains(got, "x = 41") {
		t.Errorf("berth call read in the image: %s", got)
	}
	if v := docker("exec", name, "berth", "version"); !strings.HasPrefix(v, "berth "+version+"\n") {
		t.Errorf("berth version in the image: %s", v)
	}
}
