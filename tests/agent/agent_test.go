// Package agent replays, without a model, three tasks an agent did end to
// end through berth's tools (issue #17): a Python bug hunt (lsp, ast_grep,
// eval, debug), a Go rename and error-wrapping rewrite (lsp_rename,
// ast_edit, resolve), and exploring Python's standard library (ast_grep,
// lsp). Each test builds its fixture, starts a real `berth serve`, drives
// the HTTP API through a fixed sequence of calls, asserts the answers a
// model would read off the results, and logs how many calls and result
// characters the task took — the figures the issue set goals for.
//
// The servers the tasks use (pylsp, gopls, debugpy, ipykernel) run on the
// host: tests/run installs them. Without them a test skips, or fails when
// CI=true.
package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tests/berthtest"
)

// callTimeout bounds every HTTP request, so that a hang fails the test; it
// asserts nothing about speed.
const callTimeout = 3 * time.Minute

func TestMain(m *testing.M) {
	code := m.Run()
	berthtest.Remove()
	os.Exit(code)
}

// transcript is one task's run and what its calls cost.
type transcript struct {
	t          *testing.T
	c          *berthtest.Client
	run        string
	calls      int
	text       int // characters of the results' text
	structured int // characters of the results' structuredContent (JSON)
	log        strings.Builder
}

// newTranscript starts berth serve in local mode and opens a host run on
// workspace with a conversation id (so debug is registered).
func newTranscript(t *testing.T, workspace string) *transcript {
	t.Helper()
	tok := "agent-test-token"
	s := berthtest.Start(t, berthtest.Options{Args: []string{"--mode", "local"}, Env: []string{"BERTH_TOKEN=" + tok, "PATH=" + hostPath()}})
	c := &berthtest.Client{URL: s.URL, Token: tok}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	info, err := c.OpenRun(ctx, map[string]any{"workspace": workspace, "sandbox": "host", "conversation_id": "agent-" + t.Name(), "mode": "default"})
	if err != nil {
		t.Fatal(err)
	}
	tr := &transcript{t: t, c: c, run: info.ID}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		c.CloseRun(ctx, info.ID)
		t.Logf("transcript of %s:\n%s", t.Name(), tr.log.String())
		t.Logf("%s: %d calls, %d characters of text, %d of structured content", t.Name(), tr.calls, tr.text, tr.structured)
	})
	return tr
}

// call makes one tool call as a model would and returns the result's text;
// a call error fails the test, an error result is returned as text (the
// model reads it too) and counted.
func (tr *transcript) call(tool string, args map[string]any) (string, bool) {
	tr.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := tr.c.Call(ctx, tr.run, tool, args)
	if err != nil {
		tr.t.Fatalf("call %d: %v", tr.calls+1, err)
	}
	tr.calls++
	text := res.Text()
	tr.text += len(text)
	if len(res.StructuredContent) > 0 && string(res.StructuredContent) != "null" {
		tr.structured += len(res.StructuredContent)
	}
	a, _ := json.Marshal(args)
	fmt.Fprintf(&tr.log, "#%d %s %s → %d chars%s\n%s\n\n", tr.calls, tool, a, len(text), map[bool]string{true: " (error)"}[res.IsError], indent(text))
	return text, res.IsError
}

// ok is call that wants a result that is not an error and holds every want.
func (tr *transcript) ok(tool string, args map[string]any, wants ...string) string {
	tr.t.Helper()
	text, isErr := tr.call(tool, args)
	if isErr {
		tr.t.Fatalf("%s %v: error result:\n%s", tool, args, text)
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			tr.t.Fatalf("%s %v: the result lacks %q:\n%s", tool, args, w, text)
		}
	}
	return text
}

// fails is call that wants an error result holding every want.
func (tr *transcript) fails(tool string, args map[string]any, wants ...string) string {
	tr.t.Helper()
	text, isErr := tr.call(tool, args)
	if !isErr {
		tr.t.Fatalf("%s %v: want an error result, got:\n%s", tool, args, text)
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			tr.t.Fatalf("%s %v: the result lacks %q:\n%s", tool, args, w, text)
		}
	}
	return text
}

// within fails the test when the transcript took more calls or more
// characters of text than the goal (the goals: at most half the
// calls and a third of the characters the same task took before).
func (tr *transcript) within(calls, chars int) {
	tr.t.Helper()
	if tr.calls > calls {
		tr.t.Errorf("the task took %d calls, the goal is at most %d", tr.calls, calls)
	}
	if tr.text > chars {
		tr.t.Errorf("the task's results took %d characters of text, the goal is at most %d", tr.text, chars)
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// writeTree writes files (slash paths → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// hostPath is the PATH berth's host processes get: the directories of
// gopls and go, then Debian's (its python3 is the one apt installs
// ipykernel, debugpy and pylsp for, whatever python the test's PATH has
// first).
func hostPath() string {
	var dirs []string
	for _, prog := range []string{"gopls", "go"} {
		if p, err := exec.LookPath(prog); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	dirs = append(dirs, "/usr/bin", "/bin")
	return strings.Join(dirs, string(os.PathListSeparator))
}

// need skips (or fails under CI) when a program the task needs is missing.
func need(t *testing.T, check ...string) {
	t.Helper()
	if err := exec.Command(check[0], check[1:]...).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v; tests/run installs it", strings.Join(check, " "), err)
		}
		t.Skipf("%s: %v", strings.Join(check, " "), err)
	}
}
