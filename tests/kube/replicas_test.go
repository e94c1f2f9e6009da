package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// replicaSelector selects berth's API-mode pods (the Service's selector).
	replicaSelector = "app.kubernetes.io/name=berth,app.kubernetes.io/component=api"
	// gracefulMove bounds the first answer after a replica was deleted
	// gracefully or replaced by a rollout. While it stops, its address may
	// still be listed (connections refused or reset) and the run is moving
	// to another replica (berth answers 503 until one holds it); once the
	// stopping pod has released the run's Lease, the next request's
	// replica takes it at once. 60 s is three Lease durations.
	gracefulMove = 60 * time.Second
	// crashMove bounds the first answer after a replica crashed: it
	// released nothing, so the run stays with the dead replica until its
	// Lease lapses (20 s without renewal) and then goes to the next
	// request's replica or the periodic sweep; until then the others answer
	// 503 (or cannot reach the dead address).
	crashMove = 90 * time.Second
	// closeGrace bounds how long the conversation's pod may still run the
	// run's kernel and resident supervisor after the run was closed.
	closeGrace = 30 * time.Second
)

// TestReplicas deploys k8s/overlays/api-replicas (two replicas sharing
// runs through the API server, hosted mode as shipped) and drives one
// run's Python kernel through both replicas and across what takes a
// replica away: a graceful pod deletion (the pod releases the run's
// Lease), a rollout restart (both replicas replaced) and a crash (SIGKILL,
// nothing released: another replica takes the run once its Lease lapses).
// The first eval asks the operator on a permission card, seen on the
// run's event stream through the replica that does not serve the run and
// answered "allow for this run" through the other; that answer, and the
// kernel's x, survive every move. Closing the run leaves neither kernel
// nor resident supervisor in the conversation's pod.
func TestReplicas(t *testing.T) {
	need(t)
	start := time.Now()
	last := start
	step := func(what string) {
		t.Logf("%-55s %5.1fs (total %5.1fs)", what, time.Since(last).Seconds(), time.Since(start).Seconds())
		last = time.Now()
	}
	node, apiPort := apiServer(t)
	token, operator := randomHex(24), randomHex(24)
	patches := []kustomizePatch{{body: apiModePatch(node, apiPort)}}
	if os.Getenv("BERTH_KUBE_VERBOSE") != "" {
		// berth's info and debug lines (runs opened, adopted, handed
		// over, closed; every tool call) in the logs a failure prints.
		patches = append(patches, kustomizePatch{target: "kind: Deployment\nname: berth", body: `- op: add
  path: /spec/template/spec/containers/0/args/-
  value: --verbose
`})
	}
	applyOverlay(t, "api-replicas", map[string]string{
		"base/token":                     token + "\n",
		"base/operator-token":            operator + "\n",
		"overlays/api-replicas/peer-key": randomHex(32) + "\n",
	}, replicaSelector, patches...)
	followLogs(t, "berth", replicaSelector)
	kubectl(t, "", "-n", "berth", "rollout", "status", "deployment/berth", "--timeout=150s")
	r := &replicas{t: t, token: token}
	eps := r.waitEndpoints(2)
	a, b := eps[0], eps[1]
	step("deployed: " + a.pod + ", " + b.pod)

	conv := "replicas-" + randomHex(4)
	const sandboxNS = "berth-sandboxes"
	conversationPod(t, sandboxNS, conv, "berth-test-python")
	step("conversation's pod ready")

	code, body := call(t, a.base, token, "POST", "/v1/runs", `{"conversation_id":"`+conv+`","workspace":"/workspace"}`)
	if code != http.StatusCreated {
		t.Fatalf("open run through %s: %d %s", a.pod, code, body)
	}
	var run struct{ ID, Sandbox string }
	if err := json.Unmarshal([]byte(body), &run); err != nil || run.ID == "" {
		t.Fatalf("open run: %v: %s", err, body)
	}
	r.run = run.ID
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// Where the run stood: its record (metadata only: the record
		// holds the run's secrets), its Lease, and what runs in the
		// conversation's pod.
		secrets, err := tryKubectl("", "-n", "berth", "get", "secrets", "-l", "berth.dev/store=v1", "-o",
			"custom-columns=NAME:.metadata.name,CREATED:.metadata.creationTimestamp,VERSION:.metadata.resourceVersion,DELETING:.metadata.deletionTimestamp")
		t.Logf("the run store's Secrets: %s %v", secrets, err)
		leases, err := tryKubectl("", "-n", "berth", "get", "leases", "-o", "yaml")
		t.Logf("Leases in namespace berth: %s %v", leases, err)
		ps, err := tryKubectl("", "-n", sandboxNS, "exec", conv, "--", "ps", "-eo", "pid,stat,lstart,args")
		t.Logf("processes in the conversation's pod: %s %v", ps, err)
	})
	if want := "kube://" + sandboxNS + "/" + conv + "/main"; run.Sandbox != want {
		t.Errorf("run placed in %q, want %q", run.Sandbox, want)
	}
	if h := r.holder(); h.identity != a.pod {
		t.Errorf("the run opened through %s is held by %q (%s), want the replica that opened it", a.pod, h.identity, h.address)
	}

	// The other replica forwards to the one serving the run; both see one
	// kernel. eval is exec level, so the first cell asks the operator:
	// someone must follow the run's events for a card to be drawn at all.
	cards, stopEvents := r.followCards(b)
	type answer struct {
		status int
		body   string
		err    error
	}
	first := make(chan answer, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a failure below does not leave the call waiting for its card
	go func() {
		status, body, err := tryCallContext(ctx, b.base, token, "POST", "/v1/runs/"+r.run+"/tools/eval", evalArgs("x = 41"))
		first <- answer{status, body, err}
	}()
	var c card
	select {
	case c = <-cards:
	case res := <-first:
		t.Fatalf("eval x = 41 through %s answered without asking the operator: %+v", b.pod, res)
	case <-time.After(wait):
		t.Fatalf("no permission card on the event stream through %s within %s", b.pod, wait)
	}
	if c.Kind != "permission" || c.Tool != "eval" {
		t.Fatalf("want a permission card for eval, got %+v", c)
	}
	if code, body := call(t, a.base, operator, "POST", fmt.Sprintf("/v1/runs/%s/cards/%d", r.run, c.N), `{"decision":"allow_run"}`); code != http.StatusOK {
		t.Fatalf("the operator's allow_run of card %d through %s: %d %s", c.N, a.pod, code, body)
	}
	res := <-first
	if res.err != nil || res.status != http.StatusOK {
		t.Fatalf("eval x = 41 through %s after the operator allowed it: %+v", b.pod, res)
	}
	r.expect(r.text("x = 41", res.body), "", "x = 41 through "+b.pod)
	// From here on nobody follows the events: a cell that asked again
	// would be refused at once.
	stopEvents()
	if h := r.holder(); h.identity != a.pod {
		t.Errorf("after a call through %s the run is held by %q, want still %s (a live owner's runs are forwarded to it, not taken)", b.pod, h.identity, a.pod)
	}
	r.expect(r.eval(a, "x + 1"), "42", "x + 1 through "+a.pod)
	step("x = 41 through the other replica (card allowed), 42")

	// A graceful stop: the owner detaches its runs and releases their
	// Leases; the next request's replica takes the run over.
	owner := r.holder().identity
	kubectl(t, "", "-n", "berth", "delete", "pod", owner, "--timeout=90s")
	if h := r.holder(); h.identity == owner {
		t.Errorf("the gracefully deleted %s still holds the run's Lease (renewed %s): a stopping replica must release its runs", owner, h.renewed)
	}
	step("owner " + owner + " deleted gracefully")
	text, via := r.evalAny("x + 1", gracefulMove)
	r.expect(text, "42", "x + 1 after "+owner+" was deleted (through "+via+")")
	r.heldByLive(owner)
	step("x + 1 = 42 after the graceful delete")

	// A rollout replaces both replicas, one at a time.
	before := r.pods()
	kubectl(t, "", "-n", "berth", "rollout", "restart", "deployment/berth")
	kubectl(t, "", "-n", "berth", "rollout", "status", "deployment/berth", "--timeout=180s")
	// rollout status is content once the old pods are terminating; they
	// still serve (and hold the run) until they have detached and exited.
	for _, p := range before {
		if out, err := tryKubectl("", "-n", "berth", "wait", "--for=delete", "pod/"+p, "--timeout=90s"); err != nil && !strings.Contains(err.Error(), "NotFound") {
			t.Fatalf("old replica %s not gone 90 s after the rollout: %v %s", p, err, out)
		}
	}
	step("rollout restart done, old replicas gone")
	text, via = r.evalAny("x + 2", gracefulMove)
	r.expect(text, "43", "x + 2 after the rollout (through "+via+")")
	r.heldByLive(before...)
	step("x + 2 = 43 after the rollout")

	// A crash: the owner's process is killed, it releases nothing, and the
	// run moves once the Lease lapses.
	owner = r.holder().identity
	killed := r.crash(owner)
	if killed {
		if h := r.holder(); h.identity != owner {
			t.Errorf("right after %s was killed the run's Lease is held by %q: a crashed replica cannot have released it", owner, h.identity)
		}
	}
	step("owner " + owner + " crashed")
	text, via = r.evalAny("x + 3", crashMove)
	r.expect(text, "44", "x + 3 after "+owner+" crashed (through "+via+")")
	r.heldByLive(owner)
	step("x + 3 = 44 after the crash")

	// Three moves later: still one kernel and one resident supervisor.
	residents, kernels, shims := runProcs(t, sandboxNS, conv)
	if len(residents) != 1 || len(kernels) != 1 {
		t.Errorf("before the close: want one resident supervisor and one kernel in the conversation's pod, got residents %q, kernels %q (berth's other processes %q)", residents, kernels, shims)
	}
	code, body, via = r.callAny("close the run", gracefulMove, "DELETE", "/v1/runs/"+r.run, "")
	if code != http.StatusNoContent {
		t.Fatalf("close the run through %s: %d %s", via, code, body)
	}
	deadline := time.Now().Add(closeGrace)
	for {
		residents, kernels, shims = runProcs(t, sandboxNS, conv)
		if len(residents) == 0 && len(kernels) == 0 && len(shims) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the run closed the conversation's pod still runs residents %q, kernels %q, berth's other processes %q", closeGrace, residents, kernels, shims)
		}
		time.Sleep(500 * time.Millisecond)
	}
	step("run closed, nothing left in the conversation's pod")
}

