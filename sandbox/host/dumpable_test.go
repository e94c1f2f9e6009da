package host_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/sandbox/shim"
	"go.uber.org/goleak"
)

// envHelper makes the test binary act as a berth-like parent instead of
// running the tests: "dumpable" or "undumpable" (PR_SET_DUMPABLE 0 first,
// as berth serve does), then it starts a host process that reads the
// parent's /proc/PID/environ.
const envHelper = "BERTH_HOST_TEST_PARENT"

// huntedSecret is in the helper parent's environment.
const huntedSecret = "berth-test-parent-secret-41c2"

const prSetDumpable = 4

// TestMain runs the helper parent when asked to, and otherwise the tests,
// failing the package when a test leaves a goroutine running.
func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(helperParent(mode))
	}
	goleak.VerifyTestMain(m)
}

func helperParent(mode string) int {
	if mode == residentHelper {
		return residentParent()
	}
	if mode == "undumpable" {
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
			fmt.Fprintln(os.Stderr, "prctl:", e)
			return 2
		}
	}
	sb := host.New(host.Options{})
	defer sb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, &sandbox.Cmd{
		Args:   []string{"cat", fmt.Sprintf("/proc/%d/environ", os.Getpid())},
		Dir:    "/",
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 2
	}
	if _, err := p.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "wait:", err)
		return 2
	}
	return 0
}

// reachableDir returns a new directory that every user can list and
// enter (t.TempDir's parent is private to the test's user).
func reachableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "berth-host-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyExec copies the file at src to dst, executable by everyone.
func copyExec(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUndumpableParent: a host process running as its parent's user reads
// the parent's environment through /proc, unless the parent made itself
// undumpable (prctl PR_SET_DUMPABLE 0, what berth serve does at start).
// As root the parent runs as nobody, since root reads any /proc entry.
func TestUndumpableParent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := reachableDir(t)
	bin, err := shim.Locate(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "host.test")
	copyExec(t, os.Args[0], exe)
	copyExec(t, bin.Path, filepath.Join(dir, shim.BinaryName))
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u := nobody(t)
		cred = &syscall.Credential{Uid: u.Uid, Gid: u.Gid}
	}
	for _, mode := range []string{"dumpable", "undumpable"} {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Dir = dir
		cmd.Env = []string{envHelper + "=" + mode, "HUNTED=" + huntedSecret, "PATH=" + os.Getenv("PATH"), "HOME=" + dir,
			shim.EnvBinary + "=" + filepath.Join(dir, shim.BinaryName)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s parent: %v: %s", mode, err, stderr.String())
		}
		read := strings.Contains(stdout.String(), huntedSecret)
		switch {
		case mode == "dumpable" && !read:
			t.Fatalf("control: the host process did not read its dumpable parent's environment (the test proves nothing): stdout %q stderr %q", stdout.String(), stderr.String())
		case mode == "undumpable" && read:
			t.Fatalf("the host process read its undumpable parent's environment:\n%s", stdout.String())
		case mode == "undumpable" && !strings.Contains(stderr.String(), "ermission denied"):
			t.Errorf("stderr %q, want the refused read", stderr.String())
		}
	}
}
