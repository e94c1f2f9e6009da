package security

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// refused fails the test unless r is a 4xx refusal of a run that was
// never opened.
func refused(t *testing.T, what string, r reply) {
	t.Helper()
	if r.status < 400 || r.status >= 500 {
		t.Errorf("%s: want a refusal, got %s", what, r)
	}
}

// TestHostPlacementIsTheOperatorsChoice: hosted mode without a host user
// has no host placement (explicit "host" and auto's fallback both
// refused); host workspaces must lie under --host-root (no "/" to read
// /etc/shadow from, no symlink out of a root); --host-placement off
// refuses an explicit host even in local mode.
func TestHostPlacementIsTheOperatorsChoice(t *testing.T) {
	t.Run("hosted without a host user", func(t *testing.T) {
		tok := newToken(t)
		s := startServe(t, serveOpts{args: []string{"--mode", "hosted"}, env: []string{"BERTH_TOKEN=" + tok}})
		ws := t.TempDir()
		refused(t, "explicit host", s.do("POST", "/v1/runs", tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws)))
		refused(t, "auto with no container", s.do("POST", "/v1/runs", tok, fmt.Sprintf(`{"conversation_id":"c-none","workspace":%q}`, ws)))
		refused(t, "explicit host at /", s.do("POST", "/v1/runs", tok, `{"sandbox":"host","workspace":"/"}`))
	})

	t.Run("host roots", func(t *testing.T) {
		tok := newToken(t)
		root := t.TempDir()
		s := startServe(t, serveOpts{args: []string{"--mode", "local", "--host-root", root}, env: []string{"BERTH_TOKEN=" + tok}})
		refused(t, "workspace / outside the root", s.do("POST", "/v1/runs", tok, `{"sandbox":"host","workspace":"/"}`))
		refused(t, "workspace /etc", s.do("POST", "/v1/runs", tok, `{"sandbox":"host","workspace":"/etc"}`))
		refused(t, "workspace ../ out of the root", s.do("POST", "/v1/runs", tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, root+"/../..")))
		if err := os.Symlink("/etc", filepath.Join(root, "etc-link")); err != nil {
			t.Fatal(err)
		}
		refused(t, "a symlink in the root that leads out", s.do("POST", "/v1/runs", tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, filepath.Join(root, "etc-link"))))
		ws := filepath.Join(root, "project")
		os.Mkdir(ws, 0o755)
		run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
		res, _ := s.call(tok, run, "read", `{"path":"/etc/shadow"}`)
		if !res.IsError || strings.Contains(res.Text(), "root:") {
			t.Errorf("read /etc/shadow from a run under the root: %s", res.Text())
		}
	})

	t.Run("off", func(t *testing.T) {
		tok := newToken(t)
		s := startServe(t, serveOpts{args: []string{"--mode", "local", "--host-placement", "off"}, env: []string{"BERTH_TOKEN=" + tok}})
		refused(t, "explicit host with placement off", s.do("POST", "/v1/runs", tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, t.TempDir())))
		refused(t, "auto fallback with placement off", s.do("POST", "/v1/runs", tok, fmt.Sprintf(`{"conversation_id":"c-none","workspace":%q}`, t.TempDir())))
	})
}

// docker runs the docker CLI for the test.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// needDocker skips without a Docker daemon and the minimal test image, or
// fails when CI=true.
func needDocker(t *testing.T) string {
	t.Helper()
	image := os.Getenv("BERTH_TEST_IMAGE_MINIMAL")
	if image == "" {
		image = "berth-test-minimal:latest"
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "image", "inspect", image).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker or the image %s is not available: %v", image, err)
		}
		t.Skipf("docker or the image %s is not available: %v", image, err)
	}
	return image
}

// TestUnlabelledContainerRefused: an explicit docker:// reference must
// name a container labelled with the run's conversation: an unlabelled
// container and another conversation's container are refused, the
// conversation's own is accepted; --allow-unlabelled lifts the check.
func TestUnlabelledContainerRefused(t *testing.T) {
	image := needDocker(t)
	start := func(label string) string {
		args := []string{"run", "-d", "--network", "none"}
		if label != "" {
			args = append(args, "--label", "berth.conversation="+label)
		}
		id := docker(t, append(args, image, "sleep", "infinity")...)
		t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
		return id
	}
	conv := "c-" + newToken(t)[:12]
	bare, other, own := start(""), start("c-someone-else"), start(conv)

	tok := newToken(t)
	s := startServe(t, serveOpts{args: []string{"--mode", "local"}, env: []string{"BERTH_TOKEN=" + tok}})
	spec := func(id, conv string) string {
		return fmt.Sprintf(`{"sandbox":"docker://%s","workspace":"/tmp","conversation_id":%q}`, id, conv)
	}
	refused(t, "unlabelled container", s.do("POST", "/v1/runs", tok, spec(bare, conv)))
	refused(t, "another conversation's container", s.do("POST", "/v1/runs", tok, spec(other, conv)))
	refused(t, "a container named with no conversation", s.do("POST", "/v1/runs", tok, spec(own, "")))
	if r := s.do("POST", "/v1/runs", tok, spec(own, conv)); r.status != http.StatusCreated {
		t.Errorf("the conversation's own container: want 201, got %s", r)
	} else {
		var info struct{ ID string }
		r.decode(t, &info)
		s.do("DELETE", "/v1/runs/"+info.ID, tok, "")
	}

	s2 := startServe(t, serveOpts{args: []string{"--mode", "local", "--allow-unlabelled"}, env: []string{"BERTH_TOKEN=" + tok}})
	s2.open(tok, spec(bare, conv))
}