// replicas drives berth's replicas for one run.
type replicas struct {
	t     *testing.T
	token string
	run   string
}

// endpoint is one ready replica behind Service berth.
type endpoint struct {
	pod  string
	base string // http://IP:PORT
}

// endpoints lists the ready endpoints of Service berth. This cluster runs
// no kube-proxy, so the Service's ClusterIP does not route: a call
// "through the Service" picks one of its ready endpoints here, as
// kube-proxy would, from the Service's EndpointSlices.
func (r *replicas) endpoints() ([]endpoint, error) {
	out, err := tryKubectl("", "-n", "berth", "get", "endpointslices", "-l", "kubernetes.io/service-name=berth", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Ports []struct {
				Name *string
				Port *int32
			}
			Endpoints []struct {
				Addresses  []string
				Conditions struct{ Ready *bool }
				TargetRef  *struct{ Name string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("endpointslices of Service berth: %w", err)
	}
	var eps []endpoint
	for _, s := range list.Items {
		var port int32
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == "http" && p.Port != nil {
				port = *p.Port
			}
		}
		for _, e := range s.Endpoints {
			// An unset ready condition means ready (discovery.k8s.io/v1).
			if port == 0 || len(e.Addresses) == 0 || e.TargetRef == nil || (e.Conditions.Ready != nil && !*e.Conditions.Ready) {
				continue
			}
			eps = append(eps, endpoint{pod: e.TargetRef.Name, base: "http://" + e.Addresses[0] + ":" + strconv.Itoa(int(port))})
		}
	}
	slices.SortFunc(eps, func(a, b endpoint) int { return strings.Compare(a.pod, b.pod) })
	return eps, nil
}

// waitEndpoints waits until Service berth has n ready endpoints on n pods.
func (r *replicas) waitEndpoints(n int) []endpoint {
	r.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		eps, err := r.endpoints()
		if err == nil && len(eps) == n && eps[0].pod != eps[n-1].pod {
			return eps
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("Service berth has no %d ready endpoints after %s: %v %v", n, wait, eps, err)
		}
		time.Sleep(time.Second)
	}
}

