package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"berth.dev/berth/tests/berthtest"
	"berth.dev/berth/tools/debug/debugtest"
)

// Runs that outlive berth (docs/design.md, "Main flows"): the test
// plays the platform, starts the real `berth serve` on a state directory,
// kills it (SIGKILL, as a crash or an OOM kill; SIGTERM, as a rollout) and
// starts it again on the same directory; the run's kernel keeps its
// variables and nothing runs twice in the container.

// durableToken is the bearer token of the berth serve these tests start.
const durableToken = "durable-e2e-token"

// durableBerth starts berth serve in local mode on stateDir with extra
// flags.
func durableBerth(t *testing.T, stateDir string, flags ...string) (*berthtest.Server, *berthtest.Client) {
	t.Helper()
	return durableBerthEnv(t, stateDir, nil, flags...)
}

// durableBerthEnv is durableBerth with env added to berth's environment.
func durableBerthEnv(t *testing.T, stateDir string, env []string, flags ...string) (*berthtest.Server, *berthtest.Client) {
	t.Helper()
	args := append([]string{"--mode", "local", "--state-dir", stateDir, "--label-key", labelKey}, flags...)
	args = append(args, backendArgs()...)
	s := berthtest.Start(t, berthtest.Options{Args: args, Env: append([]string{"BERTH_TOKEN=" + durableToken}, env...)})
	return s, &berthtest.Client{URL: s.URL, Token: durableToken}
}

// backendArgs are the flags of a berth serve the test starts for the
// suite's backend.
func backendArgs() []string {
	switch backend() {
	case backendContainerd:
		// dockerd's labels are not in containerd: runs name their container.
		return []string{"--containerd-address", dockerContainerd, "--allow-unlabelled"}
	case backendKube:
		// The pods of the suite's namespace, through the API server of
		// $KUBECONFIG; runs name their pod.
		return []string{"--kube", "api", "--kube-namespaces", kubeNamespace, "--allow-unlabelled"}
	}
	return nil
}

// durableRun is a run of a berth serve on a state directory in a
// container, with x = 41 set in its Python kernel.
type durableRun struct {
	ctr    *container
	state  string
	server *berthtest.Server
	client *berthtest.Client
	run    berthtest.RunInfo
}

// startDurable starts a container, berth serve (with flags) on a new
// state directory, a run in the container, and x = 41 in its kernel.
func startDurable(t *testing.T, flags ...string) durableRun {
	t.Helper()
	const image = "berth-test-python"
	needImage(t, image, false)
	durableBackend(t)
	d := durableRun{ctr: startContainer(t, image), state: t.TempDir()}
	d.server, d.client = durableBerth(t, d.state, flags...)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var err error
	if d.run, err = d.client.OpenRun(ctx, durableSpec(d.ctr)); err != nil {
		t.Fatal(err)
	}
	evalText(t, d.client, d.run.ID, "x = 41")
	return d
}

// answersGone fails unless a cell in run answers 410 sandbox_gone with
// want in its message; what names the case.
func answersGone(t *testing.T, c *berthtest.Client, run, what, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	st, body, err := c.Do(ctx, "POST", "/v1/runs/"+run+"/tools/eval", map[string]any{"args": map[string]any{"code": "x", "description": "read x after the run was lost"}})
	if err != nil {
		t.Fatal(err)
	}
	if st != http.StatusGone || !strings.Contains(string(body), "sandbox_gone") || !strings.Contains(string(body), want) {
		t.Fatalf("%s: a call answered %d %s; want 410 sandbox_gone saying %q", what, st, body, want)
	}
}

// durableSpec is the run of ctr: found by its label on Docker, named by
// its containerd reference through containerd.
func durableSpec(ctr *container) map[string]any {
	spec := map[string]any{"conversation_id": ctr.conv, "workspace": workspace}
	if backend() != backendDocker {
		spec["sandbox"] = ctr.ref
	}
	return spec
}

