package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What a cluster deployment relies on beyond the API (issue #37,
// docs/kubernetes.md): a metrics listener a scraper reaches without a
// token and that serves nothing else, readiness with real meaning, and
// TLS whose certificate rotates without a restart.

// get makes one GET with client (nil: http.DefaultClient) and returns the
// status and body, failing the test when nothing answers.
func get(t *testing.T, client *http.Client, url, tok string) (int, string) {
	t.Helper()
	status, body, err := tryGet(client, url, tok)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return status, body
}

func tryGet(client *http.Client, url, tok string) (int, string, error) {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, "", err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// logURL returns the URL berth printed after prefix at start.
func logURL(t *testing.T, s *server, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(s.log(), "\n") {
		if u, ok := strings.CutPrefix(l, prefix); ok {
			return strings.Fields(u)[0]
		}
	}
	t.Fatalf("berth did not print %q:\n%s", prefix, s.log())
	return ""
}

// TestMetricsListener: --metrics-addr serves GET /metrics in Prometheus
// format without a token, and nothing else; the API's /metrics still
// wants the metrics scope.
func TestMetricsListener(t *testing.T) {
	tok := newToken(t)
	s := startServe(t, serveOpts{args: []string{"--metrics-addr", "127.0.0.1:0"}, env: []string{"BERTH_TOKEN=" + tok}})
	metrics := logURL(t, s, "berth: metrics on ") // http://ADDR/metrics
	base := strings.TrimSuffix(metrics, "/metrics")

	status, body := get(t, nil, metrics, "")
	if status != http.StatusOK || !strings.Contains(body, "# TYPE berth_runs_open gauge") {
		t.Fatalf("GET %s without a token: %d, want 200 with berth's metrics:\n%.2000s", metrics, status, body)
	}
	// The listener serves metrics only: no API, no probes, no console,
	// with or without a token.
	for _, p := range []string{"/v1/runs", "/v1/openapi.json", "/healthz", "/readyz", "/console/", "/", "/metrics/x"} {
		for _, k := range []string{"", tok} {
			if status, body := get(t, nil, base+p, k); status != http.StatusNotFound {
				t.Errorf("GET %s on the metrics listener (token %v): %d %.200s; want 404", p, k != "", status, body)
			}
		}
	}
	// A run cannot be opened there either.
	r, err := http.Post(base+"/v1/runs", "application/json", strings.NewReader(`{"conversation_id":"c","workspace":"/tmp"}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("POST /v1/runs on the metrics listener: %d, want 404", r.StatusCode)
	}
	// The API listener's /metrics is unchanged: it needs the token.
	if r := s.do("GET", "/metrics", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("GET /metrics on the API listener without a token: %s, want 401", r)
	}
	if r := s.do("GET", "/metrics", tok, ""); r.status != http.StatusOK {
		t.Errorf("GET /metrics on the API listener with the token: %s, want 200", r)
	}
}

// TestReadyz: /livez (and /healthz) say only that berth serves; /readyz
// is 503 with the reason while the run store is gone or a configured
// engine does not answer.
func TestReadyz(t *testing.T) {
	tok := newToken(t)
	live := func(s *server) {
		t.Helper()
		for _, p := range []string{"/livez", "/healthz"} {
			if r := s.do("GET", p, "", ""); r.status != http.StatusOK || string(r.body) != "ok" {
				t.Errorf("GET %s: %s, want 200 ok", p, r)
			}
		}
	}

	t.Run("ready", func(t *testing.T) {
		s := startServe(t, serveOpts{args: []string{"--state-dir", t.TempDir()}, env: []string{"BERTH_TOKEN=" + tok}})
		live(s)
		if r := s.do("GET", "/readyz", "", ""); r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "ready") {
			t.Errorf("GET /readyz: %s, want 200 ready", r)
		}
	})

	t.Run("store gone", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		s := startServe(t, serveOpts{args: []string{"--state-dir", dir}, env: []string{"BERTH_TOKEN=" + tok}})
		if r := s.do("GET", "/readyz", "", ""); r.status != http.StatusOK {
			t.Fatalf("GET /readyz before: %s, want 200", r)
		}
		// The volume under --state-dir went away.
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		r := waitReadyz(t, s, http.StatusServiceUnavailable)
		if !strings.Contains(string(r.body), "run store") || !strings.Contains(string(r.body), dir) {
			t.Errorf("GET /readyz with the state directory gone: %s; want 503 naming the run store and %s", r, dir)
		}
		live(s)
	})

	t.Run("engine dead", func(t *testing.T) {
		// A socket nobody listens on any more: connections are refused.
		sock := filepath.Join(t.TempDir(), "docker.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		s := startServe(t, serveOpts{args: []string{"--docker-host", "unix://" + sock}, env: []string{"BERTH_TOKEN=" + tok}})
		r := s.do("GET", "/readyz", "", "")
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "engine docker") || !strings.Contains(string(r.body), sock) {
			t.Errorf("GET /readyz with --docker-host on a dead socket: %s; want 503 naming the docker engine and %s", r, sock)
		}
		live(s)
	})
}

// waitReadyz polls /readyz until it answers want (it keeps a result for
// up to httpapi.ReadyKeep), for up to a minute.
func waitReadyz(t *testing.T, s *server, want int) reply {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r := s.do("GET", "/readyz", "", "")
		if r.status == want || time.Now().After(deadline) {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTLSRotation: with --tls-cert-file and --tls-key-file the API is
// served over TLS, and a certificate rotated in place (as a mounted Secret
// or cert-manager does) is served from the next handshake on, without a
// restart; a half-done rotation keeps the last good pair.
func TestTLSRotation(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is needed to make the certificates")
	}
	dir := t.TempDir()
	gen := func(name string) (cert, key string) {
		cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		out, err := exec.Command("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
			"-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN="+name, "-addext", "subjectAltName=IP:127.0.0.1").CombinedOutput()
		if err != nil {
			t.Fatalf("openssl: %v\n%s", err, out)
		}
		return cert, key
	}
	certA, keyA := gen("berth-a")
	certB, keyB := gen("berth-b")
	live := filepath.Join(dir, "live")
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(live, "tls.crt"), filepath.Join(live, "tls.key")
	// install replaces dst with src's content by rename, as a Secret
	// volume's update does.
	install := func(src, dst string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		tmp := dst + ".new"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			t.Fatal(err)
		}
	}
	install(certA, certFile)
	install(keyA, keyFile)

	tok := newToken(t)
	s := startServe(t, serveOpts{args: []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile}, env: []string{"BERTH_TOKEN=" + tok}})
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("berth serves on %s, want https://", s.url)
	}
	pool := x509.NewCertPool()
	for _, c := range []string{certA, certB} {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(b)
	}
	// served makes a new connection and returns the CN of the certificate
	// berth presents, after an authenticated call through it.
	served := func() string {
		t.Helper()
		var cn string
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, VerifyConnection: func(cs tls.ConnectionState) error {
			cn = cs.PeerCertificates[0].Subject.CommonName
			return nil
		}}, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		status, body := get(t, &http.Client{Transport: tr}, s.url+"/v1/runs", tok)
		if status != http.StatusOK {
			t.Fatalf("GET /v1/runs over TLS: %d %s", status, body)
		}
		return cn
	}
	pid := s.Pid()
	if cn := served(); cn != "berth-a" {
		t.Fatalf("berth presents %q, want berth-a", cn)
	}
	// Plain HTTP to the TLS listener gets no API.
	if status, _, err := tryGet(nil, "http"+strings.TrimPrefix(s.url, "https")+"/v1/runs", tok); err == nil && status == http.StatusOK {
		t.Errorf("plain HTTP to the TLS listener answered 200")
	}

	// Half a rotation: the new certificate without its key does not load;
	// the last good pair is still served.
	install(certB, certFile)
	if cn := served(); cn != "berth-a" {
		t.Errorf("with a new certificate but the old key berth presents %q, want the last good pair berth-a", cn)
	}
	install(keyB, keyFile)
	if cn := served(); cn != "berth-b" {
		t.Errorf("after the rotation berth presents %q, want berth-b", cn)
	}
	if s.Pid() != pid {
		t.Errorf("berth restarted (pid %d, was %d)", s.Pid(), pid)
	}
	// A client that offers HTTP/2 gets HTTP/1.1: berth's connection caps
	// count one request at a time per connection.
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer h2.CloseIdleConnections()
	resp, err := (&http.Client{Transport: h2}).Get(s.url + "/livez")
	if err != nil {
		t.Fatalf("GET /livez over TLS: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok" || resp.ProtoMajor != 1 {
		t.Errorf("GET /livez over TLS offering h2: %d %q over %s; want 200 ok over HTTP/1.1", resp.StatusCode, b, resp.Proto)
	}
}

// TestServiceAccountsWithoutAPIServer: with --service-accounts-file and
// no static token, berth is not open: no token is 401, a token that is no
// service-account token is 401 naming the audience, and one it cannot
// have reviewed (the API server does not answer) is 503 auth_unavailable,
// never let in. The reviews themselves are tests/kube's
// TestServiceAccountAuth, against a real API server.
func TestServiceAccountsWithoutAPIServer(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := writeFile(t, dir, "kubeconfig", `apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: nothing
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
`, 0o600)
	accounts := writeFile(t, dir, "service-accounts", "agents/harness team-a harness\n", 0o600)
	s := startServe(t, serveOpts{args: []string{"--addr", "0.0.0.0:0", "--kube", "off", "--service-accounts-file", accounts},
		env: []string{"KUBECONFIG=" + kubeconfig, "BERTH_TOKEN=", "KUBERNETES_SERVICE_HOST="}})
	if !strings.Contains(s.log(), "system:serviceaccount:agents:harness (token verified by TokenReview) tenant team-a: harness") {
		t.Errorf("berth does not say at start which service accounts it accepts:\n%s", s.log())
	}
	if r := s.do("GET", "/v1/runs", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("no token: %s; want 401", r)
	}
	if r := s.do("GET", "/v1/runs", "static-guess", ""); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), `audience \"berth\"`) {
		t.Errorf("a token that is no JWT: %s; want 401 naming the audience", r)
	}
	if r := s.do("GET", "/v1/runs", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", ""); r.status != http.StatusServiceUnavailable || r.code() != "auth_unavailable" {
		t.Errorf("a JWT with the API server down: %s; want 503 auth_unavailable", r)
	}
}
