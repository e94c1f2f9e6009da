#!/usr/bin/env python3
"""berth's bundled Jupyter kernel for Python (standard library only, 3.8+).

Run as ``python3 berth_kernel.py -f conn.json``. It speaks Jupyter messaging
5.3 over ZeroMQ's wire protocol (ZMTP 3.0, NULL mechanism), implemented
here on plain sockets: ROUTER sockets for shell, control and stdin, PUB for
iopub, REP for the heartbeat. Every incoming message must carry a valid
HMAC-SHA256 signature; the rest are dropped. Part of berth
(berth.dev/berth/kernel/bundled), which documents the design.

Threads: the main thread runs cells (so SIGINT raises KeyboardInterrupt in
them); an I/O thread owns every socket and answers control requests; a
forked child answers the heartbeat, so a cell holding the GIL in a long C
call does not look like a dead kernel. The child exits when this process
does.
"""

import argparse
import ast
import base64
import builtins
import codecs
import collections
import datetime
import errno
import getpass
import hashlib
import heapq
import hmac
import importlib.abc
import importlib.util
import inspect
import io
import itertools
import json
import linecache
import os
import pprint
import queue
import re
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import types
import uuid

KERNEL_VERSION = "1.0"
PROTOCOL_VERSION = "5.3"
DELIM = b"<IDS|MSG>"

# Caps and timings.
MAX_MESSAGE = 1 << 28  # one incoming ZMTP message; a bigger one closes the connection
MAX_OUTBUF = 1 << 26  # queued bytes per connection; beyond it output messages are dropped (ZMQ's HWM) and counted
DIGEST_HISTORY = 4096  # remembered signatures, to drop replays
STREAM_FLUSH = 0.05  # seconds a stream write may wait before it is published
STREAM_CHUNK = 1 << 16  # buffered stream text that forces a publish
SHUTDOWN_GRACE = 2.0  # seconds a busy cell gets to notice shutdown before _exit
FD_SYNC_TIMEOUT = 1.0  # seconds to wait for captured fd output at a cell's end

KERNEL_FILE = os.path.abspath(__file__)

_real_stderr = sys.stderr


def log(*args):
    """log writes a diagnostic to the process's real stderr, never to a cell."""
    try:
        print("berth-kernel:", *args, file=_real_stderr, flush=True)
    except Exception:
        pass


# ---------------------------------------------------------------------------
# ZMTP 3.0 (https://rfc.zeromq.org/spec/23/), NULL mechanism.

GREETING = (b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00"
            + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31)
assert len(GREETING) == 64

FLAG_MORE, FLAG_LONG, FLAG_COMMAND = 1, 2, 4

COMPATIBLE = {
    "ROUTER": ("DEALER", "REQ", "ROUTER"),
    "PUB": ("SUB", "XSUB"),
    "REP": ("REQ", "DEALER"),
}


def zframe(body, more=False, command=False):
    flags = (FLAG_MORE if more else 0) | (FLAG_COMMAND if command else 0)
    n = len(body)
    if n > 255:
        return struct.pack(">BQ", flags | FLAG_LONG, n) + body
    return struct.pack(">BB", flags, n) + body


def zcommand(name, data=b""):
    return zframe(bytes([len(name)]) + name + data, command=True)


def zproperty(name, value):
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value


def parse_properties(data):
    props, i = {}, 0
    while i < len(data):
        n = data[i]
        name = data[i + 1:i + 1 + n].decode("ascii", "replace").lower()
        i += 1 + n
        if i + 4 > len(data):
            raise ValueError("truncated property")
        (vlen,) = struct.unpack_from(">I", data, i)
        i += 4
        props[name] = bytes(data[i:i + vlen])
        i += vlen
    return props


class Loop:
    """Loop is a selector loop owned by one thread; call_soon is the only
    method other threads may call."""

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)
        self._calls = collections.deque()
        self._timers = []
        self._seq = itertools.count()
        self.running = True

    def call_soon(self, fn, *args):
        self._calls.append((fn, args))
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, InterruptedError):
            pass

    def call_later(self, delay, fn, *args):
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), fn, args))

    def _drain_wake(self, mask):
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def register(self, fileobj, events, callback):
        try:
            self.sel.modify(fileobj, events, callback)
        except KeyError:
            self.sel.register(fileobj, events, callback)

    def unregister(self, fileobj):
        try:
            self.sel.unregister(fileobj)
        except (KeyError, ValueError):
            pass

    def run(self):
        while self.running:
            timeout = None
            if self._calls:
                timeout = 0
            elif self._timers:
                timeout = max(0.0, self._timers[0][0] - time.monotonic())
            try:
                events = self.sel.select(timeout)
            except InterruptedError:
                events = []
            for key, mask in events:
                self._safe(key.data, mask)
            for _ in range(len(self._calls)):
                fn, args = self._calls.popleft()
                self._safe(fn, *args)
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                _, _, fn, args = heapq.heappop(self._timers)
                self._safe(fn, *args)

    @staticmethod
    def _safe(fn, *args):
        try:
            fn(*args)
        except Exception:
            log("internal error:\n" + traceback.format_exc())


