package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// fakeProvider is a scripted sandbox.Provider: containers maps a
// conversation id to a ref, and labelled a ref to its labels; Open
// accepts the refs of both.
type fakeProvider struct {
	scheme     string
	containers map[string]string // conversation id → ref, labelled berth.conversation=<id> only
	// labelled are more containers, ref → labels (berth.conversation,
	// berth.tenant), matched as the real providers match them.
	labelled  map[string]map[string]string
	locateErr error  // returned by Locate when set
	openErr   error  // returned by Open when set
	onOpen    func() // called by Open first, when set

	mu     sync.Mutex
	opened []*fakeSandbox
}

func (p *fakeProvider) Scheme() string { return p.scheme }

func (p *fakeProvider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	if p.onOpen != nil {
		p.onOpen()
	}
	if p.openErr != nil {
		return nil, p.openErr
	}
	full := p.scheme
	if p.scheme != HostScheme {
		_, found := p.labelled[ref]
		for _, r := range p.containers {
			found = found || r == ref
		}
		if !found {
			return nil, fmt.Errorf("fake: no container %q: %w", ref, sandbox.ErrNotFound)
		}
		full += "://" + ref
	}
	sb := &fakeSandbox{ref: full}
	p.mu.Lock()
	p.opened = append(p.opened, sb)
	p.mu.Unlock()
	return sb, nil
}

