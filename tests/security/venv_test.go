package security

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// debianPython is Debian's python3 (python3.11, with ipykernel and
// debugpy); the python3 first on PATH may be another build.
const debianPython = "/usr/bin/python3"

// venvWorkspace is a host workspace holding a virtualenv of Debian's
// python (pyvenv.cfg, bin/python linking outside the workspace) whose
// site-packages hold evil.pth: an import line, which python runs at every
// start, appending a line to marker.
func venvWorkspace(t *testing.T, ws, marker string) {
	t.Helper()
	if _, err := os.Stat(debianPython); err != nil {
		t.Skipf("no %s: %v", debianPython, err)
	}
	writeFile(t, ws, ".venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n", 0o644)
	writeFile(t, ws, ".venv/lib/python3.11/site-packages/evil.pth",
		"import os; open("+strconv.Quote(marker)+", 'a').write('ran as uid %d\\n' % os.getuid())\n", 0o644)
	if err := os.MkdirAll(filepath.Join(ws, ".venv/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(debianPython, filepath.Join(ws, ".venv/bin/python")); err != nil {
		t.Fatal(err)
	}
}

// nextCard returns the next card of w, or the call's result when the call
// ends first (nil card).
func nextCard(t *testing.T, w *watcher, done <-chan result) (*card, *result) {
	t.Helper()
	select {
	case c := <-w.cards:
		return &c, nil
	case res := <-done:
		return nil, &res
	case <-w.done:
		t.Fatal("the event stream ended before a card was opened")
	}
	return nil, nil
}

// TestVenvStartupNeedsItsOwnCard (hosted mode, as root, --host-user): a
// host workspace's .venv/bin/python links to Debian's python, and the
// venv's site-packages hold a .pth import line. The run asks for its
// python kernel as it opens (prewarm) and the operator approves that as
// eval; then the harness evaluates 1 + 1 and the operator approves the
// cell. Neither runs the .pth line: a second card, for the kernel's start
// as an exec step of its own, names the .pth file, and the operator's deny
// keeps it from running. Approved, the cell runs under the venv's python
// (and the line runs, as the host user). A plan run refuses eval outright,
// and a prewarm of a kernel as it opens.
// Before, the line ran as soon as the kernel was probed and started, on
// the cards for `{"prewarm":"python"}` and `1 + 1`.
func TestVenvStartupNeedsItsOwnCard(t *testing.T) {
	needRoot(t)
	harness, operator := newToken(t), newToken(t)
	ws, marks := sharedDir(t), sharedDir(t)
	marker := filepath.Join(marks, "pth-ran")
	venvWorkspace(t, ws, marker)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "hosted", "--host-user", hostUser, "--host-root", filepath.Dir(ws)},
		env:  []string{"BERTH_TOKEN=" + harness, "BERTH_OPERATOR_TOKEN=" + operator},
	})

	if r := s.do("POST", "/v1/runs", harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"plan","prewarm":["python"]}`, ws)); r.status != http.StatusBadRequest {
		t.Errorf("a plan run that prewarms a kernel: want 400, got %s", r)
	}
	plan := s.open(harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"mode":"plan"}`, ws))
	if _, r := s.call(harness, plan, "eval", `{"code":"1 + 1","description":"add one and one to check the kernel"}`); r.status == http.StatusOK {
		t.Errorf("a plan run ran eval: %s", r)
	}
	noMarker(t, marker, "the venv's .pth line, in a plan run,")

	run := s.open(harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q,"prewarm":["python"]}`, ws))
	w := s.watch(t, operator, run)
	// The prewarm's card: a kernel's start, decided as a call of eval.
	c := w.next(t)
	if c.Kind != "permission" || c.Tool != "eval" || !strings.Contains(c.Summary, "prewarm") {
		t.Fatalf("want the prewarm's permission card for eval, got %+v", c)
	}
	if r, err := s.answer(operator, run, c.N, "approve"); err != nil || r.status != http.StatusOK {
		t.Fatalf("operator approve of the prewarm: %v %v", r, err)
	}

	evalCell := func() <-chan result {
		done := make(chan result, 1)
		go func() { // ends with the call, bounded by callTimeout
			res, err := s.callAsync(harness, run, "eval", `{"code":"1 + 1","description":"add one and one to check the kernel"}`)
			if err != nil {
				res = result{IsError: true}
			}
			done <- res
		}()
		return done
	}
	// cellCard approves the cell's own card and returns the next: the
	// venv's startup step, or the result when none was drawn.
	cellCard := func(done <-chan result) (*card, *result) {
		t.Helper()
		c, res := nextCard(t, w, done)
		if res != nil {
			t.Fatalf("the cell ended before its permission card: %s", res.Text())
		}
		if c.Kind != "permission" || c.Tool != "eval" || !strings.Contains(c.Detail+c.Summary, "1 + 1") {
			t.Fatalf("want the permission card for the cell 1 + 1, got %+v", *c)
		}
		if r, err := s.answer(operator, run, c.N, "approve"); err != nil || r.status != http.StatusOK {
			t.Fatalf("operator approve of the cell: %v %v", r, err)
		}
		return nextCard(t, w, done)
	}

	done := evalCell()
	step, res := cellCard(done)
	if res != nil {
		noMarker(t, marker, "the venv's .pth line, with no card of its own,")
		t.Fatalf("the cell ran with no card for the venv's startup code: %s", res.Text())
	}
	want := "the workspace venv .venv runs at start: .venv/lib/python3.11/site-packages/evil.pth (import line)"
	if step.Kind != "permission" || step.Tool != "eval" || !strings.Contains(step.Summary, want) {
		t.Fatalf("want a permission card naming the venv's startup code (%q), got %+v", want, *step)
	}
	t.Logf("the step's card: %s", step.Summary)
	noMarker(t, marker, "the venv's .pth line, before its card was answered,")
	if r, err := s.answer(operator, run, step.N, "deny"); err != nil || r.status != http.StatusOK {
		t.Fatalf("operator deny of the step: %v %v", r, err)
	}
	if res := <-done; !res.IsError || !strings.Contains(res.Text(), "evil.pth") {
		t.Errorf("the denied step: want a tool error naming evil.pth, got %s", res.Text())
	}
	noMarker(t, marker, "the venv's .pth line, denied,")

	// Approved, the same card lets the kernel start under the venv.
	done = evalCell()
	step, res = cellCard(done)
	if res != nil || !strings.Contains(step.Summary, want) {
		t.Fatalf("the second cell: want the step's card again, got %+v %+v", step, res)
	}
	if r, err := s.answer(operator, run, step.N, "approve"); err != nil || r.status != http.StatusOK {
		t.Fatalf("operator approve of the step: %v %v", r, err)
	}
	if res := <-done; res.IsError || !strings.Contains(res.Text(), "2") {
		t.Errorf("the approved cell: want 2, got %s", res.Text())
	}
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("approved, the venv's python did not run the kernel (its .pth line did not run): %v", err)
	}
	if strings.Contains(string(b), "uid 0\n") {
		t.Errorf("the venv's startup code ran as root; want --host-user %s: %q", hostUser, b)
	}
}
