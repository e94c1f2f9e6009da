package runstore

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Records are sealed: each is stored with a MAC (HMAC-SHA256 under a key
// only berth holds) over its stored bytes and its id, and a record whose
// MAC does not match is not returned as a record. A record is what a
// restarted berth acts on — the sandbox it opens, the tenant that may
// use the run, the resident it reattaches to — so one changed outside
// berth must not be adopted as written. (The sealed package's SHA-256 on
// a resource's snapshot only detects damage: anyone may recompute it.)

const (
	// KeyFile holds the key a Dir seals its records with: KeySize random
	// bytes, created (mode 0600) on the first Open of the directory.
	KeyFile = "records.key"
	// KeySize is the length of a record key, in bytes.
	KeySize = 32
)

// sealContext starts every MAC's input, so that a MAC made with the same
// key for another purpose never matches a record's.
const sealContext = "berth-runstore-record-v1\x00"

// ErrForged: a stored record's MAC is missing or does not match its bytes
// (it was changed outside berth, or sealed with another key). Such a
// record is returned as [Unreadable], never as a Record.
var ErrForged = errors.New("runstore: record fails its integrity check")

// Seal returns the MAC of run id's stored bytes data under key.
func Seal(key []byte, id string, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sealContext))
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write(data)
	return m.Sum(nil)
}

// Verify checks mac, stored with run id's bytes data, against key. It
// returns nil when it matches, and an error wrapping ErrForged, naming
// the run and what to do, when it is missing or does not match.
func Verify(key []byte, id string, data, mac []byte) error {
	if len(mac) == 0 {
		return fmt.Errorf("%w: run %s's stored record carries no MAC: it was written outside berth (or by a berth before records were sealed, after this store was already sealed); the run is not adopted: end its resident supervisor by hand if it still runs, then Delete the record", ErrForged, id)
	}
	if !hmac.Equal(mac, Seal(key, id, data)) {
		return fmt.Errorf("%w: run %s's stored record does not match its MAC: it was changed outside berth, or sealed with another key; the run is not adopted: end its resident supervisor by hand if it still runs, then Delete the record", ErrForged, id)
	}
	return nil
}

// DeriveKey derives a record key from secret, a key of at least KeySize
// bytes kept for another purpose (the replicas' shared peer key), so
// that a MAC made with one never stands for the other.
func DeriveKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("berth-runstore-record-key-v1"))
	return m.Sum(nil)
}

// loadKey reads the key file of the state directory dir, creating it
// (mode 0600, KeySize random bytes) when it is missing; created says
// whether it did. Like the database file, it must be a regular file that
// berth's user owns and nobody else may read.
func loadKey(dir string) (key []byte, created bool, err error) {
	path := filepath.Join(dir, KeyFile)
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(dir, path)
	}
	if err != nil {
		return nil, false, fmt.Errorf("runstore: record key %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, false, fmt.Errorf("runstore: record key %s is not a regular file (%s); remove it, or give berth another --state-dir: %w", path, info.Mode().Type(), fs.ErrPermission)
	}
	if err := checkOwner(path, info); err != nil {
		return nil, false, err
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, false, fmt.Errorf("runstore: record key %s may be read or written by its group or others (mode %#o); whoever reads it can forge run records: run chmod 600 %s: %w",
			path, perm, path, fs.ErrPermission)
	}
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, false, fmt.Errorf("runstore: record key %s: %w", path, err)
	}
	defer f.Close()
	key = make([]byte, KeySize+1)
	n, _ := f.Read(key)
	if n != KeySize {
		return nil, false, fmt.Errorf("runstore: record key %s holds %d bytes, not %d: it is not a key berth wrote; restore it, or remove it and the runs recorded with it will not be adopted", path, n, KeySize)
	}
	return key[:KeySize], false, nil
}

// createKey writes a new key to path, which must not exist.
func createKey(dir, path string) ([]byte, bool, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("runstore: creating record key %s: %w", path, err)
	}
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("runstore: writing record key %s: %w", path, err)
	}
	return key, true, nil
}
