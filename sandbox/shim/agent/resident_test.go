package agent

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseResident(t *testing.T) {
	tests := []struct {
		args  []string
		grace time.Duration
		dir   string
		bad   bool
	}{
		{args: []string{"/tmp/r"}, grace: DefaultResidentGrace, dir: "/tmp/r"},
		{args: []string{"--grace=2s", "/tmp/r/"}, grace: 2 * time.Second, dir: "/tmp/r"},
		{args: []string{"relative"}, bad: true},
		{args: []string{"--grace=0s", "/tmp/r"}, bad: true},
		{args: []string{"--grace=soon", "/tmp/r"}, bad: true},
		{args: []string{"--other", "/tmp/r"}, bad: true},
		{args: nil, bad: true},
		{args: []string{"/a", "/b"}, bad: true},
	}
	for _, tc := range tests {
		grace, dir, err := parseResident(tc.args)
		if tc.bad {
			if err == nil {
				t.Errorf("parseResident(%q) = %v, %q; want an error", tc.args, grace, dir)
			}
			continue
		}
		if err != nil || grace != tc.grace || dir != tc.dir {
			t.Errorf("parseResident(%q) = %v, %q, %v; want %v, %q", tc.args, grace, dir, err, tc.grace, tc.dir)
		}
	}
}

func TestUserFlag(t *testing.T) {
	tests := []struct {
		spec, prefix string
		bad          bool
	}{
		{spec: "0", prefix: "--user=0:0:"},
		{spec: "root", prefix: "--user=0:0:"},
		{spec: "4242", prefix: "--user=4242:4242:"},
		{spec: "4242:7", prefix: "--user=4242:7:"},
		{spec: "berth-nobody-such", bad: true},
		{spec: "0:berth-nogroup-such", bad: true},
	}
	for _, tc := range tests {
		got, err := userFlag(tc.spec)
		if tc.bad {
			if err == nil {
				t.Errorf("userFlag(%q) = %q, want an error", tc.spec, got)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(got, tc.prefix) {
			t.Errorf("userFlag(%q) = %q, %v; want %s...", tc.spec, got, err, tc.prefix)
		}
	}
}

func TestClaimDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, setup func(p string)) string {
		p := filepath.Join(base, name)
		if setup != nil {
			setup(p)
		}
		return p
	}
	fresh := mk("fresh", nil)
	stale := mk("stale", func(p string) { os.Mkdir(p, 0o755) })
	link := mk("link", func(p string) { os.Symlink(stale, p) })
	file := mk("file", func(p string) { os.WriteFile(p, nil, 0o600) })
	tests := []struct {
		dir string
		ok  bool
	}{
		{fresh, true},
		{stale, true},
		{link, false},
		{file, false},
		{filepath.Join(base, "missing", "parent"), false},
	}
	for _, tc := range tests {
		fd, err := claimDir(tc.dir)
		if (err == nil) != tc.ok {
			t.Errorf("claimDir(%s) = %v, want ok %v", filepath.Base(tc.dir), err, tc.ok)
		}
		if err != nil {
			continue
		}
		fi, _ := os.Lstat(tc.dir)
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("claimDir(%s) left mode %v, want 0700", filepath.Base(tc.dir), fi.Mode().Perm())
		}
		if _, err := claimDir(tc.dir); err == nil || !strings.Contains(err.Error(), errResidentRuns.Error()) {
			t.Errorf("a second claim of %s = %v, want %q", filepath.Base(tc.dir), err, errResidentRuns)
		}
		syscall.Close(fd)
	}
}

// testResident is a resident run from the test binary.
type testResident struct {
	t      *testing.T
	dir    string
	secret []byte
	cmd    *exec.Cmd
}

func startTestResident(t *testing.T, grace string) *testResident {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "res")
	r := &testResident{t: t, dir: dir, secret: []byte(strings.Repeat("s", MinResidentSecret))}
	r.cmd = exec.Command(os.Args[0], "resident", "--grace="+grace, dir)
	r.cmd.Env = append(os.Environ(), envMain+"=1")
	in, _ := r.cmd.StdinPipe()
	out, _ := r.cmd.StdoutPipe()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	})
	WriteFrame(in, TypeHello, r.secret)
	typ, p, err := NewReader(out).Next()
	var resp ResidentResponse
	if err == nil {
		err = json.Unmarshal(p, &resp)
	}
	if err != nil || typ != TypeResponse || resp.Err != nil || resp.Pid <= 0 {
		t.Fatalf("resident start: %q %+v %v", typ, resp, err)
	}
	// The stream ends although the resident runs on.
	if _, err := io.ReadAll(out); err != nil {
		t.Fatal(err)
	}
	return r
}

// call connects with secret and sends req; it returns the connection and
// the answer.
func (r *testResident) call(secret []byte, req ResidentRequest) (net.Conn, *Reader, ResidentResponse) {
	r.t.Helper()
	c, err := net.Dial("unix", filepath.Join(r.dir, ResidentSocket))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b, _ := json.Marshal(req)
	WriteFrame(c, TypeHello, secret)
	WriteFrame(c, TypeRequest, b)
	fr := NewReader(c)
	typ, p, err := fr.Next()
	var resp ResidentResponse
	if err == nil {
		err = json.Unmarshal(p, &resp)
	}
	if err != nil || typ != TypeResponse {
		r.t.Fatalf("%s: %q %v", req.Op, typ, err)
	}
	return c, fr, resp
}

