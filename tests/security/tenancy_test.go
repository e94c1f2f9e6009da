package security

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// tenantContainer starts a container of image labelled with labels
// ("KEY=VALUE"), writes secret into /work/secret.txt in it, and returns
// its id; the test's cleanup removes it.
func tenantContainer(t *testing.T, image, secret string, labels ...string) string {
	t.Helper()
	args := []string{"run", "-d", "--network", "none"}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	id := docker(t, append(args, image, "sleep", "infinity")...)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
	docker(t, "exec", id, "sh", "-c", fmt.Sprintf("mkdir -p /work && printf '%%s\\n' %q > /work/secret.txt", secret))
	return id
}

// TestSandboxesBelongToTenants: on a berth serving tenants a and b
// (hosted, a tokens file), tenant b cannot open a run in tenant a's
// container by naming a's conversation id, neither with auto nor with
// docker://ID: auto answers 404 sandbox_not_found and the explicit
// reference 403 placement_refused, each naming the labels b's container
// would need and nothing of a's. b's own container of the same
// conversation id is found instead, and b reads its own file there, not
// a's. a's runs work, and a container without a tenant label is no one's.
func TestSandboxesBelongToTenants(t *testing.T) {
	image := needDocker(t)
	conv := "c1-" + newToken(t)[:12]
	const secretA = "tenant a's secret"
	idA := tenantContainer(t, image, secretA, "berth.conversation="+conv, "berth.tenant=a")
	tn := startTenants(t)
	s := tn.s
	auto := fmt.Sprintf(`{"conversation_id":%q,"workspace":"/work"}`, conv)
	explicit := func(id string) string {
		return fmt.Sprintf(`{"sandbox":"docker://%s","conversation_id":%q,"workspace":"/work"}`, id, conv)
	}
	// clean fails the test if refusal r, of a request that named ref,
	// shows anything of a's container beyond ref itself.
	clean := func(what, ref string, r reply) {
		t.Helper()
		body := strings.ReplaceAll(string(r.body), "docker://"+ref, "docker://REF")
		for _, leak := range []string{idA[:12], secretA, "tenant=a"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: the refusal shows %q of tenant a's container: %s", what, leak, r)
			}
		}
	}

	r := s.do("POST", "/v1/runs", tn.b, auto)
	if r.status != http.StatusNotFound || r.code() != "sandbox_not_found" || !strings.Contains(string(r.body), "berth.tenant=b") {
		t.Errorf("tenant b, auto with a's conversation: want 404 sandbox_not_found naming berth.tenant=b, got %s", r)
	}
	clean("auto", "", r)
	if r.status == http.StatusCreated {
		var run struct{ ID string }
		r.decode(t, &run)
		if res, _ := s.call(tn.b, run.ID, "read", `{"path":"secret.txt"}`); strings.Contains(res.Text(), secretA) {
			t.Errorf("tenant b read tenant a's file in a's container: %q", res.Text())
		}
	}
	for _, ref := range []string{idA, idA[:12]} {
		r := s.do("POST", "/v1/runs", tn.b, explicit(ref))
		if r.status != http.StatusForbidden || r.code() != "placement_refused" || !strings.Contains(string(r.body), "berth.conversation="+conv+" and berth.tenant=b") {
			t.Errorf("tenant b, docker://%s with a's conversation: want 403 placement_refused naming both labels, got %s", ref, r)
		}
		clean("docker://"+ref, ref, r)
	}
	var list struct{ Runs []struct{ ID string } }
	s.do("GET", "/v1/runs", tn.b, "").decode(t, &list)
	if len(list.Runs) != 0 {
		t.Fatalf("tenant b has runs after its refusals: %+v", list.Runs)
	}

	// b's own container of the same conversation id is b's, and only it.
	const secretB = "tenant b's own file"
	idB := tenantContainer(t, image, secretB, "berth.conversation="+conv, "berth.tenant=b")
	runB := s.open(tn.b, auto)
	var info struct{ Sandbox string }
	s.do("GET", "/v1/runs/"+runB, tn.b, "").decode(t, &info)
	if info.Sandbox != "docker://"+idB {
		t.Errorf("tenant b's run of conversation %s is in %s, want its own container docker://%s", conv, info.Sandbox, idB)
	}
	res, rr := s.call(tn.b, runB, "read", `{"path":"secret.txt"}`)
	if rr.status != http.StatusOK || !strings.Contains(res.Text(), secretB) || strings.Contains(res.Text(), secretA) {
		t.Errorf("tenant b reads in its own run: want %q, got %s / %s", secretB, rr, res.Text())
	}

	// a's own container, by auto and by reference.
	runA := s.open(tn.a, auto)
	s.do("GET", "/v1/runs/"+runA, tn.a, "").decode(t, &info)
	if info.Sandbox != "docker://"+idA {
		t.Errorf("tenant a's run is in %s, want docker://%s", info.Sandbox, idA)
	}
	res, rr = s.call(tn.a, runA, "read", `{"path":"secret.txt"}`)
	if rr.status != http.StatusOK || !strings.Contains(res.Text(), secretA) {
		t.Errorf("tenant a cannot read its own file: %s / %s", rr, res.Text())
	}
	s.open(tn.a, explicit(idA))

	// A container labelled with the conversation alone belongs to no
	// tenant here.
	bareConv := "c2-" + newToken(t)[:12]
	bare := tenantContainer(t, image, "nobody's", "berth.conversation="+bareConv)
	r = s.do("POST", "/v1/runs", tn.a, fmt.Sprintf(`{"sandbox":"docker://%s","conversation_id":%q,"workspace":"/work"}`, bare, bareConv))
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "berth.tenant=a") {
		t.Errorf("tenant a, a container without a tenant label: want 403 naming berth.tenant=a, got %s", r)
	}
	r = s.do("POST", "/v1/runs", tn.a, fmt.Sprintf(`{"conversation_id":%q,"workspace":"/work"}`, bareConv))
	if r.status != http.StatusNotFound || r.code() != "sandbox_not_found" {
		t.Errorf("tenant a, auto to a container without a tenant label: want 404 sandbox_not_found, got %s", r)
	}
}

// TestOneTenantNeedsNoTenantLabel: a berth with one harness tenant (a
// tokens file with one harness line and an operator) places runs by the
// conversation label alone, as before, by auto and by reference.
func TestOneTenantNeedsNoTenantLabel(t *testing.T) {
	image := needDocker(t)
	conv := "c-" + newToken(t)[:12]
	id := tenantContainer(t, image, "solo's file", "berth.conversation="+conv)
	harness, op := newToken(t), newToken(t)
	file := writeFile(t, t.TempDir(), "tokens", tokenLine(harness, "solo", "harness")+tokenLine(op, "*", "operator"), 0o600)
	s := startServe(t, serveOpts{args: []string{"--tokens-file", file}})
	run := s.open(harness, fmt.Sprintf(`{"conversation_id":%q,"workspace":"/work"}`, conv))
	res, r := s.call(harness, run, "read", `{"path":"secret.txt"}`)
	if r.status != http.StatusOK || !strings.Contains(res.Text(), "solo's file") {
		t.Errorf("read in the one tenant's run: %s / %s", r, res.Text())
	}
	s.open(harness, fmt.Sprintf(`{"sandbox":"docker://%s","conversation_id":%q,"workspace":"/work"}`, id, conv))
}
