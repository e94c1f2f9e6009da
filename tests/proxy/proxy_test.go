// Package proxy runs a real `berth serve` behind a real reverse proxy
// (Debian's nginx) whose read timeout is much shorter than a cell: the
// way a harness often reaches berth (issue #35; issue #33, finding 8: the
// client's read timeout interrupted the cell, and its retry ran it again
// from the start). nginx is missing: the tests skip, or fail when CI=true
// (tests/run installs nginx-light).
package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tests/berthtest"
)

// proxyTimeout is nginx's read timeout towards berth: far shorter than
// the cells below, which wait for a file the test writes only once the
// proxy has timed out.
const proxyTimeout = "2s"

// callTimeout bounds each request of the test (a first kernel start
// included); it asserts nothing about speed.
const callTimeout = 2 * time.Minute

// TestMain removes the binaries berthtest built.
func TestMain(m *testing.M) {
	code := m.Run()
	berthtest.Remove()
	os.Exit(code)
}

// startNginx runs nginx in the foreground, as one process, proxying a free
// loopback port to upstream with a read timeout of proxyTimeout, and
// returns its URL. The test's cleanup stops it.
func startNginx(t *testing.T, upstream string) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/sbin/nginx"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no nginx: tests/run installs nginx-light")
		}
		t.Skip("no nginx (apt-get install nginx-light)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nginx binds it next; nothing else on this machine takes it meanwhile
	dir := t.TempDir()
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
	access_log %[1]s/access.log;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
		listen %[2]s;
		location / {
			proxy_pass %[3]s;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_read_timeout %[4]s;
			proxy_send_timeout %[4]s;
		}
	}
}
`, dir, addr, upstream, proxyTimeout)
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", cf)
	out, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }() // owned by the cleanup below
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt) // nginx: SIGINT is a fast shutdown
		select {
		case <-waited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-waited
		}
	})
	// Ready once it answers (berth's /healthz, through it).
	url := "http://" + addr
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
		select {
		case <-waited:
			b, _ := os.ReadFile(filepath.Join(dir, "stderr"))
			e, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited at start:\n%s\n%s", b, e)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not answer on %s: %v", addr, err)
		}
	}
}

// rig is berth serve --mode local on the host (Debian's python3 with
// ipykernel) behind nginx.
type rig struct {
	t      *testing.T
	berth  *berthtest.Server
	c      *berthtest.Client // through nginx
	run    string
	dir    string
	ctx    context.Context
	cancel context.CancelFunc
}

func newRig(t *testing.T) *rig {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	tok := "proxy-test-token"
	bs := berthtest.Start(t, berthtest.Options{
		Args: []string{"--mode", "local"},
		Env:  []string{"BERTH_TOKEN=" + tok, "PATH=/usr/bin:/bin:" + os.Getenv("PATH")}, // Debian's python3 first
	})
	url := startNginx(t, bs.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	rg := &rig{t: t, berth: bs, c: &berthtest.Client{URL: url, Token: tok}, dir: t.TempDir(), ctx: ctx, cancel: cancel}
	info, err := rg.c.OpenRun(ctx, map[string]any{"sandbox": "host", "workspace": rg.dir})
	if err != nil {
		t.Fatalf("%v\n%s", err, bs.Log())
	}
	rg.run = info.ID
	// The kernel starts before the test, straight to berth (a cold start
	// may itself outlast nginx's timeout): the cells below find it up.
	direct := &berthtest.Client{URL: bs.URL, Token: tok}
	if _, err := direct.Call(ctx, rg.run, "eval", map[string]string{"code": "print('warm')", "description": "start the kernel before the test"}); err != nil {
		t.Fatalf("%v\n%s", err, bs.Log())
	}
	return rg
}

// cell counts its runs in the kernel variable name, appends a line to
// started as it begins, then waits for the file gate.
func cell(name, started, gate string) map[string]string {
	return map[string]string{
		"description": "count the runs then wait for the gate",
		"code": fmt.Sprintf(`import os, time
%[1]s = globals().get(%[1]q, 0) + 1
with open(%[2]q, "a") as f:
    f.write("run\n")
while not os.path.exists(%[3]q):
    time.sleep(0.05)
