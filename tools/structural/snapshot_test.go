package structural_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/structural"
)

// restart snapshots ev's Engine and restores it into a new Engine bound to
// the same workspace, as a restarted berth does.
func (ev *env) restart(t *testing.T) *env {
	t.Helper()
	data, err := ev.e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return restoreInto(t, ev, data)
}

func restoreInto(t *testing.T, ev *env, data []byte) *env {
	t.Helper()
	e := structural.NewEngine(structural.Options{})
	if err := e.Restore(data); err != nil {
		t.Fatal(err)
	}
	r := tools.NewRegistry()
	structural.Register(r, ev.fs, e)
	return &env{dir: ev.dir, fs: ev.fs, e: e, r: r}
}

func stage(t *testing.T, ev *env, args map[string]any, id string) {
	t.Helper()
	wantOK(t, ev.call(t, "ast_edit", args), `edit_id "`+id+`"`)
}

var printToLog = map[string]any{"pattern": "print($$$A)", "rewrite": "logging.info($$$A)", "language": "python"}

// TestSnapshotRestore: a staged edit survives a restart: accept writes the
// same content, drift is refused as before, edits accepted before the
// restart are carried over, resolved ids stay resolved, and ids go on
// without reuse.
func TestSnapshotRestore(t *testing.T) {
	wantB := strings.Replace(editB, `print(s, end="")`, `logging.info(s, end="")`, 1)
	tests := []struct {
		name   string
		before func(t *testing.T, ev *env)    // staging, before the restart
		down   func(t *testing.T, dir string) // while berth is down
		after  func(t *testing.T, ev *env)
	}{
		{
			name:   "accept writes the staged edit",
			before: func(t *testing.T, ev *env) { stage(t, ev, printToLog, "edit_1") },
			after: func(t *testing.T, ev *env) {
				if p := ev.e.Pending(); !reflect.DeepEqual(p, []string{"edit_1"}) {
					t.Fatalf("pending after restore: %v", p)
				}
				wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "accepted edit_1: wrote 4 replacements in 2 files", "a.py (3)", "pkg/b.py (1)")
				if got := ev.read(t, "a.py"); got != wantA {
					t.Errorf("a.py:\n%s\nwant\n%s", got, wantA)
				}
				if got := ev.read(t, "pkg/b.py"); got != wantB {
					t.Errorf("pkg/b.py:\n%s", got)
				}
				wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "already accepted")
			},
		},
		{
			name:   "a file changed while berth was down is refused",
			before: func(t *testing.T, ev *env) { stage(t, ev, printToLog, "edit_1") },
			down:   func(t *testing.T, dir string) { write(t, dir, "pkg/b.py", strings.Replace(editB, "g()", "h()", 1)) },
			after: func(t *testing.T, ev *env) {
				before := snapshot(t, ev.dir)
				wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "pkg/b.py changed after staging", "nothing was written")
				if after := snapshot(t, ev.dir); !reflect.DeepEqual(before, after) {
					t.Error("a refused accept wrote files")
				}
			},
		},
		{
			name: "ids go on above the snapshot's, and a skipped id says why",
			before: func(t *testing.T, ev *env) {
				stage(t, ev, printToLog, "edit_1")
				wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "discard"}))
			},
			after: func(t *testing.T, ev *env) {
				wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "already discarded")
				wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_2", "action": "accept"}), "berth restarted", "stage it again")
				stage(t, ev, printToLog, "edit_102") // 1 + RestoreIDSkip + 1
				wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_103", "action": "accept"}), `unknown edit_id "edit_103"; pending edits: edit_102`)
			},
		},
		{
			name: "an edit staged before an accept is carried over it",
			before: func(t *testing.T, ev *env) {
				write(t, ev.dir, "m.py", "a = 1\nb = 2\n")
				stage(t, ev, map[string]any{"pattern": "a = 1", "rewrite": "a = 10", "path": "m.py"}, "edit_1")
				stage(t, ev, map[string]any{"pattern": "b = 2", "rewrite": "b = 20", "path": "m.py"}, "edit_2")
				wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}))
			},
			after: func(t *testing.T, ev *env) {
				wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_2", "action": "accept"}), "carried over edit_1")
				if got := ev.read(t, "m.py"); got != "a = 10\nb = 20\n" {
					t.Errorf("m.py = %q", got)
				}
			},
		},
		{
			name: "an overlapping edit is refused with the diff it would stage now",
			before: func(t *testing.T, ev *env) {
				write(t, ev.dir, "m.py", "a = 1\n")
				stage(t, ev, map[string]any{"pattern": "a = 1", "rewrite": "a = 10", "path": "m.py"}, "edit_1")
				stage(t, ev, map[string]any{"pattern": "a = $X", "rewrite": "a = $X + 1", "path": "m.py"}, "edit_2")
				wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}))
			},
			after: func(t *testing.T, ev *env) {
				wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_2", "action": "accept"}), "changed by edit_1", "+a = 10 + 1")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := newEnv(t, editFiles(), structural.Options{})
			tt.before(t, ev)
			data, err := ev.e.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if tt.down != nil {
				tt.down(t, ev.dir)
			}
			tt.after(t, restoreInto(t, ev, data))
		})
	}
}

