// Package agent is berth-shim, the supervisor berth places in a sandbox. It
// uses only the standard library so it builds as one static binary.
//
// Modes, chosen by the first argument:
//
//	berth-shim run [--wait-delay=D] [--direct-stdout] [--user=UID:GID[:G1,G2...]] [--nproc=N] [--cgroup=DIR]... -- PROGRAM ARGS...
//	berth-shim fs [--user=UID:GID[:G1,G2...]] ROOT
//	berth-shim watch [--user=UID:GID[:G1,G2...]] [--skip=NAME]... [--max-pending=N] [--max-watches=N] [--ping-timeout=D] ROOT DIR
//	berth-shim dial tcp 127.0.0.1:PORT | dial unix /path/to/socket
//	berth-shim kill-fs PID ROOT
//	berth-shim resident [--grace=D] DIR
//	berth-shim version
//
// "run" starts the program in a new process group and speaks the run
// protocol on stdin and stdout, from a supervisor below a keeper that
// kills and reaps what is left when the supervisor dies (keeper.go); with --direct-stdout the program writes the
// agent's stdout itself and the agent's frames go to its stderr, so that
// output reaches berth without passing through the agent. With --user the
// program runs as that user and groups while the agent keeps its own (so
// that the program can neither signal nor trace its supervisor), and with
// --nproc it starts with RLIMIT_NPROC N; with --cgroup the agent first
// moves itself into that control group (v1 or v2; once per hierarchy), so
// the program and all its descendants are in it. "fs" serves
// files below ROOT, with --user as that user and groups (so that the
// kernel checks every access as theirs and new files are theirs); "dial" relays raw bytes between stdio and a
// connection; "kill-fs" kills (SIGKILL) process PID when it is a file
// server ("berth-shim fs ... ROOT"), for berth to end a server that stopped
// answering, and succeeds when no such process is left; "resident" is a
// run's resident supervisor, which owns processes across berth's restarts
// and answers on DIR/sock (resident.go); "watch" reports the files that
// change below ROOT/DIR, watched with inotify, as that user (watch.go).
// The frame format is in frame.go.
package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Main runs the agent with args (without the program name) and returns the
// process exit code.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "berth-shim: want a mode: run, fs, watch, dial, resident or version")
		return 2
	}
	switch args[0] {
	case "version":
		fmt.Println(Version)
		return 0
	case "run", modeSupervise:
		o, rest, err := parseRun(args[1:])
		if err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim run: %v\n", err)
			return 2
		}
		if len(rest) < 2 {
			fmt.Fprintln(os.Stderr, "berth-shim run: want -- PROGRAM ARGS...")
			return 2
		}
		if args[0] == "run" {
			return keep(args[1:])
		}
		code := run(rest[1:], o)
		removeOwned(o.remove, o.cred)
		return code
	case "fs":
		rest := args[1:]
		var idle time.Duration
		for len(rest) > 1 {
			flag, v, _ := strings.Cut(rest[0], "=")
			switch flag {
			case "--user":
				c, err := parseCredential(v)
				if err != nil {
					fmt.Fprintf(os.Stderr, "berth-shim fs: bad --user %q: %v; want UID:GID or UID:GID:G1,G2,...\n", v, err)
					return 2
				}
				if err := becomeUser(c); err != nil {
					fmt.Fprintf(os.Stderr, "berth-shim fs: %v\n", err)
					return 1
				}
			case "--idle-exit":
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					fmt.Fprintf(os.Stderr, "berth-shim fs: bad --idle-exit %q\n", v)
					return 2
				}
				idle = d
			default:
				fmt.Fprintf(os.Stderr, "berth-shim fs: unknown flag %q\n", rest[0])
				return 2
			}
			rest = rest[1:]
		}
		if len(rest) != 1 {
			fmt.Fprintln(os.Stderr, "berth-shim fs: want [--user=UID:GID[:GROUPS]] [--idle-exit=DURATION] ROOT")
			return 2
		}
		return serveFS(rest[0], os.Stdin, os.Stdout, idle)
	case "watch":
		o, root, dir, err := parseWatch(args[1:])
		if err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim watch: %v\n", err)
			return 2
		}
		if o.cred != nil {
			if err := becomeUser(o.cred); err != nil {
				fmt.Fprintf(os.Stderr, "berth-shim watch: %v\n", err)
				return 1
			}
		}
		return serveWatch(o, root, dir, os.Stdin, os.Stdout)
	case "kill-fs":
		if len(args) != 3 {
			fmt.Fprintln(os.Stderr, "berth-shim kill-fs: want PID ROOT")
			return 2
		}
		pid, err := strconv.Atoi(args[1])
		if err != nil || pid <= 0 {
			fmt.Fprintf(os.Stderr, "berth-shim kill-fs: bad PID %q\n", args[1])
			return 2
		}
		if err := killFS(pid, args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim kill-fs: %v\n", err)
			return 1
		}
		return 0
	case modeResident, modeResidentServe:
		grace, dir, err := parseResident(args[1:])
		if err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim resident: %v\n", err)
			return 2
		}
		if args[0] == modeResident {
			return keepChild(modeResidentServe, modeResident, args[1:], true, func(ws syscall.WaitStatus) {
				if !ws.Exited() || ws.ExitStatus() != 0 {
					removeDeadResidentDir(dir)
				}
			})
		}
		return serveResident(dir, grace)
	case "dial":
		if len(args) != 3 {
			fmt.Fprintln(os.Stderr, "berth-shim dial: want NETWORK ADDRESS")
			return 2
		}
		return dial(args[1], args[2])
	default:
		fmt.Fprintf(os.Stderr, "berth-shim: unknown mode %q\n", args[0])
		return 2
	}
}

