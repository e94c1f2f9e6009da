// Package agent is berth-shim, the supervisor berth places in a sandbox. It
// uses only the standard library so it builds as one static binary.
//
// Modes, chosen by the first argument:
//
//	berth-shim run [--wait-delay=D] [--direct-stdout] -- PROGRAM ARGS...
//	berth-shim fs ROOT
//	berth-shim dial tcp 127.0.0.1:PORT | dial unix /path/to/socket
//	berth-shim version
//
// "run" starts the program in a new process group and speaks the run
// protocol on stdin and stdout; with --direct-stdout the program writes the
// agent's stdout itself and the agent's frames go to its stderr, so that
// output reaches berth without passing through the agent. "fs" serves
// files below ROOT; "dial" relays raw bytes between stdio and a
// connection. The frame format is in frame.go.
package agent

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Main runs the agent with args (without the program name) and returns the
// process exit code.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "berth-shim: want a mode: run, fs, dial or version")
		return 2
	}
	switch args[0] {
	case "version":
		fmt.Println(Version)
		return 0
	case "run":
		delay := 2 * time.Second
		direct := false
		rest := args[1:]
		for len(rest) > 0 && rest[0] != "--" {
			if rest[0] == "--direct-stdout" {
				direct = true
				rest = rest[1:]
				continue
			}
			v, ok := strings.CutPrefix(rest[0], "--wait-delay=")
			if !ok {
				fmt.Fprintf(os.Stderr, "berth-shim run: unknown flag %q\n", rest[0])
				return 2
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				fmt.Fprintf(os.Stderr, "berth-shim run: bad --wait-delay %q\n", v)
				return 2
			}
			delay = d
			rest = rest[1:]
		}
		if len(rest) < 2 {
			fmt.Fprintln(os.Stderr, "berth-shim run: want -- PROGRAM ARGS...")
			return 2
		}
		return run(rest[1:], delay, direct)
	case "fs":
		if len(args) != 2 {
			fmt.Fprintln(os.Stderr, "berth-shim fs: want ROOT")
			return 2
		}
		return serveFS(args[1], os.Stdin, os.Stdout)
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
