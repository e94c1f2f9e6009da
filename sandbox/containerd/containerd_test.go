package containerd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
	"berth.dev/berth/sandbox/shim"
)

// testNamespace is dockerd's containerd namespace; the tests make their
// containers with the docker CLI.
const testNamespace = "moby"

// testImage is the image the tests run: $BERTH_TEST_IMAGE or
// berth-test-minimal.
func testImage() string {
	if img := os.Getenv("BERTH_TEST_IMAGE"); img != "" {
		return img
	}
	return "berth-test-minimal"
}

// need fails (CI=true) or skips the test when containerd or the docker CLI
// is missing.
func need(t *testing.T) {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	if _, err := exec.LookPath("docker"); err != nil {
		fail("the docker CLI is needed to make test containers: %v", err)
	}
	p, err := New()
	if err == nil {
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = p.cli.Version(ctx)
		cancel()
	}
	if err != nil {
		fail("containerd does not answer: %v", err)
	}
}

func newProvider(t *testing.T, opts ...Option) *Provider {
	t.Helper()
	p, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func randomID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// startContainer runs a container of the test image labelled with the
// conversation id conv, removed at cleanup, and returns its full id.
func startContainer(t *testing.T, conv string) string {
	t.Helper()
	id := docker(t, "run", "-d", "--network", "none", "--label", DefaultLabelKey+"="+conv, testImage(), "sleep", "infinity")
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
	return id
}

func TestConformance(t *testing.T) {
	need(t)
	id := startContainer(t, "conformance-"+randomID())
	scratch := "/tmp/berth-conformance-" + randomID()
	docker(t, "exec", id, "mkdir", "-p", scratch)
	p := newProvider(t)
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		sb, err := p.Open(context.Background(), "containerd://"+testNamespace+"/"+id)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return sb, sandboxtest.Config{Scratch: scratch, WithFSReplyTimeout: func(t *testing.T, reply time.Duration) sandbox.Sandbox {
			short, err := newProvider(t, WithFSReplyTimeout(reply)).Open(context.Background(), "containerd://"+testNamespace+"/"+id)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return short
		}}
	})
}

func TestOpen(t *testing.T) {
	need(t)
	p := newProvider(t)
	ctx := context.Background()

	running := startContainer(t, "open-"+randomID())
	sb, err := p.Open(ctx, "containerd://"+testNamespace+"/"+running)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer sb.Close()
	if want := "containerd://" + testNamespace + "/" + running; sb.Ref() != want {
		t.Errorf("Ref() = %q, want %q", sb.Ref(), want)
	}
	if err := sb.Check(ctx); err != nil {
		t.Errorf("Check on a running container: %v", err)
	}

	stopped := startContainer(t, "open-"+randomID())
	stoppedSB, err := p.Open(ctx, testNamespace+"/"+stopped)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer stoppedSB.Close()
	docker(t, "stop", "-t", "0", stopped)
	if err := stoppedSB.Check(ctx); !errors.Is(err, sandbox.ErrGone) {
		t.Errorf("Check after the container stopped = %v, want ErrGone", err)
	}

	paused := startContainer(t, "open-"+randomID())
	docker(t, "pause", paused)
	t.Cleanup(func() { exec.Command("docker", "unpause", paused).Run() })

	tests := []struct {
		name  string
		ref   string
		class error
		says  string
	}{
		{"missing", testNamespace + "/berth-no-such-container-" + randomID(), sandbox.ErrNotFound, "berth-no-such-container-"},
		{"no namespace", "containerd://" + running, sandbox.ErrNotFound, "NAMESPACE/ID"},
		{"empty", "", sandbox.ErrNotFound, "NAMESPACE/ID"},
		// dockerd deletes a container from containerd when it stops.
		{"stopped", "containerd://" + testNamespace + "/" + stopped, sandbox.ErrNotFound, "dockerd"},
		{"paused", testNamespace + "/" + paused, sandbox.ErrGone, "paused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := p.Open(ctx, tt.ref)
			if err == nil {
				sb.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Open = %v; want %v saying %q", err, tt.class, tt.says)
			}
		})
	}
}

// TestLocateDocker checks that containers dockerd runs, whose labels
// containerd never sees, are not found by label (the docker backend finds
// them); labelled containers are covered by TestTasks.
func TestLocateDocker(t *testing.T) {
	need(t)
	p := newProvider(t)
	conv := "locate-" + randomID()
	startContainer(t, conv)
	for _, c := range []string{conv, "", "locate-none-" + randomID()} {
		if got, err := p.Locate(context.Background(), sandbox.Owner{Conversation: c}); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Locate(%q) = %q, %v; want ErrNotFound", c, got, err)
		}
	}
}

