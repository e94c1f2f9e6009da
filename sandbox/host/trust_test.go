package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/sandbox/sandboxtest"
)

// run starts args in sb and returns its stdout and stderr once it ended.
func run(t *testing.T, sb sandbox.Sandbox, args ...string) (stdout, stderr string, st sandbox.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: args, Dir: "/", Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("start %q: %v", args, err)
	}
	st, err = p.Wait()
	if err != nil {
		t.Fatalf("wait %q: %v", args, err)
	}
	return out.String(), errOut.String(), st
}

// TestEnvHasNoCredential: a host process sees PATH, HOME, LANG and what
// the operator configured, never berth's own environment.
func TestEnvHasNoCredential(t *testing.T) {
	const secret = "berth-test-token-7f3a9c"
	t.Setenv("BERTH_TOKEN", secret)
	t.Setenv("BERTH_OTHER_SETTING", secret+"-other")
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret+"-aws")
	sb := host.New(host.Options{Env: []string{"OPERATOR_SET=configured"}})
	defer sb.Close()
	// The process's environment, the kernel's copy of it, and that of its
	// parent, the agent.
	out, errOut, st := run(t, sb, "/bin/sh", "-c",
		`env; echo "--- self"; tr '\0' '\n' < /proc/self/environ; echo "--- agent"; tr '\0' '\n' < /proc/$PPID/environ`)
	if !st.Success() {
		t.Fatalf("exit %v: %s", st, errOut)
	}
	if strings.Contains(out, secret) || strings.Contains(out, "BERTH_") {
		t.Fatalf("a host process saw berth's environment:\n%s", out)
	}
	home := os.Getenv("HOME")
	for _, want := range []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=", "OPERATOR_SET=configured"} {
		if strings.Count(out, "\n"+want)+btoi(strings.HasPrefix(out, want)) < 3 {
			t.Errorf("%q is not in the process's, /proc/self's and the agent's environment:\n%s", want, out)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nobody returns the host user "nobody", skipping unless the test runs as
// root.
func nobody(t *testing.T) *host.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running processes as another user needs root")
	}
	u, err := host.LookupUser("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	return u
}

func TestLookupUserRefuses(t *testing.T) {
	if os.Geteuid() != 0 {
		_, err := host.LookupUser("nobody")
		if err == nil || !strings.Contains(err.Error(), "not root") {
			t.Fatalf("LookupUser as uid %d = %v, want a refusal saying berth is not root", os.Geteuid(), err)
		}
		return
	}
	for _, name := range []string{"root", "0", "berth-no-such-user"} {
		if u, err := host.LookupUser(name); err == nil {
			t.Errorf("LookupUser(%q) = %+v, want a refusal", name, u)
		}
	}
}

// TestConformanceHostUser runs the suite with processes and files as the
// host user.
func TestConformanceHostUser(t *testing.T) {
	u := nobody(t)
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		dir := reachableDir(t)
		if err := os.Chown(dir, int(u.Uid), int(u.Gid)); err != nil {
			t.Fatal(err)
		}
		return host.New(host.Options{User: u}), sandboxtest.Config{Scratch: dir, WithFSReplyTimeout: func(t *testing.T, reply time.Duration) sandbox.Sandbox {
			return host.New(host.Options{User: u, FSReplyTimeout: reply})
		}}
	})
}

