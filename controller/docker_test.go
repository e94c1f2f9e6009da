package controller

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/docker"
	"berth.dev/berth/sandbox/host"
)

// dockerTimeout bounds each docker command of the tests.
const dockerTimeout = time.Minute

// dockerRun runs the docker CLI and returns its trimmed stdout.
func dockerRun(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New("docker " + strings.Join(args, " ") + ": " + err.Error() + ": " + strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// needDockerImage skips the test unless a Docker daemon answers and the
// test image exists ($BERTH_TEST_IMAGE_MINIMAL or berth-test-minimal),
// and fails it instead under CI=true. It returns the image.
func needDockerImage(t *testing.T) string {
	t.Helper()
	image := os.Getenv("BERTH_TEST_IMAGE_MINIMAL")
	if image == "" {
		image = "berth-test-minimal:latest"
	}
	_, err := dockerRun("version", "--format", "{{.Server.APIVersion}}")
	if err == nil {
		_, err = dockerRun("image", "inspect", "--format", "{{.Id}}", image)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker and the image %s are required (CI=true): %v", image, err)
		}
		t.Skipf("docker or the image %s is not available: %v", image, err)
	}
	return image
}

// TestExplicitDockerContainerNeedsLabel opens runs on real containers by
// docker://NAME and docker://ID: the container labelled with the run's
// conversation is accepted; an unlabelled one, another conversation's,
// and any named without a conversation id are refused, unless
// AllowUnlabelled. With RequireTenantLabel the container must carry the
// run's tenant too: another tenant's container of the same conversation
// is refused.
func TestExplicitDockerContainerNeedsLabel(t *testing.T) {
	image := needDockerImage(t)
	var b [6]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	conv, otherConv := "c-"+suffix, "c-other-"+suffix
	start := func(name, label string, more ...string) string {
		t.Helper()
		args := []string{"run", "-d", "--network", "none", "--name", name}
		if label != "" {
			args = append(args, "--label", DefaultLabelKey+"="+label)
		}
		for _, l := range more {
			args = append(args, "--label", l)
		}
		id, err := dockerRun(append(args, image, "sleep", "infinity")...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dockerRun("rm", "-f", id) })
		return id
	}
	own := start("berth-ctl-own-"+suffix, conv)
	bare := start("berth-ctl-bare-"+suffix, "")
	other := start("berth-ctl-other-"+suffix, otherConv)
	tenantConv := "c-tenant-" + suffix
	ofA := start("berth-ctl-tenant-a-"+suffix, tenantConv, "berth.tenant=a")

	open := func(t *testing.T, allow, tenants bool, spec RunSpec) (*Run, error) {
		t.Helper()
		p, err := docker.New(docker.WithLabelKey(DefaultLabelKey))
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{
			Providers:          []sandbox.Provider{p, &host.Provider{}},
			Tools:              []Binder{FileTools},
			Registerer:         prometheus.NewRegistry(),
			AllowUnlabelled:    allow,
			RequireTenantLabel: tenants,
			NoQuestions:        true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); p.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		defer cancel()
		spec.Workspace = "/tmp"
		return c.Open(ctx, spec)
	}

	tests := []struct {
		name      string
		allow     bool
		tenants   bool
		spec      RunSpec
		wantRef   string
		errSubstr []string
	}{
		{name: "the conversation's own container by id", spec: RunSpec{ConversationID: conv, Sandbox: "docker://" + own}, wantRef: "docker://" + own},
		{name: "the conversation's own container by name", spec: RunSpec{ConversationID: conv, Sandbox: "docker://berth-ctl-own-" + suffix}, wantRef: "docker://" + own},
		{name: "the conversation's own container by short id", spec: RunSpec{ConversationID: conv, Sandbox: "docker://" + own[:12]}, wantRef: "docker://" + own},
		{name: "an unlabelled container", spec: RunSpec{ConversationID: conv, Sandbox: "docker://" + bare},
			errSubstr: []string{"does not carry the label " + DefaultLabelKey + "=" + conv, own}},
		{name: "another conversation's container", spec: RunSpec{ConversationID: conv, Sandbox: "docker://berth-ctl-other-" + suffix},
			errSubstr: []string{"does not carry the label " + DefaultLabelKey + "=" + conv}},
		{name: "a container named with no conversation", spec: RunSpec{Sandbox: "docker://" + own},
			errSubstr: []string{"needs the run's conversation_id"}},
		{name: "a conversation with no container", spec: RunSpec{ConversationID: "c-none-" + suffix, Sandbox: "docker://" + own},
			errSubstr: []string{"no running container is labelled"}},
		{name: "the tenant's own container", tenants: true, spec: RunSpec{Tenant: "a", ConversationID: tenantConv, Sandbox: "docker://" + ofA}, wantRef: "docker://" + ofA},
		{name: "another tenant's container", tenants: true, spec: RunSpec{Tenant: "b", ConversationID: tenantConv, Sandbox: "docker://" + ofA},
			errSubstr: []string{"both labels " + DefaultLabelKey + "=" + tenantConv + " and berth.tenant=b", "no running container is labelled " + DefaultLabelKey + "=" + tenantConv + ",berth.tenant=b"}},
		{name: "a container without a tenant label", tenants: true, spec: RunSpec{Tenant: "a", ConversationID: conv, Sandbox: "docker://" + own},
			errSubstr: []string{"both labels " + DefaultLabelKey + "=" + conv + " and berth.tenant=a"}},
		{name: "a tenant's container with one tenant", spec: RunSpec{Tenant: "b", ConversationID: tenantConv, Sandbox: "docker://" + ofA}, wantRef: "docker://" + ofA},
		{name: "unlabelled when allowed", allow: true, spec: RunSpec{Sandbox: "docker://" + bare}, wantRef: "docker://" + bare},
		{name: "another's when allowed", allow: true, spec: RunSpec{ConversationID: conv, Sandbox: "docker://" + other}, wantRef: "docker://" + other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := open(t, tt.allow, tt.tenants, tt.spec)
			if tt.wantRef != "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if r.Sandbox() != tt.wantRef {
					t.Errorf("Sandbox() = %s, want %s", r.Sandbox(), tt.wantRef)
				}
				return
			}
			if !errors.Is(err, ErrPlacement) {
				t.Fatalf("Open: %v, want ErrPlacement", err)
			}
			for _, s := range tt.errSubstr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal %q does not say %q", err, s)
				}
			}
		})
	}
}
