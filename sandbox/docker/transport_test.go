package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// run execs args through tr with stdin, collecting both outputs.
func run(t *testing.T, tr *Transport, spec shim.ExecSpec, stdin []byte) (stdout, stderr string, code int, err error) {
	t.Helper()
	st, err := tr.Exec(context.Background(), spec)
	if err != nil {
		return "", "", 0, err
	}
	defer st.Close()
	var out, errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); io.Copy(&out, st.Stdout()) }()
	go func() { defer wg.Done(); io.Copy(&errb, st.Stderr()) }()
	go func() {
		defer wg.Done()
		st.Stdin().Write(stdin)
		st.Stdin().Close()
	}()
	code, err = st.Wait()
	wg.Wait()
	return out.String(), errb.String(), code, err
}

func TestTransportExec(t *testing.T) {
	cli := needDocker(t)
	tr := NewTransport(cli, startContainer(t, cli, containerSpec{}))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB

	tests := []struct {
		name       string
		spec       shim.ExecSpec
		stdin      []byte
		wantOut    string
		wantErr    string
		wantCode   int
		wantGoneOK bool
	}{
		{name: "streams and exit code", spec: shim.ExecSpec{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 43"}},
			wantOut: "out\n", wantErr: "err\n", wantCode: 43},
		{name: "stdin to EOF", spec: shim.ExecSpec{Args: []string{"cat"}}, stdin: []byte("hello\n"), wantOut: "hello\n"},
		{name: "large stdin through cat", spec: shim.ExecSpec{Args: []string{"cat"}}, stdin: big, wantOut: string(big)},
		{name: "env dir user", spec: shim.ExecSpec{Args: []string{"sh", "-c", "echo $FOO; pwd; id -u"}, Env: []string{"FOO=bar"}, Dir: "/tmp", User: "65534"},
			wantOut: "bar\n/tmp\n65534\n"},
		{name: "empty stdin", spec: shim.ExecSpec{Args: []string{"wc", "-c"}}, wantOut: "0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code, err := run(t, tr, tt.spec, tt.stdin)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if strings.TrimLeft(out, " ") != tt.wantOut || errOut != tt.wantErr || code != tt.wantCode {
				t.Errorf("got out %.40q err %q code %d; want out %.40q err %q code %d", out, errOut, code, tt.wantOut, tt.wantErr, tt.wantCode)
			}
		})
	}
}

func TestTransportExecMissingProgram(t *testing.T) {
	cli := needDocker(t)
	tr := NewTransport(cli, startContainer(t, cli, containerSpec{}))
	_, _, code, err := run(t, tr, shim.ExecSpec{Args: []string{"/no/such/program"}}, nil)
	if err == nil && code == 0 {
		t.Fatalf("a missing program exited 0 without error")
	}
	if errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("a missing program made the container look gone: %v", err)
	}
	t.Logf("code %d err %v", code, err)
}

func TestTransportStoppedMidRun(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{})
	tr := NewTransport(cli, id)
	st, err := tr.Exec(context.Background(), shim.ExecSpec{Args: []string{"sh", "-c", "echo started; exec sleep 1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	go io.Copy(io.Discard, st.Stderr())
	line := make([]byte, len("started\n"))
	if _, err := io.ReadFull(st.Stdout(), line); err != nil {
		t.Fatalf("read first output: %v", err)
	}
	stopContainer(t, cli, id)
	go io.Copy(io.Discard, st.Stdout())
	_, err = st.Wait()
	if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), short(id)) {
		t.Fatalf("Wait after stop = %v; want ErrGone naming %s", err, short(id))
	}
	_, err = tr.Exec(context.Background(), shim.ExecSpec{Args: []string{"true"}})
	if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Exec after stop = %v; want ErrGone saying it exited", err)
	}
}

func TestTransportPausedAndRemoved(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{})
	tr := NewTransport(cli, id)
	pauseContainer(t, cli, id)
	_, err := tr.Exec(context.Background(), shim.ExecSpec{Args: []string{"true"}})
	if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("Exec in paused container = %v; want ErrGone saying paused", err)
	}
	removeContainer(t, cli, id)
	_, err = tr.Exec(context.Background(), shim.ExecSpec{Args: []string{"true"}})
	if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("Exec in removed container = %v; want ErrGone saying removed", err)
	}
}

