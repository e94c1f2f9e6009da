// Package e2e drives berth end to end: the test plays the agent platform,
// starts a conversation's container with `docker run --network none` and
// the conversation label, and talks to berth's HTTP API (the controller and
// httpapi in-process, over the real Docker and host backends). Everything
// the test checks inside the container it checks with its own `docker
// exec`, never through berth.
//
// The tests need a Docker daemon and the image $BERTH_TEST_IMAGE (default
// berth-test-minimal, built by images/build). Without them they skip, or
// fail when CI=true.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
)

const (
	labelKey     = "berth.conversation"
	defaultImage = "berth-test-minimal"
	token        = "e2e-token"
	workspace    = "/workspace"
	// callTimeout bounds every HTTP request, so a hang fails the test
	// instead of stalling it; it asserts nothing about speed.
	callTimeout = 2 * time.Minute
)

// unavailable skips the test, or fails it when CI=true.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// dockerCLI runs the docker command line, as the platform would.
func dockerCLI(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func mustDocker(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out, err := dockerCLI(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// needDocker checks that the backend answers and the default test image
// ($BERTH_TEST_IMAGE or berth-test-minimal) exists, and returns its name.
func needDocker(t *testing.T) string {
	t.Helper()
	image := os.Getenv("BERTH_TEST_IMAGE")
	if image == "" {
		image = defaultImage
	}
	needSandboxes(t, image, false)
	return image
}

func randomID(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// container is the conversation's sandbox, started by the test: a Docker
// container or, on a cluster backend, a pod.
type container struct {
	id, name, conv string
	ref            string // the reference berth must resolve the conversation to
	pod            bool   // a pod (kube), not a Docker container
}

// startContainer starts the conversation's container, with no network and
// the conversation label (on a cluster: a pod labelled so), and a workspace
// inside it. It is removed at the end of the test.
func startContainer(t *testing.T, image string) *container {
	t.Helper()
	c := &container{conv: "e2e-" + randomID(t)}
	if onKube() {
		startPod(t, c, image)
	} else {
		c.name = "berth-" + c.conv
		c.id = strings.TrimSpace(mustDocker(t, "run", "-d", "--network", "none", "--label", labelKey+"="+c.conv,
			"--name", c.name, image, "sleep", "infinity"))
		c.ref = "docker://" + c.id
		if backend() == backendContainerd {
			// dockerd does not hand its labels to containerd, so the run
			// names the container.
			c.ref = "containerd://moby/" + c.id
			explicitRefs.Store(c.conv, c.ref)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			dockerCLI(ctx, "rm", "-f", c.id)
		})
	}
	c.sh(t, "mkdir -p "+workspace+"/src && cd "+workspace+
		" && printf 'hello\\nworld\\n' > hello.txt && printf 'x = 1\\nx = 1\\n' > dup.py"+
		" && ln -s /etc/passwd passwd-link && ln -s /etc etc-link && chmod 0640 hello.txt")
	return c
}

// sh runs a shell command in the container with the test's own exec.
func (c *container) sh(t *testing.T, script string) string {
	t.Helper()
	if c.pod {
		return mustKubectl(t, "", "exec", "-n", kubeNamespace, c.name, "-c", "main", "--", "sh", "-c", script)
	}
	return mustDocker(t, "exec", c.id, "sh", "-c", script)
}

// spawn starts a program in the container's dir in the background, with
// the test's own exec, and returns at once.
func (c *container) spawn(t *testing.T, dir string, args ...string) {
	t.Helper()
	if c.pod {
		c.sh(t, "cd "+dir+" && nohup "+strings.Join(args, " ")+" >/dev/null 2>&1 </dev/null &")
		return
	}
	mustDocker(t, append([]string{"exec", "-d", "-w", dir, c.id}, args...)...)
}

// cat reads a file in the container, or returns "<missing>".
func (c *container) cat(t *testing.T, p string) string {
	t.Helper()
	return c.sh(t, "cat "+p+" 2>/dev/null || echo '<missing>'")
}

// processes lists the container's processes ("PID ARGS") with ps in a
// separate exec, or from /proc when the image has no ps. The listing's own
// processes are left out.
func (c *container) processes(t *testing.T) []string {
	t.Helper()
	out := c.sh(t, `if command -v ps >/dev/null; then ps -eo pid=,args=; else `+
		`for p in /proc/[0-9]*; do cmd=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); [ -n "$cmd" ] && echo "${p#/proc/} $cmd"; done; fi`)
	var procs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, "ps -eo") || strings.Contains(l, "/proc/[0-9]*") || strings.HasSuffix(l, "ps -eo pid=,args=") {
			continue
		}
		if f := strings.Fields(l); len(f) > 1 && (f[1] == "tr" || f[1] == "ps") {
			continue
		}
		procs = append(procs, l)
	}
	return procs
}

// state is what berth must never change about a container.
func (c *container) state(t *testing.T) string {
	t.Helper()
	if c.pod {
		return strings.TrimSpace(mustKubectl(t, "", "get", "pod", "-n", kubeNamespace, c.name, "-o",
			`jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].containerID} restarts={.status.containerStatuses[0].restartCount} started={.status.containerStatuses[0].state.running.startedAt}`))
	}
	return strings.TrimSpace(mustDocker(t, "inspect", "--format",
		"{{.Id}} {{.Name}} {{.State.Status}} running={{.State.Running}} paused={{.State.Paused}} pid={{.State.Pid}} started={{.State.StartedAt}} restarts={{.RestartCount}}", c.id))
}

// api is berth's HTTP API, served in-process over the real backends.
type api struct {
	t   *testing.T
	url string
	c   *controller.Controller
}

func newAPI(t *testing.T) *api {
	t.Helper()
	return newAPIWith(t, nil)
}

// newAPIWith is newAPI with the runs' tools wired by binders (nil: the
// defaults).
func newAPIWith(t *testing.T, binders []controller.Binder) *api {
	t.Helper()
	c, err := controller.New(controller.Config{
		Providers:  providers(t),
		LabelKey:   labelKey,
		Registerer: prometheus.NewRegistry(),
		Tools:      binders,
		// dockerd does not hand its labels to containerd, so through
		// containerd the run's container cannot show its conversation
		// label: the operator must allow unlabelled references.
		AllowUnlabelled: backend() == backendContainerd,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(c, httpapi.Options{Token: token}))
	t.Cleanup(func() {
		srv.Close()
		if err := c.Close(); err != nil {
			t.Errorf("controller close: %v", err)
		}
	})
	return &api{t: t, url: srv.URL, c: c}
}

type reply struct {
	status int
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, r)
	}
}

