package kube

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// findScript prints the first $3… directory's copy of $2 whose SHA-256 is
// $1 and exits 0; it exits 1 when none matches, 3 without sha256sum.
const findScript = `h=$1; rel=$2; shift 2
command -v sha256sum >/dev/null 2>&1 || exit 3
for d; do
	f="$d/$rel"
	if [ -f "$f" ] && [ -x "$f" ]; then
		s=$(sha256sum < "$f") && [ "${s%% *}" = "$h" ] && printf '%s\n' "$f" && exit 0
	fi
done
exit 1`

// placeScript writes its stdin to $1 atomically and checks that the
// result runs (a noexec mount does not).
const placeScript = `t="$1.tmp-$$"
if mkdir -p "${1%/*}" && cat > "$t" && chmod 755 "$t" && mv -f "$t" "$1"; then
	if o=$("$1" version 2>&1); then exit 0; fi
	echo "written, but it does not run there (a noexec mount?): $o" >&2
	rm -f "$1"
	exit 1
fi
rm -f "$t"
exit 1`

// Place makes the agent available in the container, once per transport
// and binary hash, at <dir>/shim-<hash12>/berth-shim for the first
// directory of shim.PlaceDirs where it can be written and run, and returns that
// path. A copy already there with the same SHA-256 is reused without
// sending the binary. Place needs sh (and, to reuse a copy, sha256sum) in
// the container; without sh, or without a writable directory, it fails
// with an error wrapping sandbox.ErrUnsupported.
func (t *Transport) Place(ctx context.Context, bin *shim.Binary) (string, error) {
	return t.once.Place(ctx, bin, "kube: place agent in "+t.name(), t.place)
}

func (t *Transport) place(ctx context.Context, bin *shim.Binary) (string, error) {
	data, sum, err := bin.Verified()
	if err != nil {
		return "", fmt.Errorf("kube: place agent: %w", err)
	}
	hash := hex.EncodeToString(sum[:])
	rel := bin.PlaceName()

	// A copy placed before, by this or another berth, is reused.
	find := append([]string{"sh", "-c", findScript, "sh", hash, rel}, shim.PlaceDirs...)
	out, errOut, code, err := t.run(ctx, find, nil)
	if err != nil {
		return "", t.noShell(err, "", "")
	}
	if code == 0 {
		if p := strings.TrimSpace(out); path.IsAbs(p) {
			return p, nil
		}
	}
	if code != 0 && code != 1 && code != 3 {
		return "", t.noShell(fmt.Errorf("sh exited with code %d", code), out, errOut)
	}

	var failures []string
	for _, dir := range shim.PlaceDirs {
		target := path.Join(dir, rel)
		_, errOut, code, err := t.run(ctx, []string{"sh", "-c", placeScript, "sh", target}, data)
		if err != nil {
			return "", err
		}
		if code == 0 {
			return target, nil
		}
		failures = append(failures, fmt.Sprintf("%s: %s", dir, strings.TrimSpace(errOut)))
	}
	return "", fmt.Errorf("kube: %s: no directory of %s is writable and executable, so berth cannot place its supervisor (berth-shim); mount a writable emptyDir volume at /tmp or give the container a writable root file system (%s): %w",
		t.name(), strings.Join(shim.PlaceDirs, ", "), strings.Join(failures, "; "), sandbox.ErrUnsupported)
}

// noShell explains a failure to run sh: when the runtime says sh does not
// exist, the container cannot host the agent.
func (t *Transport) noShell(err error, out, errOut string) error {
	if errors.Is(err, sandbox.ErrGone) {
		return err
	}
	text := err.Error() + " " + out + " " + errOut
	if strings.Contains(text, "not found") || strings.Contains(text, "no such file") {
		return fmt.Errorf("kube: %s has no sh (%s), which berth needs to place its supervisor (berth-shim) through a pod exec; use an image with a POSIX shell (a Debian, Alpine or busybox base): %w",
			t.name(), strings.TrimSpace(text), sandbox.ErrUnsupported)
	}
	return fmt.Errorf("kube: place agent in %s: %w (output: %s)", t.name(), err, strings.TrimSpace(out+" "+errOut))
}

// run runs args with stdin as its input and returns its stdout, stderr
// and exit code.
func (t *Transport) run(ctx context.Context, args []string, stdin []byte) (string, string, int, error) {
	out, errOut, code, err := shim.RunExec(ctx, t, shim.ExecSpec{Args: args}, stdin)
	if ctx.Err() != nil {
		return "", "", -1, fmt.Errorf("kube: place agent in %s: %w", t.name(), err)
	}
	return out, errOut, code, err
}
