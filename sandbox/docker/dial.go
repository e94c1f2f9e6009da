package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// Dial opens a byte stream to a loopback tcp address or a unix socket
// inside the container. A unix socket is connected to directly, through
// the container's /proc/PID/root, when the direct path is on (see
// [WithDirectReads]): a kernel's or debug adapter's messages then cross
// no exec stream, engine or agent. Everything else, and a unix socket the
// direct path cannot reach, goes through the agent's relay. ctx bounds
// only the dial.
func (s *Sandbox) Dial(ctx context.Context, network, address string) (sandbox.Conn, error) {
	if network != "unix" || s.init == nil {
		return s.Sandbox.Dial(ctx, network, address)
	}
	if err := shim.CheckDialAddress(network, address); err != nil {
		return nil, err
	}
	c, err := s.dialLocal(ctx, address)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, sandbox.ErrGone), errors.Is(err, errSandboxClosed), ctx.Err() != nil,
		errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOTSOCK):
		// The relay would meet the same: say it now.
		return nil, fmt.Errorf("docker: dial unix %s in container %s: %w", address, describe(s.name, s.id), err)
	default:
		return s.Sandbox.Dial(ctx, network, address)
	}
}

// errSandboxClosed is returned by a Dial after Close.
var errSandboxClosed = errors.New("the sandbox is closed; open it again")

// dialLocal connects to the unix socket at address inside the container.
// The path is resolved inside the container's root (procRoot.openInRoot),
// so no symbolic link the container makes can point the connection at one
// of the host's sockets; the socket is then connected to through its
// O_PATH descriptor.
func (s *Sandbox) dialLocal(ctx context.Context, address string) (sandbox.Conn, error) {
	pr := s.init
	fd, err := pr.openInRoot(address, 0)
	if err != nil {
		if !pr.alive() {
			return nil, s.goneError(ctx)
		}
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, syscall.ENOTSOCK
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		var se *os.SyscallError
		if errors.As(err, &se) {
			return nil, se.Err
		}
		return nil, err
	}
	// The pid was the container's init when its root was opened.
	if !pr.alive() {
		nc.Close()
		return nil, s.goneError(ctx)
	}
	c := &localConn{UnixConn: nc.(*net.UnixConn), s: s, addr: address}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return nil, errSandboxClosed
	}
	if s.conns == nil {
		s.conns = map[*localConn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return c, nil
}

// goneError says that the container's init process is gone: the
// container's state when it is no longer running, else that it restarted.
func (s *Sandbox) goneError(ctx context.Context) error {
	if err := s.Check(ctx); err != nil {
		return err
	}
	return fmt.Errorf("docker: container %s restarted; open it again: %w", describe(s.name, s.id), sandbox.ErrGone)
}

// localConn is a direct connection to a unix socket in the container,
// closed by its user or by the sandbox's Close.
type localConn struct {
	*net.UnixConn
	s     *Sandbox
	addr  string
	close sync.Once
}

func (c *localConn) Close() error {
	var err error
	c.close.Do(func() {
		err = c.UnixConn.Close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return err
}

// RemoteAddr names the socket as the container sees it.
func (c *localConn) RemoteAddr() net.Addr { return &net.UnixAddr{Name: c.addr, Net: "unix"} }

var _ sandbox.Conn = (*localConn)(nil)
