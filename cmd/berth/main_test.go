package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes berth with args and returns stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	code := report(&errb, root.ExecuteContext(context.Background()))
	return out.String(), errb.String(), code
}

func workspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# hello\nberth\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// noDocker points the Docker provider at a socket that does not exist, so
// the tests behave as on a machine without a container engine.
var noDocker = "--docker-host=unix:///nonexistent/docker.sock"

func TestCall(t *testing.T) {
	dir := workspace(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStdout bool
	}{
		{name: "read", args: []string{"call", noDocker, "--workspace", dir, "read", `{"path":"README.md"}`},
			stdout: []string{"# hello", "berth"}},
		{name: "read with a conversation and no engine falls back to host",
			args:   []string{"call", noDocker, "--conversation", "c-1", "--workspace", dir, "read", `{"path":"README.md"}`},
			stdout: []string{"# hello"}, stderr: []string{"unreachable"}},
		{name: "json", args: []string{"call", noDocker, "--workspace", dir, "--json", "read", `{"path":"README.md"}`},
			stdout: []string{`"type": "text"`, "# hello"}},
		{name: "missing file is a tool error", args: []string{"call", noDocker, "--workspace", dir, "read", `{"path":"nope.md"}`},
			code: 1, stderr: []string{"nope.md"}, noStdout: true},
		{name: "missing file with json", args: []string{"call", noDocker, "--workspace", dir, "--json", "read", `{"path":"nope.md"}`},
			code: 1, stdout: []string{`"isError": true`}},
		{name: "escape", args: []string{"call", noDocker, "--workspace", dir, "read", `{"path":"../etc/passwd"}`},
			code: 1, stderr: []string{"outside the workspace"}, noStdout: true},
		{name: "unknown tool", args: []string{"call", noDocker, "--workspace", dir, "rm", `{}`},
			code: 1, stderr: []string{"unknown tool", "rm"}, noStdout: true},
		{name: "denied on plan", args: []string{"call", noDocker, "--workspace", dir, "--surface", "plan", "write", `{"path":"x","content":"y"}`},
			code: 1, stderr: []string{"denied"}, noStdout: true},
		{name: "bad surface", args: []string{"call", noDocker, "--workspace", dir, "--surface", "root", "read", `{}`},
			code: 1, stderr: []string{"unknown surface"}},
		{name: "bad json", args: []string{"call", noDocker, "--workspace", dir, "read", `{"path":`},
			code: 1, stderr: []string{"not valid JSON"}},
		{name: "docker unreachable", args: []string{"call", noDocker, "--sandbox", "docker://c1", "--workspace", "/w", "read", `{}`},
			code: 1, stderr: []string{"cannot reach the Docker engine", "docker://c1"}},
		{name: "no host fallback", args: []string{"call", noDocker, "--no-host-fallback", "--conversation", "c-9", "read", `{}`},
			code: 1, stderr: []string{"host fallback is disabled", "berth.conversation=c-9"}},
		{name: "no args", args: []string{"call"}, code: 1, stderr: []string{"arg"}},
		{name: "bad kube mode", args: []string{"call", noDocker, "--kube", "cluster", "--workspace", dir, "read", `{}`},
			code: 1, stderr: []string{`--kube "cluster"`, "api, node, off or auto"}},
		{name: "node mode without containerd", args: []string{"call", noDocker, "--kube", "node", "--containerd-address", "/nonexistent/c.sock", "--workspace", dir, "read", `{}`},
			code: 1, stderr: []string{"--kube node", "--containerd-address"}},
		{name: "api mode without a cluster", args: []string{"call", noDocker, "--kube", "api", "--workspace", dir, "read", `{}`},
			code: 1, stderr: []string{"--kube api"}},
		{name: "kube pod without kube", args: []string{"call", noDocker, "--kube", "off", "--sandbox", "kube://default/web", "--workspace", "/w", "read", `{}`},
			code: 1, stderr: []string{"no kube provider is configured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := run(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errs, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errs)
				}
			}
			if tt.noStdout && out != "" {
				t.Errorf("stdout should be empty, got %q", out)
			}
		})
	}
}

