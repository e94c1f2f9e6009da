package runstore

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// fill makes a store in dir with n records (one of them with a 200 KB
// staged edit, which bbolt keeps in overflow pages) and returns them by
// ID.
func fill(t *testing.T, dir string, n int) map[string]Record {
	t.Helper()
	d, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want := map[string]Record{}
	for i := range n {
		r := rec(string(rune('a'+i%26))+"-run-"+string(rune('0'+i/26)), epoch.Add(time.Duration(i)*time.Minute))
		if i == n/2 {
			r = bigRecord(r.ID, 200<<10)
			r.Opened = epoch.Add(time.Duration(i) * time.Minute)
		}
		if err := d.Put(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		want[r.ID] = r
	}
	return want
}

// highWater is how many bytes of the database file bbolt uses.
func highWater(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	return size
}

func garbage(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestDamage damages a database file in the ways disks and people do:
// Open succeeds with an empty store, moves the file aside, and reports
// what it could still read.
func TestDamage(t *testing.T) {
	page := os.Getpagesize()
	tests := []struct {
		name    string
		damage  func(t *testing.T, path string, want map[string]Record)
		cause   string // in Report.Damage
		salvage string // "all": every record; "some": a subset, each intact; "none"
	}{
		{
			name: "garbage",
			damage: func(t *testing.T, path string, _ map[string]Record) {
				if err := os.WriteFile(path, garbage(64<<10), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			cause:   "invalid database",
			salvage: "none",
		},
		{
			name: "truncated to half its used size",
			damage: func(t *testing.T, path string, _ map[string]Record) {
				if err := os.Truncate(path, highWater(t, path)/2); err != nil {
					t.Fatal(err)
				}
			},
			cause:   "truncated",
			salvage: "some",
		},
		{
			name: "truncated to 100 bytes",
			damage: func(t *testing.T, path string, _ map[string]Record) {
				if err := os.Truncate(path, 100); err != nil {
					t.Fatal(err)
				}
			},
			cause:   "invalid database",
			salvage: "none",
		},
		{
			name: "truncated inside its second meta page",
			damage: func(t *testing.T, path string, _ map[string]Record) {
				if err := os.Truncate(path, int64(page+100)); err != nil {
					t.Fatal(err)
				}
			},
			cause:   "file size too small",
			salvage: "none",
		},
		{
			name: "meta pages overwritten",
			damage: func(t *testing.T, path string, _ map[string]Record) {
				overwrite(t, path, 0, garbage(2*page))
			},
			cause:   "invalid database",
			salvage: "all", // found by scanning the bytes
		},
		{
			name: "a record's pages overwritten",
			damage: func(t *testing.T, path string, want map[string]Record) {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				marker := []byte(`"conversation_id":"conv-c-run-0"`)
				hit := 0
				for i := bytes.Index(data, marker); i >= 0; {
					off := i / page * page
					overwrite(t, path, int64(off), garbage(page))
					hit++
					j := bytes.Index(data[off+page:], marker)
					if j < 0 {
						break
					}
					i = off + page + j
				}
				if hit == 0 {
					t.Fatal("record c-run-0 not found in the file")
				}
			},
			salvage: "some",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			want := fill(t, dir, 30)
			path := filepath.Join(dir, DBFile)
			tt.damage(t, path, want)
			damaged, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}

			d, report := open(t, dir)
			if report.Damage == nil || !report.Fresh || report.Runs != 0 {
				t.Fatalf("Open of a damaged file: %v", report)
			}
			if !strings.Contains(report.Damage.Error(), tt.cause) {
				t.Errorf("Damage = %v, want it to say %q", report.Damage, tt.cause)
			}
			// The damaged file is kept, whole, beside the new one.
			if !strings.HasPrefix(report.MovedTo, path+".corrupt-") {
				t.Fatalf("MovedTo = %q", report.MovedTo)
			}
			if stamp := strings.TrimPrefix(report.MovedTo, path+".corrupt-"); len(stamp) != len("20060102T150405Z") || !strings.HasSuffix(stamp, "Z") {
				t.Errorf("MovedTo %q: want a UTC time stamp", report.MovedTo)
			}
			if moved, err := os.ReadFile(report.MovedTo); err != nil || !bytes.Equal(moved, damaged) {
				t.Fatalf("the moved file is not the damaged one (%v)", err)
			}
			msg := report.String()
			for _, w := range []string{path, report.MovedTo, "unreadable", "empty store"} {
				if !strings.Contains(msg, w) {
					t.Errorf("report %q does not say %q", msg, w)
				}
			}

			// What was salvaged is intact.
			for _, r := range report.Salvaged {
				w, ok := want[r.ID]
				if !ok {
					t.Fatalf("salvaged a run that was never stored: %s", r.ID)
				}
				same(t, r, w)
				if !strings.Contains(msg, r.ID) {
					t.Errorf("report %q does not name salvaged run %s", msg, r.ID)
				}
			}
			switch got := len(report.Salvaged); {
			case tt.salvage == "all" && got != len(want),
				tt.salvage == "none" && got != 0,
				tt.salvage == "some" && got == len(want):
				t.Errorf("salvaged %d of %d runs, want %s (%s)", got, len(want), tt.salvage, report.SalvageNote)
			}
			t.Logf("%s", msg)

			// The new store is empty and works, and reopens clean.
			ctx := context.Background()
			if list, bad, err := d.List(ctx); err != nil || len(list)+len(bad) != 0 {
				t.Fatalf("new store: %d records, %d unreadable, %v", len(list), len(bad), err)
			}
			if err := d.Put(ctx, rec("new", epoch)); err != nil {
				t.Fatal(err)
			}
			d.Close()
			d, report = open(t, dir)
			if report.Damage != nil || report.Runs != 1 {
				t.Fatalf("reopened: %v", report)
			}
		})
	}
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestNoDamage: a missing or empty database file is an empty store,
// not damage.
func TestNoDamage(t *testing.T) {
	for name, setup := range map[string]func(path string) error{
		"missing": func(string) error { return nil },
		"empty":   func(path string) error { return os.WriteFile(path, nil, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := setup(filepath.Join(dir, DBFile)); err != nil {
				t.Fatal(err)
			}
			_, report := open(t, dir)
			if !report.Fresh || report.Damage != nil || report.MovedTo != "" {
				t.Fatalf("report: %#v", report)
			}
			if !strings.Contains(report.String(), "empty store") {
				t.Fatalf("report says %q", report)
			}
		})
	}
}

// putRaw writes values straight into the runs bucket, as a bug or a
// newer berth might.
func putRaw(t *testing.T, dir string, bucket []byte, kv map[string]string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		for k, v := range kv {
			if err := tx.Bucket(bucket).Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUnreadableRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := fill(t, dir, 2)
	putRaw(t, dir, runsBucket, map[string]string{
		"bad":      `{"id":"bad","opened":`,
		"mismatch": `{"id":"other","sandbox":"host://"}`,
	})
	d, report := open(t, dir)
	if report.Damage != nil || report.Runs != 4 {
		t.Fatalf("report: %v", report)
	}
	list, bad, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	same(t, ids(list), []string{"a-run-0", "b-run-0"})
	same(t, list[0], want["a-run-0"])
	if len(bad) != 2 || bad[0].ID != "bad" || bad[1].ID != "mismatch" {
		t.Fatalf("unreadable: %v", bad)
	}
	for _, u := range bad {
		if u.Err == nil || !strings.Contains(u.Err.Error(), u.ID) || !strings.Contains(u.Err.Error(), "Delete") {
			t.Errorf("unreadable %s: %v; want the id and what to do", u.ID, u.Err)
		}
		if _, err := d.Get(ctx, u.ID); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%s) = %v, want a decode error", u.ID, err)
		}
		if err := d.Delete(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, bad, _ := d.List(ctx); len(bad) != 0 {
		t.Fatalf("after Delete, unreadable: %v", bad)
	}
}

// TestNewerFormat: a store written by a newer berth is refused and left
// where it is.
func TestNewerFormat(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 1)
	putRaw(t, dir, metaBucket, map[string]string{string(formatKey): "2"})
	_, _, err := Open(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "newer berth") {
		t.Fatalf("Open = %v, want a refusal naming a newer berth", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "corrupt") {
			t.Fatalf("a newer store was moved aside: %s", e.Name())
		}
	}
	// And the lock was let go.
	putRaw(t, dir, metaBucket, map[string]string{string(formatKey): "1"})
	open(t, dir)
}
