package main

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"berth.dev/berth/sandbox/host"
)

// prSetDumpable is prctl's PR_SET_DUMPABLE.
const prSetDumpable = 4

// protectProcess makes berth's own process undumpable: its /proc entries
// (environ with BERTH_TOKEN, cmdline with --token-file, mem, fd) become
// root's, and processes of berth's user can no longer read them or trace
// berth. It is called at the start of berth serve; a failure is logged,
// not fatal (berth still serves, with /proc open to its own user).
func protectProcess(log *slog.Logger) {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		log.Warn("could not make berth undumpable (prctl PR_SET_DUMPABLE 0): processes of berth's user can read its environment and command line through /proc; set --host-user so that host processes run as another user", "err", e)
	}
}

// envName is what --host-env accepts as a variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// hostEnv turns --host-env entries (NAME, taken from berth's environment
// through lookup, or NAME=VALUE) into KEY=VALUE entries for host.Options.
// berth's own variables (BERTH_*) are refused: they hold its token and
// settings, which no sandboxed process needs.
func hostEnv(specs []string, lookup func(string) (string, bool)) ([]string, error) {
	var env []string
	for _, spec := range specs {
		name, value, set := strings.Cut(spec, "=")
		if !envName.MatchString(name) {
			return nil, fmt.Errorf("berth: --host-env %q: %q is not a variable name; give NAME or NAME=VALUE", spec, name)
		}
		if strings.HasPrefix(strings.ToUpper(name), "BERTH_") {
			return nil, fmt.Errorf("berth: --host-env %q: berth's own variables (BERTH_*, among them %s) never pass to host processes; drop it", spec, EnvToken)
		}
		if !set {
			v, ok := lookup(name)
			if !ok {
				return nil, fmt.Errorf("berth: --host-env %s: %s is not set in berth's environment; set it, or give --host-env %s=VALUE", name, name, name)
			}
			value = v
		}
		env = append(env, name+"="+value)
	}
	return env, nil
}

// hostOptions are the host sandbox's options from the flags: the host
// user (--host-user), the extra environment (--host-env) and the limits
// (--host-pids-max, --host-memory-max).
func hostOptions(g *globalFlags) (host.Options, error) {
	var opts host.Options
	env, err := hostEnv(g.hostEnv, os.LookupEnv)
	if err != nil {
		return opts, err
	}
	opts.Env = env
	if g.hostUser != "" {
		u, err := host.LookupUser(g.hostUser)
		if err != nil {
			return opts, fmt.Errorf("berth: --host-user: %w", err)
		}
		opts.User = u
	}
	opts.PidsMax = g.hostPidsMax
	mem, err := parseSize(g.hostMemoryMax)
	if err != nil {
		return opts, fmt.Errorf("berth: --host-memory-max: %w", err)
	}
	opts.MemoryMax = mem
	opts.Logger = g.logger(os.Stderr)
	return opts, nil
}

// parseSize reads a byte count with an optional K, M, G or T suffix
// (powers of 1024); "" is zero (the default) and a negative number means
// no limit.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	num := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "B"), "I")
	if n := len(num); n > 0 {
		if i := strings.IndexByte("KMGT", num[n-1]); i >= 0 {
			mult = 1 << (10 * (i + 1))
			num = num[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: give bytes, or a number with K, M, G or T (for example 4G), or -1 for no limit", s)
	}
	if v > 0 && v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return v * mult, nil
}

// newHostProvider is the host provider of the flags; it logs which limits
// host processes get.
func newHostProvider(g *globalFlags) (*host.Provider, error) {
	opts, err := hostOptions(g)
	if err != nil {
		return nil, err
	}
	limits, full := opts.Limits()
	if opts.User != nil && !full {
		opts.Logger.Warn(limits)
	} else {
		opts.Logger.Info(limits)
	}
	if !full {
		// Said once here; each sandbox warns only when it falls short of
		// what this machine gave at start.
		opts.Logger = nil
	}
	return &host.Provider{Options: opts}, nil
}

// checkTokenFile refuses a token file that another user may read when host
// processes run as a host user: that user must not find berth's token.
func checkTokenFile(path, hostUser string) error {
	if path == "" || hostUser == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("berth: token file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("berth: token file %s has mode %04o: group and others may read it, and host processes run as %s; run `chmod 600 %s` (owned by berth's user)", path, perm, hostUser, path)
	}
	return nil
}
