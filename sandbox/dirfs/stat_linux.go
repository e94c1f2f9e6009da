package dirfs

import (
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lstatAt stats the entry name of the open directory dir without following
// a final symbolic link. name must be a single path component.
func lstatAt(dir *os.File, name string) (fs.FileInfo, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
		}
		break
	}
	return &statInfo{name: name, st: st}, nil
}

// statInfo is an fs.FileInfo built from a stat result, as os builds its
// own; Sys returns a *syscall.Stat_t like os does.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (fi *statInfo) Name() string       { return fi.name }
func (fi *statInfo) Size() int64        { return fi.st.Size }
func (fi *statInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Sec, fi.st.Mtim.Nsec) }
func (fi *statInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *statInfo) Sys() any {
	return &syscall.Stat_t{
		Dev: fi.st.Dev, Ino: fi.st.Ino, Nlink: fi.st.Nlink, Mode: fi.st.Mode,
		Uid: fi.st.Uid, Gid: fi.st.Gid, Rdev: fi.st.Rdev, Size: fi.st.Size,
		Blksize: fi.st.Blksize, Blocks: fi.st.Blocks,
		Atim: syscall.Timespec(fi.st.Atim), Mtim: syscall.Timespec(fi.st.Mtim), Ctim: syscall.Timespec(fi.st.Ctim),
	}
}

func (fi *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if fi.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if fi.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if fi.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