// fakeAgent is a stand-in file for the agent binary: Place only copies bytes.
func fakeAgent(t *testing.T, content string) *shim.Binary {
	t.Helper()
	p := filepath.Join(t.TempDir(), "berth-shim")
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	return &shim.Binary{Path: p, Hash: hex.EncodeToString(sum[:])}
}

func TestPlaceIdempotentAndConcurrent(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{})
	bin := fakeAgent(t, "#!/bin/sh\necho agent \"$@\"\n")
	tr := NewTransport(cli, id)

	const n = 8
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { paths[i], errs[i] = tr.Place(context.Background(), bin) })
	}
	wg.Wait()
	want := "/.berth/shim-" + bin.Hash[:12] + "/berth-shim"
	for i := range n {
		if errs[i] != nil || paths[i] != want {
			t.Fatalf("Place #%d = %q, %v; want %q", i, paths[i], errs[i], want)
		}
	}
	out, _, code, err := run(t, tr, shim.ExecSpec{Args: []string{want, "x"}, User: "65534"}, nil)
	if err != nil || code != 0 || out != "agent x\n" {
		t.Fatalf("run placed agent as nobody: %q code %d err %v", out, code, err)
	}

	// A second transport (another berth process) finds the copy in place.
	tr2 := NewTransport(cli, id)
	if p, err := tr2.Place(context.Background(), bin); err != nil || p != want {
		t.Fatalf("Place from a new transport = %q, %v; want %q", p, err, want)
	}

	// A truncated copy (an interrupted earlier placement) is replaced.
	if _, _, _, err := run(t, tr, shim.ExecSpec{Args: []string{"sh", "-c", "printf '#!' > " + want}}, nil); err != nil {
		t.Fatal(err)
	}
	tr3 := NewTransport(cli, id)
	if p, err := tr3.Place(context.Background(), bin); err != nil || p != want {
		t.Fatalf("Place over a truncated copy = %q, %v; want %q", p, err, want)
	}
	out, _, _, err = run(t, tr, shim.ExecSpec{Args: []string{want, "y"}}, nil)
	if err != nil || out != "agent y\n" {
		t.Fatalf("run replaced agent: %q, %v", out, err)
	}
}

func TestPlaceFallbacks(t *testing.T) {
	cli := needDocker(t)
	bin := fakeAgent(t, "#!/bin/sh\necho agent\n")
	t.Run("read-only root with a /tmp volume", func(t *testing.T) {
		tr := NewTransport(cli, startContainer(t, cli, containerSpec{readOnly: true, binds: []string{t.TempDir() + ":/tmp"}}))
		p, err := tr.Place(context.Background(), bin)
		want := "/tmp/.berth/shim-" + bin.Hash[:12] + "/berth-shim"
		if err != nil || p != want {
			t.Fatalf("Place = %q, %v; want %q", p, err, want)
		}
		out, _, code, err := run(t, tr, shim.ExecSpec{Args: []string{p}}, nil)
		if err != nil || code != 0 || out != "agent\n" {
			t.Fatalf("run placed agent: %q code %d err %v", out, code, err)
		}
	})
	t.Run("nothing writable", func(t *testing.T) {
		tr := NewTransport(cli, startContainer(t, cli, containerSpec{readOnly: true}))
		_, err := tr.Place(context.Background(), bin)
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "read-only") || errors.Is(err, sandbox.ErrGone) {
			t.Fatalf("Place = %v; want ErrUnsupported saying the root is read-only", err)
		}
		t.Log(err)
	})
}

// TestTransportArch: the container's architecture comes from its image's
// config, and agrees with `uname -m` inside it.
func TestTransportArch(t *testing.T) {
	cli := needDocker(t)
	tr := NewTransport(cli, startContainer(t, cli, containerSpec{}))
	arch, err := tr.Arch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, _, code, err := run(t, tr, shim.ExecSpec{Args: []string{"uname", "-m"}}, nil)
	if err != nil || code != 0 {
		t.Fatalf("uname -m: %q, exit %d, %v", out, code, err)
	}
	if got := shim.UnameArch(out); got != arch {
		t.Fatalf("Arch = %q, uname -m says %q (%s)", arch, got, strings.TrimSpace(out))
	}
}
