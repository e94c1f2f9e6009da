package runstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// garbleRecord changes one byte of every copy of run id's stored record
// in the database file itself, in place, as a disk's damage does: the
// file's pages stay whole, the record's bytes do not.
func garbleRecord(t *testing.T, dir, id string) []byte {
	t.Helper()
	raw := rawRecord(t, dir, id)
	path := filepath.Join(dir, DBFile)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(raw, []byte(`"workspace":"`)) + len(`"workspace":"`)
	garbled := bytes.Clone(raw)
	garbled[at] ^= 0x20
	n := 0
	for i := 0; ; {
		j := bytes.Index(file[i:], raw)
		if j < 0 {
			break
		}
		overwrite(t, path, int64(i+j+at), garbled[at:at+1])
		i += j + len(raw)
		n++
	}
	if n == 0 {
		t.Fatalf("run %s's record is not in %s as it is stored", id, path)
	}
	return garbled
}

// unreadable returns List's Unreadable for run id, failing when List
// returns its record or does not report it.
func unreadable(t *testing.T, d *Dir, id string) Unreadable {
	t.Helper()
	list, bad, err := d.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.ID == id {
			t.Fatalf("List returned run %s's damaged record", id)
		}
	}
	for _, u := range bad {
		if u.ID == id {
			return u
		}
	}
	t.Fatalf("List does not report run %s as unreadable: %v", id, bad)
	return Unreadable{}
}

// TestDamagedRecord: a record whose bytes were damaged in the file is
// reported unreadable with what its sealed index entry still says (its
// tenant, sandbox and resident supervisor), and SetAside moves it out of
// the store into a file of DamagedDir, byte for byte; the other runs are
// untouched.
func TestDamagedRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := fill(t, dir, 3)
	garbled := garbleRecord(t, dir, "a-run-0")

	d, report := open(t, dir)
	if report.Damage != nil {
		t.Fatalf("one damaged record damaged the whole store: %v", report)
	}
	u := unreadable(t, d, "a-run-0")
	if !errors.Is(u.Err, ErrForged) || !strings.Contains(u.Err.Error(), dir) {
		t.Errorf("Err = %v; want ErrForged naming the state directory", u.Err)
	}
	w := want["a-run-0"]
	if u.Known == nil {
		t.Fatal("Known is nil: nothing says which sandbox and resident supervisor the damaged run had")
	}
	same(t, *u.Known, Record{ID: w.ID, Tenant: w.Tenant, Sandbox: w.Sandbox, Opened: w.Opened, Resident: w.Resident})

	path, err := d.SetAside(ctx, "a-run-0")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != filepath.Join(dir, DamagedDir) || !strings.Contains(filepath.Base(path), "a-run-0") {
		t.Errorf("SetAside kept the record at %s; want a file named after the run in %s", path, filepath.Join(dir, DamagedDir))
	}
	if kept, err := os.ReadFile(path); err != nil || !bytes.Equal(kept, garbled) {
		t.Fatalf("the kept file is not the damaged record as stored (%v):\n%s", err, kept)
	}
	for p, perm := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != perm {
			t.Errorf("%s: %v %v; want mode %#o", p, info.Mode(), err, perm)
		}
	}
	if _, err := d.Get(ctx, "a-run-0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after SetAside = %v; want ErrNotFound", err)
	}
	list, bad, err := d.List(ctx)
	if err != nil || len(bad) != 0 {
		t.Fatalf("List after SetAside: %v %v", bad, err)
	}
	same(t, ids(list), []string{"b-run-0", "c-run-0"})
	same(t, list[1], want["c-run-0"])
	if path, err := d.SetAside(ctx, "a-run-0"); path != "" || err != nil {
		t.Errorf("SetAside of a run no longer stored = %q, %v; want nothing", path, err)
	}
}

