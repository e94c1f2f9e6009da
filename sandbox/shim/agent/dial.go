package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// dialTimeout bounds connecting; berth's ctx bounds the whole exec.
const dialTimeout = 30 * time.Second

// ExitNoListener is dial's exit code when nothing listens at the address:
// no socket file (ENOENT), or a socket or port nobody accepts on
// (ECONNREFUSED). Every other failure exits 1 or 2, so that berth can
// tell a process that is gone from a dial that failed on the way.
const ExitNoListener = 3

// dial connects to network/address, writes one zero byte to stdout, then
// relays bytes both ways. Stdin EOF half-closes the connection; the
// connection's EOF ends the agent.
func dial(network, address string) int {
	switch network {
	case "tcp", "tcp4", "tcp6":
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad address %q: %v\n", address, err)
			return 2
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			fmt.Fprintf(os.Stderr, "refusing to dial %s: only loopback hosts are allowed\n", address)
			return 2
		}
	case "unix":
		if !filepath.IsAbs(address) {
			fmt.Fprintf(os.Stderr, "refusing to dial unix socket %q: the path must be absolute\n", address)
			return 2
		}
	default:
		fmt.Fprintf(os.Stderr, "unsupported network %q: want tcp or unix\n", network)
		return 2
	}
	c, err := net.DialTimeout(network, address, dialTimeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return ExitNoListener
		}
		return 1
	}
	defer c.Close()
	if _, err := os.Stdout.Write([]byte{0}); err != nil {
		return 1
	}
	go func() {
		io.Copy(c, os.Stdin)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	io.Copy(os.Stdout, c)
	return 0
}
