package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Store keeps the records of a berth's runs. Implementations are safe for
// concurrent use; every method checks its ctx before it starts.
type Store interface {
	// Put creates or replaces the record r.ID, durably: when Put returns
	// nil the record survives a crash of berth or of the machine.
	Put(ctx context.Context, r Record) error
	// Get returns the record id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)
	// Delete removes the record id; deleting a missing id is not an error.
	Delete(ctx context.Context, id string) error
	// List returns every record, by Opened then ID. Records that fail to
	// decode, or whose MAC fails (ErrForged), are returned as Unreadable
	// (with their id, and what a store that keeps an index still knows of
	// them), never dropped and never fatal. Get fails on them with the
	// same error.
	List(ctx context.Context) ([]Record, []Unreadable, error)
	// Close releases the store; later calls fail with ErrClosed.
	Close() error
}

// Unreadable is a stored record that does not decode, or whose MAC does
// not match (Err wraps ErrForged): either way none of it is to be acted
// on.
type Unreadable struct {
	ID  string
	Err error
	// Known is what the run's sealed index entry still says of it — its
	// ID, Tenant, Sandbox, Opened and Resident, nothing else — when that
	// entry's own MAC matches; nil when there is none. It is enough to
	// end what the run left running and to answer its tenant why the run
	// is gone, never to adopt it.
	Known *Record
}

var (
	// ErrNotFound: no record has that id.
	ErrNotFound = errors.New("runstore: no such run")
	// ErrLocked: another berth holds the state directory.
	ErrLocked = errors.New("runstore: state directory in use by another berth")
	// ErrTooLarge: a record is over MaxRecord bytes.
	ErrTooLarge = errors.New("runstore: record too large")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("runstore: store closed")
)

const (
	// MaxRecord bounds one record's JSON encoding, in bytes. Staged edits
	// with their files' contents are the bulk of a large record.
	MaxRecord = 64 << 20
	// MaxID bounds a record's id, in bytes.
	MaxID = 256
	// DefaultLockWait is how long Open waits for another berth to let go
	// of the state directory before it fails with ErrLocked.
	DefaultLockWait = 500 * time.Millisecond
)

// File names inside the state directory.
const (
	// DBFile is the bbolt database holding the records.
	DBFile = "runs.db"
	// LockFile is held (flock) by the berth using the directory, and
	// names it: pid, host, start time.
	LockFile = "berth.lock"
)

// Bucket layout: runs maps id to the record's JSON; macs maps id to the
// record's MAC (Seal); index maps id to what ends the run's leftovers
// when its record is damaged (indexEntry), sealed apart; meta holds the
// store's format version.
var (
	runsBucket  = []byte("runs")
	macsBucket  = []byte("macs")
	indexBucket = []byte("index")
	metaBucket  = []byte("meta")
	formatKey   = []byte("format")
)

// format is the version of the layout above this package writes and
// reads. A newer one is refused (not moved aside): a newer berth wrote it.
const format = 1

// Options configure Open.
type Options struct {
	// LockWait is how long Open waits for another berth to let go of the
	// state directory; zero means DefaultLockWait.
	LockWait time.Duration
}

// Dir is a [Store] kept in a state directory: a bbolt database, held by
// one berth at a time. Open it with [Open].
type Dir struct {
	dir       string
	lock      *os.File
	key       []byte // seals the records (KeyFile)
	maxRecord int    // MaxRecord; tests lower it

	// mu guards db against Close: every operation holds it for reading.
	mu sync.RWMutex
	db *bolt.DB // nil once closed
}

var _ Store = (*Dir)(nil)