// card is a card the run's event stream announced (questions.Card).
type card struct {
	N    int    `json:"n"`
	Kind string `json:"kind"`
	Tool string `json:"tool"`
}

// followCards follows the run's event stream through ep, from when it is
// connected (the replica serving the run counts a listener from then on),
// and sends the cards it opens. stop ends the stream and waits for the
// reader.
func (r *replicas) followCards(ep endpoint) (cards <-chan card, stop func()) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", ep.base+"/v1/runs/"+r.run+"/events", nil)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		r.t.Fatalf("the run's events through %s: %v", ep.pod, err)
	}
	sc := bufio.NewScanner(resp.Body)
	if resp.StatusCode != http.StatusOK || !sc.Scan() || sc.Text() != ": connected" {
		resp.Body.Close()
		cancel()
		r.t.Fatalf("the run's events through %s: %s, first line %q (%v); want 200 and \": connected\"", ep.pod, resp.Status, sc.Text(), sc.Err())
	}
	out := make(chan card, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		var event string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				event = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok && event == "card.opened" {
				var c card
				if json.Unmarshal([]byte(v), &c) == nil {
					select {
					case out <- c:
					default: // the test reads one card; the rest are not waited for
					}
				}
			}
		}
	}()
	return out, func() { cancel(); <-done }
}

