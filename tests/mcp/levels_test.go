package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"berth.dev/berth/tests/berthtest"
)

// TestLevelMatrix: for every surface of a default run and the default
// surface of a plan run, MCP lists exactly the tools /v1 lists, and a
// read, a write and an exec tool are allowed or refused (denied) over MCP
// exactly as over /v1.
func TestLevelMatrix(t *testing.T) {
	tn := startServe(t)
	ws := workspace(t)
	api := &berthtest.Client{URL: tn.s.URL, Token: tn.a}
	ctx := context.Background()
	open := func(mode string) string {
		run, err := api.OpenRun(ctx, map[string]any{"sandbox": "host", "workspace": ws, "mode": mode})
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}
	runs := map[string]string{"default": open("default"), "plan": open("plan")}
	for _, tc := range []struct{ mode, surface string }{
		{"default", "default"}, {"default", "plan"}, {"default", "readonly"}, {"plan", "default"}, {"plan", "plan"},
	} {
		t.Run(tc.mode+"-run/"+tc.surface, func(t *testing.T) {
			id := runs[tc.mode]
			st, b, err := api.Do(ctx, "GET", "/v1/runs/"+id+"/tools?surface="+tc.surface, nil)
			var v1 struct{ Tools []struct{ Name string } }
			if err != nil || st != 200 || json.Unmarshal(b, &v1) != nil {
				t.Fatalf("/v1 tools: %d %v %s", st, err, b)
			}
			var v1Names []string
			for _, tl := range v1.Tools {
				v1Names = append(v1Names, tl.Name)
			}
			cs := connect(t, fmt.Sprintf("%s/v1/runs/%s/mcp?surface=%s", tn.s.URL, id, tc.surface), tn.a, nil)
			mcpNames := names(t, cs)
			slices.Sort(v1Names)
			slices.Sort(mcpNames)
			if !slices.Equal(v1Names, mcpNames) {
				t.Errorf("tools differ:\n/v1 %v\nmcp %v", v1Names, mcpNames)
			}
			for _, c := range []struct {
				tool string
				args map[string]any
			}{
				{"read", map[string]any{"path": "a.txt"}},
				{"write", map[string]any{"path": "level.txt", "content": "x"}},
				{"eval", map[string]any{"code": "1 + 1", "description": "add one and one in the kernel"}},
			} {
				st, b, err := api.Do(ctx, "POST", "/v1/runs/"+id+"/tools/"+c.tool, map[string]any{"args": c.args, "surface": tc.surface})
				if err != nil {
					t.Fatal(err)
				}
				var e struct{ Error struct{ Code string } }
				json.Unmarshal(b, &e)
				v1Outcome := "ok"
				if st != 200 {
					v1Outcome = e.Error.Code
				}
				mcpOutcome := "ok"
				if _, err := call(t, cs, c.tool, c.args); err != nil {
					mcpOutcome = "error: " + err.Error()
					if je := asRPC(err); je != "" {
						mcpOutcome = je
					}
				}
				if v1Outcome != mcpOutcome {
					t.Errorf("%s: /v1 %s, mcp %s", c.tool, v1Outcome, mcpOutcome)
				}
				// The matrix must show both answers: what each cell expects.
				want := "ok"
				switch {
				case tc.mode == "plan" && tc.surface == "default":
					want = "denied" // a surface above the run's mode is refused whole
				case tc.surface != "default" && c.tool != "read":
					want = "denied"
				}
				if v1Outcome != want {
					t.Errorf("%s on %s: /v1 answered %s, want %s", c.tool, tc.surface, v1Outcome, want)
				}
			}
		})
	}
}
