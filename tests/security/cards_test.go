package security

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCardsHideNothingAndAreTheOperators: against a hosted berth serve, a
// harness that answers the card number its own next call will draw, before
// the call draws it, is refused (403 operator_required), and so is its
// answer once the card is open; a write whose content hides characters
// (Hangul fillers, a variation selector, the braille blank, a combining
// overlay, a bidi override) shows each of them escaped on the card, in the
// summary and in the detail; the operator's deny reaches the call. The
// moment between looking a card up and answering it is pinned by
// controller/httpapi's TestNoSelfApprovalByRace, which opens the card
// there with a hook; this is the same attack on the shipped binary.
func TestCardsHideNothingAndAreTheOperators(t *testing.T) {
	needRoot(t)
	harness, operator := newToken(t), newToken(t)
	ws := sharedDir(t)
	s := startServe(t, serveOpts{
		args: []string{"--mode", "hosted", "--host-user", hostUser, "--host-root", filepath.Dir(ws)},
		env:  []string{"BERTH_TOKEN=" + harness, "BERTH_OPERATOR_TOKEN=" + operator},
	})
	run := s.open(harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	w := s.watch(t, harness, run)

	// Cards count from 1: the harness knows its call will draw card 1.
	if r, err := s.answer(harness, run, 1, "allow_run"); err != nil || r.status != http.StatusForbidden || r.code() != "operator_required" {
		t.Fatalf("the harness's decision for the card its call will draw: want 403 operator_required, got %v %v", r, err)
	}
	hidden := "ok = 1\u3164\u115f\ufe0f\u2800x\u0338\u202e;)x(metsys.so\n"
	done := make(chan result, 1)
	go func() {
		res, err := s.callAsync(harness, run, "write", fmt.Sprintf(`{"path":"hidden.py","content":%q}`, hidden))
		if err != nil {
			res = result{IsError: true}
		}
		done <- res
	}()
	c := w.next(t)
	if c.Kind != "permission" || c.N != 1 {
		t.Fatalf("want permission card 1 for the write, got %+v", c)
	}
	for _, where := range []struct{ name, text string }{{"summary", c.Summary}, {"detail", c.Detail}} {
		for _, r := range []string{"\u3164", "\u115f", "\ufe0f", "\u2800", "\u0338", "\u202e"} {
			if strings.Contains(where.text, r) {
				t.Errorf("the card's %s shows %U raw:\n%s", where.name, []rune(r)[0], where.text)
			}
			// The summary is compact JSON, where a JSON escape (\u202e)
			// is as visible as berth's own.
			esc, jsonEsc := fmt.Sprintf(`\u{%04x}`, []rune(r)[0]), fmt.Sprintf(`\u%04x`, []rune(r)[0])
			if !strings.Contains(where.text, esc) && !(where.name == "summary" && strings.Contains(where.text, jsonEsc)) {
				t.Errorf("the card's %s lacks %s:\n%s", where.name, esc, where.text)
			}
		}
	}
	for _, body := range []string{`{"decision":"approve"}`, `{"skip":true}`} {
		r, err := s.request("POST", fmt.Sprintf("/v1/runs/%s/cards/%d", run, c.N), harness, body)
		if err != nil || r.status != http.StatusForbidden || r.code() != "operator_required" {
			t.Errorf("the harness answers its own open card with %s: want 403 operator_required, got %v %v", body, r, err)
		}
	}
	if r, err := s.answer(operator, run, c.N, "deny"); err != nil || r.status != http.StatusOK {
		t.Fatalf("operator deny: %v %v", r, err)
	}
	if res := <-done; !res.IsError {
		t.Errorf("a denied write returned success: %s", res.Text())
	}
	if fileExists(filepath.Join(ws, "hidden.py")) {
		t.Error("the denied write wrote its file")
	}
}

// TestSearchReadsNoHardLinkOut: a file of the workspace that is a hard
// link to a file outside it is neither read nor searched through a real
// berth serve: read refuses it, and ast_grep counts it as skipped
// (hard_links) without printing a line of it.
func TestSearchReadsNoHardLinkOut(t *testing.T) {
	tok := newToken(t)
	s := startServe(t, serveOpts{args: []string{"--mode", "local"}, env: []string{"BERTH_TOKEN=" + tok}})
	outside := writeFile(t, t.TempDir(), "secret.py", "token = 'hunter2-s3cret'\n", 0o600)
	ws := t.TempDir()
	writeFile(t, ws, "app.py", "token = 'public'\n", 0o644)
	if err := os.Link(outside, filepath.Join(ws, "linked.py")); err != nil {
		t.Skipf("no hard link across these directories: %v", err)
	}
	run := s.open(tok, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	res, r := s.call(tok, run, "ast_grep", `{"pattern":"token = $V","language":"python"}`)
	if r.status != 200 || strings.Contains(res.Text(), "hunter2") || !strings.Contains(res.Text(), "public") || !strings.Contains(res.Text(), "hard_links") {
		t.Errorf("ast_grep over a hard link out of the workspace: %s %s", r, res.Text())
	}
	res, r = s.call(tok, run, "read", `{"path":"linked.py"}`)
	if strings.Contains(res.Text(), "hunter2") || (r.status == 200 && !res.IsError) {
		t.Errorf("read of a hard link out of the workspace: %s %s", r, res.Text())
	}
}
