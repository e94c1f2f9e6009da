package security

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// tenants is a berth serve with a tokens file: tenants a and b, each with
// a harness token, and an operator for every tenant.
type tenants struct {
	s                *server
	a, b, op, metric string
}

func startTenants(t *testing.T, args ...string) *tenants {
	t.Helper()
	tn := &tenants{a: newToken(t), b: newToken(t), op: newToken(t), metric: newToken(t)}
	file := writeFile(t, t.TempDir(), "tokens",
		"# tenant a and b are two customers of one platform\n"+
			tokenLine(tn.a, "a", "harness")+
			tokenLine(tn.b, "b", "harness")+
			tokenLine(tn.op, "*", "operator")+
			tokenLine(tn.metric, "*", "metrics"), 0o600)
	tn.s = startServe(t, serveOpts{args: append([]string{"--tokens-file", file}, args...)})
	return tn
}

// routes are every route that names a run, with a body where it takes
// one; %s is the run id.
var routes = []struct{ method, path, body string }{
	{"GET", "/v1/runs/%s", ""},
	{"GET", "/v1/runs/%s/tools", ""},
	{"POST", "/v1/runs/%s/tools/read", `{"args":{"path":"secret.txt"}}`},
	{"GET", "/v1/runs/%s/events", ""},
	{"GET", "/v1/runs/%s/cards", ""},
	{"POST", "/v1/runs/%s/cards/1", `{"decision":"approve"}`},
	{"GET", "/v1/runs/%s/resources", ""},
	{"GET", "/v1/runs/%s/workers", ""},
	{"POST", "/v1/runs/%s/workers/w1", `{"status":"done","result":"x"}`},
	{"DELETE", "/v1/runs/%s", ""},
}

// TestTenantsDoNotSeeEachOther: tenant b, holding a valid harness token,
// gets on every route of tenant a's run exactly the answer it gets for a
// run that does not exist (404 unknown_run, the same message but for the
// id), does not see the run in its list, and cannot read a's file; a and
// the operator still can, and a's run is still open at the end.
func TestTenantsDoNotSeeEachOther(t *testing.T) {
	tn := startTenants(t, "--mode", "local")
	s := tn.s
	ws := t.TempDir()
	writeFile(t, ws, "secret.txt", "tenant a's secret\n", 0o644)
	run := s.open(tn.a, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"vibe":true}`, ws))
	const missing = "0123456789abcdef0123456789abcdef"

	for _, rt := range routes {
		foreign := s.do(rt.method, fmt.Sprintf(rt.path, run), tn.b, rt.body)
		absent := s.do(rt.method, fmt.Sprintf(rt.path, missing), tn.b, rt.body)
		if foreign.status != http.StatusNotFound || foreign.code() != "unknown_run" {
			t.Errorf("tenant b, %s %s of a's run: want 404 unknown_run, got %s", rt.method, rt.path, foreign)
		}
		if got, want := strings.ReplaceAll(string(foreign.body), run, "ID"), strings.ReplaceAll(string(absent.body), missing, "ID"); got != want || foreign.status != absent.status {
			t.Errorf("%s %s tells a foreign run from a missing one:\nforeign: %d %s\nmissing: %d %s", rt.method, rt.path, foreign.status, got, absent.status, want)
		}
		if strings.Contains(string(foreign.body), "secret") {
			t.Errorf("%s %s leaked a's file to b: %s", rt.method, rt.path, foreign)
		}
	}

	var list struct {
		Runs []struct{ ID string }
	}
	s.do("GET", "/v1/runs", tn.b, "").decode(t, &list)
	if len(list.Runs) != 0 {
		t.Errorf("tenant b lists runs of others: %+v", list.Runs)
	}
	for who, tok := range map[string]string{"a": tn.a, "operator": tn.op} {
		s.do("GET", "/v1/runs", tok, "").decode(t, &list)
		if len(list.Runs) != 1 || list.Runs[0].ID != run {
			t.Errorf("%s's list: want a's run %s, got %+v", who, run, list.Runs)
		}
	}
	res, r := s.call(tn.a, run, "read", `{"path":"secret.txt"}`)
	if r.status != 200 || !strings.Contains(res.Text(), "tenant a's secret") {
		t.Errorf("tenant a cannot read its own file after b's attempts: %s / %s", r, res.Text())
	}
	// The metrics credential reads metrics and nothing else; the
	// harness credential does not read metrics.
	if r := s.do("GET", "/metrics", tn.metric, ""); r.status != 200 {
		t.Errorf("metrics token: GET /metrics: %d", r.status)
	}
	if r := s.do("GET", "/v1/runs/"+run, tn.metric, ""); r.status == 200 {
		t.Errorf("the metrics token reads runs: %s", r)
	}
	if r := s.do("GET", "/metrics", tn.a, ""); r.status == 200 {
		t.Errorf("a harness token reads /metrics")
	}
	if r := s.do("GET", "/v1/runs", "not-a-token", ""); r.status != http.StatusUnauthorized {
		t.Errorf("a wrong token: want 401, got %s", r)
	}
}
