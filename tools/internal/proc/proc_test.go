package proc

import (
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
