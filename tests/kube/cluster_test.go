package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The helpers TestDeploy and TestReplicas share: kubectl, an overlay
// applied as an operator would, a conversation's pod, calls to berth.

// wait bounds every step, so that a broken deployment fails instead of
// hanging; nothing asserts that anything is fast.
const wait = 3 * time.Minute

// dialTimeout bounds connecting to a pod: a deleted pod's address may
// still be listed, and connecting to it would otherwise take the whole
// step's wait.
const dialTimeout = 5 * time.Second

func need(t *testing.T) {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	if os.Getenv("KUBECONFIG") == "" {
		fail("a cluster is needed: tests/kube/up writes $KUBECONFIG (source its env file)")
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		fail("kubectl is needed: %v", err)
	}
}

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := tryKubectl(stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tryKubectl(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// copyTree copies the directory src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// apiServer returns the node's address and the API server's port. This
// test cluster runs no kube-proxy, so the API server's service address
// does not route from a pod: berth's in-cluster config is pointed at the
// node instead (apiModePatch).
func apiServer(t *testing.T) (node, port string) {
	t.Helper()
	node = strings.TrimSpace(kubectl(t, "", "get", "nodes", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`))
	port = "16443"
	if u := strings.TrimSpace(kubectl(t, "", "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")); u != "" {
		if i := strings.LastIndex(u, ":"); i > 0 {
			port = u[i+1:]
		}
	}
	return node, port
}

// apiModePatch is the strategic merge patch API mode's Deployment needs on
// this cluster: the image is never pulled (it was imported), and the API
// server is the node's address (apiServer).
func apiModePatch(node, port string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: berth
  namespace: berth
spec:
  template:
    spec:
      containers:
      - name: berth
        imagePullPolicy: Never
        env:
        - name: KUBERNETES_SERVICE_HOST
          value: %q
        - name: KUBERNETES_SERVICE_PORT
          value: %q
`, node, port)
}

// kustomizePatch is one entry of the test kustomization's patches: a
// strategic merge patch (no target), or a JSON 6902 patch of target
// (e.g. "kind: Deployment\nname: berth").
type kustomizePatch struct {
	target string
	body   string
}

// applyOverlay deploys k8s/overlays/<overlay> as an operator would: from a
// copy of k8s/ holding the operator's files (secrets: paths under k8s/ →
// content; base/token and base/operator-token at least), through a
// kustomization of the test's that adds patches, with kubectl apply -k.
// Cleanup deletes what it applied, after logging berth's pods (selector)
// when the test failed.
func applyOverlay(t *testing.T, overlay string, secrets map[string]string, selector string, patches ...kustomizePatch) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyTree(t, filepath.Join(root, "k8s"), filepath.Join(dir, "k8s"))
	for p, content := range secrets {
		if err := os.WriteFile(filepath.Join(dir, "k8s", filepath.FromSlash(p)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	test := filepath.Join(dir, "test")
	kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../k8s/overlays/" + overlay + "\npatches:\n"
	for i, p := range patches {
		name := fmt.Sprintf("patch%d.yaml", i)
		if err := os.MkdirAll(test, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(test, name), []byte(p.body), 0o644); err != nil {
			t.Fatal(err)
		}
		kust += "  - path: " + name + "\n"
		if p.target != "" {
			kust += "    target:\n      " + strings.ReplaceAll(strings.TrimSpace(p.target), "\n", "\n      ") + "\n"
		}
	}
	if err := os.WriteFile(filepath.Join(test, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}

	kubectl(t, "", "apply", "-k", test)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := tryKubectl("", "-n", "berth", "describe", "pods", "-l", selector)
			logs, _ := tryKubectl("", "-n", "berth", "logs", "-l", selector, "--prefix", "--tail=50")
			t.Logf("berth's pods:\n%s\nlogs:\n%s", out, logs)
		}
		if _, err := tryKubectl("", "delete", "-k", test, "--wait=true", "--timeout=120s"); err != nil {
			t.Errorf("delete -k: %v", err)
		}
	})
}

// imagePrefix is where the test images are in the cluster.
func imagePrefix() string {
	if p := os.Getenv("BERTH_KUBE_IMAGE_PREFIX"); p != "" {
		return p
	}
	return "docker.io/library/"
}

// conversationPod starts the pod of conversation conv in namespace ns on
// the test image (e.g. berth-test-go) and waits until it is ready; cleanup
// deletes it.
func conversationPod(t *testing.T, ns, conv, image string) {
	t.Helper()
	kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: %[2]s
  labels:
    berth.dev/conversation: %[1]s
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  enableServiceLinks: false
  containers:
  - name: main
    image: %[3]s%[4]s:latest
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /workspace && exec sleep infinity"]
`, conv, ns, imagePrefix(), image), "apply", "-f", "-")
	t.Cleanup(func() { tryKubectl("", "-n", ns, "delete", "pod", conv, "--grace-period=1", "--wait=false") })
	kubectl(t, "", "-n", ns, "wait", "--for=condition=Ready", "pod/"+conv, "--timeout=120s")
}

var client = &http.Client{Transport: &http.Transport{
	DialContext: (&net.Dialer{Timeout: dialTimeout}).DialContext,
}}

// call makes one HTTP request to berth in the cluster.
func call(t *testing.T, base, token, method, path, body string) (int, string) {
	t.Helper()
	code, resp, err := tryCall(base, token, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, resp
}

// tryCall makes one HTTP request; err is a transport error.
func tryCall(base, token, method, path, body string) (int, string, error) {
	return tryCallContext(context.Background(), base, token, method, path, body)
}

// tryCallContext is tryCall ending early with ctx.
func tryCallContext(ctx context.Context, base, token, method, path, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s%s: %w", method, base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, string(b), fmt.Errorf("%s %s%s: reading the answer: %w", method, base, path, err)
	}
	return resp.StatusCode, string(b), nil
}

// toolResult reads a tool call's answer: its text blocks, and whether it
// is a tool error.
func toolResult(body string) (text string, isError bool, err error) {
	var res struct {
		Content []struct{ Text string }
		IsError bool
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		return "", false, fmt.Errorf("a tool result that is not JSON: %w: %s", err, body)
	}
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, c.Text)
	}
	return strings.Join(parts, "\n"), res.IsError, nil
}

// psArgs lists the command lines of the processes in a pod's container.
func psArgs(t *testing.T, ns, pod string) string {
	t.Helper()
	return kubectl(t, "", "-n", ns, "exec", pod, "--", "ps", "-eo", "comm,args")
}
