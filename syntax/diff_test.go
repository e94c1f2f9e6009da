package syntax

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// cliLang maps berth language ids to ast-grep's.
var cliLang = map[string]string{"c_sharp": "csharp"}

type span struct{ start, end int }

// runCLI returns the match spans the real ast-grep CLI reports for pattern
// over src.
func runCLI(t *testing.T, cli string, lang *Language, pattern string, src []byte) ([]span, string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "case"+lang.Extensions[0])
	if err := os.WriteFile(file, src, 0o644); err != nil {
		t.Fatal(err)
	}
	id := lang.ID
	if v, ok := cliLang[id]; ok {
		id = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, "run", "--pattern", pattern, "--lang", id, "--json=stream", file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || (ee.ExitCode() != 1 && ee.ExitCode() != 0) {
			return nil, fmt.Sprintf("cli error %v: %s", err, stderr.String())
		}
	}
	var out []span
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var m struct {
			Range struct {
				ByteOffset struct{ Start, End int } `json:"byteOffset"`
			} `json:"range"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("cli output: %v: %s", err, sc.Text())
		}
		out = append(out, span{m.Range.ByteOffset.Start, m.Range.ByteOffset.End})
	}
	return out, strings.TrimSpace(stderr.String())
}

func spanSet(s []span) string {
	sort.Slice(s, func(i, j int) bool {
		if s[i].start != s[j].start {
			return s[i].start < s[j].start
		}
		return s[i].end < s[j].end
	})
	var b strings.Builder
	for _, x := range s {
		fmt.Fprintf(&b, "[%d,%d) ", x.start, x.end)
	}
	return b.String()
}

// TestDifferentialAstGrep compares every corpus case's match set with the real
// ast-grep CLI (BERTH_AST_GREP or /tmp/sgcli/node_modules/.bin/ast-grep).
// Cases with a "differs:" header are deliberate differences (the context
// ladder) and must still differ.
func TestDifferentialAstGrep(t *testing.T) {
	cli := astGrepCLI()
	if cli == "" {
		msg := "ast-grep CLI not found; set BERTH_AST_GREP or run `cd /tmp/sgcli && npm install @ast-grep/cli` (tests/run installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, f := range corpusFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txtar"), func(t *testing.T) {
			c := readCase(t, f)
			lang := corpusLang(t, c.header["lang"])
			src := []byte(c.sections["src"])
			ms, err := Search(context.Background(), lang, c.pattern(), src)
			if err != nil {
				t.Fatal(err)
			}
			var ours []span
			for _, m := range ms {
				ours = append(ours, span{m.StartByte, m.EndByte})
			}
			theirs, stderr := runCLI(t, cli, lang, c.pattern(), src)
			o, th := spanSet(ours), spanSet(theirs)
			why := c.header["differs"]
			switch {
			case why == "" && o != th:
				t.Errorf("match sets differ from ast-grep\n berth:    %s\n ast-grep: %s\n stderr: %s", o, th, stderr)
			case why != "" && o == th:
				t.Errorf("documented difference (%s) no longer differs: both give %s", why, o)
			case why != "":
				t.Logf("deliberate difference (%s): berth %s, ast-grep %s", why, o, th)
			}
		})
	}
}
