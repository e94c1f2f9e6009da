package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/containerd"
	"berth.dev/berth/sandbox/docker"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/sandbox/kube"
)

// The sandboxes the suite runs against, chosen by $BERTH_E2E_BACKEND. The
// same tests run unchanged against each; the few that check an engine's
// own records (docker ps, docker events) say so and run on Docker only.
const (
	// backendDocker: containers of the local Docker engine (the default).
	backendDocker = "docker"
	// backendContainerd: the same containers reached through dockerd's
	// containerd (namespace moby) and named by containerd://moby/ID.
	backendContainerd = "containerd"
	// backendKube: pods of the cluster $KUBECONFIG names, reached through
	// the API server (berth's API mode).
	backendKube = "kube"
	// backendKubeNode: the same pods reached through the node's containerd
	// at $BERTH_KUBE_CONTAINERD (berth as a node agent).
	backendKubeNode = "kube-node"
)

// dockerContainerd is the socket of the containerd that dockerd runs.
const dockerContainerd = "/var/run/docker/containerd/containerd.sock"

// kubeNamespace holds the pods the suite starts on a cluster.
const kubeNamespace = "berth-e2e"

// podLabel names a pod's conversation.
const podLabel = "berth.dev/conversation"

func backend() string {
	switch b := os.Getenv("BERTH_E2E_BACKEND"); b {
	case "", backendDocker:
		return backendDocker
	default:
		return b
	}
}

// onKube reports whether the suite runs against a cluster.
func onKube() bool { return backend() == backendKube || backend() == backendKubeNode }

// explicitRefs holds, by conversation id, the sandbox reference a run
// opens with instead of "auto" (containerd: dockerd's labels are not in
// containerd).
var explicitRefs sync.Map

// dockerOnly skips a test that checks what only the Docker engine records
// and the Docker backend reports.
func dockerOnly(t *testing.T, why string) {
	t.Helper()
	if backend() != backendDocker {
		t.Skipf("e2e: %s is Docker's own record; the %s backend is checked by the other tests", why, backend())
	}
}

// kubectl runs the cluster's command line, as an operator would.
func kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out, err := kubectl(ctx, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// needSandboxes checks that the backend's engine answers (and, for Docker,
// that the image exists; a cluster's images are imported by tests/kube/up
// and a missing one fails the pod's start). A missing image fails under
// CI=true unless optional is set: then it always skips.
func needSandboxes(t *testing.T, image string, optional bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch backend() {
	case backendDocker, backendContainerd:
		if _, err := exec.LookPath("docker"); err != nil {
			unavailable(t, "e2e: no docker command on PATH: %v", err)
		}
		if _, err := dockerCLI(ctx, "version", "--format", "{{.Server.APIVersion}}"); err != nil {
			unavailable(t, "e2e: no Docker daemon answers: %v", err)
		}
		if _, err := dockerCLI(ctx, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
			if optional {
				t.Skipf("e2e: image %s is missing, skipping (build it with images/build): %v", image, err)
			}
			unavailable(t, "e2e: image %s is missing: build it with images/build (%v)", image, err)
		}
	case backendKube, backendKubeNode:
		if os.Getenv("KUBECONFIG") == "" {
			unavailable(t, "e2e: the %s backend needs $KUBECONFIG (tests/kube/up writes one)", backend())
		}
		if _, err := kubectl(ctx, "", "get", "--raw", "/readyz"); err != nil {
			unavailable(t, "e2e: the cluster does not answer: %v", err)
		}
		if backend() == backendKubeNode && os.Getenv("BERTH_KUBE_CONTAINERD") == "" {
			unavailable(t, "e2e: the kube-node backend needs $BERTH_KUBE_CONTAINERD, the node's containerd socket")
		}
	default:
		t.Fatalf("e2e: unknown $BERTH_E2E_BACKEND %q: use docker, containerd, kube or kube-node", backend())
	}
}

// startPod starts the conversation's pod with the image (imported into the
// cluster's containerd by tests/kube/up, so never pulled) and waits until
// it is ready. It is deleted at the end of the test.
func startPod(t *testing.T, c *container, image string) {
	t.Helper()
	prefix := os.Getenv("BERTH_KUBE_IMAGE_PREFIX")
	if prefix == "" {
		prefix = "docker.io/library/"
	}
	// Images are named as docker names them locally (berth-test-go, or
	// with a tag).
	if i := strings.LastIndex(image, ":"); i < 0 || strings.Contains(image[i:], "/") {
		image += ":latest"
	}
	c.name = c.conv
	c.pod = true
	c.ref = fmt.Sprintf("kube://%s/%s/main", kubeNamespace, c.name)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Pod
metadata:
  name: %[2]s
  namespace: %[1]s
  labels:
    %[3]s: %[2]s
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  enableServiceLinks: false
  containers:
  - name: main
    image: %[4]s%[5]s
    imagePullPolicy: Never
    command: ["sleep", "infinity"]
`, kubeNamespace, c.name, podLabel, prefix, image)
	mustKubectl(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		kubectl(ctx, "", "delete", "pod", "-n", kubeNamespace, c.name, "--grace-period=1", "--timeout=60s")
	})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := kubectl(ctx, "", "wait", "-n", kubeNamespace, "--for=condition=Ready", "pod/"+c.name, "--timeout=110s"); err != nil {
		desc, _ := kubectl(context.Background(), "", "describe", "pod", "-n", kubeNamespace, c.name)
		t.Fatalf("pod %s did not get ready: %v\n%s", c.name, err, desc)
	}
	c.id = strings.TrimSpace(mustKubectl(t, "", "get", "pod", "-n", kubeNamespace, c.name, "-o", "jsonpath={.metadata.uid}"))
}

// providers returns the sandbox providers of the backend, and what
// closes them.
func providers(t *testing.T) []sandbox.Provider {
	t.Helper()
	switch backend() {
	case backendKube:
		kp, err := kube.New()
		if err != nil {
			t.Fatal(err)
		}
		return []sandbox.Provider{kp, &host.Provider{}}
	case backendContainerd:
		cp, err := containerd.New(containerd.WithAddress(dockerContainerd))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.Close() })
		return []sandbox.Provider{cp, &host.Provider{}}
	case backendKubeNode:
		cp, err := containerd.New(containerd.WithAddress(os.Getenv("BERTH_KUBE_CONTAINERD")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.Close() })
		return []sandbox.Provider{cp.Pods(os.Getenv("BERTH_KUBE_NODE")), &host.Provider{}}
	}
	dp, err := docker.New(docker.WithLabelKey(labelKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	return []sandbox.Provider{dp, &host.Provider{}}
}
