// Package kube deploys berth itself onto a real cluster with k8s/'s
// overlays and drives it from outside: `kubectl apply -k`, /healthz, a
// language server placed in a conversation's pod (TestDeploy), and two
// replicas sharing a run's kernel across their restarts (TestReplicas). It
// runs in tests/run's kube step against the cluster tests/kube/up brings
// up (with the berth:dev image imported: tests/kube/up berth:dev), and
// against any cluster whose containerd holds that image ($KUBECONFIG).
package kube

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

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
	node, apiPort := apiServer(t)
	sock := os.Getenv("BERTH_KUBE_CONTAINERD")
	if sock == "" {
		sock = "/run/containerd/containerd.sock"
	}
	modes := []mode{
		{
			name: "api", overlay: "api", selector: "app.kubernetes.io/component=api", rollout: "deployment/berth",
			sandboxNS: "berth-sandboxes",
			patch:     apiModePatch(node, apiPort),
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
	token := randomHex(24)
	applyOverlay(t, m.overlay, map[string]string{
		"base/token":          token + "\n",
		"base/operator-token": randomHex(24) + "\n",
	}, m.selector, kustomizePatch{body: m.patch})
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
	conversationPod(t, m.sandboxNS, conv, "berth-test-go")

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
		text, isError, err := toolResult(body)
		if err != nil {
			t.Fatalf("%s %s: %v", name, args, err)
		}
		if isError {
			t.Fatalf("%s %s: tool error: %s", name, args, text)
		}
		return text
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
	if ps := psArgs(t, m.sandboxNS, conv); !strings.Contains(ps, "gopls") {
		t.Errorf("no gopls runs in the conversation's pod:\n%s", ps)
	}
	if code, body := call(t, base, token, "DELETE", "/v1/runs/"+run.ID, ""); code != http.StatusNoContent {
		t.Errorf("close run: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps := psArgs(t, m.sandboxNS, conv)
		if !strings.Contains(ps, "gopls") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gopls still runs 30 s after the run closed:\n%s", ps)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
