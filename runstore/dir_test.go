package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lockSlack is how much later than its LockWait Open may fail on a busy
// machine.
const lockSlack = 2 * time.Second

// checkLocked fails unless err is a lock error that names dir and the
// holder's pid and says what to do.
func checkLocked(t *testing.T, err error, dir string, pid int) {
	t.Helper()
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open on a held directory = %v, want ErrLocked", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("pid %d ", pid), "stop the other berth", "its own --state-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("lock error %q does not say %q", err, want)
		}
	}
}

// TestLockSecondProcess holds a state directory in a second process: Open
// fails fast, naming the holder, until the holder closes the store or is
// killed.
func TestLockSecondProcess(t *testing.T) {
	dir := t.TempDir()
	for _, end := range []string{"close", "kill -9"} {
		t.Run(end, func(t *testing.T) {
			p := startChild(t, "hold", dir, "", "ready")
			start := time.Now()
			_, _, err := Open(dir, Options{})
			if took := time.Since(start); took > DefaultLockWait+lockSlack {
				t.Errorf("Open took %v to refuse, want about %v", took, DefaultLockWait)
			}
			checkLocked(t, err, dir, p.cmd.Process.Pid)

			if end == "close" {
				p.stdin.Close()
			} else {
				p.cmd.Process.Kill()
			}
			p.wait(t)
			d, report, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("Open after the holder's %s: %v", end, err)
			}
			if report.Damage != nil {
				t.Fatalf("after the holder's %s: %v", end, report)
			}
			d.Close()
		})
	}
}

func TestLockSameProcess(t *testing.T) {
	dir := t.TempDir()
	d, _ := open(t, dir)
	wait := 100 * time.Millisecond
	start := time.Now()
	_, _, err := Open(dir, Options{LockWait: wait})
	if took := time.Since(start); took < wait || took > wait+lockSlack {
		t.Errorf("Open took %v to refuse, want about %v", took, wait)
	}
	checkLocked(t, err, dir, os.Getpid())
	d.Close()
	d2, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	d2.Close()
}

func TestPermissions(t *testing.T) {
	const nobody = 65534
	root := os.Geteuid() == 0
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) // dir exists, 0700
		root  bool                           // needs root (chown)
		ok    bool
		want  string // in the error
	}{
		{name: "0700", ok: true},
		{name: "0755", setup: chmod(0o755), ok: true},
		{name: "group writable", setup: chmod(0o770), want: "writable by its group or by others"},
		{name: "world writable", setup: chmod(0o707), want: "writable by its group or by others"},
		{name: "sticky 1777", setup: chmod(0o777 | fs.ModeSticky), want: "writable by its group or by others"},
		{name: "owned by another user", setup: chown(nobody, ""), root: true, want: "owned by uid 65534"},
		{name: "database readable by others", setup: dbFile(0o644), want: "read or written by its group or others"},
		{name: "database writable by group", setup: dbFile(0o620), want: "read or written by its group or others"},
		{name: "database owned by another user", setup: func(t *testing.T, dir string) {
			dbFile(0o600)(t, dir)
			chown(nobody, DBFile)(t, dir)
		}, root: true, want: "owned by uid 65534"},
		{name: "database is a symlink", setup: func(t *testing.T, dir string) {
			if err := os.Symlink("/etc/passwd", filepath.Join(dir, DBFile)); err != nil {
				t.Fatal(err)
			}
		}, want: "not a regular file"},
		{name: "not a directory", setup: func(t *testing.T, dir string) {
			os.Remove(dir)
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && !root {
				t.Skip("needs root to give a file to another user")
			}
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			d, _, err := Open(dir, Options{})
			if tt.ok {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				d.Close()
				return
			}
			if err == nil {
				d.Close()
				t.Fatal("Open succeeded, want it refused")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open = %v, want an error saying %q", err, tt.want)
			}
			if tt.want == "not a directory" {
				return
			}
			if !errors.Is(err, fs.ErrPermission) {
				t.Errorf("Open = %v, want it to wrap fs.ErrPermission", err)
			}
			if tt.want != "not a regular file" && !strings.Contains(err.Error(), "resident supervisor") {
				t.Errorf("error %q does not say why permissions matter", err)
			}
		})
	}
}

func chmod(mode fs.FileMode) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func chown(uid int, name string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		if err := os.Chown(filepath.Join(dir, name), uid, -1); err != nil {
			t.Fatal(err)
		}
	}
}

// dbFile makes a valid database file with mode perm.
func dbFile(perm fs.FileMode) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		d, _, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		if err := os.Chmod(filepath.Join(dir, DBFile), perm); err != nil {
			t.Fatal(err)
		}
	}
}
