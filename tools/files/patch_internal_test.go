package files

import (
	"strings"
	"testing"
)

func TestApplyHunks(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		hunks string // the body of an Update File section
		want  string
		err   string
	}{
		{name: "replace middle", text: "a\nb\nc\n", hunks: " a\n-b\n+B\n c", want: "a\nB\nc\n"},
		{name: "crlf kept", text: "a\r\nb\r\nc\r\n", hunks: " a\n-b\n+B\n+B2\n c", want: "a\r\nB\r\nB2\r\nc\r\n"},
		{name: "no final newline kept", text: "a\nb", hunks: " a\n-b\n+B", want: "a\nB"},
		{name: "delete everything", text: "a\nb\n", hunks: "-a\n-b", want: ""},
		{name: "into an empty file", text: "", hunks: "+x\n+y", want: "x\ny\n"},
		{name: "anchor picks the second match", text: "f1\nx\nf2\nx\n", hunks: "@@ f2\n-x\n+X", want: "f1\nx\nf2\nX\n"},
		{name: "nested anchors", text: "class A\n def m\n  x\nclass B\n def m\n  x\n", hunks: "@@ class B\n@@ def m\n-  x\n+  y", want: "class A\n def m\n  x\nclass B\n def m\n  y\n"},
		{name: "anchor then pure insert", text: "a\nb\n", hunks: "@@ a\n+inserted", want: "a\ninserted\nb\n"},
		{name: "context keeps file text", text: "a  \nb\n", hunks: " a\n-b\n+B", want: "a  \nB\n"},
		{name: "eof prefers the end", text: "x\ny\nx\n", hunks: "-x\n+Z\n*** End of File", want: "x\ny\nZ\n"},
		{name: "blank context line without space", text: "a\n\nb\n", hunks: " a\n\n-b\n+B", want: "a\n\nB\n"},
		{name: "not found", text: "a\n", hunks: "-zzz\n+y", err: "hunk 1 of f (patch line 3) did not apply"},
		{name: "first line matches only", text: "a\nb\n", hunks: " a\n-c\n+d", err: "matches line 1, but the following lines differ"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, err := parsePatch("*** Begin Patch\n*** Update File: f\n" + tt.hunks + "\n*** End Patch")
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			got, err := applyHunks("f", tt.text, ops[0].hunks)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParsePatch(t *testing.T) {
	ops, err := parsePatch("\n*** Begin Patch\r\n*** Add File: n.txt\r\n+one\r\n\r\n+three\r\n\r\n*** Add File: empty\n*** Delete File: d\n*** End Patch\n\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 || ops[0].kind != opAdd || strings.Join(ops[0].add, "|") != "one||three" ||
		ops[1].kind != opAdd || len(ops[1].add) != 0 || ops[2].kind != opDelete || ops[2].path != "d" {
		t.Fatalf("ops = %+v %+v %+v", ops[0], ops[1], ops[2])
	}
	for patch, want := range map[string]string{
		"*** Begin Patch\n*** Update File: f\n*** End Patch":                     "has no hunks",
		"*** Begin Patch\n*** Update File: f\n@@ x\n*** End Patch":               "has no lines",
		"*** Begin Patch\n*** Update File: f\n*** End of File\n*** End Patch":    "must follow the lines",
		"*** Begin Patch\n*** Update File: f\n-a\n*** Move to: g\n*** End Patch": "must come right after",
		"*** Begin Patch\n*** Add File: \n+x\n*** End Patch":                     "path is missing",
		"*** Begin Patch\ngarbage\n*** End Patch":                                "expected *** Add File:",
		"*** Begin Patch\n*** End Patch\n*** Add File: x\n+x\n*** End Patch":     "patch line 2: \"*** End Patch\" comes before the end",
	} {
		if _, err := parsePatch(patch); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse %q: err = %v, want %q", patch, err, want)
		}
	}
}
