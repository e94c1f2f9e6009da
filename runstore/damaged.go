package runstore

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A damaged record — one whose MAC fails (bytes changed on disk or by
// hand) or that does not decode — is not adopted, and berth must still
// end what its run left running: the resident supervisor in its sandbox,
// with the kernels and adapters under it. The index bucket keeps, for
// each run, the little that takes (indexEntry), sealed apart from the
// record under its own MAC, so that damage to the record leaves it
// readable and trusted. SetAside then moves the damaged record out of
// the store into DamagedDir, for whoever wants to look at it.

// DamagedDir is the directory of the state directory where SetAside
// keeps damaged records (mode 0700; each file 0600: a record may hold
// secrets). Nothing removes what is there.
const DamagedDir = "damaged"

// indexContext starts every index entry's MAC, so that a record's MAC
// never stands for an index entry's, nor the other way round.
const indexContext = "berth-runstore-index-v1\x00"

// indexEntry is what the index keeps of a run: enough to end its
// resident supervisor and to answer its tenant, not to adopt it. It has
// no "id" field, so that salvageRaw never takes it for a record.
type indexEntry struct {
	Tenant   string    `json:"tenant,omitempty"`
	Sandbox  string    `json:"sandbox"`
	Opened   time.Time `json:"opened"`
	Resident *Resident `json:"resident,omitempty"`
}

// sealIndex is the MAC of run id's index entry data under key.
func sealIndex(key []byte, id string, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(indexContext))
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write(data)
	return m.Sum(nil)
}

// sealedIndex is the stored index entry of r: its MAC, then its JSON.
func sealedIndex(key []byte, r Record) []byte {
	data, _ := json.Marshal(indexEntry{Tenant: r.Tenant, Sandbox: r.Sandbox, Opened: r.Opened, Resident: r.Resident}) // cannot fail
	return append(sealIndex(key, r.ID, data), data...)
}

// known reads run id's index entry in tx: nil when there is none, or
// when its MAC does not match or it does not decode.
func (d *Dir) known(tx *bolt.Tx, id string) *Record {
	v := tx.Bucket(indexBucket).Get([]byte(id))
	if len(v) <= sha256.Size {
		return nil
	}
	mac, data := v[:sha256.Size], v[sha256.Size:]
	if !hmac.Equal(mac, sealIndex(d.key, id, data)) {
		return nil
	}
	var e indexEntry
	if json.Unmarshal(data, &e) != nil || e.Sandbox == "" {
		return nil
	}
	return &Record{ID: id, Tenant: e.Tenant, Sandbox: e.Sandbox, Opened: e.Opened, Resident: e.Resident}
}

// indexRecords readies the index bucket and writes the entries missing
// from it, for the records that verify and decode: those of a store
// written by a berth before the index, which a damage to their record
// would otherwise leave nothing to end their leftovers by.
func indexRecords(db *bolt.DB, key []byte) error {
	missing := false
	db.View(func(tx *bolt.Tx) error {
		idx := tx.Bucket(indexBucket)
		if idx == nil {
			missing = true
			return nil
		}
		c := tx.Bucket(runsBucket).Cursor()
		for k, _ := c.First(); k != nil && !missing; k, _ = c.Next() {
			missing = idx.Get(k) == nil
		}
		return nil
	})
	if !missing {
		return nil
	}
	err := db.Update(func(tx *bolt.Tx) error {
		idx, err := tx.CreateBucketIfNotExists(indexBucket)
		if err != nil {
			return err
		}
		macs := tx.Bucket(macsBucket)
		return tx.Bucket(runsBucket).ForEach(func(k, v []byte) error {
			if idx.Get(k) != nil || Verify(key, string(k), v, macs.Get(k)) != nil {
				return nil
			}
			r, err := decode(string(k), v)
			if err != nil {
				return nil
			}
			return idx.Put(k, sealedIndex(key, r))
		})
	})
	if err != nil {
		return fmt.Errorf("runstore: indexing the records of %s: %w", db.Path(), err)
	}
	return nil
}

// SetAside moves run id's stored record out of the store into a file of
// DamagedDir, as it is stored (not decoded, not verified), and returns
// the file's path. It is for a record List returned as Unreadable: once
// it returns, the run is no longer in the store, and its record is kept
// where an operator can look at it; nothing removes it. The file is
// written and synced before the record leaves the store, never over
// another file. A run with no record is not an error ("" and nil).
func (d *Dir) SetAside(ctx context.Context, id string) (string, error) {
	if err := d.begin(ctx); err != nil {
		return "", err
	}
	defer d.mu.RUnlock()
	var v []byte
	err := d.db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket(runsBucket).Get([]byte(id)))
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("runstore: reading run %s's record from %s: %w", id, d.dir, err)
	}
	if v == nil {
		return "", nil
	}
	path, err := keepDamaged(d.dir, id, v)
	if err != nil {
		return "", fmt.Errorf("runstore: keeping run %s's damaged record in %s: %w; it stays in the store", id, filepath.Join(d.dir, DamagedDir), err)
	}
	if err := d.db.Update(func(tx *bolt.Tx) error { return deleteLocked(tx, id) }); err != nil {
		return path, fmt.Errorf("runstore: removing run %s's damaged record from %s (a copy is at %s): %w", id, d.dir, path, err)
	}
	return path, nil
}

// keepDamaged writes data, run id's stored record, to a new file of
// dir's DamagedDir and syncs it.
func keepDamaged(dir, id string, data []byte) (string, error) {
	damaged := filepath.Join(dir, DamagedDir)
	if err := os.Mkdir(damaged, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	base := filepath.Join(damaged, damagedName(id)+"."+time.Now().UTC().Format("20060102T150405Z"))
	path := base + ".record"
	var f *os.File
	for i := 1; ; i++ {
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		path = base + "-" + strconv.Itoa(i) + ".record"
	}
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(damaged)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return "", err
	}
	return path, nil
}

// damagedName is a file name for run id: the id itself when it is a
// plain one, escaped otherwise, and shortened with a hash when long. A
// damaged store's key may be anything, "../x" included.
func damagedName(id string) string {
	name := url.PathEscape(id)
	if name == "." || name == ".." || name == "" {
		name = "%2E" + name
	}
	if len(name) > 120 {
		sum := sha256.Sum256([]byte(id))
		name = name[:80] + "-" + hex.EncodeToString(sum[:8])
	}
	return name
}
