package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"berth.dev/berth/controller/httpapi"
)

// TestReadyChecks: /readyz is 503 naming each failing check, while /livez
// and /healthz stay 200; a storm of probes runs the checks once per
// ReadyKeep, not once per probe.
func TestReadyChecks(t *testing.T) {
	var calls atomic.Int32
	rg := newRig(t, httpapi.Options{Ready: []httpapi.ReadyCheck{
		{Name: "run store", Check: func(context.Context) error { calls.Add(1); return nil }},
		{Name: "engine docker", Check: func(context.Context) error { return errors.New("connection refused") }},
	}}, false)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rg.do("GET", "/readyz", "", "")
			if r.status != http.StatusServiceUnavailable || string(r.body) != "not ready: engine docker: connection refused" {
				t.Errorf("/readyz: %d %q; want 503 naming the engine", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n < 1 || n > 2 {
		t.Errorf("20 probes at once ran the store check %d times; want one round (two if ReadyKeep passed between)", n)
	}
	for _, p := range []string{"/livez", "/healthz"} {
		if r := rg.do("GET", p, "", ""); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "ok" {
			t.Errorf("%s while not ready: %d %q; want 200 ok", p, r.status, r.body)
		}
	}
}

// tokenTable is an Authenticator for the test: each token's outcome.
type tokenTable map[string]struct {
	cred httpapi.Credential
	err  error
}

func (tt tokenTable) Authenticate(_ context.Context, tok string) (httpapi.Credential, error) {
	e, ok := tt[tok]
	if !ok {
		return httpapi.Credential{}, fmt.Errorf("%w: unknown", httpapi.ErrUnauthenticated)
	}
	return e.cred, e.err
}

// TestAuthenticator: with an Authenticator and no configured token,
// berth is not open to all; a token it verifies acts as its credential
// (tenant and scopes), one it refuses is 401 with its reason, and one it
// cannot verify now is 503 auth_unavailable with Retry-After. A
// configured token still works without asking it.
func TestAuthenticator(t *testing.T) {
	auth := tokenTable{
		"sa-a":    {cred: httpapi.Credential{Tenant: "a", Scopes: []httpapi.Scope{httpapi.ScopeHarness}, Subject: "system:serviceaccount:agents:a"}},
		"sa-b":    {cred: httpapi.Credential{Tenant: "b", Scopes: []httpapi.Scope{httpapi.ScopeHarness}, Subject: "system:serviceaccount:agents:b"}},
		"sa-down": {err: errors.New("connection refused")},
	}
	rg := newRig(t, httpapi.Options{Authenticator: auth, Credentials: []httpapi.Credential{httpapi.TokenCredential("static", "a", httpapi.ScopeHarness)}}, false)
	if r := rg.do("GET", "/v1/runs", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("no token: %d %s; want 401", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs", "nobody", ""); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "unknown") {
		t.Errorf("refused token: %d %s; want 401 with the authenticator's reason", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs", "sa-down", ""); r.status != http.StatusServiceUnavailable || r.errorCode(t) != "auth_unavailable" || r.header.Get("Retry-After") == "" {
		t.Errorf("unverifiable token: %d %s %v; want 503 auth_unavailable with Retry-After", r.status, r.body, r.header)
	}
	run := rg.openAs("sa-a", `{"conversation_id":"c-42","workspace":"/w"}`)
	if r := rg.do("GET", "/v1/runs/"+run, "static", ""); r.status != http.StatusOK {
		t.Errorf("tenant a's static token on the run tenant a's service account opened: %d %s", r.status, r.body)
	}
	if r := rg.do("GET", "/v1/runs/"+run, "sa-b", ""); r.status != http.StatusNotFound {
		t.Errorf("tenant b's service account on tenant a's run: %d %s; want 404", r.status, r.body)
	}
	if r := rg.do("GET", "/metrics", "sa-a", ""); r.status != http.StatusForbidden {
		t.Errorf("a harness service account on /metrics: %d; want 403", r.status)
	}
}
