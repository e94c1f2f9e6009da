package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tests/berthtest"
)

// inspector runs the MCP Inspector's CLI mode (@modelcontextprotocol/inspector,
// installed by tests/run: BERTH_MCP_INSPECTOR) with args, and returns its
// stdout (with stderr when it failed) and whether it exited 0.
func inspector(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	bin := os.Getenv("BERTH_MCP_INSPECTOR")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("BERTH_MCP_INSPECTOR is not set: tests/run installs @modelcontextprotocol/inspector and sets it")
		}
		t.Skip("BERTH_MCP_INSPECTOR is not set (tests/run installs @modelcontextprotocol/inspector and sets it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--cli"}, args...)...)
	// Its catalog lives under HOME: keep it in the test's directory.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// A failure is reported on stderr, as JSON.
		return string(out) + stderr.String(), false
	}
	return string(out), true
}

// TestInspectorCLI: the MCP Inspector's CLI lists berth's tools and calls
// read, ast_grep, lsp and eval over Streamable HTTP (berth serve) and over
// stdio (berth mcp); on a plan surface it finds no write to call. (Its CLI
// has no elicitation handler: ask_user by elicitation is shown with the
// go-sdk and TypeScript clients.)
func TestInspectorCLI(t *testing.T) {
	ws := workspace(t)
	calls := []struct {
		tool string
		args []string
		want string
	}{
		{"read", []string{"path=a.txt"}, "hello from the workspace"},
		{"ast_grep", []string{"pattern=add($A, $B)", "language=python"}, "m.py:5"},
		{"lsp", []string{"action=hover", "file=m.py", "line=5", "symbol=add"}, "add(a, b)"},
		{"eval", []string{"code=6 * 7", "description=multiply six by seven in the kernel"}, "42"},
	}
	// A target puts a method's arguments where the CLI wants them.
	type target func(method ...string) []string
	check := func(t *testing.T, on, plan target) {
		out, ok := inspector(t, on("--method", "tools/list")...)
		var list struct{ Tools []struct{ Name string } }
		if !ok || json.Unmarshal([]byte(out), &list) != nil || len(list.Tools) == 0 {
			t.Fatalf("tools/list: %s", out)
		}
		for _, c := range calls {
			out, ok := inspector(t, on(append([]string{"--method", "tools/call", "--tool-name", c.tool, "--tool-arg"}, c.args...)...)...)
			var res struct {
				Content []struct{ Text string }
				IsError bool
			}
			if !ok || json.Unmarshal([]byte(out), &res) != nil || res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, c.want) {
				t.Errorf("%s: want %q, got %s", c.tool, c.want, out)
			}
		}
		out, ok = inspector(t, plan("--method", "tools/call", "--tool-name", "write", "--tool-arg", "path=b.txt", "content=x")...)
		if ok || !strings.Contains(out, "write") {
			t.Errorf("write on the plan surface: want a failure naming write, got ok=%v %s", ok, out)
		}
		if _, err := os.Stat(ws + "/b.txt"); !os.IsNotExist(err) {
			t.Errorf("the plan surface wrote b.txt (stat: %v)", err)
		}
	}
	t.Run("http", func(t *testing.T) {
		tn := startServe(t)
		api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
		run, err := api.OpenRun(context.Background(), map[string]any{"sandbox": "host", "workspace": ws})
		if err != nil {
			t.Fatal(err)
		}
		endpoint := tn.s.URL + "/v1/runs/" + run.ID + "/mcp"
		// The URL first, the method, then --header (which takes every
		// value after it).
		at := func(url string) target {
			return func(method ...string) []string {
				return append(append([]string{url}, method...), "--transport", "http", "--header", "Authorization: Bearer "+tn.a)
			}
		}
		check(t, at(endpoint), at(endpoint+"?surface=plan"))
	})
	t.Run("stdio", func(t *testing.T) {
		bin := berthtest.Build(t)
		// The method first, the server's command last, after "--".
		at := func(mode string) target {
			return func(method ...string) []string {
				return append(append([]string{}, method...), "--", bin, "mcp", "--sandbox", "host", "--workspace", ws, "--mode", mode)
			}
		}
		check(t, at("default"), at("plan"))
	})
}
