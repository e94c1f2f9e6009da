package eval

import (
	"strings"
	"testing"
)

func TestRewritePython(t *testing.T) {
	tests := []struct {
		name, in, want, err string
	}{
		{"plain", "x = 1\nx", "x = 1\nx", ""},
		{"pip", "%pip install ./pkg", `__berth_pip("install ./pkg")`, ""},
		{"cd", "%cd /tmp", `__berth_cd("/tmp")`, ""},
		{"bang", "!echo hi", `__berth_sh("echo hi")`, ""},
		{"bang indented", "if True:\n    !ls -l", "if True:\n    __berth_sh(\"ls -l\")", ""},
		{"capture", "files = !ls", `files = __berth_sh("ls", capture=True)`, ""},
		{"capture tuple", "a, b = !echo x", `a, b = __berth_sh("echo x", capture=True)`, ""},
		{"not capture", "x == !y", "x == !y", ""},
		{"comparison", "if a != b: pass", "if a != b: pass", ""},
		{"quotes", `!echo "a b" 'c'`, `__berth_sh("echo \"a b\" 'c'")`, ""},
		{"bash cell", "%%bash\necho $HOME\nls", `__berth_bash("echo $HOME\nls")`, ""},
		{"bash cell leading blank", "\n%%bash\necho x", `__berth_bash("echo x")`, ""},
		{"timeit cell", "%%timeit -n 10 import math\nmath.sqrt(2)", `__berth_timeit("math.sqrt(2)", setup="import math", number=10)`, ""},
		{"timeit line", "%timeit -r 3 sum(range(10))", `__berth_timeit("sum(range(10))", repeat=3)`, ""},
		{"timeit line spacing", "%timeit  x  +  1", `__berth_timeit("x  +  1")`, ""},
		{"in triple string", "s = '''\n!not a command\n%pip no\n'''\n!echo yes", "s = '''\n!not a command\n%pip no\n'''\n__berth_sh(\"echo yes\")", ""},
		{"in double triple", "s = \"\"\"a\n!x\"\"\"", "s = \"\"\"a\n!x\"\"\"", ""},
		{"string with hash", "s = '#'\n!echo ok", "s = '#'\n__berth_sh(\"echo ok\")", ""},
		{"comment quote", "# it's\n!echo ok", "# it's\n__berth_sh(\"echo ok\")", ""},
		{"unknown line magic", "%matplotlib inline", "", "unknown line magic %matplotlib"},
		{"unknown cell magic", "%%foo\nx", "", "unknown cell magic %%foo"},
		{"modulo is not magic", "x = 5 % 3", "x = 5 % 3", ""},
		{"pwd", "%pwd", "__berth_cd(None)", ""},
		{"unicode", "!echo ø", `__berth_sh("echo ø")`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rewritePython(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestRewriteJavaScript(t *testing.T) {
	tests := []struct{ in, want string }{
		{"let x = 1", "let x = 1"},
		{"!ls -l", `__berth_sh("ls -l");`},
		{"  !echo hi", `  __berth_sh("echo hi");`},
		{"if (a !== b) {}", "if (a !== b) {}"},
		{"const s = `\n!not\n`", "const s = `\n!not\n`"},
		{"/*\n!not\n*/\n!yes", "/*\n!not\n*/\n__berth_sh(\"yes\");"},
		{"x = '`'\n!yes", "x = '`'\n__berth_sh(\"yes\");"},
	}
	for _, tt := range tests {
		if got := rewriteJavaScript(tt.in); got != tt.want {
			t.Errorf("rewriteJavaScript(%q) =\n%s\nwant\n%s", tt.in, got, tt.want)
		}
	}
}
