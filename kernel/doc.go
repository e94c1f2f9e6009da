// Package kernel is a Jupyter client (messaging protocol 5.3) on
// github.com/go-zeromq/zmq4, pure Go.
//
// [NewConnectionInfo] makes a connection file (random 256-bit key, free or
// given ports); the key never prints or logs. [Codec] signs and verifies
// messages with HMAC-SHA256 over header, parent header, metadata and
// content. [Connect] dials the five channels through a caller-supplied
// [DialFunc] — berth passes the sandbox's Dial, a byte stream tunnelled
// over an exec — and waits until the kernel is ready. [Client.Execute]
// streams a cell's output until the kernel is idle and has replied;
// input_request on the stdin channel goes to a caller handler (the tool()
// bridge); [Client.Interrupt] and [Client.Shutdown] use the control
// channel; a heartbeat reports a dead kernel on [Client.Dead].
//
// This package never imports the sandbox or tools packages: it takes a
// dialer, and process control (SIGINT for signal-mode kernels, TERM and
// KILL after shutdown) stays with the caller.
//
// # zmq4 v0.17.0, as used here
//
//   - Custom dialer: zmq4 has no per-socket dialer option (its net.Dialer
//     field is unexported). Sockets dial through transports registered
//     process-wide with zmq4.RegisterTransport. This package registers one
//     transport, "berth-kernel", at init, and encodes a dial scope in the
//     endpoint ("berth-kernel://<scope>/<network>/<address>"); the
//     transport looks the scope up and calls its DialFunc with the
//     socket's context. Each scope tracks the connections it opened, so
//     closing a client also closes a connection stuck in the ZMTP greeting.
//   - Identity: shell and stdin share one ZMQ identity, or the kernel cannot
//     route input_request to us.
//   - Slow joiner: Connect repeats kernel_info_request until both its reply
//     and an IOPub status with that parent arrive.
//   - Dial before bind: sockets retry every [DialRetry] without limit until
//     Connect's ctx ends (Connect then closes them).
//   - Reconnect: automatic reconnect is on, so a dropped stream is redialed;
//     a Recv that returns io.EOF means "peer went away", not the end. When
//     the kernel is dead the sockets are closed, which stops redialing.
//   - Heartbeat: a REQ socket goes into lockstep when a reply is lost, so it
//     is closed and recreated after every miss; each ping waits one
//     interval. zmq4 Recv takes no context: a socket is closed to unblock it.
//   - zmq4 Send takes no context either; [SendTimeout] bounds it.
package kernel
