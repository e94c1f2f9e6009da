package shim

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// prebuilt holds the agents a release build put in prebuilt/ before it
// built berth: berth-shim-linux-ARCH for each of [Arches]. A developer's
// build embeds only the README.
//
//go:embed prebuilt
var prebuilt embed.FS

// Embedded returns the agent for linux/arch that this berth carries, or
// nil when it carries none (a build without release/build).
func Embedded(arch string) []byte {
	data, err := prebuilt.ReadFile("prebuilt/" + BinaryName + "-linux-" + arch)
	if err != nil {
		return nil
	}
	return data
}

// embedded writes the agent for linux/arch that this berth carries to a
// file, once per content, and returns it; nil and no error when berth
// carries none. The file goes to $XDG_CACHE_HOME/berth/shim/<hash>/ (or
// ~/.cache/…), or below the temporary directory when there is no cache
// directory or it cannot be written (a read-only root with a tmpfs /tmp).
func embedded(arch string) (*Binary, error) {
	data := Embedded(arch)
	if data == nil {
		return nil, nil
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	var dirs []string
	if cache, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(cache, "berth", "shim", hash[:24]))
	}
	dirs = append(dirs, filepath.Join(os.TempDir(), "berth-"+strconv.Itoa(os.Getuid()), "shim", hash[:24]))
	var errs []error
	for _, dir := range dirs {
		p := filepath.Join(dir, BinaryName+"-linux-"+arch)
		if b, err := binaryAt(p); err == nil && b.Hash == hash {
			return b, nil
		}
		if err := writeExecutable(dir, p, data); err != nil {
			errs = append(errs, err)
			continue
		}
		return binaryAt(p)
	}
	return nil, fmt.Errorf("shim: write berth's embedded agent for linux/%s to a file: %w; set $XDG_CACHE_HOME or $TMPDIR to a writable directory", arch, errors.Join(errs...))
}

// writeExecutable writes data to p through a temporary file in dir, so
// that a concurrent reader sees the whole file or none.
func writeExecutable(dir, p string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o755); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}
