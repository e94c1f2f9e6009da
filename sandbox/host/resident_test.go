package host_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/sandbox/sandboxtest"
)

var _ sandbox.Residence = (*host.Sandbox)(nil)

// TestResident runs the resident conformance checks on this machine. Each
// sandbox the suite opens is a new host sandbox, as a restarted berth
// opens; they share one scratch directory. With the default options each
// has a control group of its own where the machine allows one (root): a
// resident's processes run in the group of the sandbox that started them,
// and that sandbox's close must leave the group to a resident it let go
// of, not kill it.
func TestResident(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts host.Options
	}{
		{"default", host.Options{}},
		{"no limits", host.Options{PidsMax: -1, MemoryMax: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scratch := t.TempDir()
			sandboxtest.RunResident(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
				return host.New(tc.opts), sandboxtest.Config{Scratch: scratch}
			})
		})
	}
}

// residentHelper is the helper parent's mode (see TestMain) in which it is
// a berth that starts a resident and a process under it, says "started",
// and waits to be killed.
const residentHelper = "resident"

// residentParent reads the resident's directory and secret on stdin (one
// line each), starts the resident and "cat" under it, copies its output to
// stdout, and waits for good.
func residentParent() int {
	var dir, secret string
	if _, err := fmt.Fscanln(os.Stdin, &dir); err != nil {
		fmt.Fprintln(os.Stderr, "read dir:", err)
		return 2
	}
	if _, err := fmt.Fscanln(os.Stdin, &secret); err != nil {
		fmt.Fprintln(os.Stderr, "read secret:", err)
		return 2
	}
	sb := host.New(host.Options{PidsMax: -1, MemoryMax: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Resident(ctx, sandbox.ResidentSpec{Dir: dir, Secret: []byte(secret), Grace: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "resident:", err)
		return 2
	}
	inR, _ := io.Pipe()
	if _, err := res.Start(context.Background(), "cat", &sandbox.Cmd{Args: []string{"sh", "-c", `echo started; while read l; do echo "line $l"; done`}, Stdin: inR, Stdout: os.Stdout}); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 2
	}
	select {} // until killed
}

// TestResidentBerthKilled: a berth killed outright (kill -9, no Detach, no
// Close) leaves its resident and its process running, stdin open; a new
// berth adopts the resident and talks to the process.
func TestResidentBerthKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "res")
	secret := strings.Repeat("k", sandbox.MinResidentSecret)
	berth := exec.CommandContext(ctx, os.Args[0])
	berth.Env = append(os.Environ(), envHelper+"="+residentHelper)
	berth.Stdin = strings.NewReader(dir + "\n" + secret + "\n")
	out, err := berth.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	berth.Stderr = &stderr
	if err := berth.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "started\n" {
		berth.Process.Kill()
		berth.Wait()
		t.Fatalf("helper berth: %q %v: %s", line, err, stderr.String())
	}
	berth.Process.Kill()
	berth.Wait()

	sb := host.New(host.Options{PidsMax: -1, MemoryMax: -1})
	defer sb.Close()
	res, err := sb.Resident(ctx, sandbox.ResidentSpec{Dir: dir, Secret: []byte(secret), Adopt: true})
	if err != nil {
		t.Fatalf("adopt after berth was killed: %v", err)
	}
	defer res.Close()
	inR, inW := io.Pipe()
	defer inW.Close()
	var got bytes.Buffer
	p, err := res.Attach(ctx, "cat", &sandbox.Cmd{Stdin: inR, Stdout: &got})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(inW, "after\n")
	inW.Close()
	st, err := p.Wait()
	if err != nil || !st.Success() {
		t.Fatalf("Wait = %v, %v", st, err)
	}
	if got.String() != "line after\n" {
		t.Errorf("the adopted process wrote %q, want %q (its stdin survived berth's death)", got.String(), "line after\n")
	}
}