// TestSnapshotRestoreTwice: a restored engine's snapshot restores again.
func TestSnapshotRestoreTwice(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	stage(t, ev, printToLog, "edit_1")
	ev = ev.restart(t)
	stage(t, ev, map[string]any{"pattern": "print($A)", "rewrite": "println($A)", "path": "d.go"}, "edit_102")
	ev = ev.restart(t)
	if p := ev.e.Pending(); !reflect.DeepEqual(p, []string{"edit_1", "edit_102"}) {
		t.Fatalf("pending %v", p)
	}
	wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_102", "action": "accept"}))
	wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}))
	if got := ev.read(t, "d.go"); got != "package d\n\nfunc d() { println(1) }\n" {
		t.Errorf("d.go = %q", got)
	}
	stage(t, ev, map[string]any{"pattern": "println($A)", "rewrite": "print($A)", "path": "d.go"}, "edit_203")
}

// snapFS takes a snapshot of e when resolve writes its first file.
type snapFS struct {
	sandbox.FS
	e    *structural.Engine
	data []byte
}

func (f *snapFS) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	if f.data == nil {
		var err error
		if f.data, err = f.e.Snapshot(); err != nil {
			return err
		}
	}
	return f.FS.WriteFile(ctx, name, data, perm)
}

// TestSnapshotDuringAccept: an edit being accepted when the snapshot is
// taken is restored as pending, and accepting it again after the restart
// never writes twice: the files it wrote differ from what it staged, so it
// is refused.
func TestSnapshotDuringAccept(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	stage(t, ev, printToLog, "edit_1")
	sfs := &snapFS{FS: ev.fs, e: ev.e}
	if _, err := ev.e.Resolve(context.Background(), sfs, "edit_1", structural.ActionAccept); err != nil {
		t.Fatal(err)
	}
	if sfs.data == nil {
		t.Fatal("no snapshot was taken during the accept")
	}
	written := snapshot(t, ev.dir)
	ev = restoreInto(t, ev, sfs.data)
	if p := ev.e.Pending(); !reflect.DeepEqual(p, []string{"edit_1"}) {
		t.Fatalf("pending after restore: %v", p)
	}
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "a.py changed after staging: it already holds what this edit writes", "nothing was written")
	if after := snapshot(t, ev.dir); !reflect.DeepEqual(written, after) {
		t.Error("the second accept wrote files")
	}
}

// TestSnapshotBounded: staged edits over MaxSnapshotBytes are left out,
// oldest first, and resolve says they were dropped.
func TestSnapshotBounded(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	stage(t, ev, printToLog, "edit_1")
	stage(t, ev, map[string]any{"pattern": "print($A)", "rewrite": "println($A)", "path": "d.go"}, "edit_2")
	one, err := ev.e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer structural.SetSnapshotBytes(len(one) / 2)()
	ev = ev.restart(t)
	if p := ev.e.Pending(); !reflect.DeepEqual(p, []string{"edit_2"}) {
		t.Fatalf("pending %v, want only the newest edit", p)
	}
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "dropped when berth restarted", "stage it again")
	wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_2", "action": "accept"}))
}

// pending0 returns the first staged edit of a state.
func pending0(st map[string]any) map[string]any {
	return st["pending"].([]any)[0].(map[string]any)
}

func file0(st map[string]any) map[string]any {
	return pending0(st)["files"].([]any)[0].(map[string]any)
}

