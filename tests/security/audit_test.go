package security

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPermissionAudit: every permission decision leaves one audit record
// with the call's digest and who decided — in berth's JSON log and on the
// run's events. A write the operator approves names the operator's token
// (its hash's first digits, tenant and scopes), never the harness's; a call
// the policy refuses (exec on a hosted run with no approver) names the rule.
func TestPermissionAudit(t *testing.T) {
	harness, operator := newToken(t), newToken(t)
	ws := t.TempDir()
	s := startServe(t, serveOpts{
		args: []string{"--permissions", "hosted", "--host-placement", "explicit", "--host-root", ws, "--log-format", "json"},
		env:  []string{"BERTH_TOKEN=" + harness, "BERTH_OPERATOR_TOKEN=" + operator},
	})
	run := s.open(harness, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	w := s.watch(t, harness, run)

	args := `{"path":"approved.txt","content":"yes\n"}`
	done := make(chan result, 1)
	go func() {
		res, err := s.callAsync(harness, run, "write", args)
		if err != nil {
			res = result{IsError: true}
		}
		done <- res
	}()
	c := w.next(t)
	if r, err := s.answer(operator, run, c.N, "approve"); err != nil || r.status != http.StatusOK {
		t.Fatalf("operator approve: %v %v", r, err)
	}
	if res := <-done; res.IsError {
		t.Fatalf("the approved write failed: %s", res.Text())
	}
	sum := sha256.Sum256([]byte(args))
	digest := hex.EncodeToString(sum[:])
	opHash := sha256.Sum256([]byte(operator))
	opWho := fmt.Sprintf("token sha256:%x", opHash[:6])
	hHash := sha256.Sum256([]byte(harness))
	hWho := fmt.Sprintf("%x", hHash[:6])

	var ev map[string]any
	select {
	case ev = <-w.decisions:
	case <-time.After(callTimeout):
		t.Fatal("no permission.decided event for the approved write")
	}
	if ev["outcome"] != "approved" || ev["tool"] != "write" || ev["call_digest"] != digest || ev["card"] != float64(c.N) ||
		!strings.HasPrefix(fmt.Sprint(ev["by"]), opWho) || strings.Contains(fmt.Sprint(ev["by"]), hWho) || !strings.Contains(fmt.Sprint(ev["rule"]), "level=write: ask") {
		t.Errorf("the approval's event: %v\nwant outcome approved, call_digest %s, card %d, by %s…, rule level=write: ask", ev, digest, c.N, opWho)
	}

	// Nobody to approve: exec in a hosted run with the stream closed is
	// refused — also one record, naming why.
	w.cancel()
	<-w.done
	res, r := s.call(harness, run, "eval", `{"code":"1+1","description":"add one and one in the kernel"}`)
	if r.status != http.StatusOK || !res.IsError {
		t.Fatalf("eval with nobody to approve: %s %s", r, res.Text())
	}

	// The JSON log: one object a line, berth's own lines among them; one
	// record per decision with the digest and the answerer.
	var approved, refused int
	sc := bufio.NewScanner(strings.NewReader(s.log()))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "go: ") || strings.TrimSpace(line) == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", line)
			continue
		}
		if rec["msg"] != "permission decision" {
			continue
		}
		switch rec["outcome"] {
		case "approved":
			approved++
			if rec["call_digest"] != digest || !strings.HasPrefix(fmt.Sprint(rec["by"]), opWho) || rec["run"] != run || rec["level"] != "INFO" {
				t.Errorf("the approval's log record: %v", rec)
			}
		case "refused":
			refused++
			if rec["tool"] != "eval" || !strings.Contains(fmt.Sprint(rec["reason"]), "no approver") {
				t.Errorf("the refusal's log record: %v", rec)
			}
		}
	}
	if approved != 1 || refused != 1 {
		t.Errorf("log records: %d approvals, %d refusals; want one each\n%s", approved, refused, s.log())
	}
}
