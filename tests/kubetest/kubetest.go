// Package kubetest reaches the real cluster that Kubernetes tests run
// against: the one $KUBECONFIG names (tests/kube/up writes it).
package kubetest

import (
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Need returns the config and a client of the cluster of $KUBECONFIG. It
// skips the test when there is none that answers, and fails it instead
// when CI=true, where the cluster is expected.
func Need(t testing.TB) (*rest.Config, *kubernetes.Clientset) {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		fail("set $KUBECONFIG to a cluster's kubeconfig to run the Kubernetes tests (tests/kube/up writes one)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fail("$KUBECONFIG: %v", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("client: %v", err)
	}
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 10 * time.Second
	if _, err := kubernetes.NewForConfigOrDie(probe).Discovery().ServerVersion(); err != nil {
		fail("the cluster of $KUBECONFIG (%s) does not answer: %v", cfg.Host, err)
	}
	return cfg, cs
}
