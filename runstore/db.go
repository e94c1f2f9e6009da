package runstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Report says what Open found in the state directory. Its String is a
// message for berth's log; it never includes a secret.
type Report struct {
	// Path is the database file.
	Path string
	// Fresh is true when the store started empty: the file was missing
	// or empty, or it was unreadable and moved aside.
	Fresh bool
	// Runs is how many records the store holds.
	Runs int
	// Damage is why the database file could not be used; nil when it
	// could.
	Damage error
	// MovedTo is where the unreadable database file was moved; "" when
	// it was missing (Damage says so).
	MovedTo string
	// Salvaged are the records still readable from the moved file (best
	// effort), by Opened then ID. They are NOT in the new store: put them
	// back to adopt those runs, or close their residents. Other runs
	// recorded in the moved file cannot be adopted; their resident
	// supervisors end everything they own after their grace.
	Salvaged []Record
	// SalvageNote says how the salvaged records were read and how far to
	// trust them.
	SalvageNote string
	// Sealed are the runs whose records, written by a berth before
	// records were sealed, this Open sealed as they were: it created the
	// directory's key (KeyFile), and the store had no MAC yet.
	Sealed []string
}

// String is a message for berth's log.
func (r Report) String() string {
	switch {
	case r.Damage != nil && r.MovedTo == "":
		return fmt.Sprintf("runstore: %s was unreadable (%v); started an empty store; %s", r.Path, r.Damage, r.SalvageNote)
	case r.Damage != nil:
		var b strings.Builder
		fmt.Fprintf(&b, "runstore: %s was unreadable (%v); moved it to %s and started an empty store", r.Path, r.Damage, r.MovedTo)
		if len(r.Salvaged) == 0 {
			fmt.Fprintf(&b, "; %s", r.SalvageNote)
			return b.String()
		}
		ids := make([]string, len(r.Salvaged))
		for i, rec := range r.Salvaged {
			ids[i] = rec.ID
		}
		fmt.Fprintf(&b, "; runs still readable from it (not in the new store): %s (%s)", strings.Join(ids, ", "), r.SalvageNote)
		return b.String()
	case r.Fresh:
		return fmt.Sprintf("runstore: no runs recorded yet: started an empty store at %s", r.Path)
	case len(r.Sealed) > 0:
		return fmt.Sprintf("runstore: opened %s: %d runs recorded; sealed the records of a berth before records carried a MAC, as they were: %s", r.Path, r.Runs, strings.Join(r.Sealed, ", "))
	}
	return fmt.Sprintf("runstore: opened %s: %d runs recorded", r.Path, r.Runs)
}

// LogValue is what log/slog records for r: the fields without the
// salvaged records' contents (their ids only).
func (r Report) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("path", r.Path), slog.Bool("fresh", r.Fresh), slog.Int("runs", r.Runs)}
	if len(r.Sealed) > 0 {
		attrs = append(attrs, slog.String("sealed", strings.Join(r.Sealed, ",")))
	}
	if r.Damage != nil {
		ids := make([]string, len(r.Salvaged))
		for i, rec := range r.Salvaged {
			ids[i] = rec.ID
		}
		attrs = append(attrs,
			slog.String("damage", r.Damage.Error()),
			slog.String("moved_to", r.MovedTo),
			slog.String("salvaged", strings.Join(ids, ",")),
			slog.String("salvage_note", r.SalvageNote))
	}
	return slog.GroupValue(attrs...)
}

// damage is a database file that cannot be used as it is.
type damage struct{ err error }

func (d *damage) Error() string { return d.err.Error() }
func (d *damage) Unwrap() error { return d.err }

// protect runs fn, turning a panic, or a fault reading the memory-mapped
// file (a truncated file faults past its end), into damage. It must run
// on the goroutine that reads the file.
func protect(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = &damage{fmt.Errorf("reading it failed: %v", p)}
		}
	}()
	return fn()
}

// boltDamage reports whether err from bolt.Open means the file is not a
// usable database, rather than a problem of the machine (permissions,
// memory, descriptors) that moving the file aside would not fix.
func boltDamage(err error) bool {
	return errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrVersionMismatch) ||
		errors.Is(err, berrors.ErrChecksum) || strings.Contains(err.Error(), "file size too small")
}