// pods names berth's pods that exist now.
func (r *replicas) pods() []string {
	r.t.Helper()
	return strings.Fields(kubectl(r.t, "", "-n", "berth", "get", "pods", "-l", replicaSelector, "-o", "jsonpath={.items[*].metadata.name}"))
}

// eval runs a cell through one replica.
func (r *replicas) eval(ep endpoint, code string) string {
	r.t.Helper()
	status, body := call(r.t, ep.base, r.token, "POST", "/v1/runs/"+r.run+"/tools/eval", evalArgs(code))
	if status != http.StatusOK {
		r.t.Fatalf("eval %q through %s: %d %s", code, ep.pod, status, body)
	}
	return r.text(code, body)
}

// evalAny runs a cell through whichever ready endpoint answers (callAny).
// The cells are expressions without side effects, so a retry is safe.
func (r *replicas) evalAny(code string, within time.Duration) (text, via string) {
	r.t.Helper()
	status, body, via := r.callAny("eval "+code, within, "POST", "/v1/runs/"+r.run+"/tools/eval", evalArgs(code))
	if status != http.StatusOK {
		r.t.Fatalf("eval %q through %s: %d %s", code, via, status, body)
	}
	return r.text(code, body), via
}

func evalArgs(code string) string {
	b, _ := json.Marshal(map[string]any{"args": map[string]any{"code": code, "description": "keep a value across berth replicas"}})
	return string(b)
}

func (r *replicas) text(code, body string) string {
	r.t.Helper()
	text, isError, err := toolResult(body)
	if err != nil {
		r.t.Fatalf("eval %q: %v", code, err)
	}
	if isError {
		r.t.Fatalf("eval %q: tool error: %s", code, text)
	}
	return text
}