// errorCode returns the error code of an error response.
func (r reply) errorCode(t *testing.T) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	r.decode(t, &e)
	if e.Error.Message == "" {
		t.Errorf("error response without a message: %s", r)
	}
	return e.Error.Code
}

// result decodes a tool result.
type result struct {
	Content []struct{ Type, Text string }
	IsError bool
}

func (r result) text() string {
	var s []string
	for _, c := range r.Content {
		s = append(s, c.Text)
	}
	return strings.Join(s, "\n")
}

func (a *api) do(method, path, tok, body string) reply {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: b}
}

// open opens a run for the conversation and returns its id and resolved sandbox.
func (a *api) open(conv string) (string, string) {
	a.t.Helper()
	ref := "auto"
	if r, ok := explicitRefs.Load(conv); ok {
		ref = r.(string)
	}
	r := a.do("POST", "/v1/runs", token, fmt.Sprintf(`{"conversation_id":%q,"workspace":%q,"sandbox":%q,"mode":"default"}`, conv, workspace, ref))
	if r.status != http.StatusCreated {
		a.t.Fatalf("open run: %s", r)
	}
	var info struct{ ID, Sandbox, Workspace string }
	r.decode(a.t, &info)
	if info.Workspace != workspace {
		a.t.Errorf("workspace = %q, want %q", info.Workspace, workspace)
	}
	return info.ID, info.Sandbox
}

// toolReply is a tool result as the API returns it, with every content
// block and the structured content raw.
type toolReply struct {
	Content []struct {
		Type, Text, MimeType string
		Data                 string // base64, for images
	}
	IsError           bool
	StructuredContent json.RawMessage
}