// TestHostUser: with a host user, processes run as that user, with its
// home, cannot read a root-only token file and cannot kill their agent.
func TestHostUser(t *testing.T) {
	u := nobody(t)
	dir := reachableDir(t) // only the file's mode protects it
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("berth-test-token-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	public := filepath.Join(dir, "public")
	if err := os.WriteFile(public, []byte("public-ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `id -u; id -g; echo "HOME=$HOME"; cat ` + public + `; cat ` + token + ` && echo READ; kill -9 $PPID && echo KILLED; echo end`

	// As berth's own user the same read succeeds.
	own := host.New(host.Options{})
	defer own.Close()
	if out, _, _ := run(t, own, "/bin/sh", "-c", "cat "+token+" && echo READ"); !strings.Contains(out, "READ") {
		t.Fatalf("the control run as berth's user did not read the token file:\n%s", out)
	}

	sb := host.New(host.Options{User: u})
	defer sb.Close()
	out, errOut, _ := run(t, sb, "/bin/sh", "-c", script)
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || lines[0] != fmt.Sprint(u.Uid) || lines[1] != fmt.Sprint(u.Gid) {
		t.Fatalf("uid and gid = %q, want %d and %d (stderr %s)", lines, u.Uid, u.Gid, errOut)
	}
	if lines[2] != "HOME="+u.Home {
		t.Errorf("%s, want HOME=%s", lines[2], u.Home)
	}
	if !strings.Contains(out, "public-ok") {
		t.Errorf("the host user could not read a public file beside the token (the test proves nothing):\n%s", out)
	}
	if strings.Contains(out, "berth-test-token-file") || strings.Contains(out, "READ") {
		t.Errorf("the host user read a 0600 root file:\n%s", out)
	}
	if strings.Contains(out, "KILLED") || !strings.Contains(out, "end") {
		t.Errorf("the host user killed its agent:\n%s", out)
	}
	if !strings.Contains(errOut, "ermission denied") {
		t.Errorf("stderr %q, want the refused read", errOut)
	}
	// Files are served as the host user: the kernel refuses the token,
	// and what is written belongs to the host user.
	ctx := context.Background()
	fsys, err := sb.FS(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fsys.ReadFile(ctx, "public"); err != nil || string(b) != "public-ok\n" {
		t.Errorf("FS read of a public file: %q %v", b, err)
	}
	if b, err := fsys.ReadFile(ctx, "token"); err == nil {
		t.Errorf("FS read the 0600 root token as the host user: %q", b)
	}
	if err := fsys.WriteFile(ctx, "new", []byte("x"), 0o644); err == nil {
		t.Errorf("FS wrote into a root directory the host user may not write")
	}
	sub := filepath.Join(dir, "ws")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sub, int(u.Uid), int(u.Gid)); err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile(ctx, "ws/new", []byte("x"), 0o644); err != nil {
		t.Fatalf("FS write into the host user's directory: %v", err)
	}
	if uid, ok := fileUid(filepath.Join(sub, "new")); !ok || uid != u.Uid {
		t.Errorf("a written file belongs to uid %d, want the host user's %d", uid, u.Uid)
	}
	if _, err := sb.Start(context.Background(), &sandbox.Cmd{Args: []string{"true"}, User: "root"}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Cmd.User root in a host-user sandbox: %v, want ErrUnsupported", err)
	}
}

// lineBuffer is a buffer that output is copied into while the test reads it.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cgroupSandbox returns a host sandbox with its own control group,
// skipping where the machine gives none.
func cgroupSandbox(t *testing.T, opts host.Options) *host.Sandbox {
	t.Helper()
	sb := host.New(opts)
	if len(sb.CgroupDirs()) == 0 {
		sb.Close()
		t.Skipf("no control group on this machine: %s", sb.Limits())
	}
	return sb
}

// TestForkBombCgroup: in a sandbox with its own control group (berth's own
// user, root), a fork bomb stops at pids.max; the group is gone after
// Close.
func TestForkBombCgroup(t *testing.T) {
	const pidsMax = 48
	sb := cgroupSandbox(t, host.Options{PidsMax: pidsMax})
	defer sb.Close()
	dirs := sb.CgroupDirs()
	t.Logf("limits: %s", sb.Limits())
	pids := forkBomb(t, sb, pidsMax, func() {
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, "pids.current")); err == nil {
				if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n > pidsMax {
					t.Errorf("pids.current %d > pids.max %d", n, pidsMax)
				}
			}
		}
	})
	for _, pid := range pids {
		if _, ok := procUid(pid); ok {
			t.Errorf("process %d of the bomb is still there after Close", pid)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("control group %s still there after Close: %v", d, err)
		}
	}
}

// TestForkBombRlimit: without a control group, a host user's fork bomb
// stops at RLIMIT_NPROC.
func TestForkBombRlimit(t *testing.T) {
	u := nobody(t)
	const pidsMax = 48
	sb := host.NewWithoutCgroup(host.Options{User: u, PidsMax: pidsMax})
	defer sb.Close()
	if !strings.Contains(sb.Limits(), "RLIMIT_NPROC") {
		t.Fatalf("limits %q, want RLIMIT_NPROC", sb.Limits())
	}
	pids := forkBomb(t, sb, pidsMax, func() {})
	for _, pid := range pids {
		if uid, ok := procUid(pid); ok && uid == u.Uid {
			t.Errorf("process %d of the bomb is still there after Close", pid)
		}
	}
}

