package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

	defaultLSPQueries = 2000
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

// interleaveWarmUp is how many samples of each side interleave takes
// first and drops.
const interleaveWarmUp = 20

// interleave takes n samples of each of sides sides, one at a time in
// turns, the order rotating every round: sample(i) measures side i once.
// On two shared CPUs the load drifts from one millisecond to the next, so
// sides measured one after the other, or batch by batch, see different
// machines: berth over the anchor wandered from -56 to +92 µs between runs
// batch by batch, and stays within about -20 to +50 µs (median of four runs
// +8 µs for hover) taken in turns. Run the report a few times and compare
// medians.
func interleave(sides, n int, sample func(i int) time.Duration) [][]time.Duration {
	for range interleaveWarmUp {
		for i := range sides {
			sample(i)
		}
	}
	out := make([][]time.Duration, sides)
	for r := range n {
		for j := range sides {
			i := (r + j) % sides
			out[i] = append(out[i], sample(i))
		}
	}
	return out
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
		out = append(out, timeRequest(t, s, ctx, req))
	}
	return out
}

// timeRequest measures one request.
func timeRequest(t *testing.T, s *lspSide, ctx context.Context, req func(context.Context) error) time.Duration {
	t.Helper()
	start := time.Now()
	if err := req(ctx); err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	return time.Since(start)
}

// helloPos is Hello's use in main.go (line 11), which hover and references
// ask about.
var helloPos = lspc.Position{Line: 10, Character: 15}

// hoverReq asks s for the hover on Hello.
func hoverReq(s *lspSide) func(context.Context) error {
	uri := s.uri("main.go")
	return func(ctx context.Context) error {
		h, err := s.c.Hover(ctx, uri, helloPos)
		if err == nil && h == nil {
			err = fmt.Errorf("no hover")
		}
		return err
	}
}

// refsReq asks s for Hello's references (the declaration and two uses).
func refsReq(s *lspSide) func(context.Context) error {
	uri := s.uri("main.go")
	return func(ctx context.Context) error {
		locs, err := s.c.References(ctx, uri, helloPos, true)
		if err == nil && len(locs) != 3 {
			err = fmt.Errorf("%d references, want 3", len(locs))
		}
		return err
	}
}

// interleaveRequests measures n requests of one kind on every side, the
// sides taking turns (see interleave).
func interleaveRequests(t *testing.T, sides []*lspSide, n int, req func(*lspSide) func(context.Context) error) [][]time.Duration {
	t.Helper()
	reqs := make([]func(context.Context) error, len(sides))
	for i, s := range sides {
		reqs[i] = req(s)
	}
	return interleave(len(sides), n, func(i int) time.Duration {
		return timeRequest(t, sides[i], t.Context(), reqs[i])
	})
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

// execStream is a program's stdio over a raw docker exec: exec create and
// attach on the Engine API, demultiplexed, with nothing of berth's in the
// container between the engine and the program.
type execStream struct{ st shim.Stream }

func (s execStream) Read(p []byte) (int, error)  { return s.st.Stdout().Read(p) }
func (s execStream) Write(p []byte) (int, error) { return s.st.Stdin().Write(p) }
func (s execStream) Close() error {
	err := s.st.Stdin().Close()
	s.st.Close()
	return err
}

// rawExec starts args in the container over a raw docker exec, its stderr
// drained (the demultiplexer moves it only while someone reads it).
func rawExec(t *testing.T, tr *docker.Transport, spec shim.ExecSpec) execStream {
	t.Helper()
	st, err := tr.Exec(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, st.Stderr())
	return execStream{st}
}

// The sides of the comparison, in the order of the report's columns.
const (
	sideHost  = iota // gopls (or cat) started directly on the host
	sideNS           // in the container's namespaces over host pipes (nsenter)
	sideRaw          // in the container over a raw docker exec: the anchor
	sideBerth        // in the container through berth's exec stream
	numSides
)

// interleaveSides is interleave over the sides that are there (not nil).
func interleaveSides[S comparable](sides [numSides]S, n int, sample func(i int) time.Duration) [numSides][]time.Duration {
	var zero S
	var idx []int
	for i, s := range sides {
		if s != zero {
			idx = append(idx, i)
		}
	}
	d := interleave(len(idx), n, func(j int) time.Duration { return sample(idx[j]) })
	var out [numSides][]time.Duration
	for j, i := range idx {
		out[i] = d[j]
	}
	return out
}

// nsenterCmd returns args run in the namespaces of the container whose
// init is pid (mount, PID, UTS, IPC, network), in dir, with the container's
// environment (and HOME=/root: it runs as root), its stdio plain pipes of this process: the container
// without the engine's stream. It is nil when nsenter is not installed or
// berth is not root.
func nsenterCmd(pid int, env []string, dir string, args ...string) *exec.Cmd {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil || os.Geteuid() != 0 {
		return nil
	}
	c := exec.Command(nsenter, append([]string{"-t", strconv.Itoa(pid), "-m", "-p", "-u", "-i", "-n", "--wdns=" + dir, "--"}, args...)...)
	// docker exec adds HOME (the go command wants it for its cache).
	c.Env = env
	if !slices.ContainsFunc(env, func(v string) bool { return strings.HasPrefix(v, "HOME=") }) {
		c.Env = append(slices.Clone(env), "HOME=/root")
	}
	return c
}

// localProc is a child of this process, its stdio one stream.
type localProc struct {
	procStream
	cmd  *exec.Cmd
	once sync.Once
}

// startLocal starts cmd with its stdin and stdout as the stream.
func startLocal(t *testing.T, cmd *exec.Cmd) *localProc {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Args[0], err)
	}
	return &localProc{procStream: procStream{ReadCloser: out, in: in}, cmd: cmd}
}

