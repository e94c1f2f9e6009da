// Package kube deploys berth itself onto a real cluster with k8s/'s
// overlays and drives it from outside: `kubectl apply -k`, /healthz, and a
// language server placed in a conversation's pod. It runs in tests/run's
// kube step against the cluster tests/kube/up brings up (with the berth:dev
// image imported: tests/kube/up berth:dev), and against any cluster whose
// containerd holds that image ($KUBECONFIG).
package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wait bounds every step, so that a broken deployment fails instead of
// hanging; nothing asserts that anything is fast.
const wait = 3 * time.Minute

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

// mode is one way berth is deployed.
type mode struct {
	name      string
	overlay   string // under k8s/overlays
	selector  string // berth's pod
	rollout   string // what kubectl rollout status waits for
	patch     string // strategic merge patch for this cluster (image never pulled, ...)
	sandboxNS string // where the conversation's pod runs
}

// TestDeploy applies each overlay as an operator would (a fresh token
// file, kubectl apply -k), waits for berth's pod, checks /healthz and opens
// a run on a conversation's pod of another namespace, where berth starts
// gopls and answers a hover; closing the run leaves no gopls behind.
func TestDeploy(t *testing.T) {
	need(t)
	node := strings.TrimSpace(kubectl(t, "", "get", "nodes", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`))
	apiPort := "16443"
	if u := strings.TrimSpace(kubectl(t, "", "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")); u != "" {
		if i := strings.LastIndex(u, ":"); i > 0 {
			apiPort = u[i+1:]
		}
	}
	sock := os.Getenv("BERTH_KUBE_CONTAINERD")
	if sock == "" {
		sock = "/run/containerd/containerd.sock"
	}
	modes := []mode{
		{
			name: "api", overlay: "api", selector: "app.kubernetes.io/component=api", rollout: "deployment/berth",
			sandboxNS: "berth-sandboxes",
			// This test cluster runs no kube-proxy, so the API server's
			// service address does not route: berth's in-cluster config is
			// pointed at the node's address instead.
			patch: fmt.Sprintf(`apiVersion: apps/v1
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
`, node, apiPort),
		},
		{
			name: "node-agent", overlay: "node-agent", selector: "app.kubernetes.io/component=node-agent", rollout: "daemonset/berth-node-agent",
			sandboxNS: "berth-deploy-" + randomHex(3),
			// The test cluster's containerd has its own socket.
			patch: fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: berth-node-agent
  namespace: berth
spec:
  template:
    spec:
      containers:
      - name: berth
        imagePullPolicy: Never
      volumes:
      - name: containerd-sock
        hostPath:
          path: %q
          type: Socket
`, sock),
		},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { deploy(t, m) })
	}
}

