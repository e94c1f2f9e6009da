package debug

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/dap"
	"berth.dev/berth/tools"
)

// TestOpTable checks what is rendered from ops: the description with its
// caps, the enum of op and operation, and the arguments' descriptions,
// against the Input type.
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
		"- continue, pause, step_over, step_in, step_out [thread_id]: ",
		"- launch program, args[], [adapter], [stop_on_entry]: ",
	} {
		if !strings.Contains(info.Description, limit) {
			t.Errorf("the description lacks %q:\n%s", limit, info.Description)
		}
	}
	if d := description(3 * time.Second); !strings.Contains(d, "ended after 3s.") {
		t.Errorf("a 3s TTL is described as:\n%s", d)
	}

	for _, name := range []string{"op", "operation"} {
		p := info.InputSchema.Properties[name]
		if p == nil {
			t.Fatalf("no %s in the schema", name)
		}
		var got []string
		for _, v := range p.Enum {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, opNames()) {
			t.Errorf("%s: enum %v, want %v", name, got, opNames())
		}
	}

	// Every argument an operation names is a field of Input, and every
	// field but op and operation is some operation's argument.
	read := map[string]bool{"op": true, "operation": true}
	for _, o := range ops {
		for _, a := range o.args {
			read[argName(a)] = true
		}
	}
	for name, p := range info.InputSchema.Properties {
		if !read[name] {
			t.Errorf("no operation reads %s", name)
		}
		if name != "op" && name != "operation" && !strings.Contains(p.Description, ": ") {
			t.Errorf("%s: description %q names no operation", name, p.Description)
		}
	}
	if d := info.InputSchema.Properties["thread_id"].Description; !strings.HasPrefix(d, "continue, pause, step_over, step_in, step_out, stack: ") {
		t.Errorf("thread_id: %q", d)
	}
}

// TestOpSpellings: op is matched lower-cased and trimmed, in op or in
// operation, and an unknown one is the tool's own error listing the
// operations; the schema's enum (listed, left to the tool: tools.Enum)
// changes none of that.
func TestOpSpellings(t *testing.T) {
	f := newFixture(t, nil, Options{})
	all := strings.Join(opNames(), ", ")
	f.Fails(t, map[string]any{"op": "Continue"}, "no debug session: continue needs one")
	f.Fails(t, map[string]any{"op": " step_over "}, "no debug session: step_over needs one")
	f.Fails(t, map[string]any{"operation": "STACK\n"}, "no debug session: stack needs one")
	f.Ok(t, map[string]any{"op": "STATUS"}, "no debug session")
	f.Ok(t, map[string]any{"operation": " Terminate"}, "no debug session to terminate")
	f.Ok(t, map[string]any{"op": "status", "operation": "Status"}, "no debug session")
	f.Fails(t, map[string]any{"op": "explode"}, `unknown operation "explode": use one of `+all)
	f.Fails(t, map[string]any{}, "no operation: set op to one of "+all)

}
