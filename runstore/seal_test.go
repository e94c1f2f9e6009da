package runstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// rawRecord reads run id's stored bytes straight from the database file.
func rawRecord(t *testing.T, dir, id string) []byte {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket(runsBucket).Get([]byte(id)))
		return nil
	})
	if v == nil {
		t.Fatalf("no run %s in %s", id, dir)
	}
	return v
}

// dropBucket removes a bucket of the database file, as a berth before
// MACs never made it, or as someone stripping them would.
func dropBucket(t *testing.T, dir string, bucket []byte) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucket) }); err != nil {
		t.Fatal(err)
	}
}

// forged fails unless run id is refused as forged by List and Get.
func forged(t *testing.T, d *Dir, id, why string) {
	t.Helper()
	ctx := context.Background()
	list, bad, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.ID == id {
			t.Fatalf("List returned the record of run %s (tenant %q), whose %s", id, r.Tenant, why)
		}
	}
	found := false
	for _, u := range bad {
		if u.ID == id {
			found = true
			if !errors.Is(u.Err, ErrForged) || !strings.Contains(u.Err.Error(), id) {
				t.Errorf("List: run %s: %v; want ErrForged naming the run", id, u.Err)
			}
		}
	}
	if !found {
		t.Errorf("List does not report run %s, whose %s, as unreadable: %v", id, why, bad)
	}
	if _, err := d.Get(ctx, id); !errors.Is(err, ErrForged) {
		t.Errorf("Get(%s) = %v; want ErrForged", id, err)
	}
}

// TestTamperedRecord: a record changed in the database file without its
// key (the tenant, the sandbox), or whose MAC was removed, is not
// returned; the others are.
func TestTamperedRecord(t *testing.T) {
	dir := t.TempDir()
	want := fill(t, dir, 3)
	raw := rawRecord(t, dir, "a-run-0")
	var r map[string]any
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	r["tenant"] = "mallory"
	r["sandbox"] = "docker://unlabelled"
	changed, _ := json.Marshal(r)
	putRaw(t, dir, runsBucket, map[string]string{"a-run-0": string(changed)})
	putRaw(t, dir, macsBucket, map[string]string{"b-run-0": ""})

	d, _ := open(t, dir)
	forged(t, d, "a-run-0", "tenant and sandbox were changed")
	forged(t, d, "b-run-0", "MAC was removed")
	got, err := d.Get(context.Background(), "c-run-0")
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, want["c-run-0"])
	// Written again by berth, a run is sealed again.
	if err := d.Put(context.Background(), want["a-run-0"]); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Get(context.Background(), "a-run-0"); err != nil || got.Tenant != "acme" {
		t.Fatalf("after Put: %v %v", got, err)
	}
}

// TestSealBeforeMACs: the store of a berth before records carried MACs
// (no key file, no MAC bucket) is sealed as it is by the Open that
// creates the key, and said so; the next Open seals nothing.
func TestSealBeforeMACs(t *testing.T) {
	dir := t.TempDir()
	want := fill(t, dir, 2)
	dropBucket(t, dir, macsBucket)
	if err := os.Remove(filepath.Join(dir, KeyFile)); err != nil {
		t.Fatal(err)
	}
	d, report := open(t, dir)
	same(t, report.Sealed, []string{"a-run-0", "b-run-0"})
	if !strings.Contains(report.String(), "a-run-0") {
		t.Errorf("the report does not name the runs it sealed: %s", report)
	}
	list, bad, err := d.List(context.Background())
	if err != nil || len(bad) != 0 {
		t.Fatalf("List: %v %v", bad, err)
	}
	same(t, list[0], want["a-run-0"])
	d.Close()
	_, report = open(t, dir)
	if len(report.Sealed) != 0 {
		t.Fatalf("the second Open sealed %v again", report.Sealed)
	}
}

// TestStrippedMACs: once a store has MACs, removing them (the bucket or
// the key) does not make its records trusted again.
func TestStrippedMACs(t *testing.T) {
	t.Run("bucket", func(t *testing.T) {
		dir := t.TempDir()
		fill(t, dir, 1)
		dropBucket(t, dir, macsBucket)
		d, report := open(t, dir)
		if len(report.Sealed) != 0 {
			t.Fatalf("sealed %v with the key kept", report.Sealed)
		}
		forged(t, d, "a-run-0", "MACs were removed")
	})
	t.Run("key", func(t *testing.T) {
		dir := t.TempDir()
		fill(t, dir, 1)
		if err := os.Remove(filepath.Join(dir, KeyFile)); err != nil {
			t.Fatal(err)
		}
		d, report := open(t, dir)
		if len(report.Sealed) != 0 {
			t.Fatalf("sealed %v under a new key, over MACs made with the old one", report.Sealed)
		}
		forged(t, d, "a-run-0", "key was replaced")
	})
}

// TestKeyFile: the key is created 0600 and KeySize bytes long; a key
// file others may read, or of another length, is refused.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	d, _ := open(t, dir)
	d.Close()
	path := filepath.Join(dir, KeyFile)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 || info.Size() != KeySize {
		t.Fatalf("key file: mode %#o, %d bytes; want 0600, %d", info.Mode().Perm(), info.Size(), KeySize)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("Open with a key others may read = %v; want a refusal", err)
	}
	os.Chmod(path, 0o600)
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "not a key") {
		t.Fatalf("Open with a short key = %v; want a refusal", err)
	}
}

// TestSealVectors: the MAC binds the run id as well as the bytes, and
// a derived key differs from the key it comes from.
func TestSealVectors(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	data := []byte(`{"id":"r1"}`)
	mac := Seal(key, "r1", data)
	if err := Verify(key, "r1", data, mac); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"other id":    Verify(key, "r2", data, mac),
		"other bytes": Verify(key, "r1", []byte(`{"id":"r1" }`), mac),
		"other key":   Verify(DeriveKey(key), "r1", data, mac),
		"no mac":      Verify(key, "r1", data, nil),
	} {
		if !errors.Is(err, ErrForged) {
			t.Errorf("%s: %v; want ErrForged", name, err)
		}
	}
}
