package bench

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"berth.dev/berth/tests/berthtest"
)

// envForwardCalls is how many cells TestForwardReport times per route
// (default 200).
const envForwardCalls = "BERTH_BENCH_FORWARD_N"

// TestForwardReport measures what several replicas cost a call: the same
// small cell through the replica that serves the run (the anchor) and
// through the other replica, which forwards it (docs/operations.md,
// "Several replicas"), interleaved. Two real `berth serve --store=kube` share a run
// store in the API server of $KUBECONFIG (tests/kube/up's cluster); the
// run is in a Docker container. Goal: a forwarded cell within 1.2× of a
// direct one, or 2 ms more.
func TestForwardReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to measure forwarding between replicas; bench/run does", envRun)
	}
	if os.Getenv("KUBECONFIG") == "" {
		t.Skip("replicas share a run store in a cluster's API server: set $KUBECONFIG (tests/kube/up writes one)")
	}
	image := os.Getenv(envEvalImage)
	if image == "" {
		image = "berth-test-python"
	}
	n := envInt(envForwardCalls, 200)
	ctx := t.Context()
	ctr, _ := benchContainer(t, image, nil)

	var b [4]byte
	rand.Read(b[:])
	ns := "berth-bench-" + hex.EncodeToString(b[:])
	if out, err := exec.CommandContext(ctx, "kubectl", "create", "namespace", ns).CombinedOutput(); err != nil {
		t.Fatalf("kubectl create namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("kubectl", "delete", "namespace", ns, "--wait=false").Run() })
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "peer-key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	replica := func(name string) *berthtest.Client {
		s := berthtest.Start(t, berthtest.Options{
			Args: []string{"--mode", "local", "--allow-unlabelled", "--store=kube", "--store-namespace", ns, "--replica", name, "--peer-key-file", keyFile},
			Env:  []string{"BERTH_TOKEN=" + adoptToken, "POD_IP=127.0.0.1"},
		})
		return &berthtest.Client{URL: s.URL, Token: adoptToken}
	}
	owner, other := replica("bench-a"), replica("bench-b")
	run, err := owner.OpenRun(ctx, map[string]any{"sandbox": "docker://" + ctr, "workspace": benchWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	cell := func(c *berthtest.Client) time.Duration {
		start := time.Now()
		res, err := c.Call(ctx, run.ID, "eval", map[string]any{"code": "1 + 1", "description": "add two numbers to time one cell"})
		if err != nil || res.IsError || !strings.Contains(res.Text(), "2") {
			t.Fatalf("eval: %v %s", err, res.Text())
		}
		return time.Since(start)
	}
	cell(owner) // the kernel's start
	cell(other) // the forwarding replica's connection
	var direct, forwarded []time.Duration
	for range n {
		direct = append(direct, cell(owner))
		forwarded = append(forwarded, cell(other))
	}
	owner.CloseRun(ctx, run.ID)

	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "one cell (1 + 1)\tmedian\tratio to the anchor\t\n")
	fmt.Fprintf(tw, "through the replica serving the run (anchor)\t%s\t1.00\t\n", millis(median(direct)))
	verdict := "met"
	if d, f := median(direct), median(forwarded); f > d*12/10 && f > d+2*time.Millisecond {
		verdict = "NOT met"
	}
	fmt.Fprintf(tw, "through the other replica, forwarded (goal ≤ 1.2× or +2 ms: %s)\t%s\t%.2f\t\n", verdict, millis(median(forwarded)), ratio(forwarded, direct))
	tw.Flush()
	t.Logf("a cell through two replicas sharing a run store, median of %d each, interleaved:\n%s", n, sb.String())
}