// stop closes the child's stdin, kills it and waits for it, once.
func (p *localProc) stop() {
	p.once.Do(func() {
		p.in.Close()
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
}

// countingRW counts the bytes written to and read from a stream, to tell
// the size of a request and its reply.
type countingRW struct {
	io.ReadWriteCloser
	in, out atomic.Int64 // bytes written, read
	reads   atomic.Int64 // Reads that returned data: the pieces the replies came in
}

func (c *countingRW) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	c.out.Add(int64(n))
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

// Write counts p before it writes it: the reply may be read, and the
// request end, before a count made after the write.
func (c *countingRW) Write(p []byte) (int, error) {
	c.in.Add(int64(len(p)))
	return c.ReadWriteCloser.Write(p)
}

// messageSizes returns the bytes one request of req writes and reads on s
// (its frame and its reply's, headers included), the fewest of a few
// requests so that a notification arriving meanwhile does not count, and
// the pieces (Reads) the reply usually arrived in, the median count: gopls
// writes a message's header and body separately, and a stream that relays
// each write on its own hands the client two pieces.
func messageSizes(t *testing.T, s *lspSide, rw *countingRW, req func(context.Context) error) (in, out, pieces int64) {
	t.Helper()
	least := func(cur, d int64) int64 {
		if cur < 0 || d < cur {
			return d
		}
		return cur
	}
	in, out = -1, -1
	var reads []int64
	for range 11 {
		in0, out0, r0 := rw.in.Load(), rw.out.Load(), rw.reads.Load()
		if err := req(t.Context()); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		in, out = least(in, rw.in.Load()-in0), least(out, rw.out.Load()-out0)
		reads = append(reads, rw.reads.Load()-r0)
	}
	slices.Sort(reads)
	return in, out, reads[len(reads)/2]
}

// TestLSPReport compares gopls reached four ways: started directly on the
// host; in the container's namespaces over plain host pipes (nsenter: the
// container's files and processes, without the engine's stream); in the
// container over a raw docker exec stream (exec create + attach, nothing of
// berth's in between: the anchor); and in the same container through
// berth's exec stream (sandbox.Pipe: the same kind of exec, running berth's
// agent, which runs gopls in its own process group and relays its stdin,
// while gopls writes its stdout into the stream itself). The same gopls
// binary, workspace files and minimal client (startSide) serve all four,
// and the sides take turns request by request (interleave). So nsenter
// minus host is what the container itself costs, the anchor minus nsenter
// what the engine's stream costs, and berth minus the anchor what berth
// adds (goal: ≤ 50 µs). Without nsenter or root that side is left out. It
// also measures the same requests through the lsp tool, and the write to
// diagnostics path of the tools. Run it with BERTH_BENCH=1 (bench/run).
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
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	tr := docker.NewTransport(cli, ctrID)

	// The container's init, for nsenter: its pid and environment.
	ins, err := cli.ContainerInspect(ctx, ctrID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	initPid, ctrEnv := ins.Container.State.Pid, ins.Container.Config.Env

	// The floor: a 100-byte echo through a cat on the host, in the
	// container over host pipes, over a raw docker exec, and through
	// berth's exec stream.
	hostCat := startLocal(t, exec.Command("cat"))
	var nsCat *localProc
	if c := nsenterCmd(initPid, ctrEnv, "/", "cat"); c != nil {
		nsCat = startLocal(t, c)
	}
	rawCat := rawExec(t, tr, shim.ExecSpec{Args: []string{"cat"}})
	berthCat, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	cats := [numSides]io.ReadWriter{sideHost: hostCat, sideRaw: rawCat, sideBerth: berthCat}
	if nsCat != nil {
		cats[sideNS] = nsCat
	}
	msg, buf := bytes.Repeat([]byte("x"), echoBytes), make([]byte, echoBytes)
	echo := interleaveSides(cats, n*3, func(i int) time.Duration { return echoOnce(t, cats[i], msg, buf) })
	hostCat.stop()
	if nsCat != nil {
		nsCat.stop()
	}
	rawCat.Close()
	berthCat.Close()

	// gopls directly on the host.
	dir := t.TempDir()
	for name, text := range lsptest.GoProject {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
	}
	cmd := exec.Command(gopls, "serve")
	cmd.Dir = dir
	hostProc := startLocal(t, cmd)
	var sides [numSides]*lspSide
	var rws [numSides]*countingRW
	rws[sideHost] = &countingRW{ReadWriteCloser: hostProc}
	sides[sideHost] = startSide(t, "host", rws[sideHost], dir, hostProc.stop)
	defer hostProc.stop()

	// The same gopls binary in the container: over host pipes (nsenter
	// into its namespaces, no engine), over a raw docker exec (the anchor),
	// and through berth's exec stream.
	if c := nsenterCmd(initPid, ctrEnv, benchWorkspace, "gopls", "serve"); c != nil {
		nsProc := startLocal(t, c)
		rws[sideNS] = &countingRW{ReadWriteCloser: nsProc}
		sides[sideNS] = startSide(t, "nsenter", rws[sideNS], benchWorkspace, nsProc.stop)
		defer nsProc.stop()
	}
	rawRW := &countingRW{ReadWriteCloser: rawExec(t, tr, shim.ExecSpec{Args: []string{"gopls", "serve"}, Dir: benchWorkspace})}
	rws[sideRaw] = rawRW
	sides[sideRaw] = startSide(t, "raw exec", rawRW, benchWorkspace, func() { rawRW.Close() })
	defer sides[sideRaw].stop()
	ps, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"gopls", "serve"}, Dir: benchWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	rws[sideBerth] = &countingRW{ReadWriteCloser: ps}
	ctr := startSide(t, "berth", rws[sideBerth], benchWorkspace, func() { ps.Close() })
	sides[sideBerth] = ctr
	defer ctr.stop()

	type row struct {
		name    string
		in, out int64 // bytes of a request and its reply, through berth
		d       [numSides][]time.Duration
	}
	rows := []row{{name: "echo", in: echoBytes, out: echoBytes, d: echo}}
	for _, m := range []struct {
		name string
		req  func(*lspSide) func(context.Context) error
	}{{"hover", hoverReq}, {"references", refsReq}} {
		r := row{name: m.name}
		var pieces []string
		for i, s := range sides {
			if s == nil {
				continue
			}
			// The roots differ, and so may the sizes of what names them;
			// the report shows berth's.
			in, out, k := messageSizes(t, s, rws[i], m.req(s))
			if i == sideBerth {
				r.in, r.out = in, out
			}
			pieces = append(pieces, fmt.Sprintf("%s %d B request, %d B reply in %d reads", s.name, in, out, k))
		}
		t.Logf("%s: %s", m.name, strings.Join(pieces, "; "))
		reqs := [numSides]func(context.Context) error{}
		for i, s := range sides {
			if s != nil {
				reqs[i] = m.req(s)
			}
		}
		r.d = interleaveSides(sides, n, func(i int) time.Duration { return timeRequest(t, sides[i], ctx, reqs[i]) })
		rows = append(rows, r)
	}
	tp := toolPath(t, sb, ctr, max(1, n/4))
	pub := make([][2][]time.Duration, numSides)
	for i, s := range sides {
		if s != nil {
			pub[i][0], pub[i][1] = publishTimes(t, s, w)
		}
	}
	for _, s := range sides {
		if s != nil {
			s.stop()
		}
	}

	// The tools' write path in the container: edit alone, and edit with
	// diagnostics on write (sync, version-gated wait, settle, journal).
	plainEdit, diagEdit := toolWrites(t, sb, w)

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "measure\trequest\treply\thost direct\tcontainer, host pipes (nsenter)\traw docker exec (anchor)\tberth's exec stream\tcontainer over host\tengine's stream\tberth over anchor\tgoal (≤ 50 µs over anchor)\t\n")
	for _, r := range rows {
		added := median(r.d[sideBerth]) - median(r.d[sideRaw])
		verdict := "met"
		if added > 50*time.Microsecond {
			verdict = "NOT met"
		}
		// Without nsenter the container's own share is not told apart.
		ns, overHost, stream := "—", "—", "—"
		if r.d[sideNS] != nil {
			ns = us(median(r.d[sideNS]))
			overHost = us(median(r.d[sideNS]) - median(r.d[sideHost]))
			stream = us(median(r.d[sideRaw]) - median(r.d[sideNS]))
		}
		fmt.Fprintf(tw, "%s\t%d B\t%d B\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, r.in, r.out, us(median(r.d[sideHost])), ns, us(median(r.d[sideRaw])), us(median(r.d[sideBerth])),
			overHost, stream, us(added), verdict)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nthrough the lsp tool (tools/lsp: the server readied, its view refreshed, the request, the answer rendered), %d calls, in turns with the client over berth's stream:\n", max(1, n/4))
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "measure\tclient over berth's stream\tlsp tool\ttool over client\t\n")
	for _, r := range tp {
		if r.client == nil {
			fmt.Fprintf(tw, "  piece, alone: %s\t\t%s\t\t\n", r.name, us(median(r.tool)))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.name, us(median(r.client)), us(median(r.tool)), us(median(r.tool)-median(r.client)))
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nwrite → diagnostics (gopls, signature change that breaks 2 callers, %d writes each way):\n", w)
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "measure\thost direct\tcontainer, host pipes\traw docker exec\tberth's exec stream\t\n")
	for j, what := range []string{"server publishes the changed file", "server publishes the last file (callers)"} {
		fmt.Fprintf(tw, "%s", what)
		for i := range numSides {
			if pub[i][j] == nil {
				fmt.Fprintf(tw, "\t—")
				continue
			}
			fmt.Fprintf(tw, "\t%s", millis(median(pub[i][j])))
		}
		fmt.Fprintf(tw, "\t\n")
	}
	fmt.Fprintf(tw, "edit tool alone\t\t\t\t%s\t\n", millis(median(plainEdit)))
	fmt.Fprintf(tw, "edit tool with diagnostics on write\t\t\t\t%s\t\n", millis(median(diagEdit)))
	tw.Flush()
	ctrLast := pub[sideBerth][1]
	added := median(diagEdit) - median(plainEdit) - median(ctrLast)
	verdict := "met"
	if added > 50*time.Millisecond {
		verdict = "NOT met"
	}
	fmt.Fprintf(&b, "diagnostics on write adds %s over the server's own last publish (goal < 50 ms: %s)\n", millis(added), verdict)
	t.Logf("language-server path, median of %d requests (%d echoes) per side, the sides taking turns request by request:\n%s", n, 3*n, b.String())
}