// durableBackend skips as a node agent: these tests start berth serve
// themselves, outside the cluster, which reaches pods through the API
// server (kube) but not through a node's containerd.
func durableBackend(t *testing.T) {
	t.Helper()
	if backend() == backendKubeNode {
		t.Skip("berth serve started by the test reaches pods through the API server, not as a node agent")
	}
}

// evalText runs a Python cell and returns its text, failing on an error.
func evalText(t *testing.T, c *berthtest.Client, run, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := c.Call(ctx, run, "eval", map[string]any{"code": code, "description": "compute a value for the durable run test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("eval %q: %s", code, res.Text())
	}
	return res.Text()
}

// berthProcs lists the container's resident supervisors (their keepers)
// and the interpreters of its kernels and debug adapters.
func berthProcs(t *testing.T, ctr *container) (residents, kernels []string) {
	t.Helper()
	for _, p := range ctr.procTable(t) {
		if p.comm != "berth-shim" && strings.Contains(p.args, "debugpy.adapter") {
			kernels = append(kernels, p.String()) // counted with the kernels: one each
		}
		switch {
		case strings.Contains(p.args, " resident "): // the keeper of the run's resident supervisor
			residents = append(residents, p.String())
		case p.comm != "berth-shim" && strings.Contains(p.args, "ipykernel_launcher"):
			kernels = append(kernels, p.String())
		}
	}
	return residents, kernels
}

// oneOfEach fails unless exactly one resident supervisor and n
// interpreters (a kernel, and a debug adapter when n is 2) run in the
// container.
func oneOfEach(t *testing.T, ctr *container, when string, n int) {
	t.Helper()
	res, kern := berthProcs(t, ctr)
	if len(res) != 1 || len(kern) != n {
		t.Fatalf("%s: want one resident supervisor and %d kernels and adapters in the container, got residents %q, kernels and adapters %q; all: %v", when, n, res, kern, ctr.procTable(t))
	}
}

func TestRunSurvivesBerthRestart(t *testing.T) {
	d := startDurable(t)
	ctr, state, s1, c1, info := d.ctr, d.state, d.server, d.client, d.run
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	ctr.put(t, "requirements.txt", "")
	ctr.put(t, "app/main.py", debugtest.PyProgram)
	debugCall(t, c1, info.ID, map[string]any{"op": "breakpoints", "file": "app/main.py", "lines": []any{7, 11}})
	debugCall(t, c1, info.ID, map[string]any{"op": "launch", "program": "app/main.py"}, "stopped at app/main.py:7")
	oneOfEach(t, ctr, "before the restart", 2)
	editID := stageEdit(t, c1, info.ID)
	card := openCard(t, c1, info.ID)

	// A crash: nothing is flushed, nothing detaches.
	s1.Kill()
	s2, c2 := durableBerth(t, state)
	got := evalText(t, c2, info.ID, "x + 1")
	if !strings.Contains(got, "42") {
		t.Fatalf("after berth was killed and started again, x + 1 = %q; want 42 (the kernel kept)", got)
	}
	if !strings.Contains(got, "berth restarted") {
		t.Errorf("the first result after the restart does not say the kernel was kept: %q", got)
	}
	oneOfEach(t, ctr, "after a SIGKILL restart", 2)
	// Language servers start again, and the first lsp result says so.
	if res, err := c2.Call(ctx, info.ID, "lsp", map[string]any{"action": "status"}); err != nil || !strings.Contains(res.Text(), "berth restarted") {
		t.Errorf("the first lsp result after the restart does not say berth restarted: %v %s", err, res.Text())
	}
	// The debug session is still stopped where it was, and goes on.
	debugCall(t, c2, info.ID, map[string]any{"op": "status"}, "app/main.py:7")
	debugCall(t, c2, info.ID, map[string]any{"op": "continue"}, "stopped at app/main.py:11")
	// The staged edit is still there to accept.
	res, err := c2.Call(ctx, info.ID, "resolve", map[string]any{"edit_id": editID, "action": "accept"})
	if err != nil || res.IsError {
		t.Fatalf("resolve accept of the edit staged before the restart: %v %s", err, res.Text())
	}
	if got := ctr.cat(t, workspace+"/dup.py"); got != "x = 2\nx = 2\n" {
		t.Fatalf("dup.py after accepting the staged edit: %q", got)
	}
	answerRestoredCard(t, c2, info.ID, card)

	// A rollout: SIGTERM detaches, the next berth adopts.
	if err := s2.Stop(); err != nil {
		t.Fatalf("berth did not exit cleanly on SIGTERM: %v", err)
	}
	_, c3 := durableBerth(t, state)
	if got := evalText(t, c3, info.ID, "x + 2"); !strings.Contains(got, "43") {
		t.Fatalf("after a SIGTERM restart, x + 2 = %q; want 43", got)
	}
	oneOfEach(t, ctr, "after a SIGTERM restart", 2)
	debugCall(t, c3, info.ID, map[string]any{"op": "status"}, "app/main.py:11")
	debugCall(t, c3, info.ID, map[string]any{"op": "continue"}, "stopped at app/main.py:11") // the loop comes round again

	// The run's close ends everything of it in the container.
	if err := c3.CloseRun(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the run's resident supervisor and kernel to end after DELETE", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })
	if out := ctr.sh(t, "ls -d /tmp/berth-run-* 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("the run's resident directory is left after DELETE: %s", out)
	}
	noZombies(t, ctr)
}

func TestResidentGraceEndsEverything(t *testing.T) {
	d := startDurable(t, "--resident-grace", "3s")
	ctr := d.ctr
	oneOfEach(t, ctr, "before berth went away", 1)
	// A language server runs too, outside the resident (language servers
	// do not outlive berth), and a file server served the write.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if res, err := d.client.Call(ctx, d.run.ID, "write", map[string]any{"path": "main.py", "content": "hello = 1\n"}); err != nil || res.IsError {
		t.Fatalf("write: %v %s", err, res.Text())
	}
	if res, err := d.client.Call(ctx, d.run.ID, "lsp", map[string]any{"action": "hover", "file": "main.py", "line": 1, "symbol": "hello"}); err != nil || res.IsError {
		t.Fatalf("lsp hover: %v %s", err, res.Text())
	}
	d.server.Kill()
	waitFor(t, time.Minute, "the resident supervisor to end its kernel and itself after its grace (and, through containerd, after the dead berth's hold went silent)", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })
	if out := ctr.sh(t, "ls -d /tmp/berth-run-* 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("the resident directory is left after the grace: %s", out)
	}
	// Nothing berth started is left: not the language server, nor the
	// file servers and relays the dead berth had open (through containerd
	// its streams stay open: they count berth's silence), only the
	// container's own process.
	waitFor(t, time.Minute, "every process berth started in the container to end after berth was killed", func() bool {
		for _, p := range ctr.procTable(t) {
			if p.pid != 1 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })
	noZombies(t, ctr)

	// The next berth finds the run's resident gone but its container
	// alive: the run is taken over, its next result says the kernel's
	// state was lost, and a new kernel answers.
	_, c2 := durableBerth(t, d.state)
	answersLost(t, c2, ctr, d.run.ID, "the resident ended after its grace", "grace")
}

// answersLost: a run whose resident was gone when berth restarted is
// taken over; its first eval says the kernel's state is lost (x is not
// defined) and why, once; a new resident and kernel then serve it.
func answersLost(t *testing.T, c *berthtest.Client, ctr *container, run, what, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := c.Call(ctx, run, "eval", map[string]any{"code": "x", "description": "read x after the resident was lost"})
	if err != nil {
		t.Fatalf("%s: the run is not served: %v", what, err)
	}
	if txt := res.Text(); !strings.Contains(txt, "NameError") || !strings.Contains(txt, "resident supervisor no longer ran") || !strings.Contains(txt, "state is lost") || !strings.Contains(txt, want) {
		t.Fatalf("%s: the first eval says %q; want a NameError for x and the note that the resident was gone (%q) and its state lost", what, txt, want)
	}
	if txt := evalText(t, c, run, "x = 5\nprint(x * 2)"); !strings.Contains(txt, "10") || strings.Contains(txt, "state is lost") {
		t.Fatalf("%s: the next eval: %q; want 10 and no second note", what, txt)
	}
	oneOfEach(t, ctr, what+", after the next eval", 1)
}

// TestResidentKilledWhileBerthWasDown: the run's resident is killed (kill
// -9) while no berth runs; the next berth takes the run over, says once
// what was lost, and places a new resident. Before, the run was 410.
func TestResidentKilledWhileBerthWasDown(t *testing.T) {
	d := startDurable(t)
	d.server.Kill()
	var keeper int
	for _, p := range d.ctr.procTable(t) {
		if strings.Contains(p.args, " resident ") {
			keeper = p.pid
		}
	}
	if keeper == 0 {
		t.Fatalf("no resident supervisor in the container: %v", d.ctr.procTable(t))
	}
	d.ctr.sh(t, fmt.Sprintf("kill -9 %d", keeper))
	waitFor(t, time.Minute, "the killed resident's kernel to end", func() bool {
		res, kern := berthProcs(t, d.ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(d.ctr.procTable(t)) })
	_, c2 := durableBerth(t, d.state)
	answersLost(t, c2, d.ctr, d.run.ID, "the resident was killed while berth was down", "killed")
}

func TestContainerRestartedWhileBerthWasDown(t *testing.T) {
	if onKube() {
		t.Skip("a pod's container is restarted by the kubelet, not by the test")
	}
	d := startDurable(t)
	d.server.Kill()
	mustDocker(t, "restart", "-t", "1", d.ctr.id)
	_, c2 := durableBerth(t, d.state)
	answersLost(t, c2, d.ctr, d.run.ID, "the container restarted while berth was down", "restarted")
}

func TestSecondBerthOnOneStateDirRefused(t *testing.T) {
	state := t.TempDir()
	durableBerth(t, state)
	bin := berthtest.Build(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--mode", "local", "--state-dir", state)
	cmd.Env = append(os.Environ(), "BERTH_TOKEN="+durableToken)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a second berth on the same state directory started: %s", out)
	}
	if !strings.Contains(string(out), filepath.Base(state)) || !strings.Contains(string(out), "--state-dir") {
		t.Fatalf("the second berth's refusal does not name the directory and say what to do: %s", out)
	}
}

// debugCall calls debug with args and wants a result holding every one of
// want.
func debugCall(t *testing.T, c *berthtest.Client, run string, args map[string]any, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := c.Call(ctx, run, "debug", args)
	if err != nil || res.IsError {
		t.Fatalf("debug %v: %v %s", args, err, res.Text())
	}
	for _, w := range want {
		if !strings.Contains(res.Text(), w) {
			t.Fatalf("debug %v: want %q in:\n%s", args, w, res.Text())
		}
	}
	return res.Text()
}

// stageEdit stages an ast_edit of dup.py ("x = 1" twice → "x = 2") and
// returns its id.
func stageEdit(t *testing.T, c *berthtest.Client, run string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := c.Call(ctx, run, "ast_edit", map[string]any{"pattern": "x = 1", "rewrite": "x = 2", "path": "dup.py"})
	if err != nil || res.IsError {
		t.Fatalf("ast_edit: %v %s", err, res.Text())
	}
	id := regexp.MustCompile(`edit_\d+`).FindString(res.Text())
	if id == "" {
		t.Fatalf("ast_edit's result names no edit id: %s", res.Text())
	}
	return id
}

// askArgs is the question the card test asks, before and after the restart.
var askArgs = map[string]any{"question": "Which database should the service use?",
	"options": []map[string]any{{"label": "sqlite"}, {"label": "postgres"}}}

// openCard asks a question with an event subscriber connected, as a
// harness does, and returns the card's number once it is open; the call
// stays blocked on it until berth dies.
func openCard(t *testing.T, c *berthtest.Client, run string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", c.URL+"/v1/runs/"+run+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	go func() { // ends when berth dies or the test ends
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	go c.Do(ctx, "POST", "/v1/runs/"+run+"/tools/ask_user", map[string]any{"args": askArgs}) // blocked until berth dies
	var n int
	waitFor(t, 30*time.Second, "the question card to open", func() bool {
		_, b, err := c.Do(ctx, "GET", "/v1/runs/"+run+"/cards", nil)
		var cards struct{ Cards []struct{ N int } }
		if err == nil && json.Unmarshal(b, &cards) == nil && len(cards.Cards) > 0 {
			n = cards.Cards[0].N
		}
		return n > 0
	}, nil)
	// The persister writes a card opened while its call is in flight
	// within its interval (200 ms); give it that and room.
	time.Sleep(time.Second)
	return n
}

// answerRestoredCard answers, on the restarted berth, the card opened
// before the restart, and retries the question as the harness whose call
// died does: the retry gets the answer without a new card.
func answerRestoredCard(t *testing.T, c *berthtest.Client, run string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	st, b, err := c.Do(ctx, "POST", fmt.Sprintf("/v1/runs/%s/cards/%d", run, n), map[string]any{"choice": []string{"sqlite"}})
	if err != nil || st != http.StatusOK {
		t.Fatalf("answering card %d after the restart: %d %s %v", n, st, b, err)
	}
	res, err := c.Call(ctx, run, "ask_user", askArgs)
	if err != nil || res.IsError {
		t.Fatalf("the retried ask_user: %v %s", err, res.Text())
	}
	if !strings.Contains(res.Text(), "sqlite") || !strings.Contains(res.Text(), "before berth restarted") {
		t.Fatalf("the retried question did not get the answer given to the card asked before the restart: %s", res.Text())
	}
}

// waitFor polls cond until it holds or within passes; then it fails
// with what state (when not nil) says.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	for deadline := time.Now().Add(within); ; {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			msg := ""
			if state != nil {
				msg = ": " + state()
			}
			t.Fatalf("waited %s for %s%s", within, what, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDamagedStoreLeavesNoOrphan: berth dies, its store's file is damaged
// (both meta pages overwritten), and the next berth starts anyway: it
// says which runs it could still read, ends their resident supervisors —
// nothing of the run is left in the container — and answers their ids
// with sandbox_gone.
func TestDamagedStoreLeavesNoOrphan(t *testing.T) {
	d := startDurable(t)
	ctr, info := d.ctr, d.run
	d.server.Kill()
	db := filepath.Join(d.state, "runs.db")
	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil { // both meta pages
		t.Fatal(err)
	}
	f.Close()

	s2, c2 := durableBerth(t, d.state)
	waitFor(t, 30*time.Second, "the run's resident supervisor and kernel to be ended by the berth that found the store damaged", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })
	if log := s2.Log(); !strings.Contains(log, info.ID) || !strings.Contains(log, "damaged") {
		t.Errorf("berth's log does not say the store was damaged and name the run it could not adopt:\n%s", log)
	}
	answersGone(t, c2, info.ID, "the run store was damaged", "damaged")
	if matches, _ := filepath.Glob(db + ".corrupt-*"); len(matches) != 1 {
		t.Errorf("the damaged file was not kept aside: %v", matches)
	}
}

// damageRecord flips one byte of every copy of run id's stored record in
// the store's file, in place, as a disk's damage does: bbolt's pages stay
// whole, the record's bytes do not (its MAC no longer matches).
func damageRecord(t *testing.T, state, id string) {
	t.Helper()
	path := filepath.Join(state, "runs.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var v []byte
	db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("runs")); b != nil {
			v = bytes.Clone(b.Get([]byte(id)))
		}
		return nil
	})
	db.Close()
	if len(v) < 64 {
		t.Fatalf("run %s has no record in %s", id, path)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; ; {
		j := bytes.Index(file[i:], v)
		if j < 0 {
			break
		}
		file[i+j+len(v)/2] ^= 0x01
		i += j + len(v)
		n++
	}
	if n == 0 {
		t.Fatalf("run %s's record is not in %s as stored", id, path)
	}
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedRecordLeavesNoOrphan: berth dies and one byte of its run's
// record is damaged in the store's file. The next berth does not lose
// the run without a word: its log reports the record at error level with
// the run's id, the record is kept aside in the state directory's
// damaged/, the run answers 410 saying its record was damaged, and its
// resident supervisor and kernel are ended at once (the store's sealed
// index still names them), not after the resident's grace (ten minutes
// by default).
func TestDamagedRecordLeavesNoOrphan(t *testing.T) {
	d := startDurable(t)
	ctr, info := d.ctr, d.run
	oneOfEach(t, ctr, "before berth was killed", 1)
	d.server.Kill()
	damageRecord(t, d.state, info.ID)

	s2, c2 := durableBerth(t, d.state)
	waitFor(t, 30*time.Second, "the resident supervisor and kernel of the run whose record was damaged to be ended", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) + "\n" + s2.Log() })
	answersGone(t, c2, info.ID, "the run's record was damaged", "damaged")
	reported := false
	for _, line := range strings.Split(s2.Log(), "\n") {
		reported = reported || strings.Contains(line, "level=ERROR") && strings.Contains(line, info.ID) && strings.Contains(line, "damaged")
	}
	if !reported {
		t.Errorf("berth's log does not report the damaged record at error level with the run's id:\n%s", s2.Log())
	}
	if kept, _ := filepath.Glob(filepath.Join(d.state, "damaged", info.ID+".*")); len(kept) != 1 {
		t.Errorf("the damaged record was not kept aside in damaged/: %v", kept)
	}
}

