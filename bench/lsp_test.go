package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/moby/moby/client"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/docker"
	"berth.dev/berth/sandbox/shim"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/files"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

// Environment of the language-server comparison.
const (
	envLSPImage   = "BERTH_BENCH_LSP_IMAGE" // the image with gopls (default berth-test-go)
	envLSPQueries = "BERTH_BENCH_LSP_N"     // requests per measurement (default 300)
	envLSPWrites  = "BERTH_BENCH_LSP_W"     // writes per measurement (default 20)

	defaultLSPQueries = 300
	defaultLSPWrites  = 20
	benchWorkspace    = "/workspace"
	// echoBytes is the size of the exec stream's echo probe, about an LSP
	// request's.
	echoBytes = 100
)

// procStream is a local child's stdio as one stream.
type procStream struct {
	io.ReadCloser
	in io.WriteCloser
}

func (s procStream) Write(p []byte) (int, error) { return s.in.Write(p) }
func (s procStream) Close() error {
	err := s.in.Close()
	s.ReadCloser.Close()
	return err
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
func millis(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// lspSide is one gopls reached one way: started directly on the host, or
// placed in the container through the exec stream.
type lspSide struct {
	name string
	c    *lspc.Client
	root string // the workspace as the server sees it
	stop func()
}

func (s *lspSide) uri(name string) string {
	u, _ := lspc.FileURI(path.Join(s.root, name))
	return u
}

func startSide(t *testing.T, name string, rw io.ReadWriteCloser, root string, stop func()) *lspSide {
	t.Helper()
	c := lspc.NewClient(rw, lspc.ConnOptions{})
	rootURI, _ := lspc.FileURI(root)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.Initialize(ctx, lspc.InitOptions{RootURI: rootURI, InitializationOptions: map[string]any{"diagnosticsDelay": "0s"}}); err != nil {
		t.Fatalf("%s: initialize: %v", name, err)
	}
	s := &lspSide{name: name, c: c, root: root, stop: stop}
	for n, text := range lsptest.GoProject {
		if strings.HasSuffix(n, ".go") {
			if _, err := c.DidOpen(ctx, s.uri(n), "go", text); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// timeRequests measures n requests of one kind, after a warm-up.
func timeRequests(t *testing.T, s *lspSide, n int, req func(context.Context) error) []time.Duration {
	t.Helper()
	ctx := t.Context()
	for range 20 {
		if err := req(ctx); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := req(ctx); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// hoverAndRefs measures hover and references on Hello in main.go.
func hoverAndRefs(t *testing.T, s *lspSide, n int) (hover, refs []time.Duration) {
	pos := lspc.Position{Line: 10, Character: 15} // main.go:11 "Hello"
	uri := s.uri("main.go")
	hover = timeRequests(t, s, n, func(ctx context.Context) error {
		h, err := s.c.Hover(ctx, uri, pos)
		if err == nil && h == nil {
			err = fmt.Errorf("no hover")
		}
		return err
	})
	refs = timeRequests(t, s, n, func(ctx context.Context) error {
		locs, err := s.c.References(ctx, uri, pos, true)
		if err == nil && len(locs) != 3 {
			err = fmt.Errorf("%d references, want 3", len(locs))
		}
		return err
	})
	return hover, refs
}

// publishTimes changes greet.go's signature and back, n times each, and
// measures the server's own publish times: until the changed file's
// diagnostics for the new version, and until the last publish of the
// round (the callers' errors in main.go).
func publishTimes(t *testing.T, s *lspSide, n int) (touched, last []time.Duration) {
	t.Helper()
	ctx := t.Context()
	uri := s.uri("greet/greet.go")
	orig := lsptest.GoProject["greet/greet.go"]
	broken := strings.Replace(orig, "name string) string {\n\treturn", "name, punct string) string {\n\treturn", 1)
	for i := range 2 * n {
		text := broken
		if i%2 == 1 {
			text = orig
		}
		seq := s.c.DiagnosticsSeq()
		start := time.Now()
		v, err := s.c.DidChange(ctx, uri, text)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.c.WaitDiagnostics(ctx, uri, v); err != nil {
			t.Fatal(err)
		}
		touched = append(touched, time.Since(start))
		// Wait generously for the rest, then take the last arrival.
		time.Sleep(time.Second)
		var lastAt time.Time
		for _, set := range s.c.PublishedSince(seq) {
			if set.Received.After(lastAt) {
				lastAt = set.Received
			}
		}
		last = append(last, lastAt.Sub(start))
	}
	return touched, last
}

// TestLSPReport compares gopls through berth's exec stream in a container
// with the same gopls started directly on the host, and measures the write
// to diagnostics path of the tools. Run it with BERTH_BENCH=1 (bench/run).
func TestLSPReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to measure the language-server path (takes a few minutes); bench/run does", envRun)
	}
	gopls, err := exec.LookPath("gopls")
	if err != nil {
		t.Skip("gopls is not on PATH (tests/run links the go image's gopls into its tool cache)")
	}
	image := os.Getenv(envLSPImage)
	if image == "" {
		image = "berth-test-go"
	}
	n, w := envInt(envLSPQueries, defaultLSPQueries), envInt(envLSPWrites, defaultLSPWrites)
	ctx := t.Context()

	// The container, with the project in its workspace.
	ctrID, sb := benchContainer(t, image, lsptest.GoProject)
	// The floor: a 100-byte echo through a raw docker exec stream (exec
	// create + attach, nothing of berth's in between), and through the
	// stream berth's servers use (sandbox.Pipe: the same exec, running
	// berth's agent, which runs the program in its own process group).
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	raw, err := docker.NewTransport(cli, ctrID).Exec(ctx, shim.ExecSpec{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, raw.Stderr())
	rawFloor := echoRTT(t, struct {
		io.Reader
		io.Writer
	}{raw.Stdout(), raw.Stdin()}, n*3)
	raw.Close()
	echo, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	floor := echoRTT(t, echo, n*3)
	echo.Close()
	hostCat := exec.Command("cat")
	hin, _ := hostCat.StdinPipe()
	hout, _ := hostCat.StdoutPipe()
	if err := hostCat.Start(); err != nil {
		t.Fatal(err)
	}
	hostFloor := echoRTT(t, procStream{hout, hin}, n*3)
	hin.Close()
	hostCat.Wait()

	// gopls directly on the host.
	dir := t.TempDir()
	for name, text := range lsptest.GoProject {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
	}
	cmd := exec.Command(gopls, "serve")
	cmd.Dir = dir
	in, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	host := startSide(t, "host", procStream{stdout, in}, dir, func() { cmd.Process.Kill(); cmd.Wait() })
	defer host.stop()

	// The same gopls version in the container, through the exec stream.
	ps, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"gopls", "serve"}, Dir: benchWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	ctr := startSide(t, "container", ps, benchWorkspace, func() { ps.Close() })
	defer ctr.stop()

	hostHover, hostRefs := hoverAndRefs(t, host, n)
	ctrHover, ctrRefs := hoverAndRefs(t, ctr, n)
	hostTouched, hostLast := publishTimes(t, host, w)
	ctrTouched, ctrLast := publishTimes(t, ctr, w)
	host.stop()
	ctr.stop()

	// The tools' write path in the container: edit alone, and edit with
	// diagnostics on write (sync, version-gated wait, settle, journal).
	plainEdit, diagEdit := toolWrites(t, sb, w)

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "measure\thost direct\tcontainer via exec\tratio\tadded\tgoal (floor + 50 µs)\t\n")
	fmt.Fprintf(tw, "echo %d B, raw docker exec (the floor)\t%s\t%s\t%.2f\t%s\t\t\n", echoBytes, us(median(hostFloor)), us(median(rawFloor)), ratio(rawFloor, hostFloor), us(median(rawFloor)-median(hostFloor)))
	fmt.Fprintf(tw, "echo %d B, berth's exec stream (agent)\t%s\t%s\t%.2f\t%s\t%s\t\n", echoBytes, us(median(hostFloor)), us(median(floor)), ratio(floor, hostFloor), us(median(floor)-median(hostFloor)), us(median(rawFloor)+50*time.Microsecond))
	for _, r := range []struct {
		name      string
		host, ctr []time.Duration
	}{{"hover", hostHover, ctrHover}, {"references", hostRefs, ctrRefs}} {
		added := median(r.ctr) - median(r.host)
		goal := median(rawFloor) + 50*time.Microsecond
		verdict := "met"
		if added > goal {
			verdict = "NOT met"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s (%s)\t\n", r.name, us(median(r.host)), us(median(r.ctr)), ratio(r.ctr, r.host), us(added), us(goal), verdict)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nwrite → diagnostics (gopls, signature change that breaks 2 callers, %d writes each way):\n", w)
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "measure\thost direct\tcontainer\t\n")
	fmt.Fprintf(tw, "server publishes the changed file\t%s\t%s\t\n", millis(median(hostTouched)), millis(median(ctrTouched)))
	fmt.Fprintf(tw, "server publishes the last file (callers)\t%s\t%s\t\n", millis(median(hostLast)), millis(median(ctrLast)))
	fmt.Fprintf(tw, "edit tool alone\t\t%s\t\n", millis(median(plainEdit)))
	fmt.Fprintf(tw, "edit tool with diagnostics on write\t\t%s\t\n", millis(median(diagEdit)))
	tw.Flush()
	added := median(diagEdit) - median(plainEdit) - median(ctrLast)
	verdict := "met"
	if added > 50*time.Millisecond {
		verdict = "NOT met"
	}
	fmt.Fprintf(&b, "diagnostics on write adds %s over the server's own last publish (goal < 50 ms: %s)\n", millis(added), verdict)
	t.Logf("language-server path, median of %d requests:\n%s", n, b.String())
}

func ratio(a, b []time.Duration) float64 {
	return float64(median(a)) / float64(median(b))
}

// echoRTT measures n round trips of echoBytes through rw (a cat).
func echoRTT(t *testing.T, rw io.ReadWriter, n int) []time.Duration {
	t.Helper()
	msg := bytes.Repeat([]byte("x"), echoBytes)
	buf := make([]byte, echoBytes)
	var out []time.Duration
	for i := range n + 50 {
		start := time.Now()
		if _, err := rw.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(rw, buf); err != nil {
			t.Fatal(err)
		}
		if i >= 50 {
			out = append(out, time.Since(start))
		}
	}
	return out
}

// toolWrites times the edit tool in the container, without and with the
// lsp supervisor's diagnostics on write, alternating a breaking signature
// change and its undo. Every diagnostics result is checked.
func toolWrites(t *testing.T, sb sandbox.Sandbox, n int) (plain, withDiag []time.Duration) {
	t.Helper()
	ctx := t.Context()
	ws, err := sb.FS(ctx, benchWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(reg *tools.Registry, i int, check bool) time.Duration {
		from, to := "name string) string {\n\treturn", "name, punct string) string {\n\treturn"
		if i%2 == 1 {
			from, to = to, from
		}
		raw, _ := json.Marshal(map[string]any{"path": "greet/greet.go", "old_string": from, "new_string": to})
		start := time.Now()
		res, err := reg.Call(ctx, tools.SurfaceDefault, "edit", raw)
		d := time.Since(start)
		if err != nil || res.IsError {
			t.Fatalf("edit: %v %v", err, res.AllText())
		}
		if check && i%2 == 0 && strings.Count(res.AllText(), "not enough arguments") != 2 {
			t.Fatalf("write %d: the callers' errors were not reported:\n%s", i, res.AllText())
		}
		return d
	}
	reg := tools.NewRegistry()
	files.Register(reg, ws)
	for i := range 2 * n {
		plain = append(plain, edit(reg, i, false))
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg = tools.NewRegistry()
	files.Register(reg, ws)
	sup := lsp.Register(reg, sb, ws, runCtx, lsp.Options{})
	defer sup.Close()
	raw, _ := json.Marshal(map[string]any{"action": "diagnostics", "file": "main.go"})
	if res, err := reg.Call(ctx, tools.SurfaceDefault, "lsp", raw); err != nil || res.IsError {
		t.Fatalf("warm-up: %v %v", err, res.AllText())
	}
	for i := range 2 * n {
		withDiag = append(withDiag, edit(reg, i, true))
	}
	return plain, withDiag
}

// benchContainer starts image with no network (removed when the test
// ends), writes files into its workspace, and opens it as a sandbox.
func benchContainer(t *testing.T, image string, files map[string]string) (string, sandbox.Sandbox) {
	t.Helper()
	ctx := t.Context()
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--network", "none", image, "sleep", "infinity").Output()
	if err != nil {
		t.Skipf("cannot start %s (build it with images/build): %v", image, err)
	}
	ctrID := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", ctrID).Run() })
	script := "mkdir -p " + benchWorkspace
	for name, text := range files {
		p := path.Join(benchWorkspace, name)
		script += fmt.Sprintf(" && mkdir -p %s && echo %s | base64 -d > %s", path.Dir(p), base64.StdEncoding.EncodeToString([]byte(text)), p)
	}
	if err := exec.CommandContext(ctx, "docker", "exec", ctrID, "sh", "-c", script).Run(); err != nil {
		t.Fatal(err)
	}
	prov, err := docker.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	sb, err := prov.Open(ctx, ctrID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return ctrID, sb
}