// runOptions are the flags of "run".
type runOptions struct {
	delay  time.Duration
	direct bool
	// cred, when set, is the user and groups the program runs as.
	cred *syscall.Credential
	// nproc, when positive, is the program's RLIMIT_NPROC: how many
	// processes its real user may have.
	nproc uint64
	// cgroups are control group directories the agent moves itself into
	// before it starts the program, so that every descendant is counted.
	cgroups []string
	// pingTimeout, when positive, is how long berth may send nothing
	// before the agent counts it gone (berth pings every ProcessPing):
	// an engine may keep a dead berth's stdin open, as containerd does.
	pingTimeout time.Duration
	// remove are paths removed once the program ended (removeOwned).
	remove []string
}

// parseRun reads the flags of "run" up to "--" and returns the rest,
// starting at "--".
func parseRun(args []string) (runOptions, []string, error) {
	o := runOptions{delay: 2 * time.Second}
	rest := args
	for ; len(rest) > 0 && rest[0] != "--"; rest = rest[1:] {
		flag, val, _ := strings.Cut(rest[0], "=")
		switch flag {
		case "--direct-stdout":
			o.direct = true
		case "--wait-delay":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return o, nil, fmt.Errorf("bad --wait-delay %q", val)
			}
			o.delay = d
		case "--user":
			c, err := parseCredential(val)
			if err != nil {
				return o, nil, fmt.Errorf("bad --user %q: %v; want UID:GID or UID:GID:G1,G2,...", val, err)
			}
			o.cred = c
		case "--ping-timeout":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return o, nil, fmt.Errorf("bad --ping-timeout %q", val)
			}
			o.pingTimeout = d
		case "--cgroup":
			if !strings.HasPrefix(val, "/") {
				return o, nil, fmt.Errorf("bad --cgroup %q: want an absolute directory", val)
			}
			o.cgroups = append(o.cgroups, val)
		case "--remove":
			if !filepath.IsAbs(val) || filepath.Clean(val) == "/" {
				return o, nil, fmt.Errorf("bad --remove %q: want an absolute path below /", val)
			}
			o.remove = append(o.remove, filepath.Clean(val))
		case "--nproc":
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil || n == 0 {
				return o, nil, fmt.Errorf("bad --nproc %q: want a positive number of processes", val)
			}
			o.nproc = n
		default:
			return o, nil, fmt.Errorf("unknown flag %q", rest[0])
		}
	}
	return o, rest, nil
}

// parseCredential reads UID:GID[:G1,G2,...].
func parseCredential(s string) (*syscall.Credential, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("want two or three fields")
	}
	id := func(v string) (uint32, error) {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint32(n), err
	}
	uid, err := id(parts[0])
	if err != nil {
		return nil, err
	}
	gid, err := id(parts[1])
	if err != nil {
		return nil, err
	}
	c := &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	if len(parts) == 3 && parts[2] != "" {
		for _, g := range strings.Split(parts[2], ",") {
			n, err := id(g)
			if err != nil {
				return nil, err
			}
			c.Groups = append(c.Groups, n)
		}
	}
	return c, nil
}

// becomeUser sets the process's groups, gid and uid to c's, for good
// (real, effective and saved), on every thread.
func becomeUser(c *syscall.Credential) error {
	groups := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("set groups %v: %w", c.Groups, err)
	}
	if err := syscall.Setgid(int(c.Gid)); err != nil {
		return fmt.Errorf("set gid %d: %w", c.Gid, err)
	}
	if err := syscall.Setuid(int(c.Uid)); err != nil {
		return fmt.Errorf("set uid %d: %w", c.Uid, err)
	}
	return nil
}

// killFS kills process pid with SIGKILL (which also ends a stopped one)
// when its command line is that of a file server for root, and returns nil
// when no such process is left: it ended already, or its pid now names
// another program, which is left alone.
func killFS(pid int, root string) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	args := strings.Split(string(bytes.TrimSuffix(b, []byte{0})), "\x00")
	if !isFileServer(args, root) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("kill file server %d: %w", pid, err)
	}
	return nil
}

// isFileServer reports whether args, a command line, is "berth-shim fs
// [--user=...] root".
func isFileServer(args []string, root string) bool {
	return len(args) >= 3 && len(args) <= 4 && args[1] == "fs" && args[len(args)-1] == root
}
