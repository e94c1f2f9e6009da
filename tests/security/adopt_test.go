package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"berth.dev/berth/runstore"
)

// Restart adoption (issue 31, finding 8): a stored run is a claim, not a
// fact. A berth restarted on its state directory applies today's policy
// to every run it finds there, and does not act on a record changed
// outside it.

// adoptTimeout bounds waiting for what a refused run left to end; it
// asserts nothing about speed.
const adoptTimeout = 90 * time.Second

// adoptEnv puts Debian's python3 (with ipykernel) first for eval.
var adoptEnv = []string{"PATH=/usr/bin:/bin"}

// openKept opens a run that is meant to outlive this berth: unlike
// server.open, the test's cleanup does not close it on this server.
func (s *server) openKept(tok, spec string) string {
	s.t.Helper()
	r := s.do("POST", "/v1/runs", tok, spec)
	if r.status != http.StatusCreated {
		s.t.Fatalf("open run %s: %s\n%s", spec, r, s.log())
	}
	var info struct{ ID string }
	r.decode(s.t, &info)
	return info.ID
}

// kernelPid runs a cell in run that prints its kernel's pid: the kernel
// runs under the run's resident supervisor, which outlives berth.
func (s *server) kernelPid(tok, run string) int {
	s.t.Helper()
	res, r := s.call(tok, run, "eval", `{"code":"import os\nprint('pid', os.getpid())","description":"print the process id of the kernel"}`)
	if r.status != http.StatusOK || res.IsError {
		s.t.Fatalf("eval: %s %s\n%s", r, res.Text(), s.log())
	}
	_, rest, ok := strings.Cut(res.Text(), "pid ")
	if !ok {
		s.t.Fatalf("eval printed no pid: %s", res.Text())
	}
	pid, err := strconv.Atoi(strings.Fields(rest)[0])
	if err != nil {
		s.t.Fatalf("eval printed no pid: %s", res.Text())
	}
	return pid
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

// residentsOf lists the pids of processes whose command line names run's
// resident directory (its resident supervisor and what runs under it).
func residentsOf(run string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.Contains(string(b), "berth-run-"+run) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestAdoptAfterPolicyChange: a host run opened while host placement was
// allowed, with a kernel under its resident supervisor, is not adopted by
// a berth restarted with --host-placement off: its id answers 410 saying
// why, berth's log names it, and its kernel and resident supervisor are
// ended.
func TestAdoptAfterPolicyChange(t *testing.T) {
	state, ws := t.TempDir(), t.TempDir()
	writeFile(t, ws, "notes.txt", "host file\n", 0o644)
	args := []string{"--mode", "local", "--state-dir", state}
	s1 := startServe(t, serveOpts{args: append(args, "--host-placement", "explicit"), env: adoptEnv})
	run := s1.openKept("", fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	pid := s1.kernelPid("", run)
	if err := s1.Stop(); err != nil {
		t.Fatalf("berth serve: %v\n%s", err, s1.log())
	}
	if !alive(pid) || len(residentsOf(run)) == 0 {
		t.Fatalf("the kernel %d (alive %v) or the resident supervisor (%v) did not outlive berth's shutdown; the test's premise fails\n%s", pid, alive(pid), residentsOf(run), s1.log())
	}
	t.Cleanup(func() {
		for _, p := range residentsOf(run) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})

	s2 := startServe(t, serveOpts{args: append(args, "--host-placement", "off"), env: adoptEnv})
	for _, rt := range []struct{ method, path, body string }{
		{"GET", "/v1/runs/" + run, ""},
		{"POST", "/v1/runs/" + run + "/tools/read", `{"args":{"path":"notes.txt"}}`},
	} {
		r := s2.do(rt.method, rt.path, "", rt.body)
		if r.status != http.StatusGone || r.code() != "sandbox_gone" || !strings.Contains(string(r.body), "host placement is off") {
			t.Errorf("%s %s of the run after the restart with host placement off: %s; want 410 sandbox_gone saying host placement is off", rt.method, rt.path, r)
		}
		if strings.Contains(string(r.body), "host file") {
			t.Errorf("%s %s served the host run's file: %s", rt.method, rt.path, r)
		}
	}
	deadline := time.Now().Add(adoptTimeout)
	for alive(pid) || len(residentsOf(run)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("within %s, the refused run's kernel (%d, alive %v) or resident supervisor (%v) still runs\n%s", adoptTimeout, pid, alive(pid), residentsOf(run), s2.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if log := s2.log(); !strings.Contains(log, run) || !strings.Contains(log, "not adopted") || !strings.Contains(log, "level=ERROR") {
		t.Errorf("berth's log does not report the refused run at error level with its id:\n%s", log)
	}
}

// TestAdoptTamperedRecord: a run's record changed in the store's file
// (its tenant made another tenant's) is not adopted: the tenant it names
// now gets 404 unknown_run; the tenant it was (as the store's sealed
// index still says) and an operator get 410 saying the record failed its
// integrity check, and berth's log names it.
func TestAdoptTamperedRecord(t *testing.T) {
	state, ws := t.TempDir(), t.TempDir()
	writeFile(t, ws, "secret.txt", "tenant a's secret\n", 0o644)
	a, b, op := newToken(t), newToken(t), newToken(t)
	tokens := writeFile(t, t.TempDir(), "tokens", tokenLine(a, "a", "harness")+tokenLine(b, "b", "harness")+tokenLine(op, "*", "operator"), 0o600)
	args := []string{"--mode", "local", "--state-dir", state, "--tokens-file", tokens}
	s1 := startServe(t, serveOpts{args: args, env: adoptEnv})
	run := s1.openKept(a, fmt.Sprintf(`{"sandbox":"host","workspace":%q}`, ws))
	if res, r := s1.call(a, run, "read", `{"path":"secret.txt"}`); r.status != http.StatusOK || !strings.Contains(res.Text(), "secret") {
		t.Fatalf("read: %s %s", r, res.Text())
	}
	if err := s1.Stop(); err != nil {
		t.Fatalf("berth serve: %v\n%s", err, s1.log())
	}

	// The tamper: tenant b's name written into a's record, in place.
	db, err := bolt.Open(filepath.Join(state, runstore.DBFile), 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte("runs"))
		var rec map[string]any
		if err := json.Unmarshal(bk.Get([]byte(run)), &rec); err != nil {
			return err
		}
		if rec["tenant"] != "a" {
			return fmt.Errorf("the stored record's tenant is %v, not a", rec["tenant"])
		}
		rec["tenant"] = "b"
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return bk.Put([]byte(run), v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s2 := startServe(t, serveOpts{args: args, env: adoptEnv})
	if r := s2.do("POST", "/v1/runs/"+run+"/tools/read", b, `{"args":{"path":"secret.txt"}}`); r.status != http.StatusNotFound || r.code() != "unknown_run" {
		t.Errorf("tenant b, named by the tampered record, reads through the tampered run: %s; want 404 unknown_run", r)
	}
	if r := s2.do("POST", "/v1/runs/"+run+"/tools/read", a, `{"args":{"path":"secret.txt"}}`); r.status != http.StatusGone || !strings.Contains(string(r.body), "integrity") || strings.Contains(string(r.body), "a's secret") {
		t.Errorf("tenant a, whose run it was, reads through the tampered run: %s; want 410 saying its record failed its integrity check, and not the file", r)
	}
	r := s2.do("GET", "/v1/runs/"+run, op, "")
	if r.status != http.StatusGone || !strings.Contains(string(r.body), "integrity") {
		t.Errorf("the operator looks the tampered run up: %s; want 410 saying its record failed its integrity check", r)
	}
	if log := s2.log(); !strings.Contains(log, run) || !strings.Contains(log, "integrity") || !strings.Contains(log, "level=ERROR") {
		t.Errorf("berth's log does not report the tampered record at error level with its id:\n%s", log)
	}
}
