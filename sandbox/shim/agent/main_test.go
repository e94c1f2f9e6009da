package agent

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// envMain makes the test binary run the agent (Main) instead of the tests,
// so that the run protocol is tested through a real process.
const envMain = "BERTH_AGENT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runAgent runs the agent with args, sends it stdin EOF, and collects what
// it wrote on stdout and stderr. It closes the agent's stdin only after
// both ended, as berth does after the exit frame.
func runAgent(t *testing.T, args ...string) (stdout, stderr []byte, took time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(in, TypeStdinEOF, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stdout, _ = io.ReadAll(outR) }()
	go func() { defer wg.Done(); stderr, _ = io.ReadAll(errR) }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the agent did not end its output")
	}
	took = time.Since(start)
	in.Close()
	cmd.Wait()
	return stdout, stderr, took
}

// frameLog summarises frames as lines: "p" for the start, "o:" and "r:"
// with all stdout and stderr payload (relayed by goroutines of their own,
// so not in order with each other), and "x:code,signal" for the exit.
// The start must come first and the exit last.
func frameLog(t *testing.T, b []byte) string {
	t.Helper()
	var types []byte
	var out, errOut, exit string
	fr := NewReader(bytes.NewReader(b))
	for {
		typ, p, err := fr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("frames %q: %v", b, err)
		}
		types = append(types, typ)
		switch typ {
		case TypeStdout:
			out += string(p)
		case TypeStderr:
			errOut += string(p)
		case TypeExit:
			v, err := Uint32s(p, 2)
			if err != nil {
				t.Fatal(err)
			}
			exit = fmt.Sprintf("x:%d,%d", int32(v[0]), v[1])
		}
	}
	if len(types) < 2 || types[0] != TypeStarted || types[len(types)-1] != TypeExit {
		t.Fatalf("frame types %q: want the start first and the exit last", types)
	}
	lines := []string{"p"}
	if out != "" {
		lines = append(lines, "o:"+out)
	}
	if errOut != "" {
		lines = append(lines, "r:"+errOut)
	}
	return strings.Join(append(lines, exit), "\n")
}

func TestRunProtocol(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStdout string // raw bytes on the agent's stdout
		wantFrames string // the frames, on stdout or (direct) stderr
		direct     bool
		minTook    time.Duration
		maxTook    time.Duration
	}{
		{name: "framed stdout",
			args:       []string{"run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"},
			wantFrames: "p\no:out\n\nr:err\n\nx:3,0"},
		{name: "direct stdout",
			args:       []string{"run", "--direct-stdout", "--", "sh", "-c", "echo out; echo err >&2; exit 3"},
			direct:     true,
			wantStdout: "out\n", wantFrames: "p\nr:err\n\nx:3,0"},
		// The exit is reported once a grandchild holding stdout let go.
		{name: "direct stdout waits for a holder",
			args:       []string{"run", "--wait-delay=10s", "--direct-stdout", "--", "sh", "-c", "(sleep 0.5; echo late) & echo early"},
			direct:     true,
			wantStdout: "early\nlate\n", wantFrames: "p\nx:0,0", minTook: 500 * time.Millisecond},
		// A holder that stays beyond the wait delay is killed.
		{name: "direct stdout kills a lingering holder",
			args:       []string{"run", "--wait-delay=300ms", "--direct-stdout", "--", "sh", "-c", "sleep 30 & echo x"},
			direct:     true,
			wantStdout: "x\n", wantFrames: "p\nx:0,0", maxTook: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, took := runAgent(t, tt.args...)
			frames := stdout
			if tt.direct {
				frames = stderr
				if string(stdout) != tt.wantStdout {
					t.Errorf("stdout %q, want %q", stdout, tt.wantStdout)
				}
			} else if len(stderr) > 0 {
				t.Errorf("stderr %q, want nothing", stderr)
			}
			if got := frameLog(t, frames); got != tt.wantFrames {
				t.Errorf("frames:\n%s\nwant:\n%s", got, tt.wantFrames)
			}
			if took < tt.minTook || (tt.maxTook > 0 && took > tt.maxTook) {
				t.Errorf("took %v, want between %v and %v", took, tt.minTook, tt.maxTook)
			}
		})
	}
}
