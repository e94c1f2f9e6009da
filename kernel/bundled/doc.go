// Package bundled holds berth's own Jupyter kernels, for sandboxes whose
// Python has no ipykernel: one for Python that needs only the standard
// library (3.8+), one for JavaScript that needs only node (18+). Both are
// berth's code, embedded in the binary; the eval tool writes one into the
// sandbox and starts it as
//
//	python3 berth_kernel.py -f conn.json
//	node berth_kernel.js -f conn.json
//
// with a connection file from [kernel.NewConnectionInfo] (its MarshalFile),
// then talks to it with [kernel.Connect] like to any Jupyter kernel.
// [Lookup] returns a kernel's source, file name and command line.
//
// # How ZeroMQ is reached
//
// No libzmq, no pyzmq, no npm: each kernel implements the part of ZeroMQ's
// wire protocol it needs, ZMTP 3.0 with the NULL mechanism, on plain TCP
// (or Unix) sockets. A connection starts with the 64-byte greeting
// (signature, version 3.0, mechanism "NULL", as-server 0); then each side
// sends a READY command whose properties are Socket-Type and Identity;
// then frames flow, each a flags byte (MORE 1, LONG 2, COMMAND 4), a 1- or
// 8-byte big-endian size and the body. The kernels accept ZMTP 3.0 and 3.1
// peers (SUBSCRIBE/CANCEL commands, PING answered with PONG), refuse
// other mechanisms and incompatible socket types, and close a connection
// that sends a message over 256 MiB.
//
// The five channels, each a listening socket on the connection file's ip
// and port (tcp; ipc binds "<ip>-<port>" Unix sockets):
//
//   - shell, control, stdin: ROUTER. An incoming message is prefixed with
//     the peer's identity (its READY Identity, or a generated one); replies
//     are routed back by that identity. A reconnecting peer with the same
//     identity replaces the old connection (handover). input_request goes
//     out on stdin with the execute_request's identities, so the client's
//     shell and stdin sockets must share one identity, as
//     [kernel.Client]'s do.
//   - iopub: PUB. Subscriptions arrive as messages (0x01 topic) or as
//     SUBSCRIBE commands; a message goes to peers with a matching prefix
//     subscription. Topics are "kernel.<session>.<msg_type>" and
//     "stream.<name>".
//   - hb: REP. Every message is echoed as it came.
//
// The kernels bind only the address in the connection file. They assume
// one controller, like a notebook's single client, but serve several
// connections per channel. A peer that stops reading has its messages
// dropped beyond 64 MiB queued (ZeroMQ's high-water mark).
//
// # Jupyter messaging 5.3
//
// Signing: HMAC-SHA256 over header, parent header, metadata and content
// with the connection key (hex digest). Every incoming message is
// verified; a bad signature, a replayed one (the last 4096 are
// remembered) or a malformed one is dropped and logged to the kernel's
// stderr. A connection file with an empty key or another signature scheme
// is refused at start.
//
// Messages: kernel_info_request (shell and control; language_info has
// name, version, mimetype and file_extension; protocol_version 5.3),
// execute_request, is_complete_request, complete_request (Python only
// completes names), inspect_request, history_request and comm_info_request
// (empty answers), interrupt_request and shutdown_request on control
// (shutdown replies, then exits 0). Every shell and control request is
// wrapped in IOPub status busy and idle. An execute_request publishes
// execute_input, then stream, display_data, update_display_data,
// clear_output, execute_result and error as they happen, and replies with
// execute_reply (status ok, error or aborted; execution_count counts
// non-silent cells that store history). stop_on_error aborts the
// execute requests already queued behind a failed cell.
//
// # Cells
//
// Python: one __main__ namespace for all cells. A cell is parsed with ast;
// a final expression statement is evaluated and its value, unless None or
// the line ends with ";", is published as execute_result and bound to _.
// Top-level await runs on a persistent asyncio loop. print and sys.stdout
// and sys.stderr are published within 50 ms; file descriptors 1 and 2 are
// captured too, so subprocesses print into the cell. display(obj) builtin:
// text/plain (repr, pprint for containers) always, plus text/html,
// text/markdown, image/svg+xml, image/png, image/jpeg, text/latex,
// application/json from the object's _repr_*_ methods (a pandas DataFrame
// renders), and image/png for a matplotlib Figure; display_id=True returns
// a handle whose update() sends update_display_data; update_display and
// clear_output are builtins too. When matplotlib is imported the kernel
// selects its own inline backend (unless MPLBACKEND is set): plt.show()
// and the end of each cell display the open pyplot figures and close them
// (a figure already shown with display() in that cell is not shown twice).
// input() and getpass.getpass() send input_request; sys.stdin reads lines
// the same way. Errors carry ename, evalue and a plain-text traceback
// without the kernel's frames.
//
// JavaScript: cells run with vm.runInThisContext in the kernel's own
// global scope, so require (relative to the working directory), fetch and
// the other Node globals are there. Top-level let, const and class become
// var-like globals, so they persist and a cell can be re-run; a cell with
// top-level await runs inside an async function whose top-level
// declarations are hoisted to globals. Static import statements become
// awaited dynamic imports resolved from the working directory. The value of
// a final expression statement is echoed (util.inspect). console output
// streams even while a cell computes synchronously. display(value) uses
// util.inspect and _repr_html_ and friends; display.html, display.markdown,
// display.svg, display.png, display.jpeg, display.json, display.text and
// display.mime send one format. input(prompt) and tool(name, args) return
// promises: await them. Rewriting is done by a small tokenizer; when a
// rewritten cell does not compile, it runs as written.
//
// # Interrupts and liveness
//
// Python runs cells on its main thread and every socket on an I/O thread
// that blocks SIGINT; interrupt_request sends SIGINT to the main thread,
// and a SIGINT sent to the process works the same (kernelspec
// interrupt_mode "signal" or "message"). A running cell ends with
// KeyboardInterrupt, input() included; between cells SIGINT is ignored.
// The heartbeat is answered by a child process forked at start, so a cell
// holding the GIL in a long C call does not look dead; the child exits
// when the kernel process does (a pipe's EOF), and then the heartbeat
// stops.
//
// JavaScript runs cells on the main thread and its sockets, heartbeat and
// control on a worker thread, which answers while a cell computes.
// interrupt_request (or SIGINT) breaks synchronous code (breakOnSigint) and
// rejects an awaiting cell; either ends with ename "KeyboardInterrupt".
// Work the cell started keeps running (a timer still fires), and
// synchronous code after an await cannot be broken: the caller restarts
// the kernel then.
//
// # The tool() envelope
//
// tool(name, args) in a cell (Python returns the result, JavaScript a
// promise of it) sends an input_request on the stdin channel whose prompt
// is a JSON object
//
//	{"berth_tool": "<name>", "args": <args>}
//
// with password false, and waits for the input_reply. Its value must be
// JSON: {"ok": true, "result": <any JSON>} returns result; {"ok": false,
// "error": "<message>"} raises ToolError (a RuntimeError subclass in
// Python, an Error in JavaScript; both with .tool) with that message. The
// controller tells tool calls from ordinary input() prompts with
// [ParseToolRequest] and answers with [ReplyOK] or [ReplyError], in
// [kernel.ExecuteOptions].OnInput. Calls are matched to replies by the
// input_reply's parent msg_id, so concurrent calls (Promise.all, Python
// threads) work. Without stdin (no OnInput) tool() fails at once with
// ToolError and input() with StdinNotImplementedError, as in ipykernel.
// [IPythonToolShim] defines the same tool() in ipykernel.
package bundled
