package lsp

import (
	"context"
	"reflect"
	"strings"
	"testing"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
)

// TestJournalSurvivesRestore: the journals a Snapshot holds come back by
// Restore in a new supervisor (a restarted berth) exactly, are kept
// through the server's first baseline, and the first result after the
// restore says berth restarted — once.
func TestJournalSurvivesRestore(t *testing.T) {
	newSup := func() *Supervisor {
		sb := host.New(host.Options{})
		t.Cleanup(func() { sb.Close() })
		ws, err := sb.FS(t.Context(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		s := New(sb, ws, t.Context(), Options{})
		t.Cleanup(func() { s.Close() })
		return s
	}
	k := key{id: "gopls", root: "."}
	j := snapshot([]lspc.DiagnosticSet{
		dset("file:///w/a.go", diag(1, errSev, `"undeclared"`, "undefined: x"), diag(2, errSev, `"undeclared"`, "undefined: x")),
		dset("file:///w/b.go", diag(4, warnSev, "", "unused variable y")),
	}, nil)
	old := newSup()
	old.journal[k] = j
	old.gen++
	data, err := old.Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	s := newSup()
	g0 := s.Generation()
	if err := s.Restore(data); err != nil {
		t.Fatal(err)
	}
	if s.Generation() == g0 {
		t.Error("Restore did not change the generation")
	}
	if got := s.journal[k]; !reflect.DeepEqual(got, j) {
		t.Fatalf("restored journal %+v; want %+v", got, j)
	}
	if !s.kept[k] {
		t.Fatal("the restored journal is not kept through the server's first baseline")
	}
	if again, _ := s.Snapshot(); string(again) != string(data) {
		t.Fatalf("a snapshot of the restored supervisor differs:\n%s\n%s", again, data)
	}

	h := noted(s, func(context.Context, struct{}) (*tools.Result, error) { return tools.Text("answer"), nil })
	first, _ := h(t.Context(), struct{}{})
	second, _ := h(t.Context(), struct{}{})
	if !strings.Contains(first.Content[0].Text, "berth restarted") || len(second.Content) != 1 {
		t.Fatalf("first result %q, second %q; want the restart note once", first.Content, second.Content)
	}

	if err := newSup().Restore([]byte("{garbage")); err == nil || !strings.Contains(err.Error(), "fresh baseline") {
		t.Fatalf("restoring garbage: %v; want an error saying the baseline starts afresh", err)
	}
}