// TestDamagedRecordIndex: the index entry is trusted only when its own
// MAC matches; a record that does not decode though its MAC matches is
// unreadable too; a store written before the index gets one at Open; and
// a damaged store's key, whatever it is, is kept inside DamagedDir.
func TestDamagedRecordIndex(t *testing.T) {
	ctx := context.Background()
	t.Run("index changed too", func(t *testing.T) {
		dir := t.TempDir()
		fill(t, dir, 1)
		garbleRecord(t, dir, "a-run-0")
		putRaw(t, dir, indexBucket, map[string]string{"a-run-0": strings.Repeat("m", 32) + `{"tenant":"mallory","sandbox":"docker://victim"}`})
		d, _ := open(t, dir)
		if u := unreadable(t, d, "a-run-0"); u.Known != nil {
			t.Errorf("Known = %v from an index entry whose MAC does not match", u.Known)
		}
	})
	t.Run("undecodable with its MAC", func(t *testing.T) {
		dir := t.TempDir()
		want := fill(t, dir, 1)
		key, err := os.ReadFile(filepath.Join(dir, KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		v := `{"id":"a-run-0","opened":`
		putRaw(t, dir, runsBucket, map[string]string{"a-run-0": v})
		putRaw(t, dir, macsBucket, map[string]string{"a-run-0": string(Seal(key, "a-run-0", []byte(v)))})
		d, _ := open(t, dir)
		u := unreadable(t, d, "a-run-0")
		if errors.Is(u.Err, ErrForged) || !strings.Contains(u.Err.Error(), "does not decode") {
			t.Errorf("Err = %v; want a decode error", u.Err)
		}
		if u.Known == nil || u.Known.Resident == nil || u.Known.Resident.Dir != want["a-run-0"].Resident.Dir {
			t.Errorf("Known = %v; want the run's resident supervisor", u.Known)
		}
	})
	t.Run("store before the index", func(t *testing.T) {
		dir := t.TempDir()
		want := fill(t, dir, 2)
		dropBucket(t, dir, indexBucket)
		d, _ := open(t, dir) // indexes the records
		d.Close()
		garbleRecord(t, dir, "b-run-0")
		d, _ = open(t, dir)
		u := unreadable(t, d, "b-run-0")
		if u.Known == nil || u.Known.Sandbox != want["b-run-0"].Sandbox {
			t.Errorf("Known = %v; want the sandbox of the record indexed at Open", u.Known)
		}
	})
	t.Run("any key", func(t *testing.T) {
		dir := t.TempDir()
		fill(t, dir, 1)
		ids := []string{"../escape", "..", "/abs/path", strings.Repeat("é/", 200)}
		for _, id := range ids {
			putRaw(t, dir, runsBucket, map[string]string{id: "junk"})
		}
		d, _ := open(t, dir)
		for _, id := range ids {
			path, err := d.SetAside(ctx, id)
			if err != nil {
				t.Fatalf("SetAside(%.20q): %v", id, err)
			}
			if filepath.Dir(path) != filepath.Join(dir, DamagedDir) {
				t.Errorf("SetAside(%.20q) wrote %s, outside %s", id, path, filepath.Join(dir, DamagedDir))
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != "junk" {
				t.Errorf("SetAside(%.20q): %s holds %q (%v)", id, path, b, err)
			}
		}
	})
}

// TestEmptyStoreWithKey: a database file truncated to nothing, in a
// directory whose record key shows berth kept runs there, is damage,
// reported and moved aside, not taken for a new store and written over.
func TestEmptyStoreWithKey(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 2)
	path := filepath.Join(dir, DBFile)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	d, report := open(t, dir)
	if report.Damage == nil || !strings.Contains(report.Damage.Error(), "empty (0 bytes)") || !report.Fresh {
		t.Fatalf("Open of a store truncated to nothing: %v; want damage saying it is empty", report)
	}
	if info, err := os.Stat(report.MovedTo); err != nil || info.Size() != 0 || !strings.HasPrefix(report.MovedTo, path+".corrupt-") {
		t.Fatalf("the empty file was not kept aside as it was: %q %v", report.MovedTo, err)
	}
	for _, w := range []string{path, report.MovedTo, "empty (0 bytes)", "empty store"} {
		if !strings.Contains(report.String(), w) {
			t.Errorf("report %q does not say %q", report, w)
		}
	}
	if err := d.Put(context.Background(), rec("new", epoch)); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, report = open(t, dir); report.Damage != nil || report.Runs != 1 {
		t.Fatalf("reopened: %v", report)
	}
}

// TestMissingStoreWithKey: a database file gone from a directory whose
// record key shows berth kept runs there is reported, not taken for a
// new store without a word; the next Open is clean.
func TestMissingStoreWithKey(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 1)
	path := filepath.Join(dir, DBFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	d, report := open(t, dir)
	if report.Damage == nil || !strings.Contains(report.Damage.Error(), "missing") || !report.Fresh || report.MovedTo != "" {
		t.Fatalf("Open without the store's file: %#v; want damage saying it is missing", report)
	}
	for _, w := range []string{path, "missing", "empty store"} {
		if !strings.Contains(report.String(), w) {
			t.Errorf("report %q does not say %q", report, w)
		}
	}
	d.Close()
	if _, report = open(t, dir); report.Damage != nil {
		t.Fatalf("reopened: %v", report)
	}
}
