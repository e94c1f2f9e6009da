package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

func TestName(t *testing.T) {
	tests := []struct {
		root, p, want string
		bad           string // substring of the error
	}{
		{"/ws", "a/b.go", "a/b.go", ""},
		{"/ws", "./a//b.go", "a/b.go", ""},
		{"/ws", "/ws", ".", ""},
		{"/ws", "/ws/a", "a", ""},
		{"/ws/", "/ws/a/../b", "b", ""},
		{"/", "/etc/x", "etc/x", ""},
		{"/ws", "a/../../x", "", "outside the workspace /ws"},
		{"/ws", "..", "", "outside"},
		{"/ws", "/ws2/a", "", "outside"}, // a sibling sharing the prefix
		{"/ws", "/etc/passwd", "", "outside"},
		{"/ws", "~/x", "", "outside"},
		{"/ws", "", "", "empty"},
		{"/ws", "a\x00b", "", "NUL"},
		{"/ws", "a\xffb", "", "UTF-8"},
	}
	for _, tc := range tests {
		got, err := Name(tc.root, tc.p)
		if tc.bad != "" {
			var we *tools.Error
			if !errors.As(err, &we) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("Name(%q, %q) = %q, %v; want a *tools.Error with %q", tc.root, tc.p, got, err, tc.bad)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Name(%q, %q) = %q, %v; want %q", tc.root, tc.p, got, err, tc.want)
		}
	}
}

func TestExplain(t *testing.T) {
	pe := func(err error) error { return &fs.PathError{Op: "open", Path: "x", Err: err} }
	tests := []struct {
		err  error
		want string
	}{
		{pe(fs.ErrNotExist), "does not exist: list its parent directory"},
		{pe(sandbox.ErrEscape), "leads outside the workspace /ws"},
		{pe(fs.ErrPermission), "permission denied"},
		{pe(sandbox.ErrTooLarge), "too large for this tool"},
		{fmt.Errorf("exec: %w", sandbox.ErrGone), "the sandbox is gone"},
		// Paused: an unavailable sandbox's error wraps ErrGone too, and is
		// not called gone (issue 33, finding 1).
		{fmt.Errorf("exec: container paused: %w: %w", sandbox.ErrUnavailable, sandbox.ErrGone), "its files are kept, so retry"},
	}
	for _, tc := range tests {
		err := Explain("/ws", "a/x", tc.err)
		var we *tools.Error
		if !errors.As(err, &we) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Explain(%v) = %v; want %q", tc.err, err, tc.want)
		}
	}
	if Explain("/ws", "x", nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
	if err := Explain("/ws", "x", context.Canceled); err != context.Canceled {
		t.Errorf("a context error changed: %v", err)
	}
}
