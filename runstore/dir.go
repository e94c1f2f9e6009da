package runstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// secretsNote says why the state directory's permissions matter.
const secretsNote = "it holds the secrets that authenticate berth to each run's resident supervisor"

// prepareDir creates dir (0700) when it is missing and refuses one that
// another user owns or that group or others may write.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("runstore: creating state directory %s: %w; give berth a --state-dir it can create", dir, err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("runstore: state directory %s: %w", dir, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("runstore: state directory %s is not a directory; give berth a --state-dir that is one", dir)
	}
	if err := checkOwner(dir, info); err != nil {
		return err
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("runstore: state directory %s is writable by its group or by others (mode %#o); %s: run chmod go-w %s, or give berth a private --state-dir: %w",
			dir, perm, secretsNote, dir, fs.ErrPermission)
	}
	return nil
}

// checkOwner refuses a file or directory owned by another user.
func checkOwner(path string, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("runstore: %s is owned by uid %d, not by berth's uid %d; %s: run berth as its owner, or give it a --state-dir of its own: %w",
			path, st.Uid, uid, secretsNote, fs.ErrPermission)
	}
	return nil
}

// checkDBFile refuses a database file that is not a regular file, that
// another user owns, or that group or others may read or write. It
// returns nil for a missing file.
func checkDBFile(path string) (fs.FileInfo, error) {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runstore: database file %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("runstore: database file %s is not a regular file (%s); remove it, or give berth another --state-dir: %w", path, info.Mode().Type(), fs.ErrPermission)
	}
	if err := checkOwner(path, info); err != nil {
		return nil, err
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("runstore: database file %s may be read or written by its group or others (mode %#o); %s: run chmod 600 %s (and consider the secrets in it exposed): %w",
			path, perm, secretsNote, path, fs.ErrPermission)
	}
	return info, nil
}

// openNoFollow opens files for bbolt without following a symbolic link.
func openNoFollow(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
}

// lockRetry is how often lockDir tries again while another berth holds
// the directory.
const lockRetry = 50 * time.Millisecond

// lockDir takes dir's lock file (flock, exclusive), waiting at most wait,
// and writes who holds it into the file. The kernel drops the lock when
// the holder exits, however it exits: a lock is never stale.
func lockDir(dir string, wait time.Duration) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := openNoFollow(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("runstore: opening lock file %s: %w; berth's user must be able to read and write its state directory: run chmod 700 %s, or give berth a --state-dir of its own", path, err, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("runstore: opening lock file %s: %w", path, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("runstore: locking %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			holder := readHolder(f)
			f.Close()
			return nil, fmt.Errorf("%w: %s is held by another berth (%s); stop the other berth, or give this one its own --state-dir",
				ErrLocked, dir, holder)
		}
		time.Sleep(lockRetry)
	}
	host, _ := os.Hostname()
	note := fmt.Sprintf("pid %d on host %s since %s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(note), 0) // best effort: it only names the holder
	}
	return f, nil
}

// readHolder reads who holds a lock file, as its holder wrote it.
func readHolder(f *os.File) string {
	buf := make([]byte, 256)
	n, _ := f.ReadAt(buf, 0)
	line, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	if len(line) == 0 {
		return "holder unknown: it did not record its pid"
	}
	q := strconv.QuoteToGraphic(string(line)) // the file is not trusted to be printable
	return q[1 : len(q)-1]
}

// unlockDir lets go of a lock taken by lockDir.
func unlockDir(f *os.File) {
	f.Truncate(0)
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}