// openDB opens the database file in dir, moving an unreadable one aside.
func openDB(dir string, wait time.Duration) (*bolt.DB, Report, error) {
	path := filepath.Join(dir, DBFile)
	report := Report{Path: path}
	info, err := checkDBFile(path)
	if err != nil {
		return nil, report, err
	}
	report.Fresh = info == nil || info.Size() == 0
	var (
		db   *bolt.DB
		runs int
	)
	if info == nil && keyKept(dir) {
		// Nothing to move aside, but not a new store either.
		report.Damage = fmt.Errorf("it is missing, though the directory's record key (%s) shows berth kept its runs in it: it was removed or lost", KeyFile)
		report.SalvageNote = "no run could be read: the file is gone"
	}
	if info != nil && info.Size() == 0 && keyKept(dir) {
		// bbolt would take an empty file for a new store and write one
		// over it: the runs it held would be lost without a word.
		err = &damage{fmt.Errorf("it is empty (0 bytes), though the directory's record key (%s) shows berth kept its runs in it: it was truncated", KeyFile)}
	} else {
		db, runs, err = openChecked(path, wait)
	}
	var dmg *damage
	if errors.As(err, &dmg) {
		report.Damage = dmg.err
		if report.MovedTo, err = moveAside(path); err != nil {
			return nil, report, fmt.Errorf("runstore: %s is unreadable (%v) and could not be moved aside: %w; move it away by hand and start berth again", path, dmg.err, err)
		}
		if info != nil && info.Size() == 0 {
			report.SalvageNote = "no run could be read from it: it holds nothing"
		} else {
			report.Salvaged, report.SalvageNote = salvage(report.MovedTo)
		}
		report.Fresh = true
		db, runs, err = openChecked(path, wait)
	}
	if err != nil {
		return nil, report, err
	}
	report.Runs = runs
	if report.Fresh {
		if err := syncDir(dir); err != nil {
			db.Close()
			return nil, report, fmt.Errorf("runstore: syncing state directory %s: %w", dir, err)
		}
	}
	return db, report, nil
}

// keyKept reports whether the state directory dir holds a record key
// (KeyFile): every Open that got past its database file made one.
func keyKept(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, KeyFile))
	return err == nil
}

// openChecked opens the database file at path (creating it 0600) and
// checks it: its size, every record's pages, bbolt's consistency check,
// its format. It returns the number of records. An error of type
// *damage means the file is unusable.
func openChecked(path string, wait time.Duration) (*bolt.DB, int, error) {
	var db *bolt.DB
	err := protect(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: wait, OpenFile: openNoFollow})
		return err
	})
	var dmg *damage
	switch {
	case err == nil:
	case errors.As(err, &dmg):
		return nil, 0, err
	case boltDamage(err):
		return nil, 0, &damage{err}
	case errors.Is(err, berrors.ErrTimeout):
		return nil, 0, fmt.Errorf("%w: another process holds %s (not a berth, which would hold %s first; perhaps the bbolt tool): stop it", ErrLocked, path, LockFile)
	default:
		return nil, 0, fmt.Errorf("runstore: opening %s: %w", path, err)
	}
	runs, err := check(db, path)
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(runsBucket); err != nil {
				return err
			}
			meta, err := tx.CreateBucketIfNotExists(metaBucket)
			if err != nil || meta.Get(formatKey) != nil {
				return err
			}
			return meta.Put(formatKey, []byte(strconv.Itoa(format)))
		})
	}
	if err != nil {
		db.Close()
		return nil, 0, err
	}
	return db, runs, nil
}

// maxCheckErrors is how many of bbolt's consistency errors a damage
// report quotes.
const maxCheckErrors = 3

