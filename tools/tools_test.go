package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type pathIn struct {
	Path  string `json:"path" jsonschema:"the file"`
	Count int    `json:"count,omitempty" jsonschema:"how many"`
}

// newTestRegistry registers one tool per level; each echoes its name.
func newTestRegistry() *Registry {
	r := NewRegistry()
	for _, t := range []Tool{
		{Name: "look", Description: "read", Level: LevelRead},
		{Name: "change", Description: "write", Level: LevelWrite},
		{Name: "run", Description: "exec", Level: LevelExec, Serial: true},
	} {
		name := t.Name
		Register(r, t, func(ctx context.Context, in pathIn) (*Result, error) {
			return Textf("%s %s", name, in.Path), nil
		})
	}
	return r
}

func TestLevelsBySurface(t *testing.T) {
	r := newTestRegistry()
	tests := []struct {
		surface Surface
		tool    string
		allowed bool
	}{
		{SurfaceDefault, "look", true},
		{SurfaceDefault, "change", true},
		{SurfaceDefault, "run", true},
		{SurfacePlan, "look", true},
		{SurfacePlan, "change", false},
		{SurfacePlan, "run", false},
		{SurfaceReadonly, "look", true},
		{SurfaceReadonly, "change", false},
		{SurfaceReadonly, "run", false},
	}
	for _, tc := range tests {
		listed := false
		for _, i := range r.List(tc.surface) {
			if i.Name == tc.tool {
				listed = true
				if i.InputSchema == nil {
					t.Errorf("%s on %s: no input schema", tc.tool, tc.surface)
				}
			}
		}
		if listed != tc.allowed {
			t.Errorf("List(%s) lists %s = %v, want %v", tc.surface, tc.tool, listed, tc.allowed)
		}
		res, err := r.Call(context.Background(), tc.surface, tc.tool, json.RawMessage(`{"path":"a"}`))
		if tc.allowed {
			if err != nil || res.AllText() != tc.tool+" a" {
				t.Errorf("Call(%s, %s) = %v, %v", tc.surface, tc.tool, res, err)
			}
		} else if !errors.Is(err, ErrDenied) {
			t.Errorf("Call(%s, %s) by name: err = %v, want ErrDenied", tc.surface, tc.tool, err)
		}
	}
}

func TestDeniedBeforeDecoding(t *testing.T) {
	r := NewRegistry()
	var ran atomic.Bool
	Register(r, Tool{Name: "w", Description: "w", Level: LevelWrite}, func(ctx context.Context, in pathIn) (*Result, error) {
		ran.Store(true)
		return Text("ok"), nil
	})
	// Malformed arguments on a surface that may not call the tool: the
	// refusal comes first, and the handler never runs.
	_, err := r.Call(context.Background(), SurfacePlan, "w", json.RawMessage(`{not json`))
	if !errors.Is(err, ErrDenied) {
		t.Errorf("err = %v, want ErrDenied", err)
	}
	if ran.Load() {
		t.Error("handler ran on a denied call")
	}
}

func TestCallErrors(t *testing.T) {
	r := newTestRegistry()
	tests := []struct {
		name    string
		surface Surface
		tool    string
		args    string
		check   func(error) bool
	}{
		{"unknown tool", SurfaceDefault, "nope", `{}`, func(err error) bool { return errors.Is(err, ErrUnknownTool) }},
		{"malformed JSON", SurfaceDefault, "look", `{"path":`, isInputError},
		{"wrong type", SurfaceDefault, "look", `{"path":3}`, isInputError},
		{"missing required", SurfaceDefault, "look", `{}`, isInputError},
		{"unknown field", SurfaceDefault, "look", `{"path":"a","extra":1}`, isInputError},
		{"unknown surface", Surface("admin"), "look", `{"path":"a"}`, isInputError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Call(context.Background(), tc.surface, tc.tool, json.RawMessage(tc.args))
			if err == nil || !tc.check(err) {
				t.Errorf("err = %v", err)
			}
		})
	}
	if got := r.List("admin"); len(got) != 0 {
		t.Errorf("an unknown surface lists %d tools", len(got))
	}
}

func isInputError(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

func TestSchemaFromInputType(t *testing.T) {
	r := newTestRegistry()
	infos := r.List(SurfaceDefault)
	b, err := json.Marshal(infos[0].InputSchema)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"path"`, `"the file"`, `"required":["path"]`, `"count"`} {
		if !strings.Contains(s, want) {
			t.Errorf("schema %s lacks %s", s, want)
		}
	}
	b, _ = json.Marshal(infos[0])
	if !strings.Contains(string(b), `"level":"`) {
		t.Errorf("Info JSON %s: level is not a name", b)
	}
}