func ratio(a, b []time.Duration) float64 {
	return float64(median(a)) / float64(median(b))
}

// echoRTT measures n round trips of echoBytes through rw (a cat).
func echoRTT(t *testing.T, rw io.ReadWriter, n int) []time.Duration {
	t.Helper()
	msg, buf := bytes.Repeat([]byte("x"), echoBytes), make([]byte, echoBytes)
	var out []time.Duration
	for i := range n + 50 {
		d := echoOnce(t, rw, msg, buf)
		if i >= 50 {
			out = append(out, d)
		}
	}
	return out
}

// echoOnce measures one round trip of msg through rw (a cat), read into
// buf.
func echoOnce(t *testing.T, rw io.ReadWriter, msg, buf []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := rw.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rw, buf); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// toolPath times hover and references on Hello through the lsp tool
// (tools/lsp) in the container, each in turns with the same request from
// the minimal client over berth's exec stream (ctr, another gopls in the
// same container), and the per-call work the supervisor adds besides the
// request: the walk of the server's root that notices files changed behind
// its back, a re-read of an open document, and the documentSymbol request
// with which references names the function around each location (one per
// file). Every tool result is checked.
func toolPath(t *testing.T, sb sandbox.Sandbox, ctr *lspSide, n int) (rows []toolRow) {
	t.Helper()
	ctx := t.Context()
	ws, err := sb.FS(ctx, benchWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg := tools.NewRegistry()
	sup := lsp.Register(reg, sb, ws, runCtx, lsp.Options{})
	defer sup.Close()
	call := func(action, want string) func(context.Context) error {
		raw, _ := json.Marshal(map[string]any{"action": action, "file": "main.go", "line": 11, "symbol": "Hello"})
		return func(ctx context.Context) error {
			res, err := reg.Call(ctx, tools.SurfaceDefault, "lsp", raw)
			switch {
			case err != nil:
				return err
			case res.IsError || !strings.Contains(res.AllText(), want):
				return fmt.Errorf("lsp %s: %s", action, res.AllText())
			}
			return nil
		}
	}
	tool := &lspSide{name: "lsp tool"}
	if err := call("hover", "func greet.Hello")(ctx); err != nil { // starts the server
		t.Fatal(err)
	}
	for _, m := range []struct {
		name   string
		client func(*lspSide) func(context.Context) error
		tool   func(context.Context) error
	}{{"hover", hoverReq, call("hover", "func greet.Hello")}, {"references", refsReq, call("references", "3 locations")}} {
		reqs := []func(context.Context) error{m.client(ctr), m.tool}
		d := interleave(2, n, func(i int) time.Duration { return timeRequest(t, []*lspSide{ctr, tool}[i], ctx, reqs[i]) })
		rows = append(rows, toolRow{m.name, d[0], d[1]})
	}
	// The pieces, on their own.
	walk := func(ctx context.Context) error {
		return ws.Walk(ctx, ".", sandbox.WalkOptions{}, func(string, fs.FileInfo) error { return nil })
	}
	read := func(ctx context.Context) error {
		_, err := ws.ReadFile(ctx, "main.go")
		return err
	}
	symbols := func(ctx context.Context) error {
		tree, flat, err := ctr.c.DocumentSymbols(ctx, ctr.uri("main.go"))
		if err == nil && len(tree)+len(flat) == 0 {
			err = fmt.Errorf("no symbols in main.go")
		}
		return err
	}
	for _, p := range []struct {
		name string
		req  func(context.Context) error
	}{{"walk the workspace root (" + strconv.Itoa(len(lsptest.GoProject)) + " files)", walk}, {"re-read main.go", read}, {"documentSymbol of main.go (client)", symbols}} {
		rows = append(rows, toolRow{name: p.name, tool: timeRequests(t, tool, n, p.req)})
	}
	return rows
}

// toolRow is a measure of toolPath: the request from the minimal client
// and through the tool, or (client nil) a piece of the tool's work.
type toolRow struct {
	name         string
	client, tool []time.Duration
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