// expect fails unless the cell's text shows value (a word of its own), or
// shows nothing but notes when value is "".
func (r *replicas) expect(text, value, what string) {
	r.t.Helper()
	r.t.Logf("%s: %q", what, text)
	if value == "" {
		return
	}
	if !slices.Contains(strings.Fields(text), value) {
		r.t.Fatalf("%s = %q, want %s (the kernel kept its x)", what, text, value)
	}
	if strings.Contains(text, "lost") {
		r.t.Errorf("%s: the result says something was lost: %q", what, text)
	}
}

// callAny calls berth through a ready endpoint of Service berth, trying
// each in turn, until one answers with anything but 503 or a transport
// error, for up to within. Those two are what a client sees while a
// replica stops (its address still listed) or while the run moves
// between replicas.
func (r *replicas) callAny(what string, within time.Duration, method, path, body string) (int, string, string) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for attempt := 0; ; attempt++ {
		eps, err := r.endpoints()
		if err != nil {
			last = err.Error()
		}
		for i := range eps {
			ep := eps[(i+attempt)%len(eps)]
			code, resp, err := tryCall(ep.base, r.token, method, path, body)
			switch {
			case err != nil:
				last = fmt.Sprintf("%s: %v", ep.pod, err)
			case code == http.StatusServiceUnavailable:
				last = fmt.Sprintf("%s: %d %s", ep.pod, code, strings.TrimSpace(resp))
			default:
				return code, resp, ep.pod
			}
			r.t.Logf("%s: %s; trying again", what, last)
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: for %s no ready endpoint of Service berth answered but with 503 or a transport error; last: %s", what, within, last)
		}
		time.Sleep(time.Second)
	}
}

// lease is what the run's Lease says.
type lease struct {
	identity string // holderIdentity, "" when released
	address  string // where the holder serves (berth.dev/address)
	renewed  string
}

func (r *replicas) holder() lease {
	r.t.Helper()
	out := kubectl(r.t, "", "-n", "berth", "get", "lease", "berth-run-"+r.run, "-o", "json")
	var l struct {
		Metadata struct{ Annotations map[string]string }
		Spec     struct {
			HolderIdentity *string
			RenewTime      string
		}
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		r.t.Fatalf("Lease berth-run-%s: %v", r.run, err)
	}
	h := lease{address: l.Metadata.Annotations["berth.dev/address"], renewed: l.Spec.RenewTime}
	if l.Spec.HolderIdentity != nil {
		h.identity = *l.Spec.HolderIdentity
	}
	return h
}

// heldByLive fails unless the run's Lease names one of berth's pods now
// running and none of gone.
func (r *replicas) heldByLive(gone ...string) {
	r.t.Helper()
	h, pods := r.holder(), r.pods()
	if !slices.Contains(pods, h.identity) || slices.Contains(gone, h.identity) {
		r.t.Errorf("the run's Lease is held by %q (%s), want one of the running replicas %v (not %v)", h.identity, h.address, pods, gone)
		return
	}
	r.t.Logf("the run is held by %s (%s)", h.identity, h.address)
}