// TestResidentProtocol drives a resident through its socket: a wrong
// secret, start, list, takeover by a second attach, signal, close.
func TestResidentProtocol(t *testing.T) {
	r := startTestResident(t, "1m")
	c, _, resp := r.call([]byte(strings.Repeat("w", MinResidentSecret)), ResidentRequest{Op: ResidentList})
	if resp.Err == nil || resp.Err.Kind != KindPermission {
		t.Fatalf("wrong secret: %+v, want a permission error", resp)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Errorf("the refused connection stays open: %v", err)
	}

	_, fr1, resp := r.call(r.secret, ResidentRequest{Op: ResidentStart, Name: "s", Args: []string{"sleep", "100"}, Flags: []string{"--wait-delay=200ms"}})
	if resp.Err != nil || resp.Pid <= 0 {
		t.Fatalf("start: %+v", resp)
	}
	pid := resp.Pid
	_, _, resp = r.call(r.secret, ResidentRequest{Op: ResidentList})
	if len(resp.Procs) != 1 || resp.Procs[0].Name != "s" || resp.Procs[0].Pid != pid || resp.Procs[0].Exited {
		t.Fatalf("list: %+v", resp)
	}
	_, _, resp = r.call(r.secret, ResidentRequest{Op: ResidentStart, Name: "s", Args: []string{"true"}})
	if resp.Err == nil || resp.Err.Kind != KindExist {
		t.Errorf("a second start of s: %+v, want an exist error", resp)
	}
	_, _, resp = r.call(r.secret, ResidentRequest{Op: ResidentStart, Name: "m", Args: []string{"berth-no-such-program"}})
	if resp.Err == nil || resp.Err.Kind != KindStart {
		t.Errorf("start of a missing program: %+v, want a start error", resp)
	}

	// A second attach takes over: the first connection ends.
	_, fr2, resp := r.call(r.secret, ResidentRequest{Op: ResidentAttach, Name: "s"})
	if resp.Err != nil || resp.Pid != pid {
		t.Fatalf("attach: %+v", resp)
	}
	if typ, _, err := fr1.Next(); err == nil {
		t.Errorf("the taken-over connection got frame %q, want its end", typ)
	}
	_, _, resp = r.call(r.secret, ResidentRequest{Op: ResidentSignal, Name: "s", Signal: int(syscall.SIGTERM)})
	if resp.Err != nil {
		t.Fatalf("signal: %+v", resp)
	}
	for {
		typ, p, err := fr2.Next()
		if err != nil {
			t.Fatalf("attached connection ended before the exit: %v", err)
		}
		if typ == TypeExit {
			if v, _ := Uint32s(p, 2); v[1] != uint32(syscall.SIGTERM) {
				t.Errorf("exit %v, want SIGTERM", v)
			}
			break
		}
	}
	// The resident forgets the program once the exit is written, then
	// closes the connection: after its end the exit is collected.
	if typ, _, err := fr2.Next(); err == nil {
		t.Errorf("after the exit the attached connection got frame %q, want its end", typ)
	}
	_, _, resp = r.call(r.secret, ResidentRequest{Op: ResidentAttach, Name: "s"})
	if resp.Err == nil || resp.Err.Kind != KindNotExist {
		t.Errorf("attach after the exit was collected: %+v, want not found", resp)
	}

	_, _, resp = r.call(r.secret, ResidentRequest{Op: ResidentClose})
	if resp.Err != nil {
		t.Fatalf("close: %+v", resp)
	}
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the resident's keeper exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the resident did not exit after close")
	}
	if _, err := os.Lstat(r.dir); !os.IsNotExist(err) {
		t.Errorf("the resident's directory is still there: %v", err)
	}
}

// TestResidentHelloDeadline: a connection that sends nothing is closed
// and does not hold the resident, which ends after its grace.
func TestResidentHelloDeadline(t *testing.T) {
	r := startTestResident(t, "1s")
	c, err := net.Dial("unix", filepath.Join(r.dir, ResidentSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a silent connection: %v, want EOF", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the resident outlived its grace")
	}
	if _, err := os.Lstat(r.dir); !os.IsNotExist(err) {
		t.Errorf("the resident's directory is still there: %v", err)
	}
}

// TestOutBufConsume: a write that completed removes its bytes once, also
// when the front moved meanwhile (dropped while detached, or sent by a
// connection that took over).
func TestOutBufConsume(t *testing.T) {
	tests := []struct {
		name      string
		front     int64
		b         string
		off       int64
		n         int
		want      string
		wantFront int64
	}{
		{"front unchanged", 10, "abcdef", 10, 3, "def", 13},
		{"all written", 10, "abc", 10, 3, "", 13},
		{"front moved past part of it", 12, "cdef", 10, 3, "def", 13},
		{"front moved past all of it", 14, "ef", 10, 3, "ef", 14},
	}
	for _, tc := range tests {
		o := outBuf{b: []byte(tc.b), front: tc.front}
		o.consume(tc.off, tc.n)
		if string(o.b) != tc.want || o.front != tc.wantFront {
			t.Errorf("%s: %q at %d, want %q at %d", tc.name, o.b, o.front, tc.want, tc.wantFront)
		}
	}
}
