package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trustTsc is a project-local tsc: it leaves a mark where the test can see
// it and prints one finding in tsc's format.
func trustTsc(mark string) string {
	return "#!/bin/sh\ntouch " + mark + "\necho \"index.ts(1,5): error TS2322: Type 'string' is not assignable to type 'number'.\"\nexit 2\n"
}

// TestProjectCheckRunsProjectToolsInContainer: inside the conversation's
// container the sandbox is the boundary, so the project's own
// node_modules/.bin/tsc is what the project check runs (docs/tools.md DBG-4's
// preference for project-local tools), also from a plan surface — the
// trust rule is "nothing of the workspace runs on the host", not "never
// run anything".
func TestProjectCheckRunsProjectToolsInContainer(t *testing.T) {
	image := needDocker(t)
	ctr := startContainer(t, image)
	const mark = "/tmp/berth-trust-tsc-ran"
	ctr.put(t, "tsconfig.json", "{}\n")
	ctr.put(t, "index.ts", "let x: number = \"s\";\n")
	ctr.put(t, "node_modules/.bin/tsc", trustTsc(mark))
	ctr.sh(t, "chmod +x "+workspace+"/node_modules/.bin/tsc")
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	res := a.call(run, "lsp", "plan", `{"action":"diagnostics","file":"*"}`)
	text := res.text()
	t.Log(text)
	if res.IsError || !strings.Contains(text, "index.ts:1:5: error: Type 'string' is not assignable") || !strings.Contains(text, workspace+"/node_modules/.bin/tsc") {
		t.Errorf("want the project's tsc run and its finding; got %s", text)
	}
	if got := strings.TrimSpace(ctr.cat(t, mark)); got == "<missing>" {
		t.Errorf("the project's tsc did not run in the container")
	}
}

// TestProjectCheckRunsNoWorkspaceProgramOnHostOverAPI is the same project
// in a host run opened through the API, in plan mode: the planted tsc does
// not run, and the result says why and what to do.
func TestProjectCheckRunsNoWorkspaceProgramOnHostOverAPI(t *testing.T) {
	dir, marks := t.TempDir(), t.TempDir()
	mark := filepath.Join(marks, "tsc-ran")
	for name, content := range map[string]string{"tsconfig.json": "{}\n", "index.ts": "let x: number = \"s\";\n", "node_modules/.bin/tsc": trustTsc(mark)} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := newAPI(t)
	r := a.do("POST", "/v1/runs", token, fmt.Sprintf(`{"conversation_id":"trust-host","workspace":%q,"sandbox":"host","mode":"plan"}`, dir))
	if r.status != http.StatusCreated {
		t.Fatalf("open a host run: %s", r)
	}
	var info struct{ ID string }
	if err := json.Unmarshal(r.body, &info); err != nil {
		t.Fatal(err)
	}
	res := a.call(info.ID, "lsp", "plan", `{"action":"diagnostics","file":"*"}`)
	text := res.text()
	t.Log(text)
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the workspace's tsc ran on the host")
	}
	if !res.IsError || !strings.Contains(text, "node_modules/.bin/tsc is the workspace's own program; on the host berth runs only programs from outside the workspace") {
		t.Errorf("want a refusal that explains; got %s", text)
	}
}

// TestReadRefusesHardLinkInContainer: a hard link in the workspace to a
// file elsewhere in the container (/etc/passwd) is refused by read, as the
// editors refuse it, through the agent's file server as well as through
// the direct path; a file with one link still reads.
func TestReadRefusesHardLinkInContainer(t *testing.T) {
	image := needDocker(t)
	ctr := startContainer(t, image)
	ctr.sh(t, "ln /etc/passwd "+workspace+"/pw")
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	res := a.call(run, "read", "plan", `{"path":"pw"}`)
	if !res.IsError || !strings.Contains(res.text(), "hard links") || strings.Contains(res.text(), "root:") {
		t.Errorf("read of a hard link to /etc/passwd: want a refusal naming the hard links, got %s", res.text())
	}
	if res := a.call(run, "read", "plan", `{"path":"hello.txt"}`); res.IsError || !strings.Contains(res.text(), "hello") {
		t.Errorf("read of a plain file: %s", res.text())
	}
}
