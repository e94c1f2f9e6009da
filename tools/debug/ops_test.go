package debug

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/dap"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
)

// TestOpTable checks what is rendered from the tables: the description
// with its caps, the enum of op (and of adapter, from the adapter table),
// and the arguments' descriptions, against the Input type.
func TestOpTable(t *testing.T) {
	f := newFixture(t, nil, Options{})
	infos := f.reg.List(tools.SurfaceDefault)
	if len(infos) != 1 {
		t.Fatalf("tools = %+v", infos)
	}
	info := infos[0]
	for _, o := range ops {
		if !strings.Contains(info.Description, o.name) || !strings.Contains(info.Description, o.doc) {
			t.Errorf("the description lacks %s or its doc %q", o.name, o.doc)
		}
	}
	for _, limit := range []string{
		"ended after 30 minutes",
		fmt.Sprintf("at most %d,", dap.MaxFrames),
		fmt.Sprintf("%d at a time", dap.MaxVariables),
		fmt.Sprintf("cut at %d characters", dap.MaxValueChars),
		fmt.Sprintf("its last %d characters", MaxOutputChars),
		fmt.Sprintf("the frame's first %d locals", MaxStopLocals),
		"- continue, pause, step_over, step_in, step_out [thread_id]: ",
		"- launch program, [module], args[], [cwd], [env], [adapter], [stop_on_entry], [test], [test_run], [file], [lines[]]: ",
		"; debugpy runs statements too",
		"; delve evaluates Go expressions",
	} {
		if !strings.Contains(info.Description, limit) {
			t.Errorf("the description lacks %q:\n%s", limit, info.Description)
		}
	}
	if d := description(3 * time.Second); !strings.Contains(d, "ended after 3s.") {
		t.Errorf("a 3s TTL is described as:\n%s", d)
	}
	if Tool.Name != info.Name || Tool.Level != info.Level || Tool.Description != info.Description || !Tool.Serial {
		t.Errorf("Tool = %+v; registered as %+v", Tool, info)
	}

	for name, want := range map[string][]string{"op": opNames(), "adapter": adapterList()} {
		p := info.InputSchema.Properties[name]
		if p == nil {
			t.Fatalf("no %s in the schema", name)
		}
		var got []string
		for _, v := range p.Enum {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: enum %v, want %v", name, got, want)
		}
	}
	if _, ok := info.InputSchema.Properties["operation"]; ok {
		t.Errorf("the schema still has operation beside op")
	}
	// No description lists the adapters literally: the enum does.
	for name, p := range info.InputSchema.Properties {
		if strings.Contains(p.Description, "debugpy, delve") {
			t.Errorf("%s lists the adapters literally: %q", name, p.Description)
		}
	}

	// Every argument an operation names is a field of Input, and every
	// field but op is some operation's argument.
	read := map[string]bool{"op": true}
	for _, o := range ops {
		for _, a := range o.args {
			read[argName(a)] = true
		}
	}
	for name, p := range info.InputSchema.Properties {
		if !read[name] {
			t.Errorf("no operation reads %s", name)
		}
		if name != "op" && !strings.Contains(p.Description, ": ") {
			t.Errorf("%s: description %q names no operation", name, p.Description)
		}
	}
	if d := info.InputSchema.Properties["thread_id"].Description; !strings.HasPrefix(d, "continue, pause, step_over, step_in, step_out, stack: ") {
		t.Errorf("thread_id: %q", d)
	}
}

// TestOpSpellings: op is matched lower-cased and trimmed, and an unknown
// one is the tool's own error listing the operations; the schema's enum
// (listed, left to the tool: tools.Enum) changes none of that. operation,
// op's old alias, is an unknown field now: an InputError.
func TestOpSpellings(t *testing.T) {
	f := newFixture(t, nil, Options{})
	all := strings.Join(opNames(), ", ")
	f.Fails(t, map[string]any{"op": "Continue"}, "no debug session: continue needs one")
	f.Fails(t, map[string]any{"op": " step_over "}, "no debug session: step_over needs one")
	f.Fails(t, map[string]any{"op": "STACK\n"}, "no debug session: stack needs one")
	f.Ok(t, map[string]any{"op": "STATUS"}, "no debug session")
	f.Ok(t, map[string]any{"op": " Terminate"}, "no debug session to terminate")
	f.Fails(t, map[string]any{"op": "explode"}, `unknown operation "explode": use one of `+all)
	f.Fails(t, map[string]any{"op": ""}, "no operation: set op to one of "+all)
	f.Fails(t, map[string]any{"op": "launch", "program": "x.py", "adapter": "GDB"}, `unknown adapter "GDB": use one of `+adapterIDs())
	// op is required: the schema says so, and a call without it is an
	// InputError before the tool runs.
	if _, err := f.reg.Call(t.Context(), tools.SurfaceDefault, "debug", json.RawMessage(`{}`)); !errors.As(err, new(*tools.InputError)) || !strings.Contains(err.Error(), "op") {
		t.Errorf("{}: %v, want an InputError naming op", err)
	}
	for _, info := range f.reg.List(tools.SurfaceDefault) {
		if info.Name == "debug" && !slices.Contains(info.InputSchema.Required, "op") {
			t.Errorf("the schema's required fields %v lack op", info.InputSchema.Required)
		}
	}
	for _, args := range []string{`{"operation":"status"}`, `{"op":"status","operation":"status"}`} {
		_, err := f.reg.Call(t.Context(), tools.SurfaceDefault, "debug", json.RawMessage(args))
		if ie := (*tools.InputError)(nil); !errors.As(err, &ie) || !strings.Contains(err.Error(), "operation") {
			t.Errorf("%s: %v, want an InputError naming operation", args, err)
		}
	}
}

// TestWho: how a no-answer message names the adapter.
func TestWho(t *testing.T) {
	exited := make(chan struct{})
	tests := []struct {
		ss   *session
		want string
	}{
		{&session{adapter: AdapterDebugpy, server: "debugpy", pid: 12, host: true, exited: exited}, "the debugpy debug adapter (pid 12)"},
		{&session{adapter: AdapterDelve, server: "dlv", pid: 7, exited: exited}, "the delve debug adapter dlv (pid 7 in the sandbox)"},
		{&session{adapter: AdapterLLDB, server: "lldb-vscode-14", pid: 3, host: true, exited: exited}, "the lldb debug adapter lldb-vscode-14 (pid 3)"},
		{&session{adapter: AdapterDebugpy, server: "debugpy", program: "the debuggee on port 5678"}, "the debugpy DAP server of the debuggee on port 5678"},
	}
	for _, tt := range tests {
		if got := tt.ss.who(); got != tt.want {
			t.Errorf("who() = %q, want %q", got, tt.want)
		}
	}
	if got := serverName(Availability{Adapter: AdapterDelve, Binary: "/usr/local/bin/dlv"}); got != "dlv" {
		t.Errorf("serverName(delve) = %q", got)
	}
}

// TestRequestTimeoutOption: a zero RequestTimeout is dap's default; a set
// one is kept.
func TestRequestTimeoutOption(t *testing.T) {
	sb := host.New(host.Options{})
	defer sb.Close()
	dir := t.TempDir()
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ set, want time.Duration }{{0, dap.RequestTimeout}, {7 * time.Second, 7 * time.Second}} {
		if got := New(sb, ws, t.Context(), Options{RequestTimeout: tt.set}).opts.RequestTimeout; got != tt.want {
			t.Errorf("RequestTimeout %v: got %v, want %v", tt.set, got, tt.want)
		}
	}
}