// check reads every page the records use, then runs bbolt's consistency
// check, and reads the store's format.
func check(db *bolt.DB, path string) (int, error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	runs := 0
	var formatErr error
	err = protect(func() error {
		return db.View(func(tx *bolt.Tx) error {
			if tx.Size() > info.Size() {
				return &damage{fmt.Errorf("the file is %d bytes but its own index needs %d: it was truncated", info.Size(), tx.Size())}
			}
			if meta := tx.Bucket(metaBucket); meta != nil {
				if v := meta.Get(formatKey); v != nil {
					n, err := strconv.Atoi(string(v))
					if err != nil {
						return &damage{fmt.Errorf("its format version %q is not a number", v)}
					}
					if n > format {
						formatErr = fmt.Errorf("runstore: %s was written by a newer berth (store format %d; this berth reads format %d); run that berth, or give this one another --state-dir", path, n, format)
						return nil
					}
				}
			}
			if b := tx.Bucket(runsBucket); b != nil {
				var sum byte
				err := b.ForEach(func(k, v []byte) error {
					runs++
					if len(v) > 0 {
						sum += v[0] + v[len(v)-1] // fault now on a value that runs past the file's end
					}
					return nil
				})
				runtime.KeepAlive(sum)
				if err != nil {
					return &damage{err}
				}
			}
			var errs []string
			for err := range tx.Check() {
				if len(errs) < maxCheckErrors {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) > 0 {
				return &damage{fmt.Errorf("its consistency check failed: %s", strings.Join(errs, "; "))}
			}
			return nil
		})
	})
	if err == nil {
		err = formatErr
	}
	return runs, err
}

// moveAside renames an unreadable database file to
// <name>.corrupt-<UTC time>, never over an existing file.
func moveAside(path string) (string, error) {
	base := path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")
	moved := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(moved); errors.Is(err, fs.ErrNotExist) {
			break
		}
		moved = base + "-" + strconv.Itoa(i)
	}
	if err := os.Rename(path, moved); err != nil {
		return "", err
	}
	return moved, syncDir(filepath.Dir(path))
}

// maxSalvageScan bounds how much of an unreadable file salvage scans
// byte by byte.
const maxSalvageScan = 4 * MaxRecord

// salvage reads what records it can from an unreadable database file:
// first through the file's own index, then, when that fails part way,
// by scanning its bytes for records.
func salvage(path string) ([]Record, string) {
	found := map[string]Record{}
	ierr := salvageIndexed(path, found)
	indexed := len(found)
	if ierr == nil {
		return sorted(found), fmt.Sprintf("%d runs read through the file's own index", indexed)
	}
	scanned, serr := salvageRaw(path, found)
	var note string
	if indexed == 0 {
		note = fmt.Sprintf("its index could not be read (%v); %d found by scanning its bytes", ierr, scanned)
	} else {
		note = fmt.Sprintf("%d read through its index before that failed (%v), %d more found by scanning its bytes", indexed, ierr, scanned)
	}
	if scanned > 0 {
		note += " (a scanned record may be of a run closed before the damage, or an older version of a run's record)"
	}
	if serr != nil {
		note += fmt.Sprintf("; the scan failed: %v", serr)
	}
	if len(found) == 0 {
		note = "no run could be read from it: " + note
	}
	return sorted(found), note
}

func sorted(m map[string]Record) []Record {
	records := make([]Record, 0, len(m))
	for _, r := range m {
		records = append(records, r)
	}
	sortRecords(records)
	return records
}

// salvageIndexed reads the records of the runs bucket of a damaged file
// through bbolt, read-only, keeping those it reads before a failure.
func salvageIndexed(path string, found map[string]Record) error {
	var db *bolt.DB
	err := protect(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: DefaultLockWait, OpenFile: openNoFollow})
		return err
	})
	if err != nil {
		return err
	}
	defer db.Close()
	return protect(func() error {
		return db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket(runsBucket)
			if b == nil {
				return errors.New("it has no runs")
			}
			return b.ForEach(func(k, v []byte) error {
				if r, err := decode(string(k), v); err == nil {
					found[r.ID] = r
				}
				return nil
			})
		})
	})
}

// recordStart is how every stored record's JSON begins: ID is Record's
// first field.
var recordStart = []byte(`{"id":"`)

// salvageRaw scans a damaged file's bytes for records of runs not in
// found, keeping the most recently updated copy of each, and returns how
// many it added.
func salvageRaw(path string, found map[string]Record) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSalvageScan))
	if err != nil {
		return 0, err
	}
	scanned := map[string]Record{}
	for i := 0; ; {
		j := bytes.Index(data[i:], recordStart)
		if j < 0 {
			break
		}
		i += j
		var r Record
		if json.NewDecoder(bytes.NewReader(data[i:])).Decode(&r) == nil && plausible(r) {
			if _, ok := found[r.ID]; !ok {
				if old, ok := scanned[r.ID]; !ok || r.Updated.After(old.Updated) {
					scanned[r.ID] = r
				}
			}
		}
		i += len(recordStart)
	}
	for id, r := range scanned {
		found[id] = r
	}
	return len(scanned), nil
}

// plausible tells a run's record from another JSON object that happens
// to have an id (a resource's state inside a record, for one).
func plausible(r Record) bool {
	return checkID(r.ID) == nil && r.Sandbox != "" && !r.Opened.IsZero()
}