// Open opens the run store in the state directory dir, creating dir
// (mode 0700) when it is missing, and holds the directory until Close.
//
// It refuses a directory that is writable by group or others or that
// another user owns, and a database file that others may read or that
// another user owns: the records hold the secrets that authenticate
// berth to each run's resident supervisor. It fails with an error
// wrapping ErrLocked when another berth holds dir (within
// opts.LockWait).
//
// A database file that cannot be read does not stop Open: it is moved
// aside, an empty store takes its place, and the [Report] says so, with
// the runs still readable from the old file. A missing file is an empty
// store.
func Open(dir string, opts Options) (*Dir, Report, error) {
	wait := opts.LockWait
	if wait <= 0 {
		wait = DefaultLockWait
	}
	if dir == "" {
		return nil, Report{}, errors.New("runstore: no state directory given; pass berth a --state-dir")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, Report{}, fmt.Errorf("runstore: state directory %q: %w", dir, err)
	}
	if err := prepareDir(abs); err != nil {
		return nil, Report{}, err
	}
	lock, err := lockDir(abs, wait)
	if err != nil {
		return nil, Report{}, err
	}
	db, report, err := openDB(abs, wait)
	if err != nil {
		unlockDir(lock)
		return nil, report, err
	}
	key, created, err := loadKey(abs)
	if err == nil {
		report.Sealed, err = sealUnsealed(db, key, created)
	}
	if err == nil {
		err = indexRecords(db, key)
	}
	if err != nil {
		db.Close()
		unlockDir(lock)
		return nil, report, err
	}
	return &Dir{dir: abs, lock: lock, key: key, db: db, maxRecord: MaxRecord}, report, nil
}

// sealUnsealed readies the MAC bucket of a store that has none and
// returns the runs it sealed. A store without one was written by a berth
// before records were sealed: when its key was created by this Open
// (created), its records are sealed as they are, trusted as the berth
// that wrote them trusted them (and checked against today's policy when
// adopted). When the key existed already, the bucket was removed since,
// and nothing is sealed: every record without a MAC is refused.
func sealUnsealed(db *bolt.DB, key []byte, created bool) ([]string, error) {
	var sealed []string
	err := db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(macsBucket) != nil {
			return nil
		}
		macs, err := tx.CreateBucket(macsBucket)
		if err != nil || !created {
			return err
		}
		return tx.Bucket(runsBucket).ForEach(func(k, v []byte) error {
			sealed = append(sealed, string(k))
			return macs.Put(k, Seal(key, string(k), v))
		})
	})
	if err != nil {
		return nil, fmt.Errorf("runstore: sealing the records of %s: %w", db.Path(), err)
	}
	return sealed, nil
}

// Path is the state directory.
func (d *Dir) Path() string { return d.dir }

// begin checks ctx and that d is open; on success the caller holds
// d.mu for reading and must call d.mu.RUnlock.
func (d *Dir) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runstore: %w", err)
	}
	d.mu.RLock()
	if d.db == nil {
		d.mu.RUnlock()
		return fmt.Errorf("%w (state directory %s)", ErrClosed, d.dir)
	}
	return nil
}

func checkID(id string) error {
	if id == "" {
		return errors.New("runstore: a record needs an id")
	}
	if len(id) > MaxID {
		return fmt.Errorf("runstore: run id %.40q… is %d bytes, over the %d-byte limit (MaxID)", id, len(id), MaxID)
	}
	return nil
}

// Put creates or replaces the record r.ID. The record is stored as
// given (Updated is the caller's to set). It is on disk, fsynced, when
// Put returns nil. A record whose JSON is over MaxRecord bytes fails
// with an error wrapping ErrTooLarge.
func (d *Dir) Put(ctx context.Context, r Record) error {
	if err := checkID(r.ID); err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("runstore: encoding run %s: %w", r.ID, err)
	}
	if len(data) > d.maxRecord {
		return fmt.Errorf("%w: run %s's record is %d bytes, over the %d-byte limit (MaxRecord); its state (staged edits with file contents, most likely) must shrink before it can be saved",
			ErrTooLarge, r.ID, len(data), d.maxRecord)
	}
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	err = d.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(runsBucket).Put([]byte(r.ID), data); err != nil {
			return err
		}
		if err := tx.Bucket(indexBucket).Put([]byte(r.ID), sealedIndex(d.key, r)); err != nil {
			return err
		}
		return tx.Bucket(macsBucket).Put([]byte(r.ID), Seal(d.key, r.ID, data))
	})
	if err != nil {
		return fmt.Errorf("runstore: saving run %s in %s: %w", r.ID, d.dir, err)
	}
	return nil
}

