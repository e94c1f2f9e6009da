package debug

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"berth.dev/berth/tools"
)

// envName is what a launch's env may name: a portable variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envRule refuses a family of environment variables: the names equal to
// one of names, or starting with one of prefixes unless they are in keep.
type envRule struct {
	names, prefixes, keep []string
	why                   string
}

func (r envRule) matches(name string) bool {
	if slices.Contains(r.names, name) {
		return true
	}
	return !slices.Contains(r.keep, name) && slices.ContainsFunc(r.prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// envEverywhere is refused in every sandbox.
var envEverywhere = []envRule{
	{prefixes: []string{"BERTH_"}, why: "BERTH_* is berth's own configuration, which no call sets"},
}

// envOnHost is refused on the host, where berth runs no program of the
// workspace that the call does not name (docs/security.md): each family
// makes a host program — the loader, the interpreter starting the
// debuggee (and debugpy's launcher), the Go toolchain that delve builds
// with (dlv applies a launch's env to itself) — load or run code from
// somewhere the call does not name, or find other programs than the
// host's. In a container the container is the boundary, and only
// envEverywhere applies.
var envOnHost = []envRule{
	{prefixes: []string{"LD_", "DYLD_"}, names: []string{"GCONV_PATH"},
		why: "it makes the dynamic loader load other code into every program"},
	{names: []string{"PATH", "HOME", "BASH_ENV", "ENV"}, prefixes: []string{"XDG_"},
		why: "it changes which programs, settings and startup files the host's tools find"},
	{prefixes: []string{"PYTHON", "PYDEVD_", "DEBUGPY_"},
		keep: []string{"PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER", "PYTHONDEVMODE", "PYTHONTRACEMALLOC", "PYTHONASYNCIODEBUG"},
		why:  "it makes python (or debugpy) import or run other code as it starts (PYTHONUNBUFFERED, PYTHONIOENCODING, PYTHONUTF8, PYTHONHASHSEED, PYTHONDONTWRITEBYTECODE, PYTHONFAULTHANDLER, PYTHONDEVMODE, PYTHONTRACEMALLOC and PYTHONASYNCIODEBUG may be set)"},
	{names: []string{"NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS"},
		why: "it makes an interpreter load other code as it starts"},
	{prefixes: []string{"GO", "CGO_"}, names: []string{"CC", "CXX", "FC", "AR", "PKG_CONFIG", "GCCGO"},
		keep: []string{"GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK"},
		why:  "it changes how the Go toolchain builds, and delve builds with the launch's environment (the Go runtime's GODEBUG, GOGC, GOMAXPROCS, GOMEMLIMIT and GOTRACEBACK may be set)"},
}

// environment checks a launch's env: every name must be a variable name
// that no rule for this sandbox refuses, and no value may hold a NUL byte.
// It returns the names sorted, for a stable launch request.
func (s *Supervisor) environment(env map[string]string) ([]string, error) {
	names := slices.Sorted(maps.Keys(env))
	for _, name := range names {
		if !envName.MatchString(name) {
			return nil, tools.Fail("env: %q is not a variable name: use letters, digits and _, not starting with a digit", name)
		}
		if strings.IndexByte(env[name], 0) >= 0 {
			return nil, tools.Fail("env: the value of %s holds a NUL byte", name)
		}
		if why := refusedBy(envEverywhere, name); why != "" {
			return nil, tools.Fail("env: %s cannot be set: %s", name, why)
		}
		if why := refusedBy(envOnHost, name); why != "" && s.opts.Host {
			return nil, tools.Fail("env: %s cannot be set on the host: %s", name, why)
		}
	}
	return names, nil
}

// refusedBy returns why the first of rules that matches name refuses it,
// or "".
func refusedBy(rules []envRule, name string) string {
	for _, r := range rules {
		if r.matches(name) {
			return r.why
		}
	}
	return ""
}

// envList writes env as lldb-dap takes it: "NAME=value" strings, in the
// order of names.
func envList(env map[string]string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%s=%s", n, env[n])
	}
	return out
}
