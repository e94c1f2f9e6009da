package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPickBinary(t *testing.T) {
	found := []string{"/usr/bin/lldb-vscode-14", "/usr/bin/lldb-vscode-9", "/opt/clangd-16.0.1", "/usr/bin/clangd-16", "/a/gopls", "/b/gopls"}
	tests := []struct {
		names []string
		want  string
	}{
		{[]string{"gopls"}, "/a/gopls"},
		{[]string{"lldb-dap", "lldb-vscode-*"}, "/usr/bin/lldb-vscode-14"},
		{[]string{"clangd", "clangd-*"}, "/opt/clangd-16.0.1"},
		{[]string{"rust-analyzer"}, ""},
	}
	for _, tt := range tests {
		if got := PickBinary(found, tt.names); got != tt.want {
			t.Errorf("PickBinary(%v) = %q, want %q", tt.names, got, tt.want)
		}
	}
}

func TestTail(t *testing.T) {
	tb := NewTail(5)
	tb.Write([]byte("hello "))
	tb.Write([]byte("world"))
	if got := tb.String(); got != "world" {
		t.Errorf("tail = %q", got)
	}
	if got := Clip("  "+strings.Repeat("a", 10)+"bc  ", 3); got != "…abc" {
		t.Errorf("clip = %q", got)
	}
}

func TestHostProgram(t *testing.T) {
	ws, out := t.TempDir(), t.TempDir()
	mk := func(p string) string {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(target, p string) string {
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := mk(filepath.Join(ws, ".venv/bin/python"))
	system := mk(filepath.Join(out, "python3.11"))
	toSystem := link(system, filepath.Join(ws, ".venv/bin/python3"))
	intoWs := link(own, filepath.Join(out, "python3"))
	wsLink := link(ws, filepath.Join(t.TempDir(), "ws"))
	for _, tc := range []struct {
		ws, p, real string
		inside      bool
	}{
		{ws, own, own, true},
		{ws, toSystem, system, false},
		{ws, intoWs, own, true},
		{wsLink, filepath.Join(wsLink, ".venv/bin/python3"), system, false},
		{wsLink, intoWs, own, true},
		{ws, filepath.Join(ws, "missing"), "", true},
		{ws, filepath.Join(out, "missing"), "", false},
	} {
		real, inside := HostProgram(tc.ws, tc.p)
		if r, _ := filepath.EvalSymlinks(tc.real); tc.real != "" && real != r {
			t.Errorf("HostProgram(%s, %s) resolves to %q; want %q", tc.ws, tc.p, real, r)
		}
		if inside != tc.inside {
			t.Errorf("HostProgram(%s, %s) inside = %v; want %v", tc.ws, tc.p, inside, tc.inside)
		}
	}
}
