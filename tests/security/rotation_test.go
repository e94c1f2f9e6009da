package security

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTokenRotationKeepsRuns: rewriting the tokens file rotates a token
// while berth serves, closing no run: the old token is refused, the new one
// works on the same run, whose kernel still holds x = 41. A rewrite that
// would change which tenants may open runs (which placement's tenant
// labels depend on) is refused and logged, and the credentials in use stay;
// SIGHUP reloads too.
func TestTokenRotationKeepsRuns(t *testing.T) {
	old, rotated, other := newToken(t), newToken(t), newToken(t)
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokenLine(old, "a", "harness"))
	ws := t.TempDir()
	s := startServe(t, serveOpts{args: []string{"--permissions", "local", "--tokens-file", file}})
	run := s.open(old, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	if res, r := s.call(old, run, "eval", `{"code":"x = 41","description":"set x before the token is rotated"}`); r.status != 200 || res.IsError {
		t.Fatalf("eval: %s %s", r, res.Text())
	}
	runs := func(tok string) int { return s.do("GET", "/v1/runs/"+run, tok, "").status }
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within a minute\n%s", what, s.log())
			}
		}
	}

	write(tokenLine(rotated, "a", "harness"))
	waitUntil("the old token refused after the rewrite", func() bool { return runs(old) == http.StatusUnauthorized })
	if st := runs(rotated); st != http.StatusOK {
		t.Fatalf("the rotated token on the run: %d", st)
	}
	if res, r := s.call(rotated, run, "eval", `{"code":"print(x)","description":"read x after the token was rotated"}`); r.status != 200 || !strings.Contains(res.Text(), "41") {
		t.Fatalf("after the rotation the kernel says %s %s; want 41 (the run and its kernel kept)", r, res.Text())
	}

	// Another tenant's token in place of a's: refused, a's stays.
	write(tokenLine(other, "b", "harness"))
	waitUntil("the tenant change refused and logged", func() bool { return strings.Contains(s.log(), "they change which tenants may open runs") })
	if runs(rotated) != http.StatusOK || runs(other) != http.StatusUnauthorized {
		t.Fatalf("after a refused reload: a's token %d, b's %d; want 200 and 401", runs(rotated), runs(other))
	}

	// SIGHUP reloads the file as it is: back to a's rotated token and a
	// second one of a's.
	second := newToken(t)
	write(tokenLine(rotated, "a", "harness") + tokenLine(second, "a", "harness"))
	if err := syscall.Kill(s.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil("the second token accepted after SIGHUP", func() bool { return runs(second) == http.StatusOK })
	if res, r := s.call(second, run, "eval", `{"code":"print(x)","description":"read x with the second token of a"}`); r.status != 200 || !strings.Contains(res.Text(), "41") {
		t.Fatalf("with a's second token: %s %s", r, res.Text())
	}
}