// texts joins the text blocks.
func (r toolReply) texts() string {
	var s []string
	for _, c := range r.Content {
		if c.Type == "text" {
			s = append(s, c.Text)
		}
	}
	return strings.Join(s, "\n")
}

// callTool calls a tool on the default surface with args and expects 200.
func (a *api) callTool(t *testing.T, run, tool string, args map[string]any) toolReply {
	t.Helper()
	raw, _ := json.Marshal(args)
	r := a.do("POST", "/v1/runs/"+run+"/tools/"+tool, token, fmt.Sprintf(`{"args":%s,"surface":"default"}`, raw))
	if r.status != http.StatusOK {
		t.Fatalf("%s %s: %s", tool, raw, r)
	}
	var res toolReply
	r.decode(t, &res)
	return res
}

// call calls a tool and expects 200.
func (a *api) call(run, tool, surface, args string) result {
	a.t.Helper()
	r := a.do("POST", "/v1/runs/"+run+"/tools/"+tool, token, fmt.Sprintf(`{"args":%s,"surface":%q}`, args, surface))
	if r.status != http.StatusOK {
		a.t.Fatalf("%s %s: %s", tool, args, r)
	}
	var res result
	r.decode(a.t, &res)
	return res
}

func TestRunInConversationContainer(t *testing.T) {
	image := needDocker(t)
	ctr := startContainer(t, image)
	a := newAPI(t)
	before := ctr.state(t)
	since := time.Now() // after the container started and the workspace was made

	run, ref := a.open(ctr.conv)
	if ref != ctr.ref {
		t.Fatalf("run placed in %q, want %s", ref, ctr.ref)
	}

	t.Run("files", func(t *testing.T) {
		res := a.call(run, "read", "default", `{"path":"hello.txt"}`)
		if res.IsError || !strings.Contains(res.text(), "hello") || !strings.Contains(res.text(), "world") {
			t.Fatalf("read: %+v", res)
		}

		res = a.call(run, "write", "default", `{"path":"src/app.py","content":"def f():\n    return 1\n"}`)
		if res.IsError {
			t.Fatalf("write: %s", res.text())
		}
		if got := ctr.cat(t, workspace+"/src/app.py"); got != "def f():\n    return 1\n" {
			t.Errorf("after write, docker exec cat: %q", got)
		}

		res = a.call(run, "edit", "default", `{"path":"src/app.py","old_string":"return 1","new_string":"return 2"}`)
		if res.IsError {
			t.Fatalf("edit: %s", res.text())
		}
		if got := ctr.cat(t, workspace+"/src/app.py"); got != "def f():\n    return 2\n" {
			t.Errorf("after edit, docker exec cat: %q", got)
		}

		// An edit keeps the file's mode.
		res = a.call(run, "edit", "default", `{"path":"hello.txt","old_string":"world","new_string":"berth"}`)
		if res.IsError {
			t.Fatalf("edit hello.txt: %s", res.text())
		}
		if got := strings.TrimSpace(ctr.sh(t, "stat -c %a "+workspace+"/hello.txt")); got != "640" {
			t.Errorf("mode after edit = %s, want 640", got)
		}

		patch := "*** Begin Patch\n" +
			"*** Update File: src/app.py\n" +
			"@@\n def f():\n-    return 2\n+    return 3\n" +
			"*** Add File: src/new.py\n+print('new')\n" +
			"*** End Patch"
		args, _ := json.Marshal(map[string]string{"patch": patch})
		res = a.call(run, "apply_patch", "default", string(args))
		if res.IsError {
			t.Fatalf("apply_patch: %s", res.text())
		}
		if got := ctr.cat(t, workspace+"/src/app.py"); got != "def f():\n    return 3\n" {
			t.Errorf("after apply_patch, app.py: %q", got)
		}
		if got := ctr.cat(t, workspace+"/src/new.py"); got != "print('new')\n" {
			t.Errorf("after apply_patch, new.py: %q", got)
		}
		res = a.call(run, "read", "plan", `{"path":"src/app.py"}`)
		if res.IsError || !strings.Contains(res.text(), "return 3") {
			t.Errorf("read back through berth: %+v", res)
		}
	})

	t.Run("plan surface", func(t *testing.T) {
		for _, surface := range []string{"plan", "readonly"} {
			r := a.do("GET", "/v1/runs/"+run+"/tools?surface="+surface, token, "")
			var list struct {
				Tools []struct{ Name, Level string }
			}
			r.decode(t, &list)
			var names []string
			for _, tl := range list.Tools {
				names = append(names, tl.Name)
				if tl.Level != "read" {
					t.Errorf("%s surface lists %s (%s)", surface, tl.Name, tl.Level)
				}
			}
			if !strings.Contains(strings.Join(names, ","), "read") {
				t.Errorf("%s surface lacks read: %v", surface, names)
			}
			r = a.do("POST", "/v1/runs/"+run+"/tools/write", token,
				fmt.Sprintf(`{"args":{"path":"planned.txt","content":"x"},"surface":%q}`, surface))
			if r.status != http.StatusForbidden || r.errorCode(t) != "denied" {
				t.Errorf("write on %s: %s, want 403 denied", surface, r)
			}
		}
		if got := ctr.cat(t, workspace+"/planned.txt"); got != "<missing>\n" {
			t.Errorf("a refused write created planned.txt: %q", got)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		snapshot := func() string {
			return ctr.sh(t, "find "+workspace+" /etc -xdev -printf '%p %s %m %T@\\n' | sort; md5sum "+workspace+"/*.txt "+workspace+"/*.py "+workspace+"/src/* 2>&1; ls /tmp")
		}
		before := snapshot()
		patchSecondFails := "*** Begin Patch\n" +
			"*** Update File: hello.txt\n@@\n hello\n-berth\n+patched\n" +
			"*** Update File: src/app.py\n@@\n-this line does not exist\n+nope\n" +
			"*** End Patch"
		patchArgs, _ := json.Marshal(map[string]string{"patch": patchSecondFails})
		patchEscape := "*** Begin Patch\n*** Add File: ../escaped.txt\n+x\n*** End Patch"
		patchEscapeArgs, _ := json.Marshal(map[string]string{"patch": patchEscape})
		tests := []struct {
			name, tool, body string
			tok              string
			status           int
			code             string   // for call errors
			mention          []string // in the tool error text or message
		}{
			{"read ../ escape", "read", `{"args":{"path":"../etc/passwd"}}`, token, 200, "", []string{"outside the workspace"}},
			{"write ../ escape", "write", `{"args":{"path":"../tmp/evil.txt","content":"x"}}`, token, 200, "", []string{"outside"}},
			{"read absolute outside", "read", `{"args":{"path":"/etc/hostname"}}`, token, 200, "", []string{"outside"}},
			{"write absolute outside", "write", `{"args":{"path":"/tmp/evil.txt","content":"x"}}`, token, 200, "", []string{"outside"}},
			{"read symlink out", "read", `{"args":{"path":"passwd-link"}}`, token, 200, "", []string{"passwd-link"}},
			{"write through symlinked dir", "write", `{"args":{"path":"etc-link/evil.conf","content":"x"}}`, token, 200, "", []string{"etc-link"}},
			{"edit through symlink", "edit", `{"args":{"path":"passwd-link","old_string":"root","new_string":"toor"}}`, token, 200, "", []string{"passwd-link"}},
			{"missing file", "read", `{"args":{"path":"nope.txt"}}`, token, 200, "", []string{"nope.txt"}},
			{"edit missing file", "edit", `{"args":{"path":"nope.txt","old_string":"a","new_string":"b"}}`, token, 200, "", []string{"nope.txt"}},
			{"non-unique edit", "edit", `{"args":{"path":"dup.py","old_string":"x = 1","new_string":"x = 2"}}`, token, 200, "", []string{"2"}},
			{"patch second file fails", "apply_patch", `{"args":` + string(patchArgs) + `}`, token, 200, "", []string{"app.py"}},
			{"patch escapes", "apply_patch", `{"args":` + string(patchEscapeArgs) + `}`, token, 200, "", []string{"escaped.txt"}},
			{"unknown tool", "shell", `{"args":{"cmd":"rm -rf /"}}`, token, 404, "unknown_tool", []string{"shell"}},
			{"malformed JSON body", "write", `{"args":{"path":"m.txt","content":"x"}`, token, 400, "bad_request", nil},
			{"arguments off the schema", "write", `{"args":{"path":"m.txt","content":7}}`, token, 400, "bad_request", nil},
			{"missing token", "write", `{"args":{"path":"m.txt","content":"x"}}`, "", 401, "unauthorized", nil},
			{"wrong token", "write", `{"args":{"path":"m.txt","content":"x"}}`, "guess", 401, "unauthorized", nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := a.do("POST", "/v1/runs/"+run+"/tools/"+tt.tool, tt.tok, tt.body)
				if r.status != tt.status {
					t.Fatalf("status %s, want %d", r, tt.status)
				}
				text := string(r.body)
				if tt.status == 200 {
					var res result
					r.decode(t, &res)
					if !res.IsError {
						t.Fatalf("want an isError result, got %s", r.body)
					}
					text = res.text()
				} else if code := r.errorCode(t); code != tt.code {
					t.Errorf("code %q, want %q", code, tt.code)
				}
				for _, m := range tt.mention {
					if !strings.Contains(text, m) {
						t.Errorf("error %q does not mention %q", text, m)
					}
				}
				t.Logf("%s → %s", tt.name, strings.TrimSpace(text))
			})
		}
		if after := snapshot(); after != before {
			t.Errorf("bad input changed files in the container:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("close leaves no process", func(t *testing.T) {
		var berthProcs []string
		for _, p := range ctr.processes(t) {
			if strings.Contains(p, "berth") {
				berthProcs = append(berthProcs, p)
			}
		}
		if len(berthProcs) == 0 {
			t.Fatalf("no berth process runs in the container while the run is open; the check below would prove nothing: %v", ctr.processes(t))
		}
		t.Logf("berth processes while the run is open: %v", berthProcs)
		if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status != http.StatusNoContent {
			t.Fatalf("DELETE run: %s", r)
		}
		// Close returns after the sandbox closed; the agent's exit is seen
		// through a separate exec. Poll with a generous bound (this is not
		// a speed assertion, only a wait for the kernel to reap).
		var left []string
		for deadline := time.Now().Add(30 * time.Second); ; {
			left = left[:0]
			for _, p := range ctr.processes(t) {
				if !strings.HasPrefix(strings.SplitN(p, " ", 2)[1], "sleep infinity") {
					left = append(left, p)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if len(left) != 0 {
			t.Errorf("processes left in the container after the run closed: %v", left)
		}
		if r := a.do("POST", "/v1/runs/"+run+"/tools/read", token, `{"args":{"path":"hello.txt"}}`); r.status != 404 || r.errorCode(t) != "unknown_run" {
			t.Errorf("call after DELETE: %s", r)
		}
	})

	t.Run("container unchanged", func(t *testing.T) {
		if after := ctr.state(t); after != before {
			t.Errorf("container state changed:\nbefore %s\nafter  %s", before, after)
		}
		if ctr.pod {
			return // the event log below is Docker's
		}
		// The daemon's event log for this container, while berth used it:
		// exec and archive (agent placement) events only.
		until := time.Now().Add(time.Second)
		// An exec's action carries its command line, which may span lines
		// (a probe script): one JSON string per event.
		out := mustDocker(t, "events", "--since", since.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano),
			"--filter", "container="+ctr.id, "--format", "{{json .Action}}")
		allowed := []string{"exec_create", "exec_start", "exec_die", "archive-path", "extract-to-dir"}
		var actions []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var act string
			if err := json.Unmarshal([]byte(line), &act); err != nil {
				t.Errorf("docker events line %q: %v", line, err)
				continue
			}
			ok := false
			for _, p := range allowed {
				ok = ok || strings.HasPrefix(act, p)
			}
			if !ok {
				t.Errorf("berth caused container event %q on %s", act, ctr.name)
			}
			actions = append(actions, strings.SplitN(act, ":", 2)[0])
		}
		sort.Strings(actions)
		t.Logf("container events while berth ran: %s", compact(actions))
	})
}

// compact counts repeated strings: "exec_create×12 exec_die×12".
func compact(s []string) string {
	var out []string
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%s×%d", s[i], j-i))
		i = j
	}
	return strings.Join(out, " ")
}

// TestContainerListUnchanged compares `docker ps -a` before and after a
// run's whole life: berth creates, starts, stops and removes nothing.
// Containers of tests running in parallel (other packages) can change the
// list, so only containers that existed before are compared, and new ones
// are reported only when they carry this test's conversation label.
func TestContainerListUnchanged(t *testing.T) {
	dockerOnly(t, "docker ps")
	image := needDocker(t)
	ctr := startContainer(t, image)
	list := func() map[string]string {
		out := mustDocker(t, "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}} {{.State}} {{.Labels}}")
		m := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if id, rest, ok := strings.Cut(l, " "); ok {
				m[id] = rest
			}
		}
		return m
	}
	before := list()
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	a.call(run, "write", "default", `{"path":"list.txt","content":"x"}`)
	a.call(run, "read", "default", `{"path":"list.txt"}`)
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %s", r)
	}
	a.c.Close()
	after := list()
	if before[ctr.id] != after[ctr.id] {
		t.Errorf("the conversation's container changed: %q → %q", before[ctr.id], after[ctr.id])
	}
	for id, b := range before {
		if a, ok := after[id]; ok && a != b {
			t.Logf("container %s changed during the test (another test's?): %q → %q", id[:12], b, a)
		}
	}
	for id, a := range after {
		if _, ok := before[id]; !ok && strings.Contains(a, ctr.conv) {
			t.Errorf("a new container carries this conversation's label: %s %s", id[:12], a)
		}
	}
}

