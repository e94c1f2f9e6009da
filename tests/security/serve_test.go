// Package security attacks a real `berth serve` the way a hostile harness,
// repository or cell would (issue #15, docs/security.md): the test builds
// berth and its shim, starts berth serve as a process with the flags an
// operator would pass, and talks to it over HTTP only. Every attack
// reproduces a defect that was found, with a real program that would leave
// a marker or a secret behind if it got its way, and asserts that it held.
//
// The tests that need Docker (an unlabelled container) skip without it,
// or fail when CI=true; the rest run on the host.
package security

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tests/berthtest"
)

// callTimeout bounds every HTTP request, so a hang fails the test instead
// of stalling it; it asserts nothing about speed.
const callTimeout = 2 * time.Minute

// TestMain removes the binaries berthtest built.
func TestMain(m *testing.M) {
	code := m.Run()
	berthtest.Remove()
	os.Exit(code)
}

// server is one berth serve process and the test that talks to it.
type server struct {
	*berthtest.Server
	t   *testing.T
	url string
}

// serveOpts is how a test starts berth serve.
type serveOpts struct {
	args []string // flags after "serve"
	env  []string // extra environment, KEY=VALUE
	// hostEnv names variables of env that host processes get too
	// (--host-env); berth's own environment reaches them otherwise only
	// through PATH, HOME and LANG.
	hostEnv []string
}

// startServe starts berth serve on a free loopback port with o; the
// test's cleanup stops it.
func startServe(t *testing.T, o serveOpts) *server {
	t.Helper()
	args := o.args
	for _, e := range o.hostEnv {
		args = append(args, "--host-env", e)
	}
	bs := berthtest.Start(t, berthtest.Options{Args: args, Env: o.env})
	return &server{Server: bs, t: t, url: bs.URL}
}

// log is berth's stderr, for failure messages.
func (s *server) log() string { return s.Log() }

// reply is an HTTP answer.
type reply struct {
	status int
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// code is the error code of an error reply, "" for another body.
func (r reply) code() string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(r.body, &e)
	return e.Error.Code
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r, err)
	}
}

// do sends one request with the bearer token tok ("" sends none), failing
// the test when berth does not answer.
func (s *server) do(method, path, tok, body string) reply {
	s.t.Helper()
	r, err := s.request(method, path, tok, body)
	if err != nil {
		s.t.Fatalf("%v\nberth's log:\n%s", err, s.log())
	}
	return r
}

// request sends one request; safe to call from any goroutine. A run a
// restarted berth is still adopting (503 adopting) is asked again after
// its Retry-After, as a harness does, within callTimeout.
func (s *server) request(method, path, tok, body string) (reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for {
		r, err := s.requestOnce(ctx, method, path, tok, body)
		if err != nil || r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), `"code":"adopting"`) {
			return r, err
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return r, nil
		}
	}
}

func (s *server) requestOnce(ctx context.Context, method, path, tok, body string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return reply{}, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: b}, err
}

// open opens a run with spec (a JSON object) and returns its id; it fails
// the test unless berth answers 201.
func (s *server) open(tok, spec string) string {
	s.t.Helper()
	r := s.do("POST", "/v1/runs", tok, spec)
	if r.status != http.StatusCreated {
		s.t.Fatalf("open run %s: %s", spec, r)
	}
	var info struct{ ID string }
	r.decode(s.t, &info)
	s.t.Cleanup(func() { s.do("DELETE", "/v1/runs/"+info.ID, tok, "") })
	return info.ID
}

// result is a tool result.
type result = berthtest.Result

// call calls a tool and returns its result; a call error (not 200) is
// returned as the reply with a zero result.
func (s *server) call(tok, run, tool, args string) (result, reply) {
	s.t.Helper()
	r := s.do("POST", "/v1/runs/"+run+"/tools/"+tool, tok, `{"args":`+args+`}`)
	var res result
	if r.status == http.StatusOK {
		r.decode(s.t, &res)
	}
	return res, r
}

// newToken returns a random bearer token.
func newToken(t *testing.T) string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// tokenLine is a --tokens-file line for tok.
func tokenLine(tok, tenant, scopes string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:]) + " " + tenant + " " + scopes + "\n"
}

// writeFile writes content to dir/name, making parent directories, with
// mode.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// noMarker fails the test if a planted program left its marker.
func noMarker(t *testing.T, marker, what string) {
	t.Helper()
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("%s ran: it left its marker %s (%q)", what, marker, b)
	}
}
