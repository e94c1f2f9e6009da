package load

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/tests/berthtest"
)

const (
	// callTimeout bounds one HTTP request or docker command, so that a hang
	// fails the test instead of stalling it; it asserts nothing about speed.
	callTimeout = 2 * time.Minute
	// pollEvery is the interval of every bounded poll below.
	pollEvery = 250 * time.Millisecond
	// maxIdlePerHost lets the load client keep one connection per worker
	// alive, so that the drive does not churn connections.
	maxIdlePerHost = 32
)

// unavailable skips the test, or fails it when CI=true.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// docker runs the docker command line with stdin (may be nil).
func docker(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// server is a running `berth serve --mode local` and its token.
type server struct {
	*berthtest.Server
	token string
}

// startServer runs `berth serve --mode local` with BERTH_TOKEN set; the
// test's cleanup stops it if the test did not.
func startServer(t *testing.T) *server {
	t.Helper()
	tok := randomHex(t, 16)
	bs := berthtest.Start(t, berthtest.Options{Args: []string{"--mode", "local"}, Env: []string{"BERTH_TOKEN=" + tok}})
	return &server{Server: bs, token: tok}
}

// client speaks berth's HTTP API with the server's token.
type client struct {
	berthtest.Client
	hc *http.Client
}

func newClient(s *server, keepAlive bool) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: maxIdlePerHost, DisableKeepAlives: !keepAlive}
	hc := &http.Client{Transport: tr}
	return &client{Client: berthtest.Client{URL: s.URL, Token: s.token, HTTP: hc}, hc: hc}
}

// closeIdle drops the client's idle keep-alive connections, so that they
// do not count as berth's descriptors and goroutines.
func (c *client) closeIdle() { c.hc.CloseIdleConnections() }

// do is Client.Do bounded by callTimeout.
func (c *client) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return c.Do(ctx, method, path, body)
}

// openRun opens a run for the conversation with sandbox auto and returns
// its id and the sandbox it was placed in.
func (c *client) openRun(ctx context.Context, conv, workspace string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	info, err := c.OpenRun(ctx, map[string]any{
		"conversation_id": conv, "workspace": workspace, "sandbox": "auto", "mode": "default",
	})
	return info.ID, info.Sandbox, err
}

func (c *client) closeRun(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return c.CloseRun(ctx, id)
}

// toolReply is a tool result as the API returns it.
type toolReply = berthtest.Result

// call calls a tool on the default surface and wants a 200 result that is
// not an error and contains every want.
func (c *client) call(ctx context.Context, run, tool string, args map[string]any, wants ...string) (toolReply, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := c.Call(ctx, run, tool, args)
	if err != nil {
		return res, err
	}
	if res.IsError {
		return res, fmt.Errorf("%s %v: error result: %s", tool, args, res.Text())
	}
	for _, w := range wants {
		if !strings.Contains(res.Text(), w) {
			return res, fmt.Errorf("%s %v: result lacks %q:\n%s", tool, args, w, res.Text())
		}
	}
	return res, nil
}

// gauges are the process metrics the leak check compares.
type gauges struct {
	goroutines, fds, runs int
}

func (g gauges) String() string {
	return fmt.Sprintf("%d goroutines, %d fds, %d runs open", g.goroutines, g.fds, g.runs)
}

// metrics reads go_goroutines, process_open_fds and berth_runs_open from
// GET /metrics.
func (c *client) metrics(ctx context.Context) (gauges, error) {
	st, b, err := c.do(ctx, "GET", "/metrics", nil)
	if err != nil {
		return gauges{}, err
	}
	if st != http.StatusOK {
		return gauges{}, fmt.Errorf("GET /metrics: %d %s", st, b)
	}
	var g gauges
	found := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		var dst *int
		switch name {
		case "go_goroutines":
			dst = &g.goroutines
		case "process_open_fds":
			dst = &g.fds
		case "berth_runs_open":
			dst = &g.runs
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return g, fmt.Errorf("metric %s: %v", name, err)
		}
		*dst = int(math.Round(f))
		found[name] = true
	}
	for _, n := range []string{"go_goroutines", "process_open_fds"} {
		if !found[n] {
			return g, fmt.Errorf("GET /metrics has no %s:\n%s", n, b)
		}
	}
	return g, sc.Err()
}