// TestRestoreRefusesBadData: garbage, a cut or damaged snapshot, a foreign
// format, a state whose contents do not match their hashes, or an engine
// in use are refused with an error, and the Engine is left empty and
// usable.
func TestRestoreRefusesBadData(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	stage(t, ev, printToLog, "edit_1")
	good, err := ev.e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var probe map[string]json.RawMessage
	json.Unmarshal(good, &probe)
	reseal := func(change func(st map[string]any)) []byte {
		var st map[string]any
		if err := json.Unmarshal(probe["state"], &st); err != nil {
			t.Fatal(err)
		}
		change(st)
		b, _ := json.Marshal(st)
		sum := sha256.Sum256(b)
		out, _ := json.Marshal(map[string]any{"format": "berth.structural.v1", "sha256": hex.EncodeToString(sum[:]), "state": json.RawMessage(b)})
		return out
	}
	i := bytes.Index(good, []byte(`"old":"`)) + len(`"old":"`)
	damaged := append([]byte(nil), good...)
	damaged[i] ^= 1
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not readable"},
		{"garbage", []byte("PK\x03\x04garbage"), "not readable"},
		{"cut", good[:len(good)-len(good)/3], "not readable"},
		{"damaged", damaged, "damaged"},
		{"other format", bytes.Replace(good, []byte("berth.structural.v1"), []byte("berth.structural.v0"), 1), "format"},
		{"content does not match its hash", reseal(func(st map[string]any) {
			file0(st)["old"] = base64.StdEncoding.EncodeToString([]byte("print(1)\n"))
		}), "does not match its hash"},
		{"edits out of range", reseal(func(st map[string]any) {
			file0(st)["edits"] = []any{map[string]any{"StartByte": 5, "EndByte": 1 << 20, "Text": "x"}}
		}), "out of range"},
		{"edits do not give the staged content", reseal(func(st map[string]any) {
			file0(st)["edits"] = []any{}
		}), "do not give the content staged"},
		{"path outside the workspace", reseal(func(st map[string]any) { file0(st)["path"] = "../etc/passwd" }), "not a workspace path"},
		{"id above the counter", reseal(func(st map[string]any) { pending0(st)["id"] = "edit_9" }), "out of range"},
		{"negative counter", reseal(func(st map[string]any) { st["next_id"] = -1 }), "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := structural.NewEngine(structural.Options{})
			err := e.Restore(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore = %v, want an error saying %q", err, tt.want)
			}
			if e.Generation() != 0 || len(e.Pending()) != 0 {
				t.Fatalf("a refused restore left generation %d, pending %v", e.Generation(), e.Pending())
			}
			p, err := e.Stage(context.Background(), ev.fs, structural.EditRequest{Pattern: "nothing()", Rewrite: "x()", Path: "pkg/c.py"})
			if err != nil || p.ID != "edit_1" {
				t.Fatalf("stage after a refused restore: %v %+v", err, p)
			}
		})
	}
	t.Run("engine in use", func(t *testing.T) {
		if err := ev.e.Restore(good); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("Restore on a used engine = %v", err)
		}
	})
}

// TestGeneration: Generation changes exactly when the snapshot does.
func TestGeneration(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	call := func(tool string, args map[string]any) func() {
		return func() { ev.call(t, tool, args) }
	}
	steps := []struct {
		name   string
		do     func()
		change bool
	}{
		{"search", call("ast_grep", map[string]any{"pattern": "print($A)", "language": "python"}), false},
		{"stage nothing", call("ast_edit", map[string]any{"pattern": "nomatch()", "rewrite": "x()", "language": "python"}), false},
		{"stage", call("ast_edit", printToLog), true},
		{"resolve an unknown id", call("resolve", map[string]any{"edit_id": "edit_9", "action": "accept"}), false},
		{"bad action", call("resolve", map[string]any{"edit_id": "edit_1", "action": "keep"}), false},
		{"read", func() { ev.e.Pending(); ev.e.Stats() }, false},
		{"stage again", call("ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "println($A)", "path": "d.go"}), true},
		{"discard", call("resolve", map[string]any{"edit_id": "edit_2", "action": "discard"}), true},
		{"change a file", func() { write(t, ev.dir, "pkg/b.py", editB+"# more\n") }, false},
		{"refused accept", call("resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), true},
		{"stage and accept", func() {
			ev.call(t, "ast_edit", map[string]any{"pattern": "nothing()", "rewrite": "x()", "path": "pkg/c.py"})
			ev.call(t, "resolve", map[string]any{"edit_id": "edit_3", "action": "accept"})
		}, true},
	}
	snap := func() []byte {
		b, err := ev.e.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, st := range steps {
		g, b := ev.e.Generation(), snap()
		st.do()
		g2, b2 := ev.e.Generation(), snap()
		if (g2 != g) != st.change || bytes.Equal(b, b2) == st.change {
			t.Errorf("%s: generation %d → %d, snapshot changed %v; want changed %v", st.name, g, g2, !bytes.Equal(b, b2), st.change)
		}
	}
	if e := structural.NewEngine(structural.Options{}); e.Restore(snap()) != nil || e.Generation() == 0 {
		t.Error("a restore does not count as a change")
	}
}
