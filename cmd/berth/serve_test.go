package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/tools/permission"
)

func tokenLine(tok, tenant, scopes string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:]) + " " + tenant + " " + scopes + "\n"
}

// TestServeCredentials: the one-tenant token has every scope in local
// mode and harness+metrics in hosted mode, where the operator token is a
// credential of its own for every tenant; one token for two credentials
// is refused.
func TestServeCredentials(t *testing.T) {
	scopes := func(c httpapi.Credential) []httpapi.Scope { return c.Scopes }
	creds, err := credentials(serveConfig{operator: "op"}, "tok", permission.ModeHosted)
	if err != nil || len(creds) != 2 {
		t.Fatalf("hosted: %v %v", creds, err)
	}
	if h := creds[0]; h.Hash != sha256.Sum256([]byte("tok")) || h.Tenant != httpapi.DefaultTenant || h.Has(httpapi.ScopeOperator) || !h.Has(httpapi.ScopeHarness) || !h.Has(httpapi.ScopeMetrics) {
		t.Errorf("hosted mode's %s token: %+v, want tenant default with harness and metrics only", EnvToken, h)
	}
	if o := creds[1]; o.Hash != sha256.Sum256([]byte("op")) || o.Tenant != httpapi.AllTenants || !slices.Equal(scopes(o), []httpapi.Scope{httpapi.ScopeOperator}) {
		t.Errorf("the operator token: %+v, want tenant * with operator", o)
	}
	creds, err = credentials(serveConfig{}, "tok", permission.ModeLocal)
	if err != nil || len(creds) != 1 || !slices.Equal(scopes(creds[0]), httpapi.Scopes) {
		t.Errorf("local mode's %s token: %+v %v, want every scope", EnvToken, creds, err)
	}
	if _, err := credentials(serveConfig{operator: "tok"}, "tok", permission.ModeHosted); err == nil || !strings.Contains(err.Error(), "approve its own calls") {
		t.Errorf("operator token = harness token: %v", err)
	}
	file, _ := httpapi.ParseTokens(strings.NewReader(tokenLine("tok", "a", "harness")))
	if _, err := credentials(serveConfig{creds: file}, "tok", permission.ModeHosted); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a tokens-file token reused as %s: %v", EnvToken, err)
	}
	if creds, err := credentials(serveConfig{}, "", permission.ModeHosted); err != nil || len(creds) != 0 {
		t.Errorf("no token: %v %v, want no credentials", creds, err)
	}
}

func TestServeTokensFileRefusals(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokens")
	os.WriteFile(bad, []byte("# a plain token, not its hash\ns3cret acme harness\n"), 0o600)
	t.Setenv(EnvToken, "")
	t.Setenv(EnvOperatorToken, "")
	tests := []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"serve", "--tokens-file", bad}, "", "line 2"},
		{[]string{"serve", "--tokens-file", filepath.Join(dir, "none")}, "", "read the tokens file"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--host-user", "nobody", noDocker}, "", "without a token any of them could call berth"},
		{[]string{"serve", "--addr", "127.0.0.1:0", noDocker}, "same", "give the operator a token of its own"},
	}
	for _, tt := range tests {
		if tt.env != "" {
			t.Setenv(EnvToken, tt.env)
			t.Setenv(EnvOperatorToken, tt.env)
		}
		_, errs, code := run(t, tt.args...)
		if code != 1 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tt.args, code, errs, tt.want)
		}
	}
}

// TestServeTenantsAndCaps: berth serve with a tokens file keeps tenants
// apart, says which credentials it accepts, and passes the per-tenant run
// cap to the controller.
func TestServeTenantsAndCaps(t *testing.T) {
	dir := workspace(t)
	creds, err := httpapi.ParseTokens(strings.NewReader(tokenLine("tok-a", "a", "harness") + tokenLine("tok-b", "b", "harness") + tokenLine("tok-op", "*", "operator")))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := &globalFlags{labelKey: "berth.conversation", dockerHost: "unix:///nonexistent/docker.sock", serveMode: "local"}
	var stderr bytes.Buffer // read after serve returns
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, g, ln, "", &stderr, g.logger(io.Discard), func(c *serveConfig) {
			c.creds = creds
			c.limits = httpapi.Limits{MaxConns: 4}
			c.tune = func(cfg *controller.Config) { cfg.MaxRunsPerTenant = 1 }
		})
	}()
	base := "http://" + ln.Addr().String()
	do := func(method, path, tok, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	spec := `{"sandbox":"host","workspace":"` + dir + `"}`
	status, m := do("POST", "/v1/runs", "tok-a", spec)
	if status != 201 {
		t.Fatalf("open: %d %v", status, m)
	}
	id := m["id"].(string)
	if status, m := do("POST", "/v1/runs", "tok-a", spec); status != http.StatusTooManyRequests {
		t.Errorf("tenant a's second run with --max-runs-per-tenant 1: %d %v, want 429", status, m)
	}
	if status, m := do("GET", "/v1/runs/"+id, "tok-b", ""); status != 404 {
		t.Errorf("tenant b reads tenant a's run: %d %v, want 404", status, m)
	}
	if status, m := do("GET", "/v1/runs", "tok-op", ""); status != 200 || len(m["runs"].([]any)) != 1 {
		t.Errorf("the operator lists: %d %v", status, m)
	}
	if status, _ := do("POST", "/v1/runs", "tok-op", spec); status != 403 {
		t.Errorf("the operator opens a run: %d, want 403", status)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if want := "berth: credentials: tenant a: harness; tenant b: harness; tenant *: operator"; !strings.Contains(stderr.String(), want) {
		t.Errorf("start lines lack %q:\n%s", want, stderr.String())
	}
}
