package security

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostUser is the unprivileged user hosted mode runs host processes as.
const hostUser = "nobody"

// needRoot skips a test that needs berth to switch users.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test runs berth with --host-user, which needs root; CI runs as root")
		}
		t.Skip("needs root: berth switches to --host-user only as root")
	}
}

// sharedDir is a directory the host user can read and write, removed at
// the end of the test.
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "berth-security-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// hunt is a cell that looks for berth's credentials everywhere a process
// on the same machine can: its environment, every process's environment
// and command line, and every file a command line names (--token-file
// F, --token-file=F or a bare path). Whatever it could read it writes to
// loot, for the test to search.
const hunt = `import glob, os
loot = []
loot.append("ENV " + repr(dict(os.environ)))
loot.append("UID %d" % os.getuid())
for p in (glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline") if WIDE else ["/proc/self/environ", "/proc/%d/environ" % os.getppid()]):
    try:
        data = open(p, "rb").read()
    except Exception as e:
        loot.append("DENIED %s %s" % (p, type(e).__name__))
        continue
    loot.append("READ %s %r" % (p, data[:65536]))
    if p.endswith("cmdline"):
        for a in data.split(b"\0"):
            a = a.decode("utf-8", "replace")
            for cand in (a, a.split("=", 1)[-1]):
                if cand.startswith("/") and os.path.isfile(cand):
                    try:
                        loot.append("FILE %s %r" % (cand, open(cand, "rb").read(65536)))
                    except Exception as e:
                        loot.append("DENIED %s %s" % (cand, type(e).__name__))
open(LOOT, "w").write("\n".join(loot))
print("hunted", len(loot))
`

// lootOf runs the hunting cell in run and returns what it could read.
// With wide, it searches every process; without, only its own
// environment and its parent's (the kernel's supervisor).
func (s *server) lootOf(t *testing.T, tok, run, dir string, wide bool) string {
	t.Helper()
	loot := filepath.Join(dir, "loot.txt")
	code := fmt.Sprintf("LOOT = %q\nWIDE = %s\n", loot, map[bool]string{true: "True", false: "False"}[wide]) + hunt
	res, r := s.call(tok, run, "eval", fmt.Sprintf(`{"code":%q,"description":"look for berth credentials in every process"}`, code))
	if r.status != 200 || res.IsError {
		t.Fatalf("the hunting cell did not run: %s / %s", r, res.Text())
	}
	b, err := os.ReadFile(loot)
	if err != nil {
		t.Fatalf("the cell wrote no loot (%v); it said: %s", err, res.Text())
	}
	if !strings.Contains(string(b), "PATH") {
		t.Fatalf("the cell's loot has no environment at all, so it did not really look: %.400s", b)
	}
	return string(b)
}

// TestNoCredentialReachesACell (local mode): berth serve holds its token in
// BERTH_TOKEN; a cell on the host, running as the same user as berth, does
// not get it in its environment, nor does the process that supervises it.
// (A cell of the same user may read whatever that user may; with root, it
// could read berth's own /proc/PID/environ. Separating them is hosted
// mode's --host-user: TestNoCredentialReachesAHostedCell.) When berth runs
// as another user than root, the cell cannot read berth's environment
// either, because berth serve makes itself non-dumpable.
func TestNoCredentialReachesACell(t *testing.T) {
	tok := newToken(t)
	s := startServe(t, serveOpts{args: []string{"--mode", "local"}, env: []string{"BERTH_TOKEN=" + tok}})
	ws := t.TempDir()
	run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	loot := s.lootOf(t, tok, run, ws, os.Geteuid() != 0)
	if strings.Contains(loot, tok) {
		i := strings.Index(loot, tok)
		t.Errorf("a cell found berth's token: …%s…", loot[max(0, i-200):i])
	}
}

// TestNoCredentialReachesAHostedCell (hosted mode, as root): berth serve
// reads the harness token from a 0600 --token-file and the operator token
// from BERTH_OPERATOR_TOKEN, and runs host processes as an unprivileged
// --host-user. An approved cell hunts for both and finds neither; it runs
// as the host user, not as root; and the harness token cannot approve a
// permission card, so a cell that did find it still could not answer its
// own next card.
func TestNoCredentialReachesAHostedCell(t *testing.T) {
	needRoot(t)
	harness, operator := newToken(t), newToken(t)
	secrets := t.TempDir()
	tokenFile := writeFile(t, secrets, "token", harness+"\n", 0o600)
	ws := sharedDir(t)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "hosted", "--token-file", tokenFile, "--host-user", hostUser, "--host-root", filepath.Dir(ws)},
		env:  []string{"BERTH_OPERATOR_TOKEN=" + operator, "BERTH_TOKEN=" + harness},
	})
	run := s.open(harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	s.approveAll(t, operator, run)
	loot := s.lootOf(t, harness, run, ws, true)
	for name, tok := range map[string]string{"harness": harness, "operator": operator} {
		if i := strings.Index(loot, tok); i >= 0 {
			t.Errorf("a hosted cell found the %s token: …%s…", name, loot[max(0, i-200):i])
		}
	}
	if strings.Contains(loot, "UID 0\n") {
		t.Errorf("the cell ran as root; want --host-user %s", hostUser)
	}
}

// TestHarnessCannotApproveItsOwnCall: in hosted mode a write draws a
// permission card; the harness's own credential is refused when it tries
// to approve it (403 operator_required) and the call is still waiting;
// the operator's deny reaches the call, and nothing was written.
func TestHarnessCannotApproveItsOwnCall(t *testing.T) {
	needRoot(t)
	harness, operator := newToken(t), newToken(t)
	ws := sharedDir(t)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "hosted", "--host-user", hostUser, "--host-root", filepath.Dir(ws)},
		env:  []string{"BERTH_TOKEN=" + harness, "BERTH_OPERATOR_TOKEN=" + operator},
	})
	run := s.open(harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	w := s.watch(t, harness, run)
	done := make(chan result, 1)
	go func() {
		res, err := s.callAsync(harness, run, "write", `{"path":"pwned.txt","content":"written without a human\n"}`)
		if err != nil {
			res = result{IsError: true}
		}
		done <- res
	}()
	c := w.next(t)
	if c.Kind != "permission" || c.Tool != "write" {
		t.Fatalf("want a permission card for write, got %+v", c)
	}
	for _, d := range []string{"approve", "allow_run"} {
		r, err := s.answer(harness, run, c.N, d)
		if err != nil || r.status != http.StatusForbidden || r.code() != "operator_required" {
			t.Errorf("harness %s of its own card: want 403 operator_required, got %v %v", d, r, err)
		}
	}
	select {
	case res := <-done:
		t.Fatalf("the call returned before the operator answered: %s", res.Text())
	case <-time.After(200 * time.Millisecond):
	}
	if r, err := s.answer(operator, run, c.N, "deny"); err != nil || r.status != http.StatusOK {
		t.Fatalf("operator deny: %v %v", r, err)
	}
	if res := <-done; !res.IsError {
		t.Errorf("a denied write returned success: %s", res.Text())
	}
	if fileExists(filepath.Join(ws, "pwned.txt")) {
		t.Error("the denied write wrote its file")
	}
}