func TestSerialToolsRunOneAtATime(t *testing.T) {
	r := NewRegistry()
	running := map[string]*atomic.Int32{"debug": {}, "eval": {}}
	most := map[string]*atomic.Int32{"debug": {}, "eval": {}}
	for _, name := range []string{"debug", "eval"} {
		Register(r, Tool{Name: name, Description: name, Level: LevelExec, Serial: true}, func(ctx context.Context, in struct{}) (*Result, error) {
			n := running[name].Add(1)
			for {
				m := most[name].Load()
				if n <= m || most[name].CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			running[name].Add(-1)
			return Text("ok"), nil
		})
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"debug", "eval"}[i%2]
			if _, err := r.Call(context.Background(), SurfaceDefault, name, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for name, m := range most {
		if m.Load() != 1 {
			t.Errorf("%d %s calls ran at once, want 1", m.Load(), name)
		}
	}
}

// TestSerialSlotsPerTool: a cell that keeps running holds off the next
// eval call, not a debug call (terminate must get through).
func TestSerialSlotsPerTool(t *testing.T) {
	r := NewRegistry()
	release := make(chan struct{})
	started := make(chan struct{})
	Register(r, Tool{Name: "eval", Description: "e", Level: LevelExec, Serial: true}, func(ctx context.Context, in struct{}) (*Result, error) {
		close(started)
		<-release
		return Text("ok"), nil
	})
	Register(r, Tool{Name: "debug", Description: "d", Level: LevelExec, Serial: true}, func(ctx context.Context, in struct{}) (*Result, error) {
		return Text("terminated"), nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := r.Call(context.Background(), SurfaceDefault, "eval", nil)
		done <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := r.Call(ctx, SurfaceDefault, "debug", nil); err != nil || res.AllText() != "terminated" {
		t.Errorf("debug while eval runs: %+v %v", res, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func TestSerialWaitHonoursContext(t *testing.T) {
	r := NewRegistry()
	release := make(chan struct{})
	started := make(chan struct{}, 1) // buffered: the first call signals even before the test waits
	Register(r, Tool{Name: "eval", Description: "e", Level: LevelExec, Serial: true}, func(ctx context.Context, in struct{}) (*Result, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return Text("ok"), nil
	})
	go r.Call(context.Background(), SurfaceDefault, "eval", nil)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := r.Call(ctx, SurfaceDefault, "eval", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second serial call: err = %v, want the context's error", err)
	}
	close(release)
}

func TestMiddleware(t *testing.T) {
	r := newTestRegistry()
	var order []string
	r.Use(func(tl Tool, next Handler) Handler {
		return func(ctx context.Context, args json.RawMessage) (*Result, error) {
			order = append(order, "outer:"+tl.Name)
			res, err := next(ctx, args)
			if err == nil && tl.Level == LevelWrite {
				res.AppendText("checked")
			}
			return res, err
		}
	})
	res, err := r.Call(context.Background(), SurfaceDefault, "change", json.RawMessage(`{"path":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.AllText(); got != "change x\nchecked" {
		t.Errorf("result %q", got)
	}
	if len(order) != 1 || order[0] != "outer:change" {
		t.Errorf("middleware calls %v", order)
	}
	// A denied call never reaches the middleware.
	order = nil
	if _, err := r.Call(context.Background(), SurfacePlan, "change", json.RawMessage(`{"path":"x"}`)); !errors.Is(err, ErrDenied) {
		t.Fatal(err)
	}
	if len(order) != 0 {
		t.Errorf("middleware ran on a denied call: %v", order)
	}
}

func TestRegisterPanicsOnMistakes(t *testing.T) {
	h := func(ctx context.Context, in struct{}) (*Result, error) { return nil, nil }
	for name, f := range map[string]func(){
		"no level": func() { Register(NewRegistry(), Tool{Name: "x"}, h) },
		"no name":  func() { Register(NewRegistry(), Tool{Level: LevelRead}, h) },
		"duplicate": func() {
			r := NewRegistry()
			Register(r, Tool{Name: "x", Level: LevelRead}, h)
			Register(r, Tool{Name: "x", Level: LevelRead}, h)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestResultJSON(t *testing.T) {
	res := &Result{Content: []Content{{Type: "text", Text: ""}, {Type: "image", MimeType: "image/png", Data: []byte{1, 2}}}, IsError: true, Touched: []string{"a"}}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content":[{"type":"text","text":""},{"type":"image","mimeType":"image/png","data":"AQI="}],"isError":true}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// TestSurfaceOf: a handler sees the surface it was called on; outside a
// call the narrowest surface is assumed.
func TestSurfaceOf(t *testing.T) {
	if got := SurfaceOf(context.Background()); got != SurfaceReadonly {
		t.Errorf("outside a call: %q", got)
	}
	r := NewRegistry()
	var seen Surface
	type in struct{}
	Register(r, Tool{Name: "probe", Level: LevelRead, Description: "x"}, func(ctx context.Context, _ in) (*Result, error) {
		seen = SurfaceOf(ctx)
		return Text("ok"), nil
	})
	for _, s := range Surfaces {
		if _, err := r.Call(context.Background(), s, "probe", nil); err != nil {
			t.Fatal(err)
		}
		if seen != s {
			t.Errorf("called on %q, handler saw %q", s, seen)
		}
	}
}

// TestHandlerErrors pins the one tool-error path: what a handler returns
// reaches the caller either as a Result with IsError (the model acts on
// it) or as a call error, whichever package wrote it.
func TestHandlerErrors(t *testing.T) {
	cause := errors.New("disk full")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		res      *Result
		wantText string // the IsError result's text; "" means a call error
		wantIs   error  // for a call error: errors.Is target
	}{
		{name: "plain error", err: errors.New("no such symbol: give another"), wantText: "no such symbol: give another"},
		{name: "tools.Error", err: Fail("file %s is binary: read another", "a.bin"), wantText: "file a.bin is binary: read another"},
		{name: "wrapped tools.Error", err: fmt.Errorf("patch line 3: %w", Fail("a.txt changed")), wantText: "patch line 3: a.txt changed"},
		{name: "Fail keeps its cause", err: Fail("writing a.txt failed: %w; nothing changed", cause), wantText: "writing a.txt failed: disk full; nothing changed"},
		{name: "step refused is the model's", err: fmt.Errorf("lsp did not run cargo check: %w", ErrStepRefused), wantText: "lsp did not run cargo check: step refused"},
		{name: "denied", err: fmt.Errorf("gate: %w", ErrDenied), wantIs: ErrDenied},
		{name: "unknown tool", err: fmt.Errorf("%w x", ErrUnknownTool), wantIs: ErrUnknownTool},
		{name: "input error", err: &InputError{Tool: "t", Msg: "bad"}},
		{name: "the call's end", ctx: canceled, err: fmt.Errorf("waiting for the server: %w", context.Canceled), wantIs: context.Canceled},
		{name: "a deadline of the tool's own", err: fmt.Errorf("the server did not answer in 30s: %w", context.DeadlineExceeded), wantText: "the server did not answer in 30s: context deadline exceeded"},
		{name: "nil result", wantText: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRegistry()
			Register(r, Tool{Name: "t", Level: LevelRead}, func(ctx context.Context, in pathIn) (*Result, error) {
				return tc.res, tc.err
			})
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			res, err := r.Call(ctx, SurfaceDefault, "t", json.RawMessage(`{"path":"a"}`))
			switch {
			case tc.err == nil:
				if err != nil || res == nil || res.IsError {
					t.Fatalf("res %+v, err %v: want an empty result", res, err)
				}
			case tc.wantText != "":
				if err != nil || res == nil || !res.IsError || res.AllText() != tc.wantText {
					t.Fatalf("res %+v, err %v: want an IsError result %q", res, err, tc.wantText)
				}
			default:
				var ie *InputError
				if res != nil || err == nil || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) || (tc.wantIs == nil && !errors.As(err, &ie)) {
					t.Fatalf("res %+v, err %v: want a call error", res, err)
				}
			}
		})
	}
	if !errors.Is(Fail("x: %w", cause), cause) {
		t.Error("Fail lost its %w cause")
	}
}

// TestEnum pins the Enum option: the listed schema has the values, a value
// outside them is an *InputError before the handler runs, and a property
// the schema lacks is a programming error.
func TestEnum(t *testing.T) {
	type opIn struct {
		Op   string `json:"op" jsonschema:"what to do"`
		Path string `json:"path,omitempty" jsonschema:"the file"`
	}
	r := NewRegistry()
	var ran []string
	Register(r, Tool{Name: "t", Level: LevelRead}, func(ctx context.Context, in opIn) (*Result, error) {
		ran = append(ran, in.Op)
		return Text(in.Op), nil
	}, Enum("op", "start", "stop"))
	infos := r.List(SurfaceDefault)
	if len(infos) != 1 {
		t.Fatalf("listed %d tools", len(infos))
	}
	b, _ := json.Marshal(infos[0].InputSchema)
	if !strings.Contains(string(b), `"enum":["start","stop"]`) || !strings.Contains(string(b), `"what to do"`) {
		t.Errorf("schema %s lacks the enum or the description", b)
	}
	if res, err := r.Call(context.Background(), SurfaceDefault, "t", json.RawMessage(`{"op":"stop"}`)); err != nil || res.AllText() != "stop" {
		t.Errorf("op stop: res %+v, err %v", res, err)
	}
	// The listed enum is the model's guide; other strings reach the tool,
	// which answers them with its own "use one of" (or normalises them).
	for _, args := range []string{`{"op":"Stop"}`, `{"op":""}`, `{"op":"pause","path":"a"}`} {
		if _, err := r.Call(context.Background(), SurfaceDefault, "t", json.RawMessage(args)); err != nil {
			t.Errorf("%s: err = %v, want the call to reach the tool", args, err)
		}
	}
	if want := []string{"stop", "Stop", "", "pause"}; !slices.Equal(ran, want) {
		t.Errorf("the handler ran for %q, want %q", ran, want)
	}
	// The rest of the schema is still checked before the handler.
	if _, err := r.Call(context.Background(), SurfaceDefault, "t", json.RawMessage(`{"op":1}`)); !isInputError(err) {
		t.Errorf("op 1: err = %v, want an InputError", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Enum on a missing property did not panic")
		}
	}()
	Register(NewRegistry(), Tool{Name: "u", Level: LevelRead}, func(ctx context.Context, in opIn) (*Result, error) { return nil, nil }, Enum("mode", "a"))
}