// crash ends berth in pod as a crash would, releasing nothing. Through
// the node's containerd it freezes berth's container (no renewal goes
// out, no signal is handled), force-deletes the pod, so that the kubelet
// does not start berth again in it under the same name (that berth would
// take the run back as the same replica: a restart, not a crash), then
// kills it with SIGKILL, which ends it before it could run its SIGTERM
// handler. Without the node's containerd ($BERTH_KUBE_CONTAINERD, another
// cluster) the forced delete alone stands in: the kubelet then sends
// SIGTERM and SIGKILL 2 s later, and berth may release its runs in
// between. It says whether berth was killed through containerd.
func (r *replicas) crash(pod string) bool {
	r.t.Helper()
	sock := os.Getenv("BERTH_KUBE_CONTAINERD")
	id := strings.TrimSpace(kubectl(r.t, "", "-n", "berth", "get", "pod", pod, "-o", `jsonpath={.status.containerStatuses[?(@.name=="berth")].containerID}`))
	id, onContainerd := strings.CutPrefix(id, "containerd://")
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || !onContainerd {
		r.t.Logf("no containerd socket for pod %s (BERTH_KUBE_CONTAINERD %q, container %q): a forced delete stands in for the crash", pod, sock, id)
		kubectl(r.t, "", "-n", "berth", "delete", "pod", pod, "--grace-period=0", "--force")
		return false
	}
	ctr := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"-a", sock, "-n", "k8s.io", "tasks"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr tasks %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ctr("pause", id); err != nil {
		r.t.Fatalf("freeze berth in %s: %v", pod, err)
	}
	kubectl(r.t, "", "-n", "berth", "delete", "pod", pod, "--grace-period=0", "--force")
	if err := ctr("kill", "-s", "SIGKILL", id); err != nil {
		r.t.Fatalf("kill berth in %s: %v", pod, err)
	}
	// runc thaws a container it kills, so the task is most likely thawed,
	// stopped or gone already ("not paused", "stopped", "not found").
	if err := ctr("resume", id); err != nil {
		r.t.Logf("thaw the killed berth in %s: %v", pod, err)
	}
	return true
}

// runProcs lists what berth runs in the conversation's pod: the run's
// resident supervisors (berth-shim resident), Python kernels, and every
// other process of berth's (a berth-shim, or a shell starting one).
// Zombies do not count: the pod's init is sleep, which reaps nothing.
func runProcs(t *testing.T, ns, pod string) (residents, kernels, others []string) {
	t.Helper()
	out := kubectl(t, "", "-n", ns, "exec", pod, "--", "ps", "-eo", "stat=,comm=,args=")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || strings.HasPrefix(f[0], "Z") {
			continue
		}
		comm, args := f[1], strings.Join(f[2:], " ")
		switch {
		case comm == "berth-shim" && len(f) > 3 && f[3] == "resident":
			residents = append(residents, args)
		case strings.HasPrefix(comm, "python") && strings.Contains(args, "ipykernel_launcher"):
			kernels = append(kernels, args)
		case strings.Contains(args, "berth-shim"):
			others = append(others, args)
		}
	}
	return residents, kernels, others
}

// followLogs follows the logs of every pod matching selector in ns, from
// when its container starts, and of the containers the kubelet restarts
// in it, and logs them when the test failed: pods this test deletes take
// their logs with them.
func followLogs(t *testing.T, ns, selector string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	logs := map[string]*bytes.Buffer{}
	var order []string
	// follow follows each container pod runs in turn (the kubelet
	// restarts a killed one in the same pod) until the pod is gone.
	follow := func(pod string) {
		defer wg.Done()
		var last string
		for ctx.Err() == nil {
			id, err := tryKubectl("", "-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
			if err != nil && strings.Contains(err.Error(), "NotFound") {
				return
			}
			if id = strings.TrimSpace(id); err == nil && id != "" && id != last {
				cmd := exec.CommandContext(ctx, "kubectl", "-n", ns, "logs", "-f", "pod/"+pod)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				cmd.Run()
				mu.Lock()
				if last != "" {
					fmt.Fprintf(logs[pod], "--- container %s (the kubelet restarted it) ---\n", id)
				}
				logs[pod].Write(out.Bytes())
				mu.Unlock()
				last = id
				continue
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			out, err := tryKubectl("", "-n", ns, "get", "pods", "-l", selector, "-o", "jsonpath={.items[*].metadata.name}")
			if err == nil {
				for _, pod := range strings.Fields(out) {
					mu.Lock()
					_, seen := logs[pod]
					if !seen {
						logs[pod] = &bytes.Buffer{}
						order = append(order, pod)
						wg.Add(1)
						go follow(pod)
					}
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if !t.Failed() {
			return
		}
		for _, pod := range order {
			t.Logf("logs of %s:\n%s", pod, logs[pod])
		}
	})
}
