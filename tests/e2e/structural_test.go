package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestStructuralInContainer drives ast_grep, ast_edit and resolve through
// the HTTP API over a workspace inside the conversation's container, and
// checks the files with the test's own docker exec.
func TestStructuralInContainer(t *testing.T) {
	image := needDocker(t)
	ctr := startContainer(t, image)
	ctr.sh(t, "mkdir -p "+workspace+"/pkg "+workspace+"/build && cd "+workspace+
		` && printf 'def f(x):\n    print(x)\n    print("print(x)")  # print(x)\n' > pkg/a.py`+
		` && printf 'import os\nprint(os.name)\n' > pkg/b.py`+
		` && printf 'print(1)\n' > build/gen.py && printf 'build/\n' > .gitignore`)
	a := newAPI(t)
	run, ref := a.open(ctr.conv)
	if ref != ctr.ref {
		t.Fatalf("run placed in %q, want %s", ref, ctr.ref)
	}

	t.Run("ast_grep", func(t *testing.T) {
		r := a.do("POST", "/v1/runs/"+run+"/tools/ast_grep", token, `{"args":{"pattern":"print($A)","language":"python"},"surface":"plan"}`)
		if r.status != http.StatusOK {
			t.Fatalf("ast_grep: %s", r)
		}
		var res struct {
			Content           []struct{ Type, Text string }
			IsError           bool
			StructuredContent struct {
				Matches []struct {
					File      string            `json:"file"`
					StartLine int               `json:"start_line"`
					StartCol  int               `json:"start_col"`
					Text      string            `json:"text"`
					Captures  map[string]string `json:"captures"`
				} `json:"matches"`
				Total     int  `json:"total"`
				Truncated bool `json:"truncated"`
			}
		}
		r.decode(t, &res)
		if res.IsError || len(res.Content) == 0 {
			t.Fatalf("ast_grep: %s", r)
		}
		t.Logf("ast_grep → %s", res.Content[0].Text)
		var got []string
		for _, m := range res.StructuredContent.Matches {
			got = append(got, fmt.Sprintf("%s:%d:%d %s A=%s", m.File, m.StartLine, m.StartCol, m.Text, m.Captures["A"]))
		}
		want := []string{
			"pkg/a.py:2:4 print(x) A=x",
			`pkg/a.py:3:4 print("print(x)") A="print(x)"`,
			"pkg/b.py:2:0 print(os.name) A=os.name",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || res.StructuredContent.Total != 3 || res.StructuredContent.Truncated {
			t.Errorf("matches\n%s\nwant (build/ is .gitignore'd)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if !strings.Contains(res.Content[0].Text, "3 matches in 2 files") || !strings.Contains(res.Content[0].Text, "pkg/a.py:2") {
			t.Errorf("text: %s", res.Content[0].Text)
		}
	})

	t.Run("ast_edit and resolve", func(t *testing.T) {
		before := ctr.sh(t, "cd "+workspace+" && cat pkg/a.py pkg/b.py build/gen.py")
		res := a.call(run, "ast_edit", "default", `{"pattern":"print($A)","rewrite":"log($A)","path":"pkg","language":"python"}`)
		if res.IsError || !strings.Contains(res.text(), `(proposed) 3 replacements in 2 files`) || !strings.Contains(res.text(), `edit_id "edit_1"`) ||
			!strings.Contains(res.text(), "-    print(x)\n") || !strings.Contains(res.text(), "+    log(x)\n") {
			t.Fatalf("ast_edit: %s", res.text())
		}
		if after := ctr.sh(t, "cd "+workspace+" && cat pkg/a.py pkg/b.py build/gen.py"); after != before {
			t.Fatalf("ast_edit wrote files:\n%s", after)
		}
		// Not on the plan surface.
		r := a.do("POST", "/v1/runs/"+run+"/tools/resolve", token, `{"args":{"edit_id":"edit_1","action":"accept"},"surface":"plan"}`)
		if r.status != http.StatusForbidden || r.errorCode(t) != "denied" {
			t.Errorf("resolve on plan: %s, want 403 denied", r)
		}
		res = a.call(run, "resolve", "default", `{"edit_id":"edit_1","action":"accept"}`)
		if res.IsError || !strings.Contains(res.text(), "accepted edit_1: wrote 3 replacements in 2 files") {
			t.Fatalf("resolve: %s", res.text())
		}
		if got := ctr.cat(t, workspace+"/pkg/a.py"); got != "def f(x):\n    log(x)\n    log(\"print(x)\")  # print(x)\n" {
			t.Errorf("a.py after resolve: %q", got)
		}
		if got := ctr.cat(t, workspace+"/pkg/b.py"); got != "import os\nlog(os.name)\n" {
			t.Errorf("b.py after resolve: %q", got)
		}
		if got := ctr.cat(t, workspace+"/build/gen.py"); got != "print(1)\n" {
			t.Errorf("build/gen.py (outside the path) changed: %q", got)
		}
		res = a.call(run, "resolve", "default", `{"edit_id":"edit_1","action":"accept"}`)
		if !res.IsError || !strings.Contains(res.text(), "already accepted") {
			t.Errorf("second resolve: %s", res.text())
		}

		// A file changed after staging refuses the whole edit.
		res = a.call(run, "ast_edit", "default", `{"pattern":"log($A)","rewrite":"print($A)","path":"pkg","language":"python"}`)
		if res.IsError || !strings.Contains(res.text(), `edit_id "edit_2"`) {
			t.Fatalf("ast_edit 2: %s", res.text())
		}
		ctr.sh(t, "printf 'import os\nlog(os.sep)\n' > "+workspace+"/pkg/b.py")
		before = ctr.sh(t, "cd "+workspace+" && cat pkg/a.py pkg/b.py")
		res = a.call(run, "resolve", "default", `{"edit_id":"edit_2","action":"accept"}`)
		if !res.IsError || !strings.Contains(res.text(), "pkg/b.py changed after staging") || !strings.Contains(res.text(), "nothing was written") {
			t.Errorf("resolve of a changed file: %s", res.text())
		}
		if after := ctr.sh(t, "cd "+workspace+" && cat pkg/a.py pkg/b.py"); after != before {
			t.Errorf("a refused resolve changed files:\n%s\nwant\n%s", after, before)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct{ tool, args, mention string }{
			{"ast_grep", `{"pattern":"print(","language":"python"}`, "does not parse"},
			{"ast_grep", `{"pattern":"f($A)","language":"cobol"}`, "unknown language"},
			{"ast_grep", `{"pattern":"f($A)","path":"pkg"}`, "language"},
			{"ast_grep", `{"pattern":"f($A)","language":"python","path":"/etc"}`, "outside the workspace"},
			{"resolve", `{"edit_id":"edit_9","action":"accept"}`, "unknown edit_id"},
		} {
			res := a.call(run, tc.tool, "default", tc.args)
			if !res.IsError || !strings.Contains(res.text(), tc.mention) {
				t.Errorf("%s %s: %s, want an error mentioning %q", tc.tool, tc.args, res.text(), tc.mention)
			}
		}
		args, _ := json.Marshal(map[string]any{"pattern": "f($A)", "language": "python", "max_results": 5000})
		if res := a.call(run, "ast_grep", "default", string(args)); !res.IsError {
			t.Errorf("max_results 5000 accepted: %s", res.text())
		}
	})
}
