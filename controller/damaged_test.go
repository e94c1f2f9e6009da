package controller

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
)

// logBuffer is a log's output, written by several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// damageBytes flips one byte inside every copy of the stored bytes of
// run id's entry in bucket, in the database file itself, as a disk's
// damage does: bbolt's pages stay whole, the entry's bytes do not.
func damageBytes(t *testing.T, dir, bucket, id string) {
	t.Helper()
	path := filepath.Join(dir, runstore.DBFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var v []byte
	db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(bucket)); b != nil {
			v = bytes.Clone(b.Get([]byte(id)))
		}
		return nil
	})
	db.Close()
	if len(v) < 64 {
		t.Fatalf("run %s has no entry in bucket %s", id, bucket)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := len(v) - 10
	n := 0
	for i := 0; ; {
		j := bytes.Index(file[i:], v)
		if j < 0 {
			break
		}
		file[i+j+at] ^= 0x01
		i += j + len(v)
		n++
	}
	if n == 0 {
		t.Fatalf("run %s's %s entry is not in %s as stored", id, bucket, path)
	}
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptDamagedRecord: a run whose record was damaged on disk is not
// lost without a word. The restarted berth logs it at error level with
// its id and why, counts it, keeps the record aside in the state
// directory's damaged/, answers its id 410 saying the record was
// damaged, and ends the resident supervisor the store's sealed index
// names for it (with its kernels). When the index entry is damaged too,
// only an operator is told, and the answer says the resident ends after
// its grace. The runs whose records are whole are adopted.
func TestAdoptDamagedRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	prov := residenceProvider{&fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1", "c-2": "ctr2", "c-3": "ctr3"}}, &residents{}}
	c1 := policyController(t, dir, Config{}, prov)
	var ids []string
	for _, conv := range []string{"c-1", "c-2", "c-3"} {
		r, err := c1.Open(ctx, RunSpec{ConversationID: conv, Workspace: "/w", Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID())
	}
	restart(t, c1)
	damaged, lost, whole := ids[0], ids[1], ids[2]
	damageBytes(t, dir, "runs", damaged)
	damageBytes(t, dir, "runs", lost)
	damageBytes(t, dir, "index", lost)

	var log logBuffer
	c2 := policyController(t, dir, Config{Logger: slog.New(slog.NewTextHandler(&log, nil)), ResidentGrace: 7 * time.Minute}, prov)
	rep, err := c2.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted) != 1 || rep.Adopted[0] != whole {
		t.Errorf("adopted %v; want only the run whose record is whole, %s", rep.Adopted, whole)
	}
	for _, id := range []string{damaged, lost} {
		if !strings.Contains(rep.Refused[id], "damaged") {
			t.Errorf("report: run %s refused %q; want it refused as damaged (report %+v)", id, rep.Refused[id], rep)
		}
		if _, err := c2.Lookup(AllTenants, id); !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("an operator looks run %s up: %v; want 410 sandbox_gone saying its record was damaged", id, err)
		}
		if _, err := c2.cfg.Store.Get(ctx, id); !errors.Is(err, runstore.ErrNotFound) {
			t.Errorf("run %s's damaged record is still in the store: %v", id, err)
		}
		if kept, _ := filepath.Glob(filepath.Join(dir, runstore.DamagedDir, id+".*.record")); len(kept) != 1 {
			t.Errorf("run %s's damaged record was not kept aside: %v", id, kept)
		}
	}
	if _, err := c2.Lookup("acme", damaged); !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "ends what it left running") {
		t.Errorf("the run's tenant looks the damaged run up: %v; want 410 sandbox_gone saying it was damaged and its leftovers ended", err)
	}
	if _, err := c2.Lookup("acme", lost); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("a tenant looks up the run whose index entry is damaged too: %v; want ErrUnknownRun (nothing trusted names its tenant)", err)
	}
	if _, err := c2.Lookup(AllTenants, lost); err == nil || !strings.Contains(err.Error(), "grace it was started with (7m0s") {
		t.Errorf("an operator looks up the run whose index entry is damaged too: %v; want it to say its resident supervisor ends after its grace", err)
	}
	if n := prov.res.closed.Load(); n != 1 {
		t.Errorf("resident supervisors closed: %d; want 1, the damaged run's (the index names no other)", n)
	}
	if got := testutil.ToFloat64(c2.m.recordsDamaged); got != 2 {
		t.Errorf("berth_run_records_damaged_total = %v; want 2", got)
	}
	out := log.String()
	for _, id := range []string{damaged, lost} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			found = found || strings.Contains(line, "level=ERROR") && strings.Contains(line, id) && strings.Contains(line, "integrity") && strings.Contains(line, "kept_at="+filepath.Join(dir, runstore.DamagedDir))
		}
		if !found {
			t.Errorf("the log does not report run %s's damaged record at error level with why and where it was kept:\n%s", id, out)
		}
	}
}

// TestAdoptUndecodableRecord: a record that does not decode though its
// MAC matches (written by a berth whose records this one cannot read) is
// reported, kept aside and answered 410 like a damaged one, not dropped
// as an unknown run.
func TestAdoptUndecodableRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	prov := residenceProvider{&fakeProvider{scheme: "docker", containers: map[string]string{"c-1": "ctr1"}}, &residents{}}
	c1 := policyController(t, dir, Config{}, prov)
	r, err := c1.Open(ctx, RunSpec{ConversationID: "c-1", Workspace: "/w", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	restart(t, c1)
	key, err := os.ReadFile(filepath.Join(dir, runstore.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	v := []byte(`{"id":"` + r.ID() + `","opened":"not a time"}`)
	db, err := bolt.Open(filepath.Join(dir, runstore.DBFile), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("runs")).Put([]byte(r.ID()), v); err != nil {
			return err
		}
		return tx.Bucket([]byte("macs")).Put([]byte(r.ID()), runstore.Seal(key, r.ID(), v))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	c2 := policyController(t, dir, Config{}, prov)
	rep, err := c2.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Refused[r.ID()], "does not decode") {
		t.Fatalf("report %+v; want the run refused, its record not decoding", rep)
	}
	if _, err := c2.Lookup("acme", r.ID()); !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("the run's tenant looks it up: %v; want 410 sandbox_gone saying its record was damaged", err)
	}
	if prov.res.closed.Load() != 1 {
		t.Errorf("the run's resident supervisor was closed %d times; want once", prov.res.closed.Load())
	}
	kept, _ := filepath.Glob(filepath.Join(dir, runstore.DamagedDir, r.ID()+".*.record"))
	if len(kept) != 1 {
		t.Fatalf("the record was not kept aside: %v", kept)
	}
	if b, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(b, v) {
		t.Errorf("the kept record is %q (%v); want the stored bytes", b, err)
	}
}
