package kube

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/tests/berthtest"
)

// TestMain removes the binaries berthtest built.
func TestMain(m *testing.M) {
	code := m.Run()
	berthtest.Remove()
	os.Exit(code)
}

// TestServiceAccountAuth runs berth serve (built by berthtest, on this
// machine, with the admin kubeconfig, which may create TokenReviews) with
// a --service-accounts-file mapping two service accounts of a fresh
// namespace to two tenants, and calls it with tokens the API server
// issues for them (kubectl create token: the TokenRequest API, what a
// projected volume holds): the harness account's token with audience
// berth opens a run of its tenant; the other account's token is another
// tenant (404 on that run); a token of the harness account for another
// audience, and a token of an account the file does not map, are 401.
func TestServiceAccountAuth(t *testing.T) {
	need(t)
	ns := "berth-sa-" + randomHex(3)
	kubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() { tryKubectl("", "delete", "namespace", ns, "--wait=false") })
	for _, sa := range []string{"harness", "other", "stranger"} {
		kubectl(t, "", "-n", ns, "create", "serviceaccount", sa)
	}
	token := func(sa, audience string) string {
		t.Helper()
		return strings.TrimSpace(kubectl(t, "", "-n", ns, "create", "token", sa, "--audience", audience, "--duration", "10m"))
	}
	dir := t.TempDir()
	accounts := filepath.Join(dir, "service-accounts")
	if err := os.WriteFile(accounts, []byte(fmt.Sprintf("%[1]s/harness team-a harness\n%[1]s/other team-b harness\n", ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	s := berthtest.Start(t, berthtest.Options{
		Args: []string{"--mode", "local", "--kube", "off", "--host-root", ws, "--service-accounts-file", accounts},
		Env:  []string{"BERTH_TOKEN="},
	})
	do := func(method, path, tok, body string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	harness := token("harness", "berth")
	code, body := do("POST", "/v1/runs", harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	if code != http.StatusCreated {
		t.Fatalf("open a run with the harness account's token: %d %s\nberth's log:\n%s", code, body, s.Log())
	}
	id := between(body, `"id":"`, `"`)
	if code, body := do("GET", "/v1/runs/"+id, harness, ""); code != http.StatusOK || id == "" || !strings.Contains(body, id) {
		t.Errorf("the run through the same token: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/runs/"+id, token("other", "berth"), ""); code != http.StatusNotFound {
		t.Errorf("tenant team-b's account on team-a's run: %d %s; want 404", code, body)
	}
	if code, body := do("GET", "/v1/runs", token("harness", "not-berth"), ""); code != http.StatusUnauthorized || !strings.Contains(body, "audience") {
		t.Errorf("the harness account's token for another audience: %d %s; want 401 naming the audience", code, body)
	}
	if code, body := do("GET", "/v1/runs", token("stranger", "berth"), ""); code != http.StatusUnauthorized || !strings.Contains(body, "system:serviceaccount:"+ns+":stranger") {
		t.Errorf("an unmapped account's token: %d %s; want 401 naming the account", code, body)
	}
	if code, body := do("DELETE", "/v1/runs/"+id, harness, ""); code != http.StatusNoContent {
		t.Errorf("close the run: %d %s", code, body)
	}
}

// between returns the text of s between the first before and the next
// after, "" when absent.
func between(s, before, after string) string {
	_, rest, ok := strings.Cut(s, before)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, after)
	return v
}