// TestEmptyStoreReported: berth dies and its store's file is truncated
// to nothing. The next berth says so at error level and keeps the empty
// file aside rather than writing a new store over it, serves new runs,
// and the lost run's resident supervisor, which nothing names any more,
// ends its kernel after its grace (3s here).
func TestEmptyStoreReported(t *testing.T) {
	d := startDurable(t, "--resident-grace", "3s")
	ctr := d.ctr
	oneOfEach(t, ctr, "before berth was killed", 1)
	d.server.Kill()
	db := filepath.Join(d.state, "runs.db")
	if err := os.Truncate(db, 0); err != nil {
		t.Fatal(err)
	}

	s2, c2 := durableBerth(t, d.state)
	reported := false
	for _, line := range strings.Split(s2.Log(), "\n") {
		reported = reported || strings.Contains(line, "level=ERROR") && strings.Contains(line, "run store damaged") && strings.Contains(line, "empty (0 bytes)")
	}
	if !reported {
		t.Errorf("berth's log does not report the emptied store at error level:\n%s", s2.Log())
	}
	if matches, _ := filepath.Glob(db + ".corrupt-*"); len(matches) != 1 {
		t.Errorf("the emptied file was not kept aside: %v", matches)
	}
	waitFor(t, time.Minute, "the lost run's resident supervisor to end its kernel and itself after its grace", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	run, err := c2.OpenRun(ctx, durableSpec(ctr))
	if err != nil {
		t.Fatalf("a new run after the store was found empty: %v\n%s", err, s2.Log())
	}
	if got := evalText(t, c2, run.ID, "print(6 * 7)"); !strings.Contains(got, "42") {
		t.Errorf("a cell of the new run printed %q", got)
	}
}