// forkBomb runs a process in sb that forks until it cannot, checks that
// it stopped below pidsMax and that berth still starts processes in
// another sandbox meanwhile, calls during while the bomb holds its limit,
// closes sb and returns the bomb's pids.
func forkBomb(t *testing.T, sb *host.Sandbox, pidsMax int, during func()) []int {
	t.Helper()
	const bound = 1000 // the loop ends here even without a limit
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The loop runs in a subshell, which exits when a fork fails; its
	// parent then holds the limit with everything it forked still alive.
	script := fmt.Sprintf(`(i=0; while [ $i -lt %d ]; do sleep 120 & echo "pid $!"; i=$((i+1)); done); echo forking-stopped; exec sleep 120`, bound)
	var out, errOut lineBuffer
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", script}, Dir: "/", Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "forking-stopped") {
		select {
		case <-ctx.Done():
			t.Fatalf("the fork loop did not stop: %d forks so far; stderr %s", strings.Count(out.String(), "pid "), errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var pids []int
	for _, l := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "pid "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("line %q", l)
			}
			pids = append(pids, n)
		}
	}
	t.Logf("forked %d processes before the limit of %d", len(pids), pidsMax)
	if len(pids) >= pidsMax {
		t.Fatalf("forked %d processes, beyond the limit of %d", len(pids), pidsMax)
	}
	// stderr comes through the agent's frames, stdout directly: the
	// shell's complaint may arrive after "forking-stopped".
	for !strings.Contains(errOut.String(), "fork") {
		select {
		case <-ctx.Done():
			t.Fatalf("stderr %q, want the shell's fork failure", errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	during()
	// The machine keeps working: berth starts a process in another sandbox.
	other := host.New(host.Options{})
	defer other.Close()
	if out, _, st := run(t, other, "echo", "alive"); !st.Success() || out != "alive\n" {
		t.Fatalf("another sandbox while the bomb holds its limit: %v %q", st, out)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	return pids
}

// TestMemoryMax: a process that takes more memory than the sandbox's
// limit is killed; the same one without the limit is not.
func TestMemoryMax(t *testing.T) {
	const limit = 32 << 20
	// tail keeps a line without newline whole: 200 MB of zeros.
	script := `head -c 200000000 /dev/zero | tail -n 1 >/dev/null; echo "tail $?"`
	sb := cgroupSandbox(t, host.Options{MemoryMax: limit})
	defer sb.Close()
	if out, errOut, _ := run(t, sb, "/bin/sh", "-c", script); out != "tail 137\n" {
		t.Fatalf("with a %d MiB limit: %q (stderr %q), want tail killed (137)", limit>>20, out, errOut)
	}
	free := host.New(host.Options{MemoryMax: -1})
	defer free.Close()
	if out, errOut, _ := run(t, free, "/bin/sh", "-c", script); out != "tail 0\n" {
		t.Fatalf("without a memory limit: %q (stderr %q), want tail 0", out, errOut)
	}
}

// procUid returns the real uid of pid, false when it is gone.
func procUid(pid int) (uint32, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, err := strconv.ParseUint(f[0], 10, 32)
				return uint32(n), err == nil
			}
		}
	}
	return 0, false
}

// fileUid returns the owner of the file at p.
func fileUid(p string) (uint32, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// TestHostUserPath: a program is looked up in PATH as the host user would
// (the agent's own user may enter directories the host user may not).
func TestHostUserPath(t *testing.T) {
	u := nobody(t)
	dir := reachableDir(t)
	priv, pub := filepath.Join(dir, "private"), filepath.Join(dir, "public")
	for d, mode := range map[string]os.FileMode{priv: 0o700, pub: 0o755} {
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "berth-probe"), []byte("#!/bin/sh\necho "+filepath.Base(d)+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb := host.New(host.Options{User: u, Env: []string{"PATH=" + priv + ":" + pub + ":/usr/bin:/bin"}})
	defer sb.Close()
	if out, errOut, st := run(t, sb, "berth-probe"); !st.Success() || out != "public\n" {
		t.Fatalf("berth-probe as the host user: %v %q %q, want the public one", st, out, errOut)
	}
}