// zombies walks berth's descendants through /proc/PID/task/*/children and
// returns those in state Z, as "PID (comm)", and how many it saw in all.
func zombies(pid int) (zs []string, seen int) {
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				cp, err := strconv.Atoi(c)
				if err != nil {
					continue
				}
				seen++
				queue = append(queue, cp)
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cp))
				if err != nil {
					continue // gone meanwhile
				}
				// "pid (comm) S ...": the state follows the last ')'.
				s := string(stat)
				if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'Z' {
					zs = append(zs, fmt.Sprintf("%d %s", cp, s[strings.IndexByte(s, '('):i+1]))
				}
			}
		}
	}
	return zs, seen
}

// container is a conversation's sandbox the test started.
type container struct {
	id, conv string
}

// startContainers starts n containers from image with no network and the
// conversation label, each with the project in /workspace. They are
// removed at the end of the test, whatever happens.
func startContainers(t *testing.T, image, labelKey string, n int, files map[string]string) []*container {
	t.Helper()
	tarball := tarOf(t, files)
	prefix := "berth-load-" + randomHex(t, 4)
	var cs []*container
	for i := range n {
		c := &container{conv: fmt.Sprintf("%s-%02d", prefix, i)}
		out, err := docker(t.Context(), nil, "run", "-d", "--network", "none", "--label", labelKey+"="+c.conv,
			"--name", c.conv, image, "sleep", "infinity")
		if err != nil {
			t.Fatal(err)
		}
		c.id = strings.TrimSpace(out)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			if _, err := docker(ctx, nil, "rm", "-f", c.id); err != nil {
				t.Errorf("remove container %s: %v", c.conv, err)
			}
		})
		if _, err := docker(t.Context(), bytes.NewReader(tarball), "cp", "-", c.id+":/"); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

// tarOf archives files (paths relative to /) with their directories.
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(files[name]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// processes lists the container's processes ("PID ARGS") with the test's
// own `docker exec ps`, leaving out the listing itself.
func (c *container) processes(ctx context.Context) ([]string, error) {
	out, err := docker(ctx, nil, "exec", c.id, "ps", "-eo", "pid=,args=")
	if err != nil {
		return nil, err
	}
	var procs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		l = strings.TrimSpace(l)
		if f := strings.Fields(l); len(f) < 2 || f[1] == "ps" {
			continue
		}
		procs = append(procs, l)
	}
	return procs, nil
}

// strangers are the container's processes other than PID 1.
func (c *container) strangers(ctx context.Context) ([]string, error) {
	procs, err := c.processes(ctx)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, p := range procs {
		if pid, _, _ := strings.Cut(p, " "); pid != "1" {
			left = append(left, p)
		}
	}
	return left, nil
}

// tempLeft lists what berth makes under the container's /tmp for a run
// (kernels' private directories, debug builds: /tmp/berth-*) that is
// still there.
func (c *container) tempLeft(ctx context.Context) ([]string, error) {
	out, err := docker(ctx, nil, "exec", c.id, "find", "/tmp", "-mindepth", "1", "-maxdepth", "1", "-name", "berth-*")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// settle polls cond until it reports done or timeout passes, and returns
// its last detail.
func settle(ctx context.Context, timeout time.Duration, cond func() (bool, string, error)) (bool, string, error) {
	deadline := time.Now().Add(timeout)
	for {
		done, detail, err := cond()
		if err != nil || done || time.Now().After(deadline) {
			return done, detail, err
		}
		select {
		case <-ctx.Done():
			return false, detail, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// latencies records call durations by name, safe for concurrent use.
type latencies struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (l *latencies) add(name string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.d == nil {
		l.d = map[string][]time.Duration{}
	}
	l.d[name] = append(l.d[name], d)
}

// stat is one name's count and percentiles.
type stat struct {
	name          string
	n             int
	p50, p99, max time.Duration
}

func (l *latencies) stats() []stat {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []stat
	for name, ds := range l.d {
		s := slices.Clone(ds)
		slices.Sort(s)
		out = append(out, stat{name: name, n: len(s), p50: percentile(s, 50), p99: percentile(s, 99), max: s[len(s)-1]})
	}
	slices.SortFunc(out, func(a, b stat) int { return strings.Compare(a.name, b.name) })
	return out
}

// percentile is the nearest-rank percentile of sorted s.
func percentile(s []time.Duration, p int) time.Duration {
	i := int(math.Ceil(float64(p)/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// TestMain removes the binaries berthtest built.
func TestMain(m *testing.M) {
	code := m.Run()
	berthtest.Remove()
	os.Exit(code)
}