print(%[1]q, %[1]s)`, name, started, gate),
	}
}

// count is the kernel's variable name, printed by a call through nginx.
func (rg *rig) count(name string) string {
	rg.t.Helper()
	res, err := rg.c.Call(rg.ctx, rg.run, "eval", map[string]string{"code": "print(" + name + ")", "description": "print how often the cell ran"})
	if err != nil {
		rg.t.Fatalf("%v\n%s", err, rg.berth.Log())
	}
	return strings.TrimSpace(res.Text())
}

// waitFile waits for the cell to have written path: it runs.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(callTimeout); ; {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s: the cell never started", path, callTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// starts is how many times the cell wrote to started.
func starts(t *testing.T, started string) int {
	b, _ := os.ReadFile(started)
	return strings.Count(string(b), "run\n")
}

// TestLongCellThroughProxySync: a cell outlasts nginx's read timeout (the
// client gets nginx's 504); it completes anyway, and the client's retry
// with the same Idempotency-Key gets its output: the cell ran once.
func TestLongCellThroughProxySync(t *testing.T) {
	rg := newRig(t)
	started, gate := filepath.Join(rg.dir, "started"), filepath.Join(rg.dir, "gate")
	args := cell("n_sync", started, gate)
	opts := berthtest.CallOptions{IdempotencyKey: "sync-cell-1"}

	first, err := rg.c.CallWith(rg.ctx, rg.run, "eval", args, opts)
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != http.StatusGatewayTimeout {
		t.Fatalf("the first call through nginx: %d %s, want nginx's 504 (its read timeout is %s; the cell waits for the test)", first.Status, first.Body, proxyTimeout)
	}
	waitFile(t, started)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The client retries, as one does after a 504, with the same key
	// (again while nginx times out, if the cell takes that long to end).
	var ans berthtest.Answer
	for {
		if ans, err = rg.c.CallWith(rg.ctx, rg.run, "eval", args, opts); err != nil {
			t.Fatal(err)
		}
		if ans.Status != http.StatusGatewayTimeout || rg.ctx.Err() != nil {
			break
		}
	}
	res, err := ans.Result()
	if err != nil {
		t.Fatalf("retry: %v\n%s", err, rg.berth.Log())
	}
	if !strings.Contains(res.Text(), "n_sync 1") || len(ans.CallID()) != 32 || ans.CallStatus() != "done" {
		t.Errorf("retry: %q (call %q, %s), want the first run's output n_sync 1", res.Text(), ans.CallID(), ans.CallStatus())
	}
	if n := starts(t, started); n != 1 {
		t.Errorf("the cell started %d times, want once", n)
	}
	if n := rg.count("n_sync"); n != "1" {
		t.Errorf("the kernel counted %s runs of the cell, want 1", n)
	}
}

// TestLongCellThroughProxyAsync: the same cell under Prefer:
// respond-async: 202 at once; a long poll longer than nginx's timeout is
// cut by nginx (504) and hurts nothing; polling gets the output once the
// cell ends; a retry with the key is the same call. The cell ran once.
func TestLongCellThroughProxyAsync(t *testing.T) {
	rg := newRig(t)
	started, gate := filepath.Join(rg.dir, "started"), filepath.Join(rg.dir, "gate")
	args := cell("n_async", started, gate)
	opts := berthtest.CallOptions{IdempotencyKey: "async-cell-1", Async: true}

	a, err := rg.c.CallWith(rg.ctx, rg.run, "eval", args, opts)
	if err != nil {
		t.Fatal(err)
	}
	call := a.CallID()
	var st struct{ Call, Status string }
	json.Unmarshal(a.Body, &st)
	if a.Status != http.StatusAccepted || a.Header.Get("Location") != "/v1/runs/"+rg.run+"/calls/"+call || st.Call != call || st.Status != "running" {
		t.Fatalf("respond-async: %d %v %s", a.Status, a.Header, a.Body)
	}
	// A poll that waits longer than nginx does: nginx answers 504.
	if p, err := rg.c.PollCall(rg.ctx, rg.run, call, 20*time.Second); err != nil || p.Status != http.StatusGatewayTimeout {
		t.Fatalf("a long poll past nginx's timeout: %d %s %v, want nginx's 504", p.Status, p.Body, err)
	}
	if again, err := rg.c.CallWith(rg.ctx, rg.run, "eval", args, opts); err != nil || again.Status != http.StatusAccepted || again.CallID() != call {
		t.Fatalf("async retry with the key: %d %v %v, want 202 for call %s", again.Status, again.Header, err, call)
	}
	waitFile(t, started)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var p berthtest.Answer
	for {
		if p, err = rg.c.PollCall(rg.ctx, rg.run, call, time.Second); err != nil {
			t.Fatal(err)
		}
		if p.Status != http.StatusAccepted || rg.ctx.Err() != nil {
			break
		}
	}
	res, err := p.Result()
	if err != nil {
		t.Fatalf("poll: %v\n%s", err, rg.berth.Log())
	}
	if !strings.Contains(res.Text(), "n_async 1") || p.CallStatus() != "done" {
		t.Errorf("polled: %q %s, want n_async 1, done", res.Text(), p.CallStatus())
	}
	if n := starts(t, started); n != 1 {
		t.Errorf("the cell started %d times, want once", n)
	}
	if n := rg.count("n_async"); n != "1" {
		t.Errorf("the kernel counted %s runs of the cell, want 1", n)
	}
}
