package containerd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// openTaskRoot opens the root file system of the task whose init has host
// pid pid, when this machine shows it (berth runs beside containerd, in its
// PID namespace). The process must name container id in its cgroup or
// mount table: from another PID namespace the same pid is some other
// process. Symbolic links inside resolve within the returned root.
func openTaskRoot(pid uint32, id string) (*os.Root, bool) {
	if pid == 0 || !mentions(pid, id) {
		return nil, false
	}
	root, err := os.OpenRoot(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		return nil, false
	}
	return root, true
}

// mentions reports whether process pid's cgroup or mount table names the
// container id.
func mentions(pid uint32, id string) bool {
	for _, f := range []string{"cgroup", "mountinfo"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err == nil && bytes.Contains(b, []byte(id)) {
			return true
		}
	}
	return false
}

// placeLocal writes the agent at <dir>/rel inside root for the first
// directory of shim.PlaceDirs that can be written, reusing a matching copy.
func (t *Transport) placeLocal(root *os.Root, rel string, data []byte, sum [32]byte) (string, error) {
	for _, dir := range shim.PlaceDirs {
		target := path.Join(dir, rel)
		if sameFile(root, strings.TrimPrefix(target, "/"), sum) {
			return target, nil
		}
	}
	var failures []string
	for _, dir := range shim.PlaceDirs {
		target := path.Join(dir, rel)
		if err := writeAgent(root, strings.TrimPrefix(target, "/"), data); err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		return target, nil
	}
	return "", t.unwritable(failures)
}

func (t *Transport) unwritable(failures []string) error {
	return fmt.Errorf("containerd: container %s: no directory of %s is writable, so berth cannot place its supervisor (berth-shim); mount a writable volume at /tmp or give the container a writable root file system (%s): %w",
		t.name(), strings.Join(shim.PlaceDirs, ", "), strings.Join(failures, "; "), sandbox.ErrUnsupported)
}

// sameFile reports whether name is an executable regular file in root with
// the content whose SHA-256 is sum.
func sameFile(root *os.Root, name string, sum [32]byte) bool {
	fi, err := root.Lstat(name)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return false
	}
	f, err := root.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	return bytes.Equal(h.Sum(nil), sum[:])
}

// writeAgent writes data to name in root atomically (a temporary file
// renamed over it), executable by every user.
func writeAgent(root *os.Root, name string, data []byte) error {
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	tmp := name + ".tmp-" + randomSuffix()
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(tmp, 0o755)
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

// placeScript writes its stdin to $1 atomically unless $1 already holds
// content with SHA-256 $2 (when sha256sum exists to tell).
const placeScript = `set -e
if [ -f "$1" ] && [ -x "$1" ] && command -v sha256sum >/dev/null 2>&1 && [ "$(sha256sum < "$1" | cut -d' ' -f1)" = "$2" ]; then exit 0; fi
mkdir -p "$(dirname "$1")"
cat > "$1.tmp-$$"
chmod 755 "$1.tmp-$$"
mv -f "$1.tmp-$$" "$1"`

// placeExec pipes the agent into the container through an exec of sh as
// root, for when this machine does not show the task's root file system.
func (t *Transport) placeExec(ctx context.Context, rel string, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	var failures []string
	for _, dir := range shim.PlaceDirs {
		target := path.Join(dir, rel)
		_, errOut, code, err := shim.RunExec(ctx, t, shim.ExecSpec{Args: []string{"sh", "-c", placeScript, "sh", target, hex.EncodeToString(sum[:])}, User: "0"}, data)
		if ctx.Err() != nil {
			return "", fmt.Errorf("containerd: place agent in container %s: %w", t.name(), err)
		}
		if err != nil {
			return "", err
		}
		if code == 0 {
			return target, nil
		}
		failures = append(failures, fmt.Sprintf("%s: %s", dir, strings.TrimSpace(errOut)))
	}
	return "", t.unwritable(failures)
}

// errNoUser is returned for a user name the container's /etc/passwd does
// not know.
var errNoUser = errors.New("unknown user")

// resolveUser turns "name", "uid", "name:group" or "uid:gid" into the ids
// to run as, reading /etc/passwd and /etc/group of the task with host pid
// pid for names.
func resolveUser(pid uint32, user string) (u specs.User, err error) {
	name, group, hasGroup := strings.Cut(user, ":")
	var root *os.Root
	readFile := func(p string) []byte {
		if root == nil {
			r, err := os.OpenRoot(fmt.Sprintf("/proc/%d/root", pid))
			if err != nil {
				return nil
			}
			root = r
		}
		b, _ := root.ReadFile(p)
		return b
	}
	defer func() {
		if root != nil {
			root.Close()
		}
	}()
	uid, gid, err := lookupID(readFile, "etc/passwd", name, 2, 3)
	if err != nil {
		return u, fmt.Errorf("user %q: %w; name a user of the container's /etc/passwd or a numeric uid", name, err)
	}
	u.UID = uid
	u.GID = gid
	if hasGroup {
		g, _, err := lookupID(readFile, "etc/group", group, 2, -1)
		if err != nil {
			return u, fmt.Errorf("group %q: %w; name a group of the container's /etc/group or a numeric gid", group, err)
		}
		u.GID = g
	}
	return u, nil
}

// lookupID finds name (or a numeric id) in a passwd-style file and returns
// the id in field idField and, when gidField >= 0, the gid in that field.
// A numeric name not in the file is used as is, with gid 0.
func lookupID(readFile func(string) []byte, file, name string, idField, gidField int) (uint32, uint32, error) {
	num, numErr := parseID(name)
	for line := range strings.SplitSeq(string(readFile(file)), "\n") {
		f := strings.Split(line, ":")
		if len(f) <= max(idField, gidField) {
			continue
		}
		id, err := parseID(f[idField])
		if err != nil || (f[0] != name && (numErr != nil || id != num)) {
			continue
		}
		var gid uint32
		if gidField >= 0 {
			gid, _ = parseID(f[gidField])
		}
		return id, gid, nil
	}
	if numErr == nil {
		return num, 0, nil
	}
	return 0, 0, fmt.Errorf("%w in the container's /%s", errNoUser, file)
}

func parseID(s string) (uint32, error) {
	var n uint64
	if s == "" || len(s) > 10 {
		return 0, fs.ErrInvalid
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fs.ErrInvalid
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 1<<32-1 {
		return 0, fs.ErrInvalid
	}
	return uint32(n), nil
}
