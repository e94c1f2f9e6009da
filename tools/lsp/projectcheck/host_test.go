package projectcheck

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"berth.dev/berth/tools"
)

// TestGoToolchainLineOnHost: a go.mod toolchain line asks for a go that
// does not exist; on the host go vet runs with GOTOOLCHAIN=local (berth's
// own environment says auto here), so it neither fetches nor runs another
// toolchain and checks with the local one.
func TestGoToolchainLineOnHost(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		unavailable(t, "no go on PATH: install Go to run this test")
	}
	t.Setenv("GOTOOLCHAIN", "auto")
	dir := project(t, map[string]string{
		"go.mod":  "module example.com/pinned\n\ngo 1.22\n\ntoolchain go1.99.9\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Printf(\"%d\\n\", \"x\") }\n",
	})
	sb := hostSandbox(t, "")
	ctx := ctxFor(t)
	app, miss, err := Find(ctx, sb, dir, dir, onHost)
	if err != nil {
		t.Fatal(err)
	}
	a := applicable(t, app, miss, "go")
	if !strings.Contains(a.CommandLine(), " GOTOOLCHAIN=local ") {
		t.Errorf("command line %q; want GOTOOLCHAIN=local", a.CommandLine())
	}
	res, err := Run(ctx, sb, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %v, %d diagnostics, unparsed %q", res.Command, res.Status, res.Total, res.Unparsed)
	if strings.Contains(res.Unparsed, "go1.99.9") || strings.Contains(res.Unparsed, "toolchain") {
		t.Errorf("go tried another toolchain: %s", res.Unparsed)
	}
	if !has(res.Diagnostics, dir+"/main.go", 5, SeverityWarning, "fmt.Printf format %d has arg") {
		t.Errorf("no vet finding from the local toolchain: %+v", res.Diagnostics)
	}
}

// TestHostRefusesUnapprovedCheck: a check that executes project code
// (here cargo check, whose program need not exist: the refusal comes
// before anything starts) is refused outside any permission gate, with
// the command and the reason.
func TestHostRefusesUnapprovedCheck(t *testing.T) {
	app, _ := plan(hostProbe("marker Cargo.toml\npath /usr/bin\nbin /nonexistent/cargo\n", "/w"), "/w", "/w")
	if len(app) != 1 || app[0].ExecWhy == "" {
		t.Fatalf("applicable %+v; want cargo check needing approval", app)
	}
	_, err := Run(ctxFor(t), hostSandbox(t, ""), app[0])
	if !errors.Is(err, tools.ErrStepRefused) || !strings.Contains(err.Error(), "cd /w && CARGO_TERM_COLOR=never /nonexistent/cargo check --all-targets") || !strings.Contains(err.Error(), "build scripts") {
		t.Errorf("Run: %v; want a refusal naming the command line and why", err)
	}
}

// hostProbe parses a recorded probe as the host sees it. Its programs are
// not resolved (they need not exist): trustHost is tested with real files
// elsewhere.
func hostProbe(out, ws string) *probe {
	pr := parseProbe(out, ws, ws)
	pr.host = true
	return pr
}

// TestPlanOnHost: what Find picks on the host for recorded probes.
func TestPlanOnHost(t *testing.T) {
	const path = "path /usr/local/bin:/usr/bin:/bin\n"
	for _, tc := range []struct {
		name, probe, lang string
		args              []string // nil: missing
		execWhy           bool
		want              string // in the reason or Skipped
	}{
		{"tsc from node_modules is skipped for PATH's", "marker tsconfig.json\nlocal node_modules/.bin/tsc\n" + path + "bin /usr/bin/tsc\n", "typescript",
			[]string{"/usr/bin/tsc", "--noEmit", "--pretty", "false"}, false, "node_modules/.bin/tsc is the workspace's own program"},
		{"only node_modules tsc", "marker tsconfig.json\nlocal node_modules/.bin/tsc\n" + path, "typescript",
			nil, false, "node_modules/.bin/tsc is the workspace's own program; on the host berth runs only programs from outside the workspace: install typescript globally (npm install -g typescript) or use a container"},
		{"mypy without plugins", "marker mypy.ini\n" + path + "bin /usr/bin/mypy\n", "python",
			append([]string{"/usr/bin/mypy"}, mypyArgs...), false, ""},
		{"mypy with plugins", "marker pyproject.toml\nmypyplugins pyproject.toml\n" + path + "bin /usr/bin/mypy\n", "python",
			append([]string{"/usr/bin/mypy"}, mypyArgs...), true, ""},
		{"dart with plugins", "marker pubspec.yaml\ndartplugins\n" + path + "bin /opt/dart/bin/dart\n", "dart",
			[]string{"/opt/dart/bin/dart", "analyze", "--format=machine"}, true, ""},
		{"go vet", "marker go.mod\n" + path + "bin /usr/local/go/bin/go\n", "go",
			[]string{"/usr/local/go/bin/go", "vet", "-json", "./..."}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, miss := plan(hostProbe(tc.probe, "/w"), "/w", "/w")
			var got *Applicable
			for i := range app {
				if app[i].Language == tc.lang {
					got = &app[i]
				}
			}
			if tc.args == nil {
				if got != nil {
					t.Fatalf("applies as %q; want missing", got.args)
				}
				for _, m := range miss {
					if m.Language == tc.lang && !strings.Contains(m.Reason, tc.want) {
						t.Errorf("reason %q; want %q", m.Reason, tc.want)
					}
				}
				return
			}
			if got == nil {
				t.Fatalf("%s missing: %+v", tc.lang, miss)
			}
			if strings.Join(got.args, " ") != strings.Join(tc.args, " ") || (got.ExecWhy != "") != tc.execWhy {
				t.Errorf("args %q exec %q; want %q exec %v", got.args, got.ExecWhy, tc.args, tc.execWhy)
			}
			if tc.want != "" && !strings.Contains(strings.Join(got.Skipped, "; "), tc.want) {
				t.Errorf("skipped %q; want %q", got.Skipped, tc.want)
			}
			if tc.lang == "go" && !strings.Contains(got.CommandLine(), "GOTOOLCHAIN=local") {
				t.Errorf("go without GOTOOLCHAIN=local: %s", got.CommandLine())
			}
		})
	}
}

// TestProbeFindsPlugins runs the probe on the host against configuration
// files that name mypy and dart analyzer plugins, and one that does not.
func TestProbeFindsPlugins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		mypy  string
		dart  bool
	}{
		{"mypy.ini", map[string]string{"mypy.ini": "[mypy]\nstrict = True\nplugins = evil.plugin\n"}, "mypy.ini", false},
		{"pyproject", map[string]string{"pyproject.toml": "[project]\nname = \"x\"\n\n[tool.mypy]\nplugins = [\"pydantic.mypy\"]\n"}, "pyproject.toml", false},
		{"setup.cfg other section", map[string]string{"setup.cfg": "[flake8]\nplugins = x\n[mypy]\nstrict = True\n"}, "", false},
		{"dart", map[string]string{"pubspec.yaml": "name: x\n", "analysis_options.yaml": "analyzer:\n  plugins:\n    - custom_lint\n"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := project(t, tc.files)
			pr, err := runProbe(ctxFor(t), hostSandbox(t, ""), dir, dir, true)
			if err != nil {
				t.Fatal(err)
			}
			if pr.mypyPlugins != tc.mypy || pr.dartPlugins != tc.dart {
				t.Errorf("mypy plugins %q, dart plugins %v; want %q, %v", pr.mypyPlugins, pr.dartPlugins, tc.mypy, tc.dart)
			}
		})
	}
}