func TestCallWritesAndDefaultsToCwd(t *testing.T) {
	dir := workspace(t)
	t.Chdir(dir)
	if out, errs, code := run(t, "call", noDocker, "write", `{"path":"sub/new.txt","content":"made by berth\n"}`); code != 0 {
		t.Fatalf("write: exit %d: %s %s", code, out, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sub", "new.txt"))
	if err != nil || string(b) != "made by berth\n" {
		t.Fatalf("written file: %q %v", b, err)
	}
	out, errs, code := run(t, "call", noDocker, "read", `{"path":"README.md"}`)
	if code != 0 || !strings.Contains(out, "# hello") {
		t.Fatalf("read in cwd: exit %d: %s %s", code, out, errs)
	}
}

func TestTools(t *testing.T) {
	dir := workspace(t)
	out, errs, code := run(t, "tools", noDocker, "--workspace", dir, "--surface", "plan", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var list struct {
		Tools []struct {
			Name, Level string
			InputSchema map[string]any
		}
		Missing []struct{ Name, Level, Needs string } `json:"not_in_this_run"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	// Every tool a run can have is listed: its own, and those it lacks
	// with what they need.
	lacks := map[string]string{}
	for _, m := range list.Missing {
		lacks[m.Name] = m.Needs
		if m.Level != "read" {
			t.Errorf("plan lists the missing %s at level %s", m.Name, m.Level)
		}
	}
	for name, needs := range map[string]string{"ask_user": "question port", "vibe_spawn": "vibe mode", "vibe_list": "vibe mode"} {
		if !strings.Contains(lacks[name], needs) {
			t.Errorf("%s is not listed as needing %s: %q", name, needs, lacks[name])
		}
	}
	if len(list.Tools) == 0 {
		t.Fatal("plan surface lists no tools")
	}
	for _, tl := range list.Tools {
		if tl.Level != "read" || tl.InputSchema == nil {
			t.Errorf("plan lists %s at level %s (schema %v)", tl.Name, tl.Level, tl.InputSchema != nil)
		}
	}

	// Every action or operation field says what it accepts.
	out, errs, code = run(t, "tools", noDocker, "--workspace", dir, "--conversation", "c1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var all struct {
		Tools []struct {
			Name        string
			InputSchema struct {
				Properties map[string]struct{ Enum []string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	enums := map[string]string{"lsp": "action", "resolve": "action", "debug": "op"}
	for _, tl := range all.Tools {
		if field, ok := enums[tl.Name]; ok {
			if len(tl.InputSchema.Properties[field].Enum) < 2 {
				t.Errorf("%s.%s has no enum: %+v", tl.Name, field, tl.InputSchema.Properties[field])
			}
			delete(enums, tl.Name)
		}
	}
	if len(enums) > 0 {
		t.Errorf("tools --conversation lists none of %v", enums)
	}

	out, _, code = run(t, "tools", noDocker, "--workspace", dir)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"TOOL", "read", "write", "edit", "apply_patch", "NOT IN THIS RUN", "debug            exec   a conversation id"} {
		if !strings.Contains(out, want) {
			t.Errorf("tools output lacks %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, code := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "berth ") {
		t.Fatalf("version: %d %q", code, out)
	}
	for _, want := range []string{"\ncommit ", "\ngo           go1.", "\ntree-sitter  go-tree-sitter v0.", "grammar ABI "} {
		if !strings.Contains(out, want) {
			t.Errorf("version lacks %q:\n%s", want, out)
		}
	}
}

func TestServeRefusals(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "token")
	os.WriteFile(empty, []byte("\n"), 0o600)
	t.Setenv(EnvToken, "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--addr", "0.0.0.0:0"}, "refusing to listen on 0.0.0.0:0 without a token"},
		{[]string{"serve", "--addr", ":0"}, "without a token"},
		{[]string{"serve", "--addr", "10.1.2.3:0"}, "without a token"},
		{[]string{"serve", "--token-file", empty}, "is empty"},
		{[]string{"serve", "--token-file", "/nonexistent/token"}, "read the token file"},
	}
	for _, tt := range tests {
		_, errs, code := run(t, tt.args...)
		if code != 1 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tt.args, code, errs, tt.want)
		}
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7450": true, "localhost:1": true, "[::1]:7450": true, "127.1.2.3:9": true,
		":7450": false, "0.0.0.0:7450": false, "[::]:7450": false, "192.168.1.2:7450": false, "example.com:80": false, "junk": false,
	} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestServeAndGracefulShutdown(t *testing.T) {
	dir := workspace(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Hosted mode (the default) places nothing on the host unless told to.
	g := &globalFlags{labelKey: "berth.conversation", dockerHost: "unix:///nonexistent/docker.sock",
		hostPlacement: "fallback", hostRoots: []string{dir}}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, g, ln, "tok", io.Discard, g.logger(io.Discard)) }()
	base := "http://" + ln.Addr().String()

	do := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	status, m := do("POST", "/v1/runs", `{"workspace":"`+dir+`","conversation_id":"c-1"}`)
	if status != 201 || m["sandbox"] != "host" {
		t.Fatalf("open: %d %v", status, m)
	}
	id := m["id"].(string)
	status, m = do("POST", "/v1/runs/"+id+"/tools/read", `{"args":{"path":"README.md"}}`)
	if status != 200 || !strings.Contains(m["content"].([]any)[0].(map[string]any)["text"].(string), "# hello") {
		t.Fatalf("read: %d %v", status, m)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("/metrics without token: %d, want 401", resp.StatusCode)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve after shutdown: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still answers after shutdown")
	}
}

// TestPermissionsFlag: serve's permission mode is --permissions, and the
// old spelling --mode still sets it, saying it is deprecated.
func TestPermissionsFlag(t *testing.T) {
	for _, args := range [][]string{{"--permissions", "local"}, {"--mode", "local"}} {
		g := &globalFlags{}
		cmd := newServe(g)
		var errb strings.Builder
		cmd.SetErr(&errb)
		cmd.SetOut(&errb)
		if err := cmd.ParseFlags(args); err != nil || g.serveMode != "local" {
			t.Errorf("serve %v: mode %q, %v", args, g.serveMode, err)
		}
		if deprecated := strings.Contains(errb.String(), "deprecated"); deprecated != (args[0] == "--mode") {
			t.Errorf("serve %v: said %q", args, errb.String())
		}
	}
}
