package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/tools/permission"
)

// The credentials of the tenant tests: two harnesses of tenants a and b,
// an operator of every tenant, an operator of tenant b, and a metrics
// scraper.
const (
	tokA       = "harness-a-token"
	tokB       = "harness-b-token"
	tokOp      = "operator-of-all-token"
	tokOpB     = "operator-of-b-token"
	tokMetrics = "metrics-token"
)

func hashLine(tok, tenant, scopes string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:]) + " " + tenant + " " + scopes + "\n"
}

// tenantCreds parses a tokens file as berth serve --tokens-file does.
func tenantCreds(t *testing.T) []httpapi.Credential {
	t.Helper()
	file := "# berth tokens: <sha256> <tenant> <scopes>\n\n" +
		hashLine(tokA, "a", "harness") +
		hashLine(tokB, "b", "harness") +
		"  " + hashLine(tokOp, "*", "operator,metrics") +
		hashLine(tokOpB, "b", "operator") +
		hashLine(tokMetrics, "*", "metrics")
	creds, err := httpapi.ParseTokens(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

func TestParseTokens(t *testing.T) {
	creds, err := httpapi.ParseTokens(strings.NewReader(hashLine("t", "acme", "harness,metrics,harness")))
	if err != nil || len(creds) != 1 {
		t.Fatalf("ParseTokens: %v %v", creds, err)
	}
	if c := creds[0]; c.Hash != sha256.Sum256([]byte("t")) || c.Tenant != "acme" || !slices.Equal(c.Scopes, []httpapi.Scope{httpapi.ScopeHarness, httpapi.ScopeMetrics}) {
		t.Errorf("credential %+v", c)
	}
	bad := []struct{ name, file, want string }{
		{"empty", "# nothing\n\n", "no credentials"},
		{"plain token", "s3cret acme harness\n", "not a SHA-256"},
		{"short hash", "abcd acme harness\n", "not a SHA-256"},
		{"two fields", hashLine("t", "acme", "")[:70] + "\n", "want 3"},
		{"unknown scope", hashLine("t", "acme", "harness,root"), `unknown scope "root"`},
		{"harness of every tenant", hashLine("t", "*", "harness"), "belong to one tenant"},
		{"duplicate", hashLine("t", "a", "harness") + hashLine("t", "b", "operator"), "line 1"},
		{"long tenant", hashLine("t", strings.Repeat("x", httpapi.MaxTenantLen+1), "harness"), "more than"},
	}
	for _, tt := range bad {
		if _, err := httpapi.ParseTokens(strings.NewReader(tt.file)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// head sends a request and reads the body unless the response is an
// event stream, which it closes after the headers.
func (rg *rig) head(method, path, tok, body string) response {
	rg.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, rg.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		rg.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return response{status: resp.StatusCode, header: resp.Header}
	}
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestCrossTenant404: on every route, another tenant's run answers 404
// unknown_run with the very body a missing id gets (no oracle), while the
// owner reaches it and an operator of every tenant sees it.
func TestCrossTenant404(t *testing.T) {
	rg := newAskRigWith(t, controller.Config{Mode: permission.ModeLocal, Tools: []controller.Binder{controller.FileTools, controller.VibeTools(controller.VibeConfig{})}},
		httpapi.Options{Credentials: tenantCreds(t)})
	id := rg.openAs(tokA, `{"sandbox":"host","workspace":"`+rg.dir+`","vibe":true}`)
	missing := strings.Repeat("0", 32)
	routes := []struct{ method, path, body string }{
		{"GET", "", ""},
		{"GET", "/tools", ""},
		{"POST", "/tools/read", `{"args":{"path":"."}}`},
		{"GET", "/events", ""},
		{"GET", "/cards", ""},
		{"POST", "/cards/1", `{"skip":true}`},
		{"GET", "/resources", ""},
		{"GET", "/workers", ""},
		{"POST", "/workers/w1", `{"status":"running","result":"x"}`},
		{"DELETE", "", ""}, // last: the owner's DELETE closes the run
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			other := rg.head(rt.method, "/v1/runs/"+id+rt.path, tokB, rt.body)
			if other.status != 404 || other.errorCode(t) != "unknown_run" {
				t.Fatalf("tenant b on tenant a's run: %d %s, want 404 unknown_run", other.status, other.body)
			}
			none := rg.head(rt.method, "/v1/runs/"+missing+rt.path, tokB, rt.body)
			if got := strings.ReplaceAll(string(other.body), id, missing); got != string(none.body) {
				t.Errorf("another tenant's run and a missing one answer differently:\n%s\n%s", other.body, none.body)
			}
			if rt.method == "GET" {
				if r := rg.head(rt.method, "/v1/runs/"+id+rt.path, tokOpB, ""); r.status != 404 || r.errorCode(t) != "unknown_run" {
					t.Errorf("operator of tenant b on tenant a's run: %d %s", r.status, r.body)
				}
				if r := rg.head(rt.method, "/v1/runs/"+id+rt.path, tokOp, ""); r.status != 200 {
					t.Errorf("operator of every tenant: %d %s", r.status, r.body)
				}
			}
			own := rg.head(rt.method, "/v1/runs/"+id+rt.path, tokA, rt.body)
			if own.status == 404 && own.errorCode(t) == "unknown_run" || own.status >= 500 {
				t.Errorf("tenant a on its own run: %d %s", own.status, own.body)
			}
			if rt.method == "DELETE" && own.status != http.StatusNoContent {
				t.Errorf("tenant a's DELETE after tenant b's: %d %s (b's must not have closed it)", own.status, own.body)
			}
		})
	}
}

// TestListFiltering: GET /v1/runs lists the caller's tenant's runs; an
// operator of every tenant lists all, with their tenants.
func TestListFiltering(t *testing.T) {
	rg := newRig(t, httpapi.Options{Credentials: tenantCreds(t)}, false)
	a1 := rg.openAs(tokA, `{"sandbox":"host"}`)
	b1 := rg.openAs(tokB, `{"sandbox":"host"}`)
	a2 := rg.openAs(tokA, `{"sandbox":"host"}`)
	list := func(tok string) (ids, tenants []string) {
		t.Helper()
		r := rg.do("GET", "/v1/runs", tok, "")
		var l struct{ Runs []controller.RunInfo }
		if err := json.Unmarshal(r.body, &l); err != nil || r.status != 200 {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		for _, ri := range l.Runs {
			ids, tenants = append(ids, ri.ID), append(tenants, ri.Tenant)
		}
		return ids, tenants
	}
	for _, tt := range []struct {
		name, tok string
		want      []string
	}{
		{"tenant a", tokA, []string{a1, a2}},
		{"tenant b", tokB, []string{b1}},
		{"operator of b", tokOpB, []string{b1}},
		{"operator of all", tokOp, []string{a1, b1, a2}},
	} {
		if got, _ := list(tt.tok); !slices.Equal(got, tt.want) {
			t.Errorf("%s lists %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, tenants := list(tokOp); !slices.Equal(tenants, []string{"a", "b", "a"}) {
		t.Errorf("the operator's list shows tenants %v", tenants)
	}
}

// TestScopes: each credential reaches only the routes of its scopes, and
// the refusal closes the connection.
func TestScopes(t *testing.T) {
	rg := newRig(t, httpapi.Options{Credentials: tenantCreds(t)}, false)
	id := rg.openAs(tokA, `{"sandbox":"host"}`)
	run := "/v1/runs/" + id
	tests := []struct {
		name, method, path, tok, body string
		status                        int
	}{
		{"operator opens a run", "POST", "/v1/runs", tokOp, `{"sandbox":"host"}`, 403},
		{"operator calls a tool", "POST", run + "/tools/read", tokOp, `{"args":{"path":"a"}}`, 403},
		{"operator closes a run", "DELETE", run, tokOp, "", 403},
		{"operator reports a worker", "POST", run + "/workers/w1", tokOp, `{"status":"done"}`, 403},
		{"metrics lists runs", "GET", "/v1/runs", tokMetrics, "", 403},
		{"metrics answers a card", "POST", run + "/cards/1", tokMetrics, `{"skip":true}`, 403},
		{"harness scrapes metrics", "GET", "/metrics", tokA, "", 403},
		{"operator of b scrapes metrics", "GET", "/metrics", tokOpB, "", 403},
		{"metrics scrapes metrics", "GET", "/metrics", tokMetrics, "", 200},
		{"operator lists runs", "GET", "/v1/runs", tokOp, "", 200},
		{"operator reads a run", "GET", run, tokOp, "", 200},
		{"harness calls a tool", "POST", run + "/tools/read", tokA, `{"args":{"path":"a"}}`, 200},
	}
	for _, tt := range tests {
		r := rg.do(tt.method, tt.path, tt.tok, tt.body)
		if r.status != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, r.status, r.body, tt.status)
			continue
		}
		if tt.status == 403 && (r.errorCode(t) != "missing_scope" || !r.close) {
			t.Errorf("%s: %s (closing: %v), want missing_scope and Connection: close", tt.name, r.body, r.close)
		}
	}
}

// TestNoSelfApproval: the harness that made a call cannot approve its
// permission card — the attack of an approved cell that found the token
// and POSTed allow_run — while an operator can; question cards stay
// answerable by the harness.
func TestNoSelfApproval(t *testing.T) {
	rg := newAskRigWith(t, controller.Config{}, httpapi.Options{Credentials: tenantCreds(t)})
	id := rg.openAs(tokA, `{"sandbox":"host","workspace":"`+rg.dir+`"}`)
	ev := rg.subscribeAs(tokA, id, "")
	cards := "/v1/runs/" + id + "/cards/"

	done := rg.callAs(tokA, id, "write", `{"args":{"path":"self.txt","content":"x"}}`)
	card := ev.next("card.opened")
	if card.data["kind"] != "permission" {
		t.Fatalf("card %+v", card.data)
	}
	n := formatInt(int(card.data["n"].(float64)))
	for _, d := range []string{"allow_run", "approve", "deny"} {
		r := rg.do("POST", cards+n, tokA, `{"decision":"`+d+`"}`)
		if r.status != 403 || r.errorCode(t) != "operator_required" || !strings.Contains(string(r.body), "operator must answer it") {
			t.Fatalf("the harness decides %s on its own card: %d %s, want 403 operator_required", d, r.status, r.body)
		}
	}
	if r := rg.do("GET", "/v1/runs/"+id+"/cards", tokA, ""); !strings.Contains(string(r.body), `"n":`+n) {
		t.Fatalf("the card closed after the harness's refused answers: %s", r.body)
	}
	if r := rg.do("POST", cards+n, tokOpB, `{"decision":"approve"}`); r.status != 404 || r.errorCode(t) != "unknown_run" {
		t.Errorf("operator of another tenant: %d %s", r.status, r.body)
	}
	if r := rg.do("POST", cards+n, tokOp, `{"decision":"approve"}`); r.status != 200 {
		t.Fatalf("operator approves: %d %s", r.status, r.body)
	}
	if r := wait(t, done); r.status != 200 || r.isError {
		t.Fatalf("approved write: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(rg.dir, "self.txt")); err != nil {
		t.Fatalf("approved write wrote nothing: %v", err)
	}

	// Question cards: the harness relays them to its user and answers.
	for _, tok := range []string{tokA, tokOp} {
		done = rg.callAs(tokA, id, "ask_user", `{"args":{"question":"Ship it?","options":[{"label":"yes"},{"label":"no"}]}}`)
		card = ev.next("card.opened")
		if card.data["kind"] != "question" {
			t.Fatalf("card %+v", card.data)
		}
		n = formatInt(int(card.data["n"].(float64)))
		if r := rg.do("POST", cards+n, tok, `{"choice":["yes"]}`); r.status != 200 {
			t.Fatalf("answer a question card: %d %s", r.status, r.body)
		}
		if r := wait(t, done); !strings.Contains(r.text, `Chose: "yes"`) {
			t.Fatalf("ask_user: %+v", r)
		}
	}
}

// TestNoSelfApprovalByRace: a harness that answers the card number its
// own next call will draw, the card opening between the answer's arrival
// and its hand-over to the port (the hook puts it exactly there, no
// timing loop), is refused, and the call is left to the operator. Before
// the rights were checked where the card is found, the harness's
// allow_run answered a card that was not yet open when its kind was
// looked up.
func TestNoSelfApprovalByRace(t *testing.T) {
	rg := newAskRigWith(t, controller.Config{}, httpapi.Options{Credentials: tenantCreds(t)})
	id := rg.openAs(tokA, `{"sandbox":"host","workspace":"`+rg.dir+`"}`)
	ev := rg.subscribeAs(tokA, id, "")
	var done <-chan callResult
	opened := 0
	defer httpapi.SetTestHookBeforeAnswer(func(int) {
		if done != nil {
			return
		}
		done = rg.callAs(tokA, id, "write", `{"args":{"path":"race.txt","content":"x"}}`)
		opened = int(ev.next("card.opened").data["n"].(float64))
	})()
	// Cards count from 1: the harness knows its call will draw card 1.
	r := rg.do("POST", "/v1/runs/"+id+"/cards/1", tokA, `{"decision":"allow_run"}`)
	if r.status != 403 || r.errorCode(t) != "operator_required" {
		t.Fatalf("the harness answers the card its own call opens: %d %s, want 403 operator_required", r.status, r.body)
	}
	// A question's answer sent the same way reaches the hook, and the port
	// refuses it under the lock that finds the (permission) card.
	r = rg.do("POST", "/v1/runs/"+id+"/cards/1", tokA, `{"skip":true}`)
	if r.status != 403 || r.errorCode(t) != "operator_required" {
		t.Fatalf("the harness skips the permission card that opened under it: %d %s, want 403 operator_required", r.status, r.body)
	}
	if done == nil || opened != 1 {
		t.Fatalf("the hook did not open card 1 (opened %d)", opened)
	}
	if _, err := os.Stat(filepath.Join(rg.dir, "race.txt")); err == nil {
		t.Fatal("the harness's own answer let its write run")
	}
	if r := rg.do("POST", "/v1/runs/"+id+"/cards/1", tokOp, `{"decision":"deny"}`); r.status != 200 {
		t.Fatalf("the operator denies: %d %s", r.status, r.body)
	}
	if r := wait(t, done); !r.isError {
		t.Fatalf("denied write: %+v", r)
	}
}

// TestTenantCaps: a tenant at its cap of open runs or of calls in flight
// is answered 429 too_many, saying what to close or wait for; another
// tenant is not held back.
func TestTenantCaps(t *testing.T) {
	rg := newRigWith(t, controller.Config{MaxRunsPerTenant: 1, MaxCallsPerTenant: 1}, httpapi.Options{Credentials: tenantCreds(t)})
	a := rg.openAs(tokA, `{"sandbox":"host"}`)
	r := rg.do("POST", "/v1/runs", tokA, `{"sandbox":"host"}`)
	if r.status != http.StatusTooManyRequests || r.errorCode(t) != "too_many" || !strings.Contains(string(r.body), "DELETE /v1/runs/") {
		t.Fatalf("tenant a's second run: %d %s, want 429 too_many naming what to close", r.status, r.body)
	}
	b := rg.openAs(tokB, `{"sandbox":"host"}`)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", rg.srv.URL+"/v1/runs/"+a+"/tools/block", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+tokA)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-blockStarted
	r = rg.do("POST", "/v1/runs/"+a+"/tools/read", tokA, `{"args":{"path":"x"}}`)
	if r.status != http.StatusTooManyRequests || r.errorCode(t) != "too_many" || !strings.Contains(string(r.body), "wait for a call to return") {
		t.Errorf("tenant a's second call in flight: %d %s, want 429 too_many", r.status, r.body)
	}
	if r := rg.do("POST", "/v1/runs/"+b+"/tools/read", tokB, `{"args":{"path":"x"}}`); r.status != 200 {
		t.Errorf("tenant b's call while a is at its cap: %d %s", r.status, r.body)
	}
	if r.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After: %v", r.header)
	}
	cancel()
	<-done
	// The call outlives its client: closing the run ends it.
	if r := rg.do("DELETE", "/v1/runs/"+a, tokA, ""); r.status != http.StatusNoContent {
		t.Fatalf("close: %d %s", r.status, r.body)
	}
	<-ctxSeen
	rg.openAs(tokA, `{"sandbox":"host"}`) // a slot again
}

// TestRunExpired: an idle run expires; its tenant is told run_expired
// (open a new run) on every route, another tenant still unknown_run.
func TestRunExpired(t *testing.T) {
	rg := newRigWith(t, controller.Config{IdleExpiry: 100 * time.Millisecond}, httpapi.Options{Credentials: tenantCreds(t)})
	id := rg.openAs(tokA, `{"sandbox":"host"}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := rg.do("GET", "/v1/runs/"+id, tokA, "")
		if r.status == 404 {
			if r.errorCode(t) != "run_expired" || !strings.Contains(string(r.body), "open a new run") {
				t.Fatalf("expired run: %s, want run_expired", r.body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not expire within 10 s of 100 ms idle expiry: %d %s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := rg.do("POST", "/v1/runs/"+id+"/tools/read", tokA, `{"args":{"path":"x"}}`); r.status != 404 || r.errorCode(t) != "run_expired" {
		t.Errorf("call on the expired run: %d %s", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs/"+id, tokB, ""); r.status != 404 || r.errorCode(t) != "unknown_run" {
		t.Errorf("tenant b on a's expired run: %d %s, want unknown_run", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs", tokA, ""); strings.Contains(string(r.body), id) {
		t.Errorf("the expired run is still listed: %s", r.body)
	}
}
