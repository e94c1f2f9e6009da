package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tests/berthtest"
)

// Several replicas (docs/kubernetes.md, "Several replicas"): two real
// `berth serve --store=kube` processes share one run store in the test
// cluster's API server, as the replicas of a Deployment do (tests/kube's
// TestReplicas deploys exactly that in the cluster). The test plays the
// Service: it sends each request to one replica or the other.

// replicaTakeover bounds how long a run waits for another replica after its
// replica was killed: the lease's 20 s, a sweep's 15 s, adopting.
const replicaTakeover = 90 * time.Second

// replica starts berth serve as replica name of the run store in
// namespace ns, forwarding with the peer key in keyFile.
func replica(t *testing.T, name, ns, keyFile string) (*berthtest.Server, *berthtest.Client) {
	t.Helper()
	return durableBerthEnv(t, "", []string{"POD_IP=127.0.0.1"},
		"--store=kube", "--store-namespace", ns, "--replica", name, "--peer-key-file", keyFile)
}

// evalEventually runs a cell until it answers 200, for up to within: a
// request that reaches a replica while the run moves answers 503
// run_moving (and nothing else is accepted).
func evalEventually(t *testing.T, c *berthtest.Client, run, code string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		st, body, err := c.Do(ctx, "POST", "/v1/runs/"+run+"/tools/eval", map[string]any{"args": map[string]any{"code": code, "description": "use the run through another replica"}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case st == http.StatusOK:
			var res berthtest.Result
			if err := json.Unmarshal(body, &res); err != nil || res.IsError {
				t.Fatalf("eval %q: %v %s", code, err, body)
			}
			return res.Text()
		case st != http.StatusServiceUnavailable || !strings.Contains(string(body), "run_moving"):
			t.Fatalf("eval %q while the run moves between replicas: %d %s; want 200, or 503 run_moving", code, st, body)
		case time.Now().After(deadline):
			t.Fatalf("eval %q: still %d %s after %v", code, st, body, within)
		}
		time.Sleep(time.Second)
	}
}

func TestReplicas(t *testing.T) {
	if backend() != backendKube {
		t.Skip("replicas share their runs through the cluster's API server: run with BERTH_E2E_BACKEND=kube")
	}
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)

	// The run store's namespace, and the key the replicas share.
	var b [4]byte
	rand.Read(b[:])
	ns := "berth-e2e-store-" + hex.EncodeToString(b[:])
	mustKubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		kubectl(ctx, "", "delete", "namespace", ns, "--wait=false")
	})
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "peer-key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}

	a, ca := replica(t, "berth-a", ns, keyFile)
	sb, cb := replica(t, "berth-b", ns, keyFile)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	info, err := ca.OpenRun(ctx, durableSpec(ctr))
	if err != nil {
		t.Fatal(err)
	}
	holder := func() string {
		return strings.TrimSpace(mustKubectl(t, "", "-n", ns, "get", "lease", "berth-run-"+info.ID, "-o", "jsonpath={.spec.holderIdentity}"))
	}
	if h := holder(); h != "berth-a" {
		t.Fatalf("the run opened through berth-a is held by %q", h)
	}

	// Used through the other replica: forwarded to its owner.
	evalText(t, cb, info.ID, "x = 41")
	if got := evalText(t, ca, info.ID, "x + 1"); !strings.Contains(got, "42") {
		t.Fatalf("x + 1 through berth-a after x = 41 through berth-b: %s", got)
	}
	if h := holder(); h != "berth-a" {
		t.Fatalf("forwarded calls moved the run to %q", h)
	}
	st, body, err := cb.Do(ctx, "GET", "/v1/runs", nil)
	if err != nil || st != 200 || !strings.Contains(string(body), info.ID) {
		t.Fatalf("GET /v1/runs through berth-b: %d %s %v; want the run berth-a serves", st, body, err)
	}
	// An ask_user card, opened with the event stream and the call both
	// through the other replica; the card's event id, for a resumed
	// stream after the takeover.
	card := openCard(t, cb, info.ID)
	cardEvent := eventID(t, cb, info.ID, "", "card.opened")

	// A hostile client: a forged peer signature is refused, and a wrong
	// token is refused before anything is forwarded.
	for _, tc := range []struct{ name, token, peer string }{
		{"forged signature", durableToken, "berth-a " + strconv.FormatInt(time.Now().Unix(), 10) + " " + strings.Repeat("0", 64)},
		{"wrong token", "not-the-token", ""},
	} {
		req, _ := http.NewRequestWithContext(ctx, "POST", cb.URL+"/v1/runs/"+info.ID+"/tools/eval", strings.NewReader(`{"args":{"code":"x = 0","description":"attack"}}`))
		req.Header.Set("Authorization", "Bearer "+tc.token)
		if tc.peer != "" {
			req.Header.Set("Berth-Peer", tc.peer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", tc.name, resp.StatusCode)
		}
	}

	// The owner dies (SIGKILL: no release). The other replica takes the
	// run over once its lease lapses; until then calls answer run_moving.
	a.Kill()
	if got := evalEventually(t, cb, info.ID, "x + 1", replicaTakeover); !strings.Contains(got, "42") {
		t.Fatalf("x + 1 after the owner was killed: %s", got)
	}
	if h := holder(); h != "berth-b" {
		t.Fatalf("after the takeover the run is held by %q, want berth-b", h)
	}
	oneOfEach(t, ctr, "after the takeover", 1)
	// The event stream resumes on the new owner where the client left
	// it (Last-Event-ID), and the card asked before the takeover is
	// answered there; the harness's retried question gets the answer.
	if got := eventID(t, cb, info.ID, strconv.Itoa(cardEvent-1), "card.opened"); got != cardEvent {
		t.Fatalf("resumed after event %d, the stream's card.opened is event %d; want %d", cardEvent-1, got, cardEvent)
	}
	answerRestoredCard(t, cb, info.ID, card)

	// A rollout: a new replica starts, and the owner leaves on SIGTERM,
	// letting the lease go: the new one serves the run at once.
	_, cc := replica(t, "berth-c", ns, keyFile)
	if err := sb.Stop(); err != nil {
		t.Fatalf("berth-b's SIGTERM: %v", err)
	}
	if got := evalEventually(t, cc, info.ID, "x + 2", 30*time.Second); !strings.Contains(got, "43") {
		t.Fatalf("x + 2 after berth-b left: %s", got)
	}
	if h := holder(); h != "berth-c" {
		t.Fatalf("after berth-b left the run is held by %q, want berth-c", h)
	}
	oneOfEach(t, ctr, "after the hand-over", 1)

	if err := cc.CloseRun(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the run's resident and kernel to end", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })
	if out := mustKubectl(t, "", "-n", ns, "get", "secrets,leases", "-l", "berth.dev/run="+info.ID, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("the closed run left in the store: %s", out)
	}
}

// eventID reads run's event stream through c (resumed after lastID when it
// is not empty) until an event of type typ, and returns its id.
func eventID(t *testing.T, c *berthtest.Client, run, lastID, typ string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.URL+"/v1/runs/"+run+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("events of run %s: %d %s", run, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	id := -1
	var seen []string
	for sc.Scan() {
		line := sc.Text()
		seen = append(seen, line)
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			id, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if strings.TrimSpace(strings.TrimPrefix(line, "event:")) == typ && strings.HasPrefix(line, "event:") {
			return id
		}
	}
	t.Fatalf("no %s event on run %s's stream (after %q): %v; read %q", typ, run, lastID, sc.Err(), seen)
	return 0
}