// TestContainerGoneMidRun: the platform stops or removes the
// container while a run is open; the next call fails with sandbox_gone
// naming the container and what happened, later calls fail the same way,
// and berth changes nothing about the container.
func TestContainerGoneMidRun(t *testing.T) {
	dockerOnly(t, "the docker stop/rm sequence")
	image := needDocker(t)
	tests := []struct {
		name     string
		action   []string // docker command line, with the id appended
		mention  string   // what happened, in the error
		reopen   string   // error code when opening a run on it again
		endState string   // State.Status afterwards; "" when removed
	}{
		{"stopped", []string{"stop", "-t", "0"}, "exited", "sandbox_gone", "exited"},
		{"removed", []string{"rm", "-f"}, "removed", "sandbox_not_found", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctr := startContainer(t, image)
			a := newAPI(t)
			run, _ := a.open(ctr.conv)
			if res := a.call(run, "read", "default", `{"path":"hello.txt"}`); res.IsError {
				t.Fatalf("read before: %s", res.text())
			}
			mustDocker(t, append(tt.action, ctr.id)...)

			for i := range 2 {
				r := a.do("POST", "/v1/runs/"+run+"/tools/read", token, `{"args":{"path":"hello.txt"}}`)
				if r.status != http.StatusGone || r.errorCode(t) != "sandbox_gone" {
					t.Fatalf("call %d: %s, want 410 sandbox_gone", i, r)
				}
				msg := string(r.body)
				if !strings.Contains(msg, ctr.id[:12]) {
					t.Errorf("error does not name the container %s: %s", ctr.id[:12], msg)
				}
				if !strings.Contains(msg, tt.mention) {
					t.Errorf("error does not say the container was %s: %s", tt.mention, msg)
				}
				t.Logf("call %d → %s", i, msg)
			}
			if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status != http.StatusNoContent {
				t.Errorf("DELETE: %s", r)
			}
			r := a.do("POST", "/v1/runs", token, fmt.Sprintf(`{"sandbox":"docker://%s","workspace":"/workspace"}`, ctr.name))
			if code := r.errorCode(t); code != tt.reopen {
				t.Errorf("open on the container again: %s, want %s", r, tt.reopen)
			}
			// berth neither restarted, unpaused nor recreated it.
			st, _ := dockerCLI(context.Background(), "inspect", "--format", "{{.State.Status}}", ctr.id)
			if strings.TrimSpace(st) != tt.endState {
				t.Errorf("container state %q after berth's calls, want %q", strings.TrimSpace(st), tt.endState)
			}
		})
	}
}