func deploy(t *testing.T, m mode) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyTree(t, filepath.Join(root, "k8s"), filepath.Join(dir, "k8s"))
	token := randomHex(24)
	if err := os.WriteFile(filepath.Join(dir, "k8s", "base", "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k8s", "base", "operator-token"), []byte(randomHex(24)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "test")
	os.MkdirAll(overlay, 0o755)
	os.WriteFile(filepath.Join(overlay, "patch.yaml"), []byte(m.patch), 0o644)
	os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../k8s/overlays/`+m.overlay+`
patches:
  - path: patch.yaml
`), 0o644)

	kubectl(t, "", "apply", "-k", overlay)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := tryKubectl("", "-n", "berth", "describe", "pods", "-l", m.selector)
			logs, _ := tryKubectl("", "-n", "berth", "logs", "-l", m.selector, "--tail=50")
			t.Logf("berth's pod:\n%s\nlogs:\n%s", out, logs)
		}
		if _, err := tryKubectl("", "delete", "-k", overlay, "--wait=true", "--timeout=120s"); err != nil {
			t.Errorf("delete -k: %v", err)
		}
	})
	kubectl(t, "", "-n", "berth", "rollout", "status", m.rollout, "--timeout=150s")
	ip := strings.TrimSpace(kubectl(t, "", "-n", "berth", "get", "pods", "-l", m.selector, "-o", "jsonpath={.items[0].status.podIP}"))
	base := "http://" + ip + ":8080"

	// /healthz answers without the token; the API wants it.
	if code, body := call(t, base, "", "GET", "/healthz", ""); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, _ := call(t, base, "", "GET", "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}

	// The conversation's pod, in another namespace.
	conv := "deploy-" + randomHex(4)
	if m.sandboxNS != "berth-sandboxes" {
		kubectl(t, "", "create", "namespace", m.sandboxNS)
		t.Cleanup(func() { tryKubectl("", "delete", "namespace", m.sandboxNS, "--wait=false") })
	}
	prefix := os.Getenv("BERTH_KUBE_IMAGE_PREFIX")
	if prefix == "" {
		prefix = "docker.io/library/"
	}
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
    image: %[3]sberth-test-go:latest
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /workspace && exec sleep infinity"]
`, conv, m.sandboxNS, prefix), "apply", "-f", "-")
	t.Cleanup(func() { tryKubectl("", "-n", m.sandboxNS, "delete", "pod", conv, "--grace-period=1", "--wait=false") })
	kubectl(t, "", "-n", m.sandboxNS, "wait", "--for=condition=Ready", "pod/"+conv, "--timeout=120s")

	// A conversation without a pod does not run on berth's own container.
	code, body := call(t, base, token, "POST", "/v1/runs", `{"conversation_id":"nobody-`+randomHex(3)+`","workspace":"/workspace"}`)
	if code != http.StatusNotFound || !strings.Contains(body, "sandbox_not_found") {
		t.Errorf("a run without a pod: %d %s; want 404 sandbox_not_found (no host fallback in a cluster)", code, body)
	}

	code, body = call(t, base, token, "POST", "/v1/runs", `{"conversation_id":"`+conv+`","workspace":"/workspace"}`)
	if code != http.StatusCreated {
		t.Fatalf("open run: %d %s", code, body)
	}
	var run struct{ ID, Sandbox string }
	json.Unmarshal([]byte(body), &run)
	if want := "kube://" + m.sandboxNS + "/" + conv + "/main"; run.Sandbox != want {
		t.Errorf("run placed in %q, want %q", run.Sandbox, want)
	}
	tool := func(name, args string) string {
		t.Helper()
		code, body := call(t, base, token, "POST", "/v1/runs/"+run.ID+"/tools/"+name, `{"args":`+args+`}`)
		if code != 200 {
			t.Fatalf("%s %s: %d %s", name, args, code, body)
		}
		var res struct {
			Content []struct{ Text string }
			IsError bool
		}
		json.Unmarshal([]byte(body), &res)
		var text []string
		for _, c := range res.Content {
			text = append(text, c.Text)
		}
		if res.IsError {
			t.Fatalf("%s %s: tool error: %s", name, args, strings.Join(text, "\n"))
		}
		return strings.Join(text, "\n")
	}
	// berth serves in hosted mode, where a write waits for an approver;
	// the project is put in place with the test's own exec instead.
	for name, content := range map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.22\n",
		"main.go": "package main\n\n// Hello greets.\nfunc Hello() string { return \"hi\" }\n\nfunc main() { println(Hello()) }\n",
	} {
		kubectl(t, "", "-n", m.sandboxNS, "exec", conv, "--", "sh", "-c",
			"echo "+base64.StdEncoding.EncodeToString([]byte(content))+" | base64 -d > /workspace/"+name)
	}
	if got := tool("read", `{"path":"go.mod"}`); !strings.Contains(got, "module example.com/hello") {
		t.Errorf("read through berth's pod: %s", got)
	}
	if got := tool("lsp", `{"action":"hover","file":"main.go","line":6,"symbol":"Hello"}`); !strings.Contains(got, "func Hello() string") {
		t.Errorf("hover through berth's pod: %s", got)
	}
	if ps := kubectl(t, "", "-n", m.sandboxNS, "exec", conv, "--", "ps", "-eo", "args"); !strings.Contains(ps, "gopls") {
		t.Errorf("no gopls runs in the conversation's pod:\n%s", ps)
	}
	if code, body := call(t, base, token, "DELETE", "/v1/runs/"+run.ID, ""); code != http.StatusNoContent {
		t.Errorf("close run: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps := kubectl(t, "", "-n", m.sandboxNS, "exec", conv, "--", "ps", "-eo", "args")
		if !strings.Contains(ps, "gopls") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gopls still runs 30 s after the run closed:\n%s", ps)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// call makes one HTTP request to berth in the cluster.
func call(t *testing.T, base, token, method, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
