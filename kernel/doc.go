// Package kernel is a Jupyter client (messaging protocol 5.3) on berth's
// own ZMTP 3.0 client (package kernel/zmtp), pure Go.
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
// # Sockets
//
//   - Dialer: every socket dials through the caller's [DialFunc], by way of
//     a dial scope (one per Client, one per heartbeat socket) that tracks
//     each connection it opened, so closing a client also closes a
//     connection stuck in the ZMTP greeting, and spaces out dials that keep
//     failing.
//   - Identity: shell and stdin share one ZMQ identity, or the kernel cannot
//     route input_request to us.
//   - Slow joiner: Connect repeats kernel_info_request until both its reply
//     and an IOPub status with that parent arrive.
//   - Dial before bind: sockets retry every [DialRetry] until Connect's ctx
//     ends (Connect then closes them).
//   - Reconnect: a connection that fails is dropped and redialed; when the
//     kernel is dead the sockets are closed, which stops redialing. After a
//     shell or IOPub connection was dropped, Execute proves IOPub
//     subscribed again (the slow-joiner probe) before it sends the cell,
//     and a cell whose send failed goes out again only after that proof:
//     a redialed SUB may not be subscribed yet, and output published
//     before it is goes to nobody.
//   - Heartbeat: a REQ socket is closed and recreated after every miss;
//     each ping waits one interval.
//   - Sends take a context; [SendTimeout] bounds each one.
//
// # Memory
//
// Frames are read through bounded readers, never allocated at their
// declared size. A content frame over [MaxContent] is rewritten while it
// streams — each JSON string longer than [MaxString] keeps its head and
// tail — and the HMAC is computed over the original bytes as they pass;
// [Message.Dropped] and [Event.Dropped] say how many bytes were cut. One
// huge message thus costs about 3 × MaxContent plus a constant.
package kernel