// TestExecUserAndCleanup runs programs as other users and checks that the
// execs leave no FIFOs behind in the FIFO directory (its own, so that other
// containerd clients on the machine do not count).
func TestExecUserAndCleanup(t *testing.T) {
	need(t)
	fifoDir := t.TempDir()
	p := newProvider(t, WithFIFODir(fifoDir))
	ctx := context.Background()
	id := startContainer(t, "exec-"+randomID())
	before, _ := os.ReadDir(fifoDir)

	sb, err := p.Open(ctx, testNamespace+"/"+id)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ user, want string }{
		{"", "0:0"},
		{"daemon", "1:1"},
		{"1", "1:1"},
		{"2:1", "2:1"},
		{"bin:daemon", "2:1"},
		{"4242", "4242:0"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", `echo "$(id -u):$(id -g)"`}, User: tt.user, Stdout: &out})
		if err != nil {
			t.Fatalf("Start as %q: %v", tt.user, err)
		}
		if st, err := proc.Wait(); err != nil || !st.Success() {
			t.Fatalf("Wait as %q: %v, %v", tt.user, st, err)
		}
		if got := strings.TrimSpace(out.String()); got != tt.want {
			t.Errorf("as %q: ids %s, want %s", tt.user, got, tt.want)
		}
	}
	if _, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}, User: "no-such-user"}); err == nil {
		t.Errorf("Start as an unknown user succeeded")
	}
	sb.Close()
	// The last streams' FIFOs are deleted as their processes are reaped,
	// which a loaded machine may finish a moment after Close; a leak stays.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, _ := os.ReadDir(fifoDir)
		if len(after) <= len(before) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s has %d entries 10 s after the execs, %d before: FIFOs leak", fifoDir, len(after), len(before))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPlaceExec places the agent through an exec, the path used when this
// machine does not show the task's root file system, and reuses the copy.
func TestPlaceExec(t *testing.T) {
	need(t)
	p := newProvider(t)
	ctx := context.Background()
	id := startContainer(t, "place-"+randomID())
	bin, err := shim.Locate(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin.Path)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := p.cli.LoadContainer(namespaces.WithNamespace(ctx, testNamespace), id)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(p.cli, testNamespace, ctr)
	rel := "shim-test-" + randomID() + "/berth-shim"
	for i := range 2 {
		target, err := tr.placeExec(ctx, rel, data)
		if err != nil {
			t.Fatalf("placeExec #%d: %v", i, err)
		}
		if want := "/.berth/" + rel; target != want {
			t.Fatalf("placeExec #%d = %s, want %s", i, target, want)
		}
		_, errOut, code, err := shim.RunExec(ctx, tr, shim.ExecSpec{Args: []string{target, "version"}}, nil)
		if err != nil || code != 0 {
			t.Fatalf("running the placed agent: code %d, %v, stderr %q", code, err, errOut)
		}
	}
}

// TestUnreachable checks that a daemon that does not answer is ErrGone.
func TestUnreachable(t *testing.T) {
	p := newProvider(t, WithAddress(filepath.Join(t.TempDir(), "no-containerd.sock")))
	ctx := context.Background()
	t.Run("locate", func(t *testing.T) {
		t.Parallel()
		if _, err := p.Locate(ctx, sandbox.Owner{Conversation: "c1"}); !errors.Is(err, sandbox.ErrGone) {
			t.Errorf("Locate = %v, want ErrGone", err)
		}
	})
	t.Run("open", func(t *testing.T) {
		t.Parallel()
		if _, err := p.Open(ctx, "moby/c1"); !errors.Is(err, sandbox.ErrGone) {
			t.Errorf("Open = %v, want ErrGone", err)
		}
	})
}

// TestExecCancelledStart cancels execs of a program that writes to stderr
// and exits, at moments from 0 to 40 ms into their start, and requires every
// Exec to return (with a stream or an error). An exec whose start RPC fails
// leaves containerd's client waiting for its output copies; the abandoned
// start closes the FIFOs and the stream so that they end. (The hang seen in
// CI — a copy blocked on the stream's stderr pipe — needs a start RPC that
// fails after the program wrote, which this sweep did not hit on this
// machine; it guards the cancelled-start path in general.)
func TestExecCancelledStart(t *testing.T) {
	need(t)
	p := newProvider(t)
	id := startContainer(t, "cancel-"+randomID())
	ctr, err := p.cli.LoadContainer(namespaces.WithNamespace(context.Background(), testNamespace), id)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(p.cli, testNamespace, ctr)
	msg := strings.Repeat("the dial failed ", 8)
	for i := range 21 {
		after := time.Duration(i) * 2 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(after, cancel)
		type result struct {
			st  shim.Stream
			err error
		}
		done := make(chan result, 1)
		go func() {
			st, err := tr.Exec(ctx, shim.ExecSpec{Args: []string{"sh", "-c", "echo '" + msg + "' >&2"}})
			done <- result{st, err}
		}()
		select {
		case r := <-done:
			if r.err == nil {
				go io.Copy(io.Discard, r.st.Stderr())
				io.Copy(io.Discard, r.st.Stdout())
				r.st.Wait()
				r.st.Close()
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Exec cancelled after %v has not returned 20 s later", after)
		}
		cancel()
	}
}