// Get returns the record id, or an error wrapping ErrNotFound. A record
// that is stored but does not decode is an error naming the run.
func (d *Dir) Get(ctx context.Context, id string) (Record, error) {
	if err := d.begin(ctx); err != nil {
		return Record{}, err
	}
	defer d.mu.RUnlock()
	var (
		r     Record
		found bool
		derr  error
	)
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(runsBucket).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		r, derr = d.open(tx, id, v)
		return nil
	})
	switch {
	case err != nil:
		return Record{}, fmt.Errorf("runstore: reading run %s from %s: %w", id, d.dir, err)
	case !found:
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	case derr != nil:
		return Record{}, derr
	}
	return r, nil
}

// Delete removes the record id; a missing id is not an error. It is on
// disk when Delete returns nil.
func (d *Dir) Delete(ctx context.Context, id string) error {
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	err := d.db.Update(func(tx *bolt.Tx) error {
		return deleteLocked(tx, id)
	})
	if err != nil {
		return fmt.Errorf("runstore: deleting run %s from %s: %w", id, d.dir, err)
	}
	return nil
}

// List returns every record by Opened, then ID, and the records that do
// not decode (by ID).
func (d *Dir) List(ctx context.Context) ([]Record, []Unreadable, error) {
	if err := d.begin(ctx); err != nil {
		return nil, nil, err
	}
	defer d.mu.RUnlock()
	var (
		records []Record
		bad     []Unreadable
	)
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(runsBucket).ForEach(func(k, v []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			r, err := d.open(tx, string(k), v)
			if err != nil {
				bad = append(bad, Unreadable{ID: string(k), Err: err, Known: d.known(tx, string(k))})
				return nil
			}
			records = append(records, r)
			return nil
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("runstore: listing runs in %s: %w", d.dir, err)
	}
	sortRecords(records)
	return records, bad, nil
}

func sortRecords(records []Record) {
	sort.Slice(records, func(i, j int) bool {
		if !records[i].Opened.Equal(records[j].Opened) {
			return records[i].Opened.Before(records[j].Opened)
		}
		return records[i].ID < records[j].ID
	})
}

// open checks the MAC of run id's stored bytes v, then decodes them.
func (d *Dir) open(tx *bolt.Tx, id string, v []byte) (Record, error) {
	if err := Verify(d.key, id, v, tx.Bucket(macsBucket).Get([]byte(id))); err != nil {
		return Record{}, fmt.Errorf("%w (state directory %s)", err, d.dir)
	}
	r, err := decode(id, v)
	if err != nil {
		return Record{}, fmt.Errorf("%w (state directory %s)", err, d.dir)
	}
	return r, nil
}

// deleteLocked removes run id's record, MAC and index entry in tx.
func deleteLocked(tx *bolt.Tx, id string) error {
	for _, b := range [][]byte{runsBucket, macsBucket, indexBucket} {
		if err := tx.Bucket(b).Delete([]byte(id)); err != nil {
			return err
		}
	}
	return nil
}

// decode decodes a stored record. v belongs to a bbolt transaction, so
// nothing of it is kept.
func decode(id string, v []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(v, &r); err != nil {
		return Record{}, fmt.Errorf("runstore: run %s's stored record (%d bytes) does not decode: %w; the run cannot be adopted: close its sandbox's resident by hand if it still runs, then Delete the record", id, len(v), err)
	}
	if r.ID != id {
		return Record{}, fmt.Errorf("runstore: run %s's stored record names run %q; the run cannot be adopted: Delete the record", id, r.ID)
	}
	return r, nil
}

// Close closes the database and lets go of the state directory. It
// waits for operations under way, and is idempotent.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.db == nil {
		return nil
	}
	err := d.db.Close()
	d.db = nil
	unlockDir(d.lock)
	if err != nil {
		return fmt.Errorf("runstore: closing %s: %w", d.dir, err)
	}
	return nil
}

// syncDir makes a new or renamed entry of dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