class Peer:
    """Peer is one ZMTP connection accepted by a Socket."""

    GREETING, HANDSHAKE, READY = range(3)

    def __init__(self, zsock, sock):
        self.zsock = zsock
        self.loop = zsock.loop
        self.sock = sock
        self.inbuf = bytearray()
        self.out = bytearray()
        self.state = Peer.GREETING
        self.frames = []
        self.size = 0
        self.identity = b""
        self.routing_id = b""
        self.subs = set()
        self.closed = False
        self.dropped = False
        self.events = selectors.EVENT_READ
        sock.setblocking(False)
        self.loop.register(sock, self.events, self._on_event)
        self._write(GREETING)

    def _on_event(self, mask):
        if mask & selectors.EVENT_READ:
            self._on_read()
        if mask & selectors.EVENT_WRITE and not self.closed:
            self._flush()

    def _on_read(self):
        try:
            data = self.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not data:
            self.close()
            return
        self.inbuf += data
        self._parse()

    def _parse(self):
        buf = self.inbuf
        pos = 0
        if self.state == Peer.GREETING:
            if buf[:1] and buf[0] != 0xFF:
                self.close()
                return
            if len(buf) < 64:
                return
            if buf[9] != 0x7F or buf[10] < 3 or bytes(buf[12:32]).rstrip(b"\0") != b"NULL":
                log("%s: peer greeting is not ZMTP 3 with the NULL mechanism; closing" % self.zsock.name)
                self.close()
                return
            pos = 64
            self.state = Peer.HANDSHAKE
            props = zproperty(b"Socket-Type", self.zsock.kind.encode())
            if self.zsock.kind in ("ROUTER", "REP"):
                props += zproperty(b"Identity", b"")
            self._write(zcommand(b"READY", props))
        n = len(buf)
        while not self.closed:
            if n - pos < 2:
                break
            flags = buf[pos]
            if flags & FLAG_LONG:
                if n - pos < 9:
                    break
                (size,) = struct.unpack_from(">Q", buf, pos + 1)
                hdr = 9
            else:
                size = buf[pos + 1]
                hdr = 2
            if size > MAX_MESSAGE or self.size + size > MAX_MESSAGE:
                log("%s: message over %d bytes; closing the connection" % (self.zsock.name, MAX_MESSAGE))
                self.close()
                return
            if n - pos - hdr < size:
                break
            body = bytes(buf[pos + hdr:pos + hdr + size])
            pos += hdr + size
            if flags & FLAG_COMMAND:
                self._on_command(body)
                continue
            if self.state != Peer.READY:
                self.close()
                return
            self.frames.append(body)
            self.size += size
            if not flags & FLAG_MORE:
                frames, self.frames, self.size = self.frames, [], 0
                self.zsock._on_message(self, frames)
        if not self.closed:
            del buf[:pos]

    def _on_command(self, body):
        if not body or body[0] + 1 > len(body):
            self.close()
            return
        name = body[1:1 + body[0]]
        data = body[1 + body[0]:]
        if self.state == Peer.HANDSHAKE:
            if name != b"READY":
                if name == b"ERROR":
                    log("%s: peer sent ERROR during the handshake" % self.zsock.name)
                self.close()
                return
            try:
                props = parse_properties(data)
            except (ValueError, IndexError):
                self.close()
                return
            peer_type = props.get("socket-type", b"").decode("ascii", "replace").upper()
            if peer_type not in COMPATIBLE[self.zsock.kind]:
                log("%s: a %s socket cannot talk to our %s; closing" % (self.zsock.name, peer_type, self.zsock.kind))
                self.close()
                return
            self.identity = props.get("identity", b"")
            self.state = Peer.READY
            self.zsock._attach(self)
            return
        if name == b"PING":
            self._write(zcommand(b"PONG", data[2:]))
        elif name == b"SUBSCRIBE":
            self.subs.add(bytes(data))
        elif name == b"CANCEL":
            self.subs.discard(bytes(data))

    def send(self, frames, force=False):
        """send queues a message and reports whether it was; past MAX_OUTBUF
        it is dropped, unless force (a status message, small, without which
        a client would wait for the cell's end forever)."""
        if self.closed or self.state != Peer.READY:
            return True
        data = b"".join(zframe(f, more=i < len(frames) - 1) for i, f in enumerate(frames))
        if len(self.out) + len(data) > MAX_OUTBUF and not force:
            if not self.dropped:
                log("%s: peer is not reading; dropping messages" % self.zsock.name)
                self.dropped = True
            return False
        self.dropped = False
        self._write(data)
        return True

    def _write(self, data):
        self.out += data
        self._flush()

    def _flush(self):
        while self.out:
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.close()
                return
            del self.out[:n]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)
        if events != self.events:
            self.events = events
            self.loop.register(self.sock, events, self._on_event)

    def pending(self):
        return bool(self.out) and not self.closed

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.loop.unregister(self.sock)
        try:
            self.sock.close()
        except OSError:
            pass
        self.zsock._detach(self)


class Socket:
    """Socket is a listening ZMQ socket of one kind: ROUTER, PUB or REP."""

    def __init__(self, loop, name, kind, handler=None):
        self.loop = loop
        self.name = name
        self.kind = kind
        self.handler = handler
        self.peers = []
        self.by_id = {}
        self.listener = None
        self.path = None
        self._next_id = itertools.count(1)

    def bind(self, transport, ip, port):
        if transport == "ipc":
            path = "%s-%d" % (ip, port)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.bind(path)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                os.unlink(path)
                s.bind(path)
            self.path = path
        else:
            family = socket.AF_INET6 if ":" in ip else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, port))
        s.listen(16)
        self.listener = s

    def start(self, loop=None):
        if loop is not None:
            self.loop = loop
        self.listener.setblocking(False)
        self.loop.register(self.listener, selectors.EVENT_READ, self._accept)

    def _accept(self, mask):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log("%s: accept: %s" % (self.name, e))
            return
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peers.append(Peer(self, conn))

    def _attach(self, peer):
        if self.kind != "ROUTER":
            return
        rid = peer.identity or b"\0" + struct.pack(">I", next(self._next_id))
        old = self.by_id.get(rid)
        peer.routing_id = rid
        self.by_id[rid] = peer
        if old is not None and old is not peer:
            old.close()  # handover: a reconnecting client takes its identity back

    def _detach(self, peer):
        if peer in self.peers:
            self.peers.remove(peer)
        if self.by_id.get(peer.routing_id) is peer:
            del self.by_id[peer.routing_id]

    def _on_message(self, peer, frames):
        if self.kind == "REP":
            peer.send(frames)  # heartbeat: echo the envelope and the ping
        elif self.kind == "PUB":
            f = frames[0] if frames else b""
            if f[:1] == b"\x01":
                peer.subs.add(f[1:])
            elif f[:1] == b"\x00":
                peer.subs.discard(f[1:])
        elif self.handler is not None:
            self.handler([peer.routing_id] + frames)

    def send(self, frames, force=False):
        """send routes frames (loop thread only): ROUTER by the first frame,
        PUB to every peer subscribed to a prefix of the first frame. It
        reports False when a peer dropped the message (see Peer.send)."""
        sent = True
        if self.kind == "ROUTER":
            peer = self.by_id.get(frames[0])
            if peer is not None:
                sent = peer.send(frames[1:], force)
        elif self.kind == "PUB":
            topic = frames[0] if frames else b""
            for p in list(self.peers):
                if any(topic.startswith(s) for s in p.subs):
                    sent = p.send(frames, force) and sent
        return sent

    def pending(self):
        return any(p.pending() for p in self.peers)

    def close(self):
        for p in list(self.peers):
            p.close()
        if self.listener is not None:
            self.loop.unregister(self.listener)
            self.listener.close()
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


