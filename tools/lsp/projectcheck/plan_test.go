package projectcheck

import (
	"slices"
	"strings"
	"testing"
)

// TestPlan checks which checker Find picks, and its command line, for
// recorded probe outputs; the workspace and the root are /w.
func TestPlan(t *testing.T) {
	const path = "path /usr/local/bin:/usr/bin:/bin\n"
	type want struct {
		lang, checker string
		args          []string // the argv Run starts; nil means not applicable
		env           []string
		base          string
		reason        string // a substring of the Missing reason when args is nil
	}
	for _, tc := range []struct {
		name  string
		probe string
		want  want
	}{
		{
			name:  "go module",
			probe: "marker go.mod\n" + path + "bin /usr/local/go/bin/go\n",
			want:  want{lang: "go", checker: "go vet", args: []string{"/usr/local/go/bin/go", "vet", "-json", "./..."}, base: "/w"},
		},
		{
			name:  "go.work only: the work pattern",
			probe: "marker go.work\n" + path + "bin /usr/local/go/bin/go\n",
			want:  want{lang: "go", checker: "go vet", args: []string{"/usr/local/go/bin/go", "vet", "-json", "work"}, base: "/w"},
		},
		{
			name:  "go.mod without go",
			probe: "marker go.mod\n" + path,
			want:  want{lang: "go", reason: "binary missing: go.mod is in /w, but no go (the Go toolchain) resolves"},
		},
		{
			name:  "a go inside the workspace is never used",
			probe: "marker go.mod\n" + path + "bin /w/bin/go\n",
			want:  want{lang: "go", reason: "binary missing"},
		},
		{
			name:  "no marker",
			probe: path + "bin /usr/local/go/bin/go\n",
			want:  want{lang: "go", reason: "marker missing: none of go.mod, go.work in /w"},
		},
		{
			name:  "cargo member of a cargo workspace",
			probe: "marker Cargo.toml\n" + path + "bin /root/.cargo/bin/cargo\ncargows /w\n",
			want:  want{lang: "rust", checker: "cargo check", args: []string{"/root/.cargo/bin/cargo", "check", "--all-targets", "--message-format=json-diagnostic-short"}, env: []string{"CARGO_TERM_COLOR=never"}, base: "/w"},
		},
		{
			name:  "tsc from node_modules before PATH",
			probe: "marker tsconfig.json\nlocal node_modules/.bin/tsc\n" + path + "bin /usr/bin/tsc\n",
			want:  want{lang: "typescript", checker: "tsc", args: []string{"/w/node_modules/.bin/tsc", "--noEmit", "--pretty", "false"}, base: "/w"},
		},
		{
			name:  "a JavaScript project: tsc reads its jsconfig.json",
			probe: "marker jsconfig.json\n" + path + "bin /usr/bin/tsc\n",
			want:  want{lang: "javascript", checker: "tsc", args: []string{"/usr/bin/tsc", "-p", "jsconfig.json", "--noEmit", "--pretty", "false"}, base: "/w"},
		},
		{
			name:  "package.json alone is no typescript project",
			probe: "marker package.json\n" + path + "bin /usr/bin/tsc\n",
			want:  want{lang: "typescript", reason: "marker missing: none of tsconfig.json in /w"},
		},
		{
			name:  "pyright from the venv, with the venv",
			probe: "marker pyproject.toml\nlocal .venv/bin/pyright\nlocal .venv/bin/mypy\n" + path + "venv /w/.venv/bin/python\npy /w/.venv/bin/python\tmypy\n",
			want: want{lang: "python", checker: "pyright", args: []string{"/w/.venv/bin/pyright", "--outputjson"},
				env: []string{"VIRTUAL_ENV=/w/.venv", "PATH=/w/.venv/bin:/usr/local/bin:/usr/bin:/bin"}, base: "/w"},
		},
		{
			name:  "mypy of a PATH python checks against the venv",
			probe: "marker setup.py\n" + path + "venv /w/.venv/bin/python\npy /w/.venv/bin/python\t\nbin /usr/bin/python3\npy /usr/bin/python3\tmypy pyflakes\nbin /usr/bin/find\n",
			want: want{lang: "python", checker: "mypy", args: append([]string{"/usr/bin/python3", "-m", "mypy", "--python-executable", "/w/.venv/bin/python"}, mypyArgs...),
				env: []string{"VIRTUAL_ENV=/w/.venv", "PATH=/w/.venv/bin:/usr/local/bin:/usr/bin:/bin"}, base: "/w"},
		},
		{
			name:  "pyflakes3 on PATH, run through find",
			probe: "marker requirements.txt\n" + path + "bin /usr/bin/python3\npy /usr/bin/python3\t\nbin /usr/bin/find\nbin /usr/bin/pyflakes3\n",
			want:  want{lang: "python", checker: "pyflakes", args: []string{"/bin/sh", "-c", pyflakesScript, "berth-pyflakes", "/usr/bin/find", "/usr/bin/pyflakes3"}, base: "/w"},
		},
		{
			name:  "pyflakes module of the second python3 on PATH, no find",
			probe: "marker pyproject.toml\n" + path + "bin /root/.pyenv/shims/python3\npy /root/.pyenv/shims/python3\t\nbin /usr/bin/python3\npy /usr/bin/python3\tpyflakes\n",
			want:  want{lang: "python", checker: "pyflakes", args: []string{"/usr/bin/python3", "-m", "pyflakes", "."}, base: "/w"},
		},
		{
			name:  "a python inside the workspace is never used",
			probe: "marker pyproject.toml\n" + path + "py /w/tools/python3\tmypy pyflakes\n",
			want:  want{lang: "python", reason: "binary missing: pyproject.toml is in /w, but no pyright, mypy or pyflakes"},
		},
		{
			name:  "dart",
			probe: "marker pubspec.yaml\n" + path + "bin /opt/flutter/bin/dart\n",
			want:  want{lang: "dart", checker: "dart analyze", args: []string{"/opt/flutter/bin/dart", "analyze", "--format=machine"}, base: "/w"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, miss := plan(parseProbe(tc.probe, "/w", "/w"), "/w", "/w")
			if len(app)+len(miss) != len(table) {
				t.Errorf("%d applicable + %d missing; want one of each per language (%d)", len(app), len(miss), len(table))
			}
			var got *Applicable
			for i := range app {
				if app[i].Language == tc.want.lang {
					got = &app[i]
				}
			}
			var reason string
			for _, m := range miss {
				if m.Language == tc.want.lang {
					reason = m.Reason
				}
			}
			if tc.want.args == nil {
				if got != nil {
					t.Fatalf("%s applies as %v; want missing", tc.want.lang, got.args)
				}
				if !strings.Contains(reason, tc.want.reason) {
					t.Errorf("reason %q; want it to contain %q", reason, tc.want.reason)
				}
				return
			}
			if got == nil {
				t.Fatalf("%s does not apply (%s)", tc.want.lang, reason)
			}
			if got.Checker != tc.want.checker || !slices.Equal(got.args, tc.want.args) || !slices.Equal(got.env, tc.want.env) || got.base != tc.want.base {
				t.Errorf("got %s %q env %q base %s; want %s %q env %q base %s", got.Checker, got.args, got.env, got.base, tc.want.checker, tc.want.args, tc.want.env, tc.want.base)
			}
			if got.Root != "/w" || got.Marker == "" || got.Binary == "" || got.Command == "" || got.parse == nil {
				t.Errorf("incomplete: %+v", got)
			}
		})
	}
}

func TestCheckers(t *testing.T) {
	var langs []string
	for _, c := range Checkers() {
		langs = append(langs, c.Language)
		if len(c.Markers) == 0 || len(c.Commands) == 0 {
			t.Errorf("%s: no markers or commands: %+v", c.Language, c)
		}
	}
	if want := []string{"go", "rust", "typescript", "javascript", "python", "dart"}; !slices.Equal(langs, want) {
		t.Errorf("languages %q; want %q", langs, want)
	}
}