func (p *fakeProvider) Locate(ctx context.Context, o sandbox.Owner) (string, error) {
	if p.locateErr != nil {
		return "", p.locateErr
	}
	var found []string
	for conv, ref := range p.containers {
		if o.Matches(DefaultLabelKey, map[string]string{DefaultLabelKey: conv}) {
			found = append(found, ref)
		}
	}
	for ref, labels := range p.labelled {
		if o.Matches(DefaultLabelKey, labels) {
			found = append(found, ref)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("fake: no container labelled %s: %w", o.Selector(DefaultLabelKey), sandbox.ErrNotFound)
	case 1:
		return found[0], nil
	}
	slices.Sort(found)
	return "", fmt.Errorf("fake: %d containers labelled %s: %s", len(found), o.Selector(DefaultLabelKey), strings.Join(found, ", "))
}

// fakeSandbox records Close and answers Check from a flag. Start and Dial
// are unsupported; FS returns a fakeFS that only knows its root.
type fakeSandbox struct {
	ref    string
	closed atomic.Int32
	gone   atomic.Bool
	paused atomic.Bool
	hung   atomic.Bool // Check does not answer until its context ends (a hung engine)
	checks atomic.Int32
}

func (s *fakeSandbox) Ref() string { return s.ref }
func (s *fakeSandbox) Start(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	return nil, sandbox.ErrUnsupported
}
func (s *fakeSandbox) FS(ctx context.Context, root string) (sandbox.FS, error) {
	if root == "/missing" {
		return nil, &fs.PathError{Op: "open", Path: root, Err: fs.ErrNotExist}
	}
	return fakeFS{root: root}, nil
}
func (s *fakeSandbox) Dial(ctx context.Context, network, address string) (sandbox.Conn, error) {
	return nil, sandbox.ErrUnsupported
}
func (s *fakeSandbox) Check(ctx context.Context) error {
	s.checks.Add(1)
	if s.hung.Load() {
		<-ctx.Done()
		return fmt.Errorf("fake: inspect container %s: %w", s.ref, ctx.Err())
	}
	if s.gone.Load() {
		return fmt.Errorf("fake: container %s exited (exit code 137): %w", s.ref, sandbox.ErrGone)
	}
	if s.paused.Load() {
		return fmt.Errorf("fake: container %s is paused: %w: %w", s.ref, sandbox.ErrUnavailable, sandbox.ErrGone)
	}
	return nil
}
func (s *fakeSandbox) Close() error { s.closed.Add(1); return nil }

type fakeFS struct {
	sandbox.FS // nil: methods other than Root panic, which no test calls
	root       string
}

func (f fakeFS) Root() string { return f.root }

// testTools registers: look (read), touch (write), run (exec), fail (read,
// returns an isError result), block (read, waits for ctx), vanish (read,
// marks the sandbox gone and fails with ErrGone).
func testTools(ctx context.Context, r *tools.Registry, env *Env) error {
	type pathIn struct {
		Path string `json:"path"`
	}
	tools.Register(r, tools.Tool{Name: "look", Description: "look at a path", Level: tools.LevelRead},
		func(ctx context.Context, in pathIn) (*tools.Result, error) {
			return tools.Textf("looked at %s in %s", in.Path, env.Workspace.Root()), nil
		})
	tools.Register(r, tools.Tool{Name: "touch", Description: "touch a path", Level: tools.LevelWrite},
		func(ctx context.Context, in pathIn) (*tools.Result, error) { return tools.Text("touched"), nil })
	tools.Register(r, tools.Tool{Name: "run", Description: "run", Level: tools.LevelExec},
		func(ctx context.Context, in struct{}) (*tools.Result, error) { return tools.Text("ran"), nil })
	tools.Register(r, tools.Tool{Name: "fail", Description: "fail", Level: tools.LevelRead},
		func(ctx context.Context, in struct{}) (*tools.Result, error) {
			return tools.Errorf("fail: nothing to see; call look instead"), nil
		})
	tools.Register(r, tools.Tool{Name: "block", Description: "block", Level: tools.LevelRead},
		func(ctx context.Context, in struct{}) (*tools.Result, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	tools.Register(r, tools.Tool{Name: "vanish", Description: "vanish", Level: tools.LevelRead},
		func(ctx context.Context, in struct{}) (*tools.Result, error) {
			env.Sandbox.(*fakeSandbox).gone.Store(true)
			return tools.Errorf("vanish: read failed: %v", sandbox.ErrGone), nil
		})
	return nil
}

type rig struct {
	c      *Controller
	host   *fakeProvider
	docker *fakeProvider
	reg    *prometheus.Registry
}

func newRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	rg := &rig{
		host:   &fakeProvider{scheme: HostScheme},
		docker: &fakeProvider{scheme: "docker", containers: map[string]string{"c-42": "0123abcd", "c-7": "feed"}},
		reg:    prometheus.NewRegistry(),
	}
	cfg := Config{
		Providers:  []sandbox.Provider{rg.docker, rg.host},
		Tools:      []Binder{testTools},
		Registerer: rg.reg,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rg.c = c
	t.Cleanup(func() { c.Close() })
	return rg
}

func TestPlacement(t *testing.T) {
	tests := []struct {
		name      string
		mod       func(*Config)
		docker    func(*fakeProvider)
		spec      RunSpec
		wantRef   string
		wantWS    string
		wantErr   error
		errSubstr []string
	}{
		{name: "auto finds the labelled container", spec: RunSpec{ConversationID: "c-42", Workspace: "/workspace"},
			wantRef: "docker://0123abcd", wantWS: "/workspace"},
		{name: "auto without container falls back to host", spec: RunSpec{ConversationID: "c-nope", Workspace: "/tmp"},
			wantRef: "host", wantWS: "/tmp"},
		{name: "auto without conversation is host", spec: RunSpec{Workspace: "/tmp"}, wantRef: "host", wantWS: "/tmp"},
		{name: "explicit host", spec: RunSpec{ConversationID: "c-42", Sandbox: "host", Workspace: "/tmp"},
			wantRef: "host", wantWS: "/tmp"},
		{name: "explicit docker", spec: RunSpec{ConversationID: "c-7", Sandbox: "docker://feed", Workspace: "/w/../src"},
			wantRef: "docker://feed", wantWS: "/src"},
		{name: "explicit docker missing", spec: RunSpec{Sandbox: "docker://nope", Workspace: "/w"},
			wantErr: sandbox.ErrNotFound, errSubstr: []string{"docker://nope"}},
		{name: "no fallback", mod: func(c *Config) { c.NoHostFallback = true },
			spec:    RunSpec{ConversationID: "c-nope", Workspace: "/w"},
			wantErr: sandbox.ErrNotFound, errSubstr: []string{"berth.conversation=c-nope", "host fallback is disabled", "docker: no container"}},
		{name: "no fallback custom label", mod: func(c *Config) { c.NoHostFallback = true; c.LabelKey = "acme.chat" },
			spec:    RunSpec{ConversationID: "x"},
			wantErr: sandbox.ErrNotFound, errSubstr: []string{"acme.chat=x"}},
		{name: "engine unreachable falls back", docker: func(p *fakeProvider) {
			p.locateErr = fmt.Errorf("fake: cannot reach the engine: %w", sandbox.ErrGone)
		}, spec: RunSpec{ConversationID: "c-42", Workspace: "/tmp"}, wantRef: "host"},
		{name: "ambiguous label fails", docker: func(p *fakeProvider) {
			p.locateErr = errors.New("fake: 2 running containers have the label berth.conversation=c-42: a, b")
		}, spec: RunSpec{ConversationID: "c-42", Workspace: "/tmp"}, errSubstr: []string{"2 running containers", "c-42"}},
		{name: "container needs workspace", spec: RunSpec{ConversationID: "c-42"},
			wantErr: ErrBadSpec, errSubstr: []string{"needs a workspace", "docker://0123abcd"}},
		{name: "container workspace relative", spec: RunSpec{ConversationID: "c-7", Sandbox: "docker://feed", Workspace: "src"},
			wantErr: ErrBadSpec, errSubstr: []string{"not absolute"}},
		{name: "workspace missing in sandbox", spec: RunSpec{ConversationID: "c-7", Sandbox: "docker://feed", Workspace: "/missing"},
			wantErr: fs.ErrNotExist, errSubstr: []string{"/missing", "docker://feed"}},
		{name: "unknown scheme", spec: RunSpec{Sandbox: "kube://ns/pod", Workspace: "/w"},
			wantErr: ErrBadSpec, errSubstr: []string{"no kube provider", "docker, host"}},
		{name: "malformed ref", spec: RunSpec{Sandbox: "docker:/x"}, wantErr: ErrBadSpec},
		{name: "bad mode", spec: RunSpec{Mode: "admin"}, wantErr: ErrBadSpec, errSubstr: []string{"admin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := newRig(t, tt.mod)
			if tt.docker != nil {
				tt.docker(rg.docker)
			}
			r, err := rg.c.Open(context.Background(), tt.spec)
			if tt.wantErr != nil || tt.errSubstr != nil {
				if err == nil {
					t.Fatalf("Open: got run in %s, want error", r.Sandbox())
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("Open error %q does not wrap %v", err, tt.wantErr)
				}
				for _, s := range tt.errSubstr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("Open error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Sandbox() != tt.wantRef {
				t.Errorf("Sandbox() = %q, want %q", r.Sandbox(), tt.wantRef)
			}
			if tt.wantWS != "" && r.Info().Workspace != tt.wantWS {
				t.Errorf("Workspace = %q, want %q", r.Info().Workspace, tt.wantWS)
			}
			if len(r.ID()) != 32 {
				t.Errorf("ID() = %q, want 32 hex digits", r.ID())
			}
		})
	}
}

func TestOpenFailureClosesSandbox(t *testing.T) {
	rg := newRig(t, nil)
	if _, err := rg.c.Open(context.Background(), RunSpec{ConversationID: "c-7", Sandbox: "docker://feed", Workspace: "/missing"}); err == nil {
		t.Fatal("Open succeeded on a missing workspace")
	}
	if n := len(rg.docker.opened); n != 1 || rg.docker.opened[0].closed.Load() != 1 {
		t.Fatalf("sandbox opened %d times, want 1 and closed once", n)
	}
	if got := testutil.ToFloat64(rg.c.m.runsOpen); got != 0 {
		t.Errorf("berth_runs_open = %v, want 0", got)
	}
}

func TestHostWorkspaceDefault(t *testing.T) {
	rg := newRig(t, func(c *Config) { c.DefaultWorkspace = "/srv/checkout" })
	r, err := rg.c.Open(context.Background(), RunSpec{Sandbox: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Info().Workspace != "/srv/checkout" {
		t.Errorf("workspace = %q, want the configured default", r.Info().Workspace)
	}
}

func TestCallsAndSurfaces(t *testing.T) {
	rg := newRig(t, nil)
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	names := func(s tools.Surface) string {
		var n []string
		for _, i := range r.Tools(s) {
			n = append(n, i.Name)
		}
		return strings.Join(n, ",")
	}
	if got := names(tools.SurfacePlan); got != "block,fail,look,vanish" {
		t.Errorf("plan tools = %s", got)
	}
	if got := names(""); got != "block,fail,look,run,touch,vanish" {
		t.Errorf("default tools = %s", got)
	}

	tests := []struct {
		surface tools.Surface
		tool    string
		args    string
		want    string // text of the result, or "" when wantErr
		isError bool
		wantErr error
		outcome string
	}{
		{"", "look", `{"path":"a.go"}`, "looked at a.go in /workspace", false, nil, OutcomeOK},
		{tools.SurfacePlan, "look", `{"path":"b"}`, "looked at b in /workspace", false, nil, OutcomeOK},
		{tools.SurfacePlan, "touch", `{"path":"b"}`, "", false, tools.ErrDenied, OutcomeDenied},
		{tools.SurfaceReadonly, "run", `{}`, "", false, tools.ErrDenied, OutcomeDenied},
		{"", "touch", `{"path":"b"}`, "touched", false, nil, OutcomeOK},
		{"", "nosuch", `{}`, "", false, tools.ErrUnknownTool, OutcomeUnknown},
		{"", "look", `{"path":`, "", false, nil, OutcomeBadInput},
		{"", "look", `{"paht":"x"}`, "", false, nil, OutcomeBadInput},
		{"admin", "look", `{}`, "", false, nil, OutcomeBadInput},
		{"", "fail", `{}`, "fail: nothing to see; call look instead", true, nil, OutcomeToolError},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/%s", tt.surface, tt.tool, tt.args), func(t *testing.T) {
			before := testutil.ToFloat64(rg.c.m.calls.WithLabelValues(metricTool(r, tt.tool), tt.outcome))
			res, err := r.Call(ctx, tt.surface, tt.tool, json.RawMessage(tt.args))
			after := testutil.ToFloat64(rg.c.m.calls.WithLabelValues(metricTool(r, tt.tool), tt.outcome))
			if after != before+1 {
				t.Errorf("berth_tool_calls_total{outcome=%q} went from %v to %v", tt.outcome, before, after)
			}
			if tt.want == "" {
				if err == nil {
					t.Fatalf("got result %q, want an error", res.AllText())
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %v does not wrap %v", err, tt.wantErr)
				}
				var in *tools.InputError
				if tt.outcome == OutcomeBadInput && !errors.As(err, &in) {
					t.Errorf("error %v is not an InputError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.AllText() != tt.want || res.IsError != tt.isError {
				t.Errorf("got %q isError=%v, want %q isError=%v", res.AllText(), res.IsError, tt.want, tt.isError)
			}
		})
	}
	if n := rg.docker.opened[0].checks.Load(); n != 1 {
		t.Errorf("sandbox checked %d times, want once (after the isError result)", n)
	}
}

func metricTool(r *Run, name string) string {
	if _, ok := r.reg.Lookup(name); ok {
		return name
	}
	return "_unknown"
}

func TestModeIsACeiling(t *testing.T) {
	rg := newRig(t, nil)
	r, err := rg.c.Open(context.Background(), RunSpec{Sandbox: "host", Mode: tools.SurfacePlan})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []tools.Surface{"", tools.SurfacePlan, tools.SurfaceDefault} {
		for _, name := range []string{"touch", "run"} {
			if _, err := r.Call(context.Background(), s, name, json.RawMessage(`{"path":"x"}`)); !errors.Is(err, tools.ErrDenied) {
				t.Errorf("%s in a plan-mode run on surface %q: err = %v, want ErrDenied", name, s, err)
			}
		}
		for _, i := range r.Tools(s) {
			if i.Level > tools.LevelRead {
				t.Errorf("plan-mode run lists %s (%s) on surface %q", i.Name, i.Level, s)
			}
		}
	}
	if _, err := r.Call(context.Background(), tools.SurfaceDefault, "look", json.RawMessage(`{"path":"x"}`)); err == nil || !errors.Is(err, tools.ErrDenied) {
		t.Errorf("a plan-mode run must refuse the default surface even for read tools: err = %v", err)
	}
	if _, err := r.Call(context.Background(), tools.SurfaceReadonly, "look", json.RawMessage(`{"path":"x"}`)); err != nil {
		t.Errorf("look on the readonly surface of a plan-mode run: %v", err)
	}
}

func TestSandboxGone(t *testing.T) {
	rg := newRig(t, nil)
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb := rg.docker.opened[0]
	_, err = r.Call(ctx, "", "vanish", nil)
	if !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("vanish: err = %v, want ErrGone", err)
	}
	for _, s := range []string{"docker://0123abcd", "exit code 137", "open a new run"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	checks := sb.checks.Load()
	// Later calls fail at once, without asking the sandbox again.
	for range 3 {
		if _, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); !errors.Is(err, sandbox.ErrGone) {
			t.Fatalf("look after gone: err = %v, want ErrGone", err)
		}
	}
	if n := sb.checks.Load(); n != checks {
		t.Errorf("sandbox checked %d more times after it was known gone", n-checks)
	}
	if got := testutil.ToFloat64(rg.c.m.calls.WithLabelValues("look", OutcomeSandboxGone)); got != 3 {
		t.Errorf("sandbox_gone outcomes for look = %v, want 3", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseCancelsCallsAndIsIdempotent(t *testing.T) {
	closed := false
	rg := newRig(t, func(c *Config) {
		c.Tools = append(c.Tools, func(ctx context.Context, r *tools.Registry, env *Env) error {
			env.OnClose(func() error {
				// A binder's closer runs before the sandbox is closed.
				if env.Sandbox.(*fakeSandbox).closed.Load() != 0 {
					t.Error("sandbox closed before the run's closers ran")
				}
				if env.Context.Err() == nil {
					t.Error("run context still live in the closer")
				}
				closed = true
				return nil
			})
			return nil
		})
	})
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{ConversationID: "c-7", Workspace: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(rg.c.m.runsOpen); got != 1 {
		t.Errorf("berth_runs_open = %v, want 1", got)
	}
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		close(started)
		_, err := r.Call(ctx, "", "block", nil)
		errc <- err
	}()
	<-started
	for range 3 {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err == nil {
		t.Error("blocked call returned no error after Close")
	}
	if !closed {
		t.Error("closer did not run")
	}
	if n := rg.docker.opened[0].closed.Load(); n != 1 {
		t.Errorf("sandbox closed %d times, want 1", n)
	}
	if _, err := rg.c.Get(r.ID()); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("Get after Close: err = %v, want ErrUnknownRun", err)
	}
	if _, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("Call after Close: err = %v, want ErrUnknownRun", err)
	}
	if got := testutil.ToFloat64(rg.c.m.runsOpen); got != 0 {
		t.Errorf("berth_runs_open = %v, want 0", got)
	}
}

func TestControllerCloseClosesAllRuns(t *testing.T) {
	rg := newRig(t, nil)
	ctx := context.Background()
	var runs []*Run
	for _, spec := range []RunSpec{{ConversationID: "c-42", Workspace: "/w"}, {ConversationID: "c-7", Workspace: "/w"}, {Sandbox: "host"}} {
		r, err := rg.c.Open(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if got := len(rg.c.List()); got != 3 {
		t.Fatalf("List has %d runs, want 3", got)
	}
	if got := rg.c.List()[0].ID; got != runs[0].ID() {
		t.Errorf("List()[0] = %s, want the oldest run %s", got, runs[0].ID())
	}
	if err := rg.c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*fakeProvider{rg.docker, rg.host} {
		for _, sb := range p.opened {
			if sb.closed.Load() != 1 {
				t.Errorf("sandbox %s closed %d times, want 1", sb.ref, sb.closed.Load())
			}
		}
	}
	if got := len(rg.c.List()); got != 0 {
		t.Errorf("List has %d runs after Close", got)
	}
	if _, err := rg.c.Open(ctx, RunSpec{Sandbox: "host"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Open after Close: err = %v, want ErrClosed", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	rg := newRig(t, nil)
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{Sandbox: "host"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			res, err := r.Call(ctx, "", "look", json.RawMessage(fmt.Sprintf(`{"path":"f%d"}`, i)))
			if err != nil || !strings.Contains(res.AllText(), fmt.Sprintf("f%d", i)) {
				t.Errorf("call %d: %v %v", i, res, err)
			}
		})
	}
	wg.Go(func() { rg.c.List() })
	wg.Wait()
	if got := testutil.ToFloat64(rg.c.m.calls.WithLabelValues("look", OutcomeOK)); got != 20 {
		t.Errorf("ok calls = %v, want 20", got)
	}
}

func TestDuplicateScheme(t *testing.T) {
	_, err := New(Config{Providers: []sandbox.Provider{&fakeProvider{scheme: "docker"}, &fakeProvider{scheme: "docker"}}})
	if err == nil || !strings.Contains(err.Error(), "docker") {
		t.Fatalf("New with two docker providers: err = %v", err)
	}
}

func TestMetricsRegistered(t *testing.T) {
	rg := newRig(t, nil)
	if _, err := rg.c.Open(context.Background(), RunSpec{Sandbox: "host"}); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(rg.reg, "berth_runs_open", "berth_runs_opened_total")
	if err != nil || n != 2 {
		t.Fatalf("gathered %d series (%v), want 2", n, err)
	}
	// A second controller on the same registerer is refused, not silently merged.
	if _, err := New(Config{Registerer: rg.reg}); err == nil {
		t.Error("second controller registered the same metrics")
	}
}

func TestBinderErrorClosesEverything(t *testing.T) {
	ran := false
	rg := newRig(t, func(c *Config) {
		c.Tools = []Binder{
			func(ctx context.Context, r *tools.Registry, env *Env) error {
				env.OnClose(func() error { ran = true; return nil })
				return nil
			},
			func(ctx context.Context, r *tools.Registry, env *Env) error {
				return errors.New("lsp: no supervisor")
			},
		}
	})
	_, err := rg.c.Open(context.Background(), RunSpec{ConversationID: "c-7", Sandbox: "docker://feed", Workspace: "/w"})
	if err == nil || !strings.Contains(err.Error(), "lsp: no supervisor") || !strings.Contains(err.Error(), "docker://feed") {
		t.Fatalf("Open: err = %v", err)
	}
	if !ran || rg.docker.opened[0].closed.Load() != 1 {
		t.Errorf("after a failed binder: closer ran %v, sandbox closed %d times", ran, rg.docker.opened[0].closed.Load())
	}
	if len(rg.c.List()) != 0 {
		t.Error("a run that failed to open is listed")
	}
}

// TestSandboxUnavailable: a paused sandbox (or an engine that does not
// answer) is not the end of the run: calls fail fast with a retryable
// error, the sandbox is asked again after a wait that grows, and the run
// is used as before once it answers; only then gone is gone.
func TestSandboxUnavailable(t *testing.T) {
	rg := newRig(t, nil)
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb := rg.docker.opened[0]
	sb.paused.Store(true)
	_, err = r.Call(ctx, "", "fail", nil)
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "the run and what runs in it are kept") {
		t.Fatalf("a call while paused: err = %v, want ErrUnavailable saying the run is kept", err)
	}
	checks := sb.checks.Load()
	// Within the wait, calls fail fast without asking the sandbox.
	if _, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("look while paused: err = %v", err)
	}
	if n := sb.checks.Load(); n != checks {
		t.Errorf("the sandbox was checked %d more times within the wait", n-checks)
	}
	// After the wait one look decides: still paused, and the wait grows.
	r.mu.Lock()
	first := r.backoff
	r.retryAt = time.Now()
	r.mu.Unlock()
	if _, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("look after the wait, still paused: err = %v", err)
	}
	r.mu.Lock()
	second := r.backoff
	r.retryAt = time.Now()
	r.mu.Unlock()
	if second != 2*first {
		t.Errorf("the wait went from %v to %v, want it doubled", first, second)
	}
	// Unpaused: the run works again, nothing was lost.
	sb.paused.Store(false)
	res, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`))
	if err != nil || !strings.Contains(res.AllText(), "looked at a") {
		t.Fatalf("look after unpause: %v %v", res, err)
	}
	if got := testutil.ToFloat64(rg.c.m.calls.WithLabelValues("look", OutcomeSandboxUnavailable)); got != 2 {
		t.Errorf("sandbox_unavailable outcomes for look = %v, want 2", got)
	}
	// Paused, then stopped while paused: gone for good.
	sb.paused.Store(true)
	if _, err := r.Call(ctx, "", "fail", nil); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("paused again: %v", err)
	}
	sb.paused.Store(false)
	sb.gone.Store(true)
	r.mu.Lock()
	r.retryAt = time.Now()
	r.mu.Unlock()
	if _, err := r.Call(ctx, "", "look", json.RawMessage(`{"path":"a"}`)); !errors.Is(err, sandbox.ErrGone) || errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("stopped while paused: err = %v, want ErrGone alone", err)
	}
}

// TestCallCutWhenSandboxPauses: a call that waits on something a pause
// froze is cut short with the retryable error, instead of hanging until
// the pause ends.
func TestCallCutWhenSandboxPauses(t *testing.T) {
	rg := newRig(t, nil)
	ctx := context.Background()
	r, err := rg.c.Open(ctx, RunSpec{ConversationID: "c-42", Workspace: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	rg.docker.opened[0].paused.Store(true)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = r.Call(ctx, "", "block", nil)
	if !errors.Is(err, sandbox.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("a call blocked by a pause: err = %v (ctx %v), want ErrUnavailable before the caller's deadline", err, ctx.Err())
	}
}

// TestCheckPrewarm: prewarm names kernel languages, each kept once in
// eval's name, and only a run that may run exec-level tools may ask.
func TestCheckPrewarm(t *testing.T) {
	for _, tc := range []struct {
		mode    tools.Surface
		prewarm []string
		want    []string
		bad     string
	}{
		{tools.SurfaceDefault, nil, nil, ""},
		{tools.SurfaceDefault, []string{"python", "py", "node"}, []string{"python", "javascript"}, ""},
		{tools.SurfaceDefault, []string{"ruby"}, nil, "python or javascript"},
		{tools.SurfaceDefault, []string{""}, nil, "python or javascript"},
		{tools.SurfaceDefault, []string{"py", "py", "py", "py", "py", "py", "py"}, nil, "more than 6"},
		{tools.SurfacePlan, []string{"python"}, nil, "exec level"},
		{tools.SurfaceReadonly, []string{"python"}, nil, "exec level"},
		// Language servers: read level, so any mode; a language id of the
		// server table, in lower case, once.
		{tools.SurfaceDefault, []string{"python", "LSP:Go", "lsp:go", "lsp:typescript"}, []string{"python", "lsp:go", "lsp:typescript"}, ""},
		{tools.SurfaceReadonly, []string{"lsp:python", "lsp:rs"}, []string{"lsp:python", "lsp:rs"}, ""},
		{tools.SurfacePlan, []string{"lsp:go", "python"}, nil, "exec level"},
		{tools.SurfaceDefault, []string{"lsp:cobol"}, nil, "no language server handles"},
		{tools.SurfaceDefault, []string{"lsp:"}, nil, "no language server handles"},
		// Only a language of the table: never a path, a binary or a flag.
		{tools.SurfaceDefault, []string{"lsp:../../bin/sh"}, nil, "no language server handles"},
		{tools.SurfaceDefault, []string{"lsp:gopls --remote=x"}, nil, "no language server handles"},
		{tools.SurfaceDefault, []string{"lsp:.go"}, nil, "no language server handles"},
		{tools.SurfaceDefault, []string{"gopls"}, nil, "lsp: and its language"},
	} {
		spec := RunSpec{Mode: tc.mode, Prewarm: tc.prewarm}
		err := checkPrewarm(&spec)
		switch {
		case tc.bad != "":
			if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s %q: %v; want ErrBadSpec saying %q", tc.mode, tc.prewarm, err, tc.bad)
			}
		case err != nil || !slices.Equal(spec.Prewarm, tc.want):
			t.Errorf("%s %q: %v %q; want %q", tc.mode, tc.prewarm, err, spec.Prewarm, tc.want)
		}
	}
}
