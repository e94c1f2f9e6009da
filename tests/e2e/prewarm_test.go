package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tests/berthtest"
	"berth.dev/berth/tools/lsp/lsptest"
)

// resourceState reads the run's resources and returns the state of the one
// of kind named name ("" when it has none).
func resourceState(t *testing.T, c *berthtest.Client, run, kind, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, b, err := c.Do(ctx, "GET", "/v1/runs/"+run+"/resources", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rs struct {
		Resources []struct{ Kind, Name, State string }
	}
	json.Unmarshal(b, &rs)
	for _, r := range rs.Resources {
		if r.Kind == kind && r.Name == name {
			return r.State
		}
	}
	return ""
}

// kernelState is the state of the run's python kernel.
func kernelState(t *testing.T, c *berthtest.Client, run string) string {
	t.Helper()
	return resourceState(t, c, run, "kernel", "python")
}

// TestPrewarmInContainer: a run opened with "prewarm": ["python"] starts
// its kernel in the container as it opens (resources: starting, then
// running), and the first cell runs in that kernel — one kernel in the
// container. In hosted mode the start is a permission card for the
// operator (summary {"prewarm":"python"}) once someone follows the run's
// events; "allow for this run" there lets the first cell run at once.
func TestPrewarmInContainer(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	durableBackend(t)
	ctr := startContainer(t, image)
	spec := durableSpec(ctr)
	spec["prewarm"] = []string{"python"}

	t.Run("local", func(t *testing.T) {
		_, c := durableBerth(t, "")
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		run, err := c.OpenRun(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "the prewarmed kernel to run", func() bool { return kernelState(t, c, run.ID) == "running" },
			func() string { return kernelState(t, c, run.ID) })
		_, kern := berthProcs(t, ctr)
		if len(kern) != 1 {
			t.Fatalf("kernels in the container after the prewarm: %q, want one", kern)
		}
		if got := evalText(t, c, run.ID, "import os; os.getpid()"); !strings.Contains(kern[0], strings.TrimSpace(got)) {
			t.Errorf("the first cell ran in pid %s, not the prewarmed kernel %s", got, kern[0])
		}
		if _, kern := berthProcs(t, ctr); len(kern) != 1 {
			t.Errorf("kernels after the first cell: %q, want the prewarmed one only", kern)
		}
		c.CloseRun(ctx, run.ID)
	})

	t.Run("hosted", func(t *testing.T) {
		const harness, operator = "prewarm-harness", "prewarm-operator"
		args := []string{"--mode", "hosted", "--label-key", labelKey}
		args = append(args, backendArgs()...)
		s := berthtest.Start(t, berthtest.Options{Args: args, Env: []string{"BERTH_TOKEN=" + harness, "BERTH_OPERATOR_TOKEN=" + operator}})
		c := &berthtest.Client{URL: s.URL, Token: harness}
		op := &berthtest.Client{URL: s.URL, Token: operator}
		ctx, cancel := context.WithTimeout(context.Background(), 2*callTimeout)
		defer cancel()
		run, err := c.OpenRun(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if st := kernelState(t, c, run.ID); st != "starting" {
			t.Fatalf("before anyone approved, the kernel is %q, want starting (waiting for approval)", st)
		}
		// The operator follows the run's events and allows eval for the run.
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/runs/"+run.ID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+operator)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		n := 0
		for n == 0 && sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || !strings.Contains(d, `"kind":"permission"`) {
				continue
			}
			var card struct {
				N       int
				Tool    string
				Summary string
			}
			json.Unmarshal([]byte(d), &card)
			if card.Tool != "eval" || !strings.Contains(card.Summary, `"prewarm":"python"`) {
				t.Fatalf("the prewarm's card: %s", d)
			}
			n = card.N
		}
		if n == 0 {
			t.Fatalf("no permission card for the prewarm on the run's events: %v", sc.Err())
		}
		if st, b, err := op.Do(ctx, "POST", fmt.Sprintf("/v1/runs/%s/cards/%d", run.ID, n), map[string]any{"decision": "allow_run"}); err != nil || st != 200 {
			t.Fatalf("allow_run: %d %s %v", st, b, err)
		}
		waitFor(t, 2*time.Minute, "the approved kernel to run", func() bool { return kernelState(t, c, run.ID) == "running" },
			func() string { return kernelState(t, c, run.ID) })
		// Allowed for the run: the first cell runs with no card.
		if got := evalText(t, c, run.ID, "6 * 7"); !strings.Contains(got, "42") {
			t.Fatalf("the first cell: %s", got)
		}
		c.CloseRun(ctx, run.ID)
	})
}

// TestPrewarmLanguageServer: a run opened with "prewarm": ["lsp:go",
// "lsp:python"] in a Go project starts gopls in the container as it opens,
// before any lsp call (resources: starting, then running; one gopls in the
// container), and the first lsp call is answered by it. The image has no
// Python server: the first lsp result says that prewarm could not start
// one, and why.
func TestPrewarmLanguageServer(t *testing.T) {
	const image = "berth-test-go"
	needImage(t, image, false)
	durableBackend(t)
	ctr := startContainer(t, image)
	for name, content := range lsptest.GoProject {
		ctr.put(t, name, content)
	}
	spec := durableSpec(ctr)
	spec["prewarm"] = []string{"lsp:go", "lsp:python"}
	_, c := durableBerth(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*callTimeout)
	defer cancel()
	run, err := c.OpenRun(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	state := func() string { return resourceState(t, c, run.ID, "language server", "gopls at the workspace root") }
	waitFor(t, 2*time.Minute, "the prewarmed gopls to run", func() bool { return state() == "running" }, state)
	goplses := func() (n int) {
		for _, p := range ctr.procTable(t) {
			if p.comm == "gopls" && strings.HasSuffix(p.args, "gopls serve") { // not its telemetry child
				n++
			}
		}
		return n
	}
	if n := goplses(); n != 1 {
		t.Fatalf("gopls processes in the container after the prewarm: %d, want 1: %v", n, ctr.procTable(t))
	}
	res, err := c.Call(ctx, run.ID, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Text()
	if res.IsError || !strings.Contains(text, "func greet.Hello") {
		t.Fatalf("the first lsp call: %s", text)
	}
	if !strings.Contains(text, "the python language server asked for when the run opened (prewarm) was not started: pyright: binary missing") || strings.Contains(text, "berth-prewarm") {
		t.Errorf("the first lsp result does not say the python server was not prewarmed:\n%s", text)
	}
	if n := goplses(); n != 1 {
		t.Errorf("gopls processes after the first call: %d, want the prewarmed one", n)
	}
	res, _ = c.Call(ctx, run.ID, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"})
	if strings.Contains(res.Text(), "prewarm") {
		t.Errorf("the prewarm note is given twice:\n%s", res.Text())
	}
	c.CloseRun(ctx, run.ID)
}