# ---------------------------------------------------------------------------
# Jupyter messages.


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_safe(obj):
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def dumps(obj):
    try:
        s = json.dumps(obj, ensure_ascii=False, allow_nan=False, default=repr)
    except ValueError:
        s = json.dumps(_json_safe(obj), ensure_ascii=False, allow_nan=False, default=repr)
    return s.encode("utf-8", "replace")


class Session:
    """Session signs outgoing and verifies incoming messages."""

    def __init__(self, key):
        self.key = key
        self.id = str(uuid.uuid4())
        self.username = "berth"
        self._seen = set()
        self._ring = collections.deque()
        self._lock = threading.Lock()

    def sign(self, parts):
        h = hmac.new(self.key, digestmod=hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.hexdigest().encode("ascii")

    def header(self, msg_type, msg_id=None):
        return {"msg_id": msg_id or uuid.uuid4().hex, "session": self.id, "username": self.username,
                "date": now_iso(), "msg_type": msg_type, "version": PROTOCOL_VERSION}

    def serialize(self, msg_type, content, parent=None, metadata=None, idents=(), msg_id=None):
        parts = [dumps(self.header(msg_type, msg_id)), dumps(parent or {}), dumps(metadata or {}), dumps(content)]
        return list(idents) + [DELIM, self.sign(parts)] + parts

    def deserialize(self, frames):
        """deserialize returns (idents, msg) or None for a message that is
        malformed, badly signed or replayed."""
        try:
            i = frames.index(DELIM)
        except ValueError:
            return None
        rest = frames[i + 1:]
        if len(rest) < 5:
            return None
        sig, parts = rest[0], rest[1:5]
        if not hmac.compare_digest(sig, self.sign(parts)):
            log("dropped a message with a bad signature")
            return None
        with self._lock:
            if sig in self._seen:
                log("dropped a replayed message")
                return None
            self._seen.add(sig)
            self._ring.append(sig)
            if len(self._ring) > DIGEST_HISTORY:
                self._seen.discard(self._ring.popleft())
        try:
            header, parent, metadata, content = (json.loads(p.decode("utf-8")) for p in parts)
        except ValueError:
            return None
        if not isinstance(header, dict) or not isinstance(content, dict):
            return None
        return frames[:i], {"header": header, "parent_header": parent or {}, "metadata": metadata or {},
                            "content": content, "buffers": rest[5:]}


# ---------------------------------------------------------------------------
# Cell output.


class OutStream(io.TextIOBase):
    """OutStream is sys.stdout or sys.stderr: text is published as stream
    messages within STREAM_FLUSH, at once past STREAM_CHUNK, and on flush."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, kernel, name, fd):
        super().__init__()
        self._kernel = kernel
        self._name = name
        self._fd = fd
        self._buf = []
        self._size = 0
        self._lock = threading.RLock()
        self.buffer = _BinaryOut(self)

    @property
    def name(self):
        return "<%s>" % self._name

    def writable(self):
        return True

    def readable(self):
        return False

    def isatty(self):
        return False

    def fileno(self):
        if self._fd is None:
            raise io.UnsupportedOperation("fileno")
        return self._fd

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        if not s:
            return 0
        with self._lock:
            first = not self._buf
            self._buf.append(s)
            self._size += len(s)
            if self._size >= STREAM_CHUNK:
                self._flush_locked()
            elif first:
                self._kernel.loop.call_soon(self._kernel.loop.call_later, STREAM_FLUSH, self.flush)
        return len(s)

    def flush(self):
        with self._lock:
            self._flush_locked()

    def _flush_locked(self):
        if not self._buf:
            return
        text = "".join(self._buf)
        self._buf, self._size = [], 0
        # One message per STREAM_CHUNK: a single huge write must not be one
        # message bigger than a peer's buffer, dropped whole.
        for i in range(0, len(text), STREAM_CHUNK):
            self._kernel.publish("stream", {"name": self._name, "text": text[i:i + STREAM_CHUNK]})


class _BinaryOut:
    """_BinaryOut is OutStream.buffer: bytes decoded as UTF-8."""

    def __init__(self, stream):
        self._stream = stream
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, b):
        self._stream.write(self._dec.decode(bytes(b)))
        return len(b)

    def flush(self):
        self._stream.flush()

    def writable(self):
        return True


class _Stdin(io.TextIOBase):
    """_Stdin is sys.stdin: each line read is an input request."""

    encoding = "utf-8"

    def readable(self):
        return True

    def isatty(self):
        return False

    def readline(self, size=-1):
        try:
            return builtins.input() + "\n"
        except EOFError:
            return ""

    def read(self, size=-1):
        return self.readline()


class StdinNotImplementedError(RuntimeError):
    """input() was called but the request does not allow stdin."""


class ToolError(RuntimeError):
    """ToolError is raised by tool() when the tool call failed."""

    def __init__(self, tool, message):
        super().__init__(message)
        self.tool = tool


class DisplayHandle:
    """DisplayHandle updates a display made with display(..., display_id=...)."""

    def __init__(self, kernel, display_id):
        self._kernel = kernel
        self.display_id = display_id

    def display(self, obj, **kwargs):
        self._kernel.display(obj, display_id=self.display_id, **kwargs)

    def update(self, obj, **kwargs):
        self._kernel.display(obj, display_id=self.display_id, update=True, **kwargs)

    def __repr__(self):
        return "<DisplayHandle display_id=%s>" % self.display_id


_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)


def _plain(obj):
    if type(obj) in (dict, list, tuple, set, frozenset):
        try:
            return pprint.pformat(obj, width=79, sort_dicts=False)
        except Exception:
            pass
    return repr(obj)


# ---------------------------------------------------------------------------
# matplotlib: an inline backend, chosen right after matplotlib is imported.

MPL_BACKEND = "berth_kernel_mpl"
MPL_BACKEND_SOURCE = """
from matplotlib.backend_bases import FigureManagerBase as FigureManager
from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas


def show(*args, **kwargs):
    _berth_show()


def draw_if_interactive(*args, **kwargs):
    pass
"""


class _MplHook(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """_MplHook serves the inline backend module and, when matplotlib is
    first imported, selects it (unless MPLBACKEND says otherwise). Nothing
    changes for child processes."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.patched = False

    def find_spec(self, name, path, target=None):
        if name == MPL_BACKEND:
            return importlib.util.spec_from_loader(name, self)
        if name != "matplotlib" or self.patched or os.environ.get("MPLBACKEND"):
            return None
        self.patched = True
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                real = spec.loader.exec_module

                def exec_module(module, real=real):
                    real(module)
                    try:
                        module.rcParams["backend"] = "module://" + MPL_BACKEND
                    except Exception as e:
                        log("could not select the inline matplotlib backend: %s" % e)

                spec.loader.exec_module = exec_module
                return spec
            if spec is not None:
                return spec
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__dict__["_berth_show"] = self.kernel.show_figures
        exec(compile(MPL_BACKEND_SOURCE, "<berth matplotlib backend>", "exec"), module.__dict__)


# ---------------------------------------------------------------------------
# The kernel.


class Kernel:
    def __init__(self, conn):
        key = conn.get("key", "")
        if not key:
            raise SystemExit("berth-kernel: the connection file has no key; refusing to run unsigned")
        if conn.get("signature_scheme", "hmac-sha256") != "hmac-sha256":
            raise SystemExit("berth-kernel: signature scheme %r is not supported; use hmac-sha256"
                             % conn.get("signature_scheme"))
        self.conn = conn
        self.session = Session(key.encode("utf-8"))
        self.loop = Loop()
        self.shell = Socket(self.loop, "shell", "ROUTER", self._on_shell)
        self.control = Socket(self.loop, "control", "ROUTER", self._on_control)
        self.stdin = Socket(self.loop, "stdin", "ROUTER", self._on_stdin)
        self.iopub = Socket(self.loop, "iopub", "PUB")
        self.hb = Socket(self.loop, "hb", "REP")
        self.shell_q = queue.Queue()
        self.pending = collections.deque()
        self.execution_count = 0
        self.parent = {}
        self.dropped_for, self.dropped_bytes = "", 0  # loop thread: output a client's full buffer dropped, and its cell
        self.parent_idents = []
        self.allow_stdin = False
        self.executing = False
        self.shutting_down = False
        self.input_waiters = {}
        self.input_lock = threading.Lock()
        self.shown = set()
        self.fd_pipes = []
        self.hb_pid = None
        self.asyncio_loop = None
        self.user_module = types.ModuleType("__main__")
        self.user_module.__dict__.update({"__builtins__": builtins, "__name__": "__main__", "__doc__": None})
        self.ns = self.user_module.__dict__

    # -- startup -----------------------------------------------------------

    def bind(self):
        transport = self.conn.get("transport", "tcp")
        ip = self.conn.get("ip", "127.0.0.1")
        if transport not in ("tcp", "ipc"):
            raise SystemExit("berth-kernel: transport %r is not supported; use tcp or ipc" % transport)
        for sock, field in ((self.shell, "shell_port"), (self.control, "control_port"),
                            (self.stdin, "stdin_port"), (self.iopub, "iopub_port"), (self.hb, "hb_port")):
            port = int(self.conn.get(field, 0))
            if transport == "tcp" and not port:
                raise SystemExit("berth-kernel: the connection file has no %s" % field)
            try:
                sock.bind(transport, ip, port)
            except OSError as e:
                raise SystemExit("berth-kernel: cannot bind the %s channel to %s:%s: %s" % (sock.name, ip, port, e))

    def start_heartbeat(self):
        """start_heartbeat forks the heartbeat child (before any thread
        starts); it echoes pings until this process is gone."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(w)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)  # never hold the controller's pipes open
                for s in (self.shell, self.control, self.stdin, self.iopub):
                    s.listener.close()
                loop = Loop()
                self.hb.start(loop)

                def parent_gone(mask):
                    try:
                        if os.read(r, 1):
                            return
                    except (BlockingIOError, InterruptedError):
                        return
                    except OSError:
                        pass
                    os._exit(0)

                loop.register(r, selectors.EVENT_READ, parent_gone)
                loop.run()
            finally:
                os._exit(0)
        os.close(r)
        self._hb_pipe = w  # held open for our lifetime; its EOF stops the child
        if hasattr(os, "register_at_fork"):
            # A cell's forked child must not keep the heartbeat alive.
            os.register_at_fork(after_in_child=lambda: _close_quietly(w))
        self.hb_pid = pid
        self.hb.listener.close()

    def install(self):
        """install swaps in the cell's stdio, input, display and tool."""
        self.stdout = OutStream(self, "stdout", None)
        self.stderr = OutStream(self, "stderr", None)
        self._capture_fds()
        sys.stdout, sys.stderr, sys.stdin = self.stdout, self.stderr, _Stdin()
        builtins.input = self.input
        getpass.getpass = self.getpass
        builtins.display = self.display
        builtins.update_display = self.update_display
        builtins.clear_output = self.clear_output
        builtins.tool = self.tool
        builtins.ToolError = ToolError
        sys.modules["__main__"] = self.user_module
        script_dir = os.path.dirname(KERNEL_FILE)
        if sys.path and os.path.abspath(sys.path[0] or ".") == script_dir:
            sys.path[0] = ""
        elif "" not in sys.path:
            sys.path.insert(0, "")
        sys.meta_path.insert(0, _MplHook(self))
        signal.signal(signal.SIGINT, self._on_sigint)

    def _capture_fds(self):
        """_capture_fds points fds 1 and 2 at pipes read by the I/O thread,
        so subprocesses and C code print into the cell too."""
        global _real_stderr
        try:
            _real_stderr = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
            for fd, stream in ((1, self.stdout), (2, self.stderr)):
                r, w = os.pipe()
                os.dup2(w, fd)
                os.close(w)
                os.set_blocking(r, False)
                stream._fd = fd
                dec = codecs.getincrementaldecoder("utf-8")("replace")
                self.fd_pipes.append((r, stream, dec))
        except OSError as e:
            log("cannot capture fds 1 and 2: %s" % e)

    def _read_fd(self, r, stream, dec):
        while True:
            try:
                data = os.read(r, 1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.loop.unregister(r)
                return
            if not data:
                self.loop.unregister(r)
                return
            stream.write(dec.decode(data))

    def _sync_fds(self):
        """_sync_fds waits until the I/O thread has read what fds 1 and 2
        hold now, so it is published before the cell's reply."""
        if not self.fd_pipes:
            return
        done = threading.Event()

        def drain():
            for r, stream, dec in self.fd_pipes:
                self._read_fd(r, stream, dec)
            done.set()

        self.loop.call_soon(drain)
        done.wait(FD_SYNC_TIMEOUT)

    def serve(self):
        for s in (self.shell, self.control, self.stdin, self.iopub):
            s.start()
        for r, stream, dec in self.fd_pipes:
            self.loop.register(r, selectors.EVENT_READ, lambda mask, a=(r, stream, dec): self._read_fd(*a))
        io_thread = threading.Thread(target=self._run_io, name="berth-kernel-io", daemon=True)
        io_thread.start()
        self.publish("status", {"execution_state": "starting"}, parent={})
        while True:
            if self.pending:
                item = self.pending.popleft()
            else:
                item = self.shell_q.get()
            if item is None:
                break
            try:
                self._dispatch_shell(*item)
            except KeyboardInterrupt:
                pass
            except Exception:
                log("internal error handling a shell message:\n" + traceback.format_exc())
        try:
            import atexit
            atexit._run_exitfuncs()
        except BaseException:
            pass
        self._exit()

    def _run_io(self):
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        except (AttributeError, OSError):
            pass
        self.loop.run()

    # -- sending -----------------------------------------------------------

    def publish(self, msg_type, content, parent=None, metadata=None):
        if parent is None:
            parent = self.parent
        topic = ("stream.%s" % content.get("name")) if msg_type == "stream" else "kernel.%s.%s" % (self.session.id, msg_type)
        frames = self.session.serialize(msg_type, content, parent, metadata, idents=[topic.encode()])
        if msg_type == "status":
            self.loop.call_soon(self.iopub.send, frames, True)
            return
        size = len(content["text"].encode("utf-8", "replace")) if msg_type == "stream" else len(frames[-1])
        self.loop.call_soon(self._send_output, frames, (parent or {}).get("msg_id", ""), size)

    def _send_output(self, frames, parent_id, size):
        """_send_output publishes an output message (loop thread) and counts
        the bytes of the ones a slow client's full buffer dropped, for the
        cell's execute_reply (berth_output_dropped)."""
        if self.iopub.send(frames) or not parent_id:
            return
        if parent_id != self.dropped_for:
            self.dropped_for, self.dropped_bytes = parent_id, 0
        self.dropped_bytes += size

    def _reply(self, sock, idents, msg_type, content, parent, metadata=None):
        frames = self.session.serialize(msg_type, content, parent, metadata, idents=idents)
        self.loop.call_soon(sock.send, frames)

    def _execute_reply(self, idents, content, parent, metadata):
        """_execute_reply sends a cell's reply from the loop thread, after
        the cell's output before it, with the bytes of output dropped."""
        if self.dropped_for == parent.get("msg_id") and self.dropped_bytes:
            content = dict(content, berth_output_dropped=self.dropped_bytes)
        self.dropped_for, self.dropped_bytes = "", 0
        self.shell.send(self.session.serialize("execute_reply", content, parent, metadata, idents=idents))

    def _flush_streams(self):
        self._sync_fds()
        self.stdout.flush()
        self.stderr.flush()

    # -- receiving (I/O thread) --------------------------------------------

    def _on_shell(self, frames):
        m = self.session.deserialize(frames)
        if m is not None:
            self.shell_q.put(m)

    def _on_stdin(self, frames):
        m = self.session.deserialize(frames)
        if m is None:
            return
        idents, msg = m
        if msg["header"].get("msg_type") != "input_reply":
            return
        pid = (msg["parent_header"] or {}).get("msg_id")
        value = msg["content"].get("value", "")
        with self.input_lock:
            q = self.input_waiters.get(pid)
            if q is None and not pid and len(self.input_waiters) == 1:
                q = next(iter(self.input_waiters.values()))  # a client that sets no parent
        if q is not None:
            q.put(value)

    def _on_control(self, frames):
        m = self.session.deserialize(frames)
        if m is None:
            return
        idents, msg = m
        header = msg["header"]
        t = header.get("msg_type", "")
        self.publish("status", {"execution_state": "busy"}, parent=header)
        if t == "kernel_info_request":
            self._reply(self.control, idents, "kernel_info_reply", self.kernel_info(), header)
        elif t == "interrupt_request":
            self.interrupt()
            self._reply(self.control, idents, "interrupt_reply", {"status": "ok"}, header)
        elif t == "shutdown_request":
            self._shutdown_request(self.control, idents, msg)
            return
        else:
            log("ignored control message %r" % t)
        self.publish("status", {"execution_state": "idle"}, parent=header)

    def _shutdown_request(self, sock, idents, msg):
        header = msg["header"]
        restart = bool(msg["content"].get("restart", False))
        content = {"status": "ok", "restart": restart}
        self._reply(sock, idents, "shutdown_reply", content, header)
        self.publish("shutdown_reply", content, parent=header)
        self.publish("status", {"execution_state": "idle"}, parent=header)
        self.loop.call_soon(self._shutdown, time.monotonic() + SHUTDOWN_GRACE)

    def interrupt(self):
        """interrupt sends SIGINT to the main thread, where a running cell
        raises KeyboardInterrupt; between cells it is ignored."""
        try:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        except (AttributeError, OSError):
            os.kill(os.getpid(), signal.SIGINT)

    def _shutdown(self, deadline):
        """_shutdown waits (until deadline) for the replies to leave, then
        asks the main thread to exit, interrupting a running cell, and exits
        from this thread after SHUTDOWN_GRACE if the main thread is stuck."""
        if self.shutting_down:
            return
        pending = any(s.pending() for s in (self.control, self.iopub, self.shell))
        if pending and time.monotonic() < deadline:
            self.loop.call_later(0.02, self._shutdown, deadline)
            return
        self.shutting_down = True
        self.shell_q.put(None)
        if self.executing:
            self.interrupt()
        self.loop.call_later(SHUTDOWN_GRACE, self._exit)

    def _exit(self):
        for s in (self.shell, self.control, self.stdin, self.iopub):
            try:
                if s.path:
                    os.unlink(s.path)
            except OSError:
                pass
        if self.hb.path and self.hb_pid:
            try:
                os.unlink(self.hb.path)
            except OSError:
                pass
        try:
            _real_stderr.flush()
        except Exception:
            pass
        os._exit(0)

    # -- shell (main thread) -----------------------------------------------

    def kernel_info(self):
        v = sys.version_info
        return {
            "status": "ok",
            "protocol_version": PROTOCOL_VERSION,
            "implementation": "berth",
            "implementation_version": KERNEL_VERSION,
            "language_info": {
                "name": "python",
                "version": "%d.%d.%d" % (v[0], v[1], v[2]),
                "mimetype": "text/x-python",
                "file_extension": ".py",
                "pygments_lexer": "python3",
                "codemirror_mode": {"name": "python", "version": 3},
                "nbconvert_exporter": "python",
            },
            "banner": "berth Python kernel %s (Python %s)" % (KERNEL_VERSION, sys.version.split()[0]),
            "help_links": [],
        }

    def _dispatch_shell(self, idents, msg):
        header = msg["header"]
        t = header.get("msg_type", "")
        content = msg["content"]
        self.parent, self.parent_idents = header, idents
        self.publish("status", {"execution_state": "busy"})
        try:
            if t == "execute_request":
                self._execute(idents, msg)
            elif t == "kernel_info_request":
                self._reply(self.shell, idents, "kernel_info_reply", self.kernel_info(), header)
            elif t == "is_complete_request":
                self._reply(self.shell, idents, "is_complete_reply", self._is_complete(content.get("code", "")), header)
            elif t == "complete_request":
                self._reply(self.shell, idents, "complete_reply", self._complete(content), header)
            elif t == "inspect_request":
                self._reply(self.shell, idents, "inspect_reply",
                            {"status": "ok", "found": False, "data": {}, "metadata": {}}, header)
            elif t == "history_request":
                self._reply(self.shell, idents, "history_reply", {"status": "ok", "history": []}, header)
            elif t == "comm_info_request":
                self._reply(self.shell, idents, "comm_info_reply", {"status": "ok", "comms": {}}, header)
            elif t == "comm_open":
                self.publish("comm_close", {"comm_id": content.get("comm_id", ""), "data": {}})
            elif t == "shutdown_request":  # clients before protocol 5 sent it on shell
                self.loop.call_soon(self._shutdown_request, self.shell, idents, msg)
            elif t in ("comm_msg", "comm_close"):
                pass
            else:
                log("ignored shell message %r" % t)
        finally:
            self.publish("status", {"execution_state": "idle"})

    def _is_complete(self, code):
        import codeop
        try:
            if codeop.compile_command(code + "\n", "<cell>", "exec") is None:
                last = code.rstrip("\n").split("\n")[-1]
                indent = re.match(r"\s*", last).group(0)
                if last.rstrip().endswith(":"):
                    indent += "    "
                return {"status": "incomplete", "indent": indent}
            return {"status": "complete"}
        except (SyntaxError, ValueError, OverflowError):
            return {"status": "invalid"}

    def _complete(self, content):
        import rlcompleter
        code = content.get("code", "")
        pos = content.get("cursor_pos", len(code))
        if pos is None:
            pos = len(code)
        m = re.search(r"[\w.]*$", code[:pos])
        text = m.group(0) if m else ""
        matches = []
        completer = rlcompleter.Completer(self.ns)
        try:
            for i in itertools.count():
                c = completer.complete(text, i)
                if c is None or i > 1000:
                    break
                if c not in matches:
                    matches.append(c)
        except Exception:
            pass
        return {"status": "ok", "matches": matches, "cursor_start": pos - len(text), "cursor_end": pos, "metadata": {}}

    def _execute(self, idents, msg):
        header = msg["header"]
        c = msg["content"]
        code = c.get("code", "") or ""
        silent = bool(c.get("silent", False))
        store_history = bool(c.get("store_history", not silent))
        stop_on_error = bool(c.get("stop_on_error", True))
        self.allow_stdin = bool(c.get("allow_stdin", False))
        started = now_iso()
        if not silent and store_history:
            self.execution_count += 1
        if not silent:
            self.publish("execute_input", {"code": code, "execution_count": self.execution_count})
        self.shown = set()
        error = self.run_cell(code, silent)
        if not silent:
            self._flush_figures_safely()
        user_expressions = {}
        for name, expr in (c.get("user_expressions") or {}).items():
            user_expressions[name] = self._user_expression(expr)
        self._flush_streams()
        if error is None:
            content = {"status": "ok", "execution_count": self.execution_count,
                       "user_expressions": user_expressions, "payload": []}
        else:
            content = dict(error)
            content.update({"status": "error", "execution_count": self.execution_count,
                            "user_expressions": user_expressions, "payload": [],
                            "engine_info": {"engine_uuid": self.session.id, "engine_id": -1, "method": "execute"}})
        metadata = {"started": started, "dependencies_met": True, "engine": self.session.id,
                    "status": content["status"]}
        self.loop.call_soon(self._execute_reply, idents, content, header, metadata)
        if error is not None and stop_on_error:
            self._abort_queued()

    def _abort_queued(self):
        """_abort_queued answers execute requests already queued behind a
        failed cell with status aborted (stop_on_error)."""
        keep = []
        while True:
            try:
                item = self.shell_q.get_nowait()
            except queue.Empty:
                break
            if item is None:
                keep.append(item)
                break
            idents, msg = item
            if msg["header"].get("msg_type") != "execute_request":
                keep.append(item)
                continue
            self.publish("status", {"execution_state": "busy"}, parent=msg["header"])
            self._reply(self.shell, idents, "execute_reply",
                        {"status": "aborted", "execution_count": self.execution_count,
                         "user_expressions": {}, "payload": []},
                        msg["header"], {"status": "aborted", "dependencies_met": False,
                                        "engine": self.session.id, "started": now_iso()})
            self.publish("status", {"execution_state": "idle"}, parent=msg["header"])
        self.pending.extend(keep)

    def _user_expression(self, expr):
        try:
            value = eval(expr, self.ns)
            data, md = self.mimebundle(value)
            return {"status": "ok", "data": data, "metadata": md}
        except BaseException as e:
            err = self._error_content(e)
            err["status"] = "error"
            return err

    def run_cell(self, code, silent):
        """run_cell runs code like a notebook cell and returns None, or the
        error content after publishing it."""
        filename = "<cell-%d>" % self.execution_count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not _ends_with_semicolon(code):
                last = tree.body.pop()
            flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
            body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
            expr = None
            if last is not None:
                expr = compile(ast.Expression(last.value), filename, "eval", flags=flags, dont_inherit=True)
        except (SyntaxError, ValueError, OverflowError) as e:
            return self._publish_error(e)
        self.executing = True
        try:
            self._run(body)
            value = self._run(expr) if expr is not None else None
        except BaseException as e:
            self.executing = False
            return self._publish_error(e)
        finally:
            self.executing = False
        if value is not None and not silent:
            self.ns["_"] = value
            try:
                data, md = self.mimebundle(value)
            except BaseException as e:
                return self._publish_error(e)
            self._flush_streams()
            self.publish("execute_result", {"data": data, "metadata": md, "execution_count": self.execution_count})
        return None

    def _run(self, code):
        if code.co_flags & inspect.CO_COROUTINE:
            if self.asyncio_loop is None:
                import asyncio
                self.asyncio_loop = asyncio.new_event_loop()
            import asyncio
            asyncio.set_event_loop(self.asyncio_loop)
            return self.asyncio_loop.run_until_complete(eval(code, self.ns))
        return eval(code, self.ns)

    def _on_sigint(self, signum, frame):
        if self.executing:
            raise KeyboardInterrupt

    def _error_content(self, e):
        te = traceback.TracebackException(type(e), e, e.__traceback__)
        _strip_kernel_frames(te)
        lines = [s.rstrip("\n") for s in te.format()]
        return {"ename": type(e).__name__, "evalue": str(e), "traceback": lines}

    def _publish_error(self, e):
        err = self._error_content(e)
        self._flush_streams()
        self.publish("error", err)
        return err

    # -- builtins for cells -------------------------------------------------

    def mimebundle(self, obj):
        data, md = {}, {}
        if not isinstance(obj, type):
            method = getattr(obj, "_repr_mimebundle_", None)
            if callable(method):
                try:
                    r = method(include=None, exclude=None)
                except Exception:
                    r = None
                    self._warn_repr(obj, "_repr_mimebundle_")
                if isinstance(r, tuple) and len(r) == 2:
                    r, rmd = r
                    md.update(rmd or {})
                if isinstance(r, dict):
                    data.update(r)
            for mime, name in _REPR_METHODS:
                if mime in data:
                    continue
                method = getattr(obj, name, None)
                if not callable(method):
                    continue
                try:
                    v = method()
                except Exception:
                    self._warn_repr(obj, name)
                    continue
                if isinstance(v, tuple) and len(v) == 2:
                    v, vmd = v
                    if vmd:
                        md[mime] = vmd
                if v is None:
                    continue
                if mime in ("image/png", "image/jpeg") and isinstance(v, (bytes, bytearray)):
                    v = base64.b64encode(v).decode("ascii")
                data[mime] = v
            if "image/png" not in data and _is_figure(obj):
                buf = io.BytesIO()
                obj.savefig(buf, format="png", bbox_inches="tight")
                data["image/png"] = base64.b64encode(buf.getvalue()).decode("ascii")
        if "text/plain" not in data:
            data["text/plain"] = _plain(obj)
        return data, md

    def _warn_repr(self, obj, name):
        self.stderr.write("display: %s.%s raised:\n%s" % (type(obj).__name__, name, traceback.format_exc()))

    def display(self, *objs, raw=False, metadata=None, display_id=None, update=False, clear=False,
                transient=None, include=None, exclude=None, **kwargs):
        """display(obj, ...) shows objects like IPython's: text/plain always,
        rich formats from _repr_*_ methods, PNG for matplotlib figures."""
        if clear:
            self.clear_output(wait=True)
        if display_id is True:
            display_id = uuid.uuid4().hex
        for obj in objs:
            if raw:
                data, md = dict(obj), {}
            else:
                data, md = self.mimebundle(obj)
            if _is_figure(obj):
                self.shown.add(id(obj))
            if metadata:
                md.update(metadata)
            tr = dict(transient or {})
            if display_id:
                tr["display_id"] = display_id
            self._flush_streams()
            self.publish("update_display_data" if update else "display_data",
                         {"data": data, "metadata": md, "transient": tr})
        if display_id and not update:
            return DisplayHandle(self, display_id)
        return None

    def update_display(self, obj, display_id, **kwargs):
        self.display(obj, display_id=display_id, update=True, **kwargs)

    def clear_output(self, wait=False):
        self._flush_streams()
        self.publish("clear_output", {"wait": bool(wait)})

    def show_figures(self):
        """show_figures displays every open pyplot figure and closes them
        (plt.show() and the end of each cell)."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            from matplotlib._pylab_helpers import Gcf
            managers = Gcf.get_all_fig_managers()
        except Exception:
            return
        for m in managers:
            fig = m.canvas.figure
            if id(fig) not in self.shown:
                self.display(fig)
        plt.close("all")
        self.shown = set()

    def _flush_figures_safely(self):
        try:
            self.show_figures()
        except Exception as e:
            self.stderr.write("matplotlib figures could not be shown: %s: %s\n" % (type(e).__name__, e))

    def request_input(self, prompt, password=False):
        """request_input sends input_request on stdin to the client of the
        running cell and waits for its input_reply."""
        if not self.allow_stdin:
            raise StdinNotImplementedError(
                "input was called, but this frontend does not support input requests.")
        self._flush_streams()
        msg_id = uuid.uuid4().hex
        q = queue.Queue(1)
        with self.input_lock:
            self.input_waiters[msg_id] = q
        try:
            frames = self.session.serialize("input_request", {"prompt": prompt, "password": bool(password)},
                                            self.parent, idents=self.parent_idents, msg_id=msg_id)
            self.loop.call_soon(self.stdin.send, frames)
            return q.get()
        finally:
            with self.input_lock:
                self.input_waiters.pop(msg_id, None)

    def input(self, prompt=""):
        value = self.request_input(str(prompt), False)
        if value == "\x04":
            raise EOFError("EOF when reading a line")
        return value

    def getpass(self, prompt="Password: ", stream=None):
        return self.request_input(str(prompt), True)

    def tool(self, name, args=None, **kwargs):
        """tool(name, args) calls one of berth's tools from the cell and
        returns its result; a failed call raises ToolError."""
        if args is None:
            args = kwargs
        elif kwargs:
            raise TypeError("tool() takes args as a dict or as keywords, not both")
        envelope = json.dumps({"berth_tool": str(name), "args": args}, default=repr)
        if not self.allow_stdin:
            raise ToolError(name, "tool() needs a controller that answers input requests; "
                                  "this cell was run without stdin")
        raw = self.request_input(envelope, False)
        try:
            reply = json.loads(raw)
        except ValueError:
            raise ToolError(name, "tool %s: the reply is not JSON: %.200r" % (name, raw)) from None
        if not isinstance(reply, dict):
            raise ToolError(name, "tool %s: the reply is not an object: %.200r" % (name, raw))
        if reply.get("ok"):
            return reply.get("result")
        raise ToolError(name, str(reply.get("error") or "tool %s failed" % name))


def _close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def _ends_with_semicolon(code):
    lines = [ln for ln in code.rstrip().split("\n")]
    last = lines[-1].split("#", 1)[0].rstrip() if lines else ""
    return last.endswith(";")


def _is_figure(obj):
    fig = sys.modules.get("matplotlib.figure")
    return fig is not None and isinstance(obj, getattr(fig, "Figure", ()))


def _strip_kernel_frames(te, seen=None):
    """_strip_kernel_frames keeps the frames from the first cell frame on,
    minus the kernel's own; a compile error keeps none."""
    seen = seen if seen is not None else set()
    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    for i, f in enumerate(frames):
        if f.filename.startswith("<cell-"):
            frames = frames[i:]
            break
    else:
        if frames and frames[0].filename == KERNEL_FILE:
            frames = []
    te.stack = traceback.StackSummary.from_list([f for f in frames if f.filename != KERNEL_FILE])
    _strip_kernel_frames(te.__cause__, seen)
    _strip_kernel_frames(te.__context__, seen)


def main(argv=None):
    p = argparse.ArgumentParser(description="berth's bundled Python kernel")
    p.add_argument("-f", "--connection-file", required=True, help="Jupyter connection file")
    args = p.parse_args(argv)
    with open(args.connection_file, "r", encoding="utf-8") as f:
        conn = json.load(f)
    k = Kernel(conn)
    k.bind()
    k.start_heartbeat()
    k.install()
    k.serve()


if __name__ == "__main__":
    main()
