#!/usr/bin/env node
// berth's bundled Jupyter kernel for JavaScript: Node.js 18+, no npm packages.
//
// Run as `node berth_kernel.js -f conn.json`. It speaks Jupyter messaging
// 5.3 over ZeroMQ's wire protocol (ZMTP 3.0, NULL mechanism), implemented
// here on plain sockets: ROUTER sockets for shell, control and stdin, PUB
// for iopub, REP for the heartbeat. Every incoming message must carry a
// valid HMAC-SHA256 signature; the rest are dropped. Part of berth
// (berth.dev/berth/kernel/bundled), which documents the design.
//
// Threads: the main thread runs cells with vm.runInThisContext; a worker
// thread owns every socket, answers the heartbeat and control requests
// (so a cell busy in a synchronous loop still beats and can be interrupted
// with SIGINT), and publishes what the main thread posts to it, in order.
//
// Cells: top-level let/const/class become var-like globals so they persist
// and a cell can be re-run; a cell using top-level await runs inside an
// async function whose top-level declarations are hoisted to globals; the
// value of a final expression statement is echoed. Globals for cells:
// display(), input() and tool() (both return promises: await them),
// require (relative to the working directory), ToolError.
'use strict';

const { isMainThread, Worker, parentPort, workerData } = require('worker_threads');

const KERNEL_VERSION = '1.0';
const PROTOCOL_VERSION = '5.3';
const DELIM = Buffer.from('<IDS|MSG>');

// Caps and timings.
const MAX_MESSAGE = 1 << 28; // one incoming ZMTP message; a bigger one closes the connection
const MAX_OUTBUF = 1 << 26; // queued bytes per connection; beyond it output messages are dropped (ZMQ's HWM) and counted
const DIGEST_HISTORY = 4096; // remembered signatures, to drop replays
const STREAM_FLUSH_MS = 50; // how long a stream write may wait before it is published
const STREAM_CHUNK = 1 << 16; // buffered stream text that forces a publish
const SHUTDOWN_FLUSH_MS = 1000; // how long shutdown waits for replies to leave
const SHUTDOWN_GRACE_MS = 2000; // how long a busy main thread gets before SIGKILL

function log(...args) {
  try {
    require('fs').writeSync(2, 'berth-kernel: ' + args.join(' ') + '\n');
  } catch (e) {
    // nowhere left to report
  }
}

function isoNow() {
  return new Date().toISOString().replace(/Z$/, '000Z');
}

if (!isMainThread) {
  ioThread();
} else if (require.main === module) {
  mainThread();
}

// ---------------------------------------------------------------------------
// The I/O thread: ZMTP 3.0 (https://rfc.zeromq.org/spec/23/) and signing.

function ioThread() {
  const net = require('net');
  const fs = require('fs');
  const crypto = require('crypto');
  const { conn, sessionId, kernelInfo } = workerData;
  const key = Buffer.from(conn.key, 'utf8');

  const GREETING = Buffer.alloc(64);
  GREETING[0] = 0xff;
  GREETING[9] = 0x7f;
  GREETING[10] = 3;
  GREETING[11] = 0;
  GREETING.write('NULL', 12, 'ascii');

  const FLAG_MORE = 1;
  const FLAG_LONG = 2;
  const FLAG_COMMAND = 4;
  const COMPATIBLE = { ROUTER: ['DEALER', 'REQ', 'ROUTER'], PUB: ['SUB', 'XSUB'], REP: ['REQ', 'DEALER'] };

  function frameHeader(size, flags) {
    if (size > 255) {
      const h = Buffer.alloc(9);
      h[0] = flags | FLAG_LONG;
      h.writeBigUInt64BE(BigInt(size), 1);
      return h;
    }
    return Buffer.from([flags, size]);
  }

  function encodeFrames(frames) {
    const parts = [];
    frames.forEach((f, i) => {
      parts.push(frameHeader(f.length, i < frames.length - 1 ? FLAG_MORE : 0), f);
    });
    return Buffer.concat(parts);
  }

  function command(name, data) {
    const n = Buffer.from(name, 'ascii');
    const body = Buffer.concat([Buffer.from([n.length]), n, data || Buffer.alloc(0)]);
    return Buffer.concat([frameHeader(body.length, FLAG_COMMAND), body]);
  }

  function property(name, value) {
    const n = Buffer.from(name, 'ascii');
    const len = Buffer.alloc(4);
    len.writeUInt32BE(value.length, 0);
    return Buffer.concat([Buffer.from([n.length]), n, len, value]);
  }

  function parseProperties(data) {
    const props = {};
    let i = 0;
    while (i < data.length) {
      const n = data[i];
      const name = data.subarray(i + 1, i + 1 + n).toString('ascii').toLowerCase();
      i += 1 + n;
      if (i + 4 > data.length) throw new Error('truncated property');
      const vlen = data.readUInt32BE(i);
      i += 4;
      props[name] = data.subarray(i, i + vlen);
      i += vlen;
    }
    return props;
  }

  const GREET = 0;
  const HANDSHAKE = 1;
  const READY = 2;

  class Peer {
    constructor(zsock, sock) {
      this.zsock = zsock;
      this.sock = sock;
      this.chunks = [];
      this.len = 0;
      this.need = 1;
      this.state = GREET;
      this.frames = [];
      this.size = 0;
      this.identity = Buffer.alloc(0);
      this.routingId = null;
      this.subs = new Set();
      this.closed = false;
      this.dropped = false;
      if (sock.setNoDelay) sock.setNoDelay(true);
      sock.on('data', (d) => this.onData(d));
      sock.on('error', () => this.close());
      sock.on('close', () => this.close());
      sock.write(GREETING);
    }

    onData(d) {
      this.chunks.push(d);
      this.len += d.length;
      if (this.len < this.need) return;
      const buf = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.len);
      const pos = this.parse(buf);
      if (this.closed) return;
      const rest = buf.subarray(pos);
      this.chunks = rest.length ? [rest] : [];
      this.len = rest.length;
    }

    // parse consumes whole frames from buf, sets this.need for the next
    // step and returns how many bytes it used.
    parse(buf) {
      let pos = 0;
      if (this.state === GREET) {
        if (buf[0] !== 0xff) return this.close(), 0;
        if (buf.length < 64) {
          this.need = 64;
          return 0;
        }
        const mech = buf.subarray(12, 32).toString('ascii').replace(/\0+$/, '');
        if (buf[9] !== 0x7f || buf[10] < 3 || mech !== 'NULL') {
          log(`${this.zsock.name}: peer greeting is not ZMTP 3 with the NULL mechanism; closing`);
          return this.close(), 0;
        }
        pos = 64;
        this.state = HANDSHAKE;
        let props = property('Socket-Type', Buffer.from(this.zsock.kind));
        if (this.zsock.kind !== 'PUB') props = Buffer.concat([props, property('Identity', Buffer.alloc(0))]);
        this.write(command('READY', props));
      }
      while (!this.closed) {
        const avail = buf.length - pos;
        if (avail < 2) {
          this.need = 2;
          break;
        }
        const flags = buf[pos];
        let size;
        let hdr;
        if (flags & FLAG_LONG) {
          if (avail < 9) {
            this.need = 9;
            break;
          }
          const big = buf.readBigUInt64BE(pos + 1);
          size = big > BigInt(MAX_MESSAGE) ? MAX_MESSAGE + 1 : Number(big);
          hdr = 9;
        } else {
          size = buf[pos + 1];
          hdr = 2;
        }
        if (size > MAX_MESSAGE || this.size + size > MAX_MESSAGE) {
          log(`${this.zsock.name}: message over ${MAX_MESSAGE} bytes; closing the connection`);
          this.close();
          return pos;
        }
        if (avail < hdr + size) {
          this.need = hdr + size;
          break;
        }
        const body = Buffer.from(buf.subarray(pos + hdr, pos + hdr + size));
        pos += hdr + size;
        if (flags & FLAG_COMMAND) {
          this.onCommand(body);
          continue;
        }
        if (this.state !== READY) {
          this.close();
          return pos;
        }
        this.frames.push(body);
        this.size += size;
        if (!(flags & FLAG_MORE)) {
          const frames = this.frames;
          this.frames = [];
          this.size = 0;
          this.zsock.onMessage(this, frames);
        }
      }
      return pos;
    }

    onCommand(body) {
      if (!body.length || body[0] + 1 > body.length) return this.close();
      const name = body.subarray(1, 1 + body[0]).toString('ascii');
      const data = body.subarray(1 + body[0]);
      if (this.state === HANDSHAKE) {
        if (name !== 'READY') {
          if (name === 'ERROR') log(`${this.zsock.name}: peer sent ERROR during the handshake`);
          return this.close();
        }
        let props;
        try {
          props = parseProperties(data);
        } catch (e) {
          return this.close();
        }
        const peerType = (props['socket-type'] || Buffer.alloc(0)).toString('ascii').toUpperCase();
        if (!COMPATIBLE[this.zsock.kind].includes(peerType)) {
          log(`${this.zsock.name}: a ${peerType} socket cannot talk to our ${this.zsock.kind}; closing`);
          return this.close();
        }
        this.identity = Buffer.from(props.identity || Buffer.alloc(0));
        this.state = READY;
        this.zsock.attach(this);
        return;
      }
      if (name === 'PING') this.write(command('PONG', data.subarray(2)));
      else if (name === 'SUBSCRIBE') this.subs.add(data.toString('latin1'));
      else if (name === 'CANCEL') this.subs.delete(data.toString('latin1'));
    }

    // send queues a message and reports whether it was; past MAX_OUTBUF it
    // is dropped, unless force (a status message, small, without which a
    // client would wait for the cell's end forever).
    send(frames, force) {
      if (this.closed || this.state !== READY) return true;
      const data = encodeFrames(frames);
      if (this.sock.writableLength + data.length > MAX_OUTBUF && !force) {
        if (!this.dropped) log(`${this.zsock.name}: peer is not reading; dropping messages`);
        this.dropped = true;
        return false;
      }
      this.dropped = false;
      this.write(data);
      return true;
    }

    write(data) {
      if (!this.closed) this.sock.write(data);
    }

    pending() {
      return !this.closed && this.sock.writableLength > 0;
    }

    close() {
      if (this.closed) return;
      this.closed = true;
      this.sock.destroy();
      this.zsock.detach(this);
    }
  }

  class ZSocket {
    constructor(name, kind, handler) {
      this.name = name;
      this.kind = kind;
      this.handler = handler;
      this.peers = new Set();
      this.byId = new Map();
      this.nextId = 1;
      this.server = null;
      this.path = null;
    }

    listen(transport, ip, port) {
      return new Promise((resolve, reject) => {
        const server = net.createServer((sock) => this.peers.add(new Peer(this, sock)));
        server.once('error', reject);
        const onListening = () => {
          server.removeListener('error', reject);
          server.on('error', (e) => log(`${this.name}: ${e.message}`));
          this.server = server;
          resolve();
        };
        if (transport === 'ipc') {
          this.path = `${ip}-${port}`;
          try {
            fs.unlinkSync(this.path);
          } catch (e) {
            // not there: fine
          }
          server.listen(this.path, onListening);
        } else {
          server.listen({ port, host: ip, exclusive: true }, onListening);
        }
      });
    }

    attach(peer) {
      if (this.kind !== 'ROUTER') return;
      let rid = peer.identity;
      if (!rid.length) {
        rid = Buffer.alloc(5);
        rid.writeUInt32BE(this.nextId++, 1);
      }
      const k = rid.toString('latin1');
      const old = this.byId.get(k);
      peer.routingId = rid;
      this.byId.set(k, peer);
      if (old && old !== peer) old.close(); // handover: a reconnecting client takes its identity back
    }

    detach(peer) {
      this.peers.delete(peer);
      if (peer.routingId) {
        const k = peer.routingId.toString('latin1');
        if (this.byId.get(k) === peer) this.byId.delete(k);
      }
    }

    onMessage(peer, frames) {
      if (this.kind === 'REP') {
        peer.send(frames); // heartbeat: echo the envelope and the ping
      } else if (this.kind === 'PUB') {
        const f = frames[0] || Buffer.alloc(0);
        if (f[0] === 1) peer.subs.add(f.subarray(1).toString('latin1'));
        else if (f[0] === 0) peer.subs.delete(f.subarray(1).toString('latin1'));
      } else if (this.handler) {
        this.handler([peer.routingId, ...frames]);
      }
    }

    // send routes frames: ROUTER by the first frame, PUB to every peer
    // subscribed to a prefix of the first frame. It reports false when a
    // peer dropped the message (see Peer.send).
    send(frames, force) {
      let sent = true;
      if (this.kind === 'ROUTER') {
        const peer = this.byId.get(Buffer.from(frames[0]).toString('latin1'));
        if (peer) sent = peer.send(frames.slice(1), force);
      } else if (this.kind === 'PUB') {
        const topic = (frames[0] || Buffer.alloc(0)).toString('latin1');
        for (const p of this.peers) {
          for (const s of p.subs) {
            if (topic.startsWith(s)) {
              sent = p.send(frames, force) && sent;
              break;
            }
          }
        }
      }
      return sent;
    }

    pending() {
      for (const p of this.peers) if (p.pending()) return true;
      return false;
    }
  }

  // -- Jupyter messages ------------------------------------------------------

  const seen = new Set();
  const ring = [];

  function sign(parts) {
    const h = crypto.createHmac('sha256', key);
    for (const p of parts) h.update(p);
    return Buffer.from(h.digest('hex'), 'ascii');
  }

  function header(msgType, msgId) {
    return {
      msg_id: msgId || crypto.randomUUID().replace(/-/g, ''),
      session: sessionId,
      username: 'berth',
      date: isoNow(),
      msg_type: msgType,
      version: PROTOCOL_VERSION,
    };
  }

  // serialize builds signed frames; content is an object or JSON text.
  function serialize(msgType, content, parent, metadata, idents, msgId) {
    const parts = [
      Buffer.from(JSON.stringify(header(msgType, msgId))),
      Buffer.from(JSON.stringify(parent || {})),
      Buffer.from(JSON.stringify(metadata || {})),
      Buffer.from(typeof content === 'string' ? content : JSON.stringify(content)),
    ];
    return [...(idents || []).map((i) => Buffer.from(i)), DELIM, sign(parts), ...parts];
  }

  function deserialize(frames) {
    const i = frames.findIndex((f) => f.equals(DELIM));
    if (i < 0 || frames.length - i - 1 < 5) return null;
    const sig = frames[i + 1];
    const parts = frames.slice(i + 2, i + 6);
    const want = sign(parts);
    if (sig.length !== want.length || !crypto.timingSafeEqual(sig, want)) {
      log('dropped a message with a bad signature');
      return null;
    }
    const s = sig.toString('ascii');
    if (seen.has(s)) {
      log('dropped a replayed message');
      return null;
    }
    seen.add(s);
    ring.push(s);
    if (ring.length > DIGEST_HISTORY) seen.delete(ring.shift());
    let msg;
    try {
      const [h, p, m, c] = parts.map((b) => JSON.parse(b.toString('utf8')));
      if (!h || typeof h !== 'object' || !c || typeof c !== 'object') return null;
      msg = { header: h, parent_header: p || {}, metadata: m || {}, content: c };
    } catch (e) {
      return null;
    }
    return { idents: frames.slice(0, i), msg };
  }

  // -- channels --------------------------------------------------------------

  const shell = new ZSocket('shell', 'ROUTER', (frames) => {
    const m = deserialize(frames);
    if (m) parentPort.postMessage({ t: 'shell', idents: m.idents, msg: m.msg });
  });
  const stdin = new ZSocket('stdin', 'ROUTER', (frames) => {
    const m = deserialize(frames);
    if (!m || m.msg.header.msg_type !== 'input_reply') return;
    parentPort.postMessage({
      t: 'input_reply',
      parentId: (m.msg.parent_header || {}).msg_id || '',
      value: String(m.msg.content.value ?? ''),
    });
  });
  const control = new ZSocket('control', 'ROUTER', onControl);
  const iopub = new ZSocket('iopub', 'PUB');
  const hb = new ZSocket('hb', 'REP');
  const sockets = { shell, stdin, control, iopub };

  function publish(msgType, content, parent) {
    flushStreams();
    const topic = msgType === 'stream' ? `stream.${content.name}` : `kernel.${sessionId}.${msgType}`;
    iopub.send(serialize(msgType, content, parent, {}, [Buffer.from(topic)]), msgType === 'status');
  }

  // Output a slow client's full buffer dropped, and the cell it was for:
  // the cell's execute_reply says how much (berth_output_dropped).
  let droppedFor = '';
  let droppedBytes = 0;

  function sendOutput(frames, parentId, size) {
    if (iopub.send(frames) || !parentId) return;
    if (parentId !== droppedFor) {
      droppedFor = parentId;
      droppedBytes = 0;
    }
    droppedBytes += size;
  }

  function reply(sock, idents, msgType, content, parent) {
    flushStreams();
    sock.send(serialize(msgType, content, parent, {}, idents));
  }

  // Streams: text from the main thread is coalesced here, so a cell in a
  // synchronous loop still streams; any other message flushes them first.
  const streams = [];
  let streamTimer = null;

  function streamWrite(name, text, parent) {
    const last = streams[streams.length - 1];
    if (last && last.name === name && last.parentId === (parent || {}).msg_id) {
      last.text.push(text);
      last.size += text.length;
    } else {
      streams.push({ name, parent, parentId: (parent || {}).msg_id, text: [text], size: text.length });
    }
    const total = streams.reduce((n, s) => n + s.size, 0);
    if (total >= STREAM_CHUNK) flushStreams();
    else if (!streamTimer) streamTimer = setTimeout(flushStreams, STREAM_FLUSH_MS);
  }

  function flushStreams() {
    if (streamTimer) {
      clearTimeout(streamTimer);
      streamTimer = null;
    }
    while (streams.length) {
      const s = streams.shift();
      const text = s.text.join('');
      // One message per STREAM_CHUNK: a single huge write must not be one
      // message bigger than a peer's buffer, dropped whole.
      for (let i = 0; i < text.length;) {
        let end = Math.min(i + STREAM_CHUNK, text.length);
        const c = text.charCodeAt(end - 1);
        if (end < text.length && c >= 0xd800 && c <= 0xdbff) end--; // keep a surrogate pair whole
        const piece = text.slice(i, end);
        i = end;
        sendOutput(serialize('stream', { name: s.name, text: piece }, s.parent, {}, [Buffer.from(`stream.${s.name}`)]),
          s.parentId, Buffer.byteLength(piece, 'utf8'));
      }
    }
  }

  let shuttingDown = false;

  function onControl(frames) {
    const m = deserialize(frames);
    if (!m) return;
    const h = m.msg.header;
    publish('status', { execution_state: 'busy' }, h);
    switch (h.msg_type) {
      case 'kernel_info_request':
        reply(control, m.idents, 'kernel_info_reply', kernelInfo, h);
        break;
      case 'interrupt_request':
        interrupt();
        reply(control, m.idents, 'interrupt_reply', { status: 'ok' }, h);
        break;
      case 'shutdown_request':
        shutdownRequest(control, m.idents, m.msg);
        return;
      default:
        log(`ignored control message ${JSON.stringify(h.msg_type)}`);
    }
    publish('status', { execution_state: 'idle' }, h);
  }

  // interrupt signals the process: a synchronous cell is broken by
  // breakOnSigint, an awaiting one by the main thread's SIGINT handler.
  // It also tells the main thread by message: a SIGINT that lands just as
  // a cell's synchronous part ends finds nothing to break and is lost, and
  // the cell would then await forever (see onInterrupt).
  function interrupt() {
    parentPort.postMessage({ t: 'interrupt' });
    try {
      process.kill(process.pid, 'SIGINT');
    } catch (e) {
      log(`interrupt: ${e.message}`);
    }
  }

  function shutdownRequest(sock, idents, msg) {
    const h = msg.header;
    const content = { status: 'ok', restart: !!(msg.content || {}).restart };
    reply(sock, idents, 'shutdown_reply', content, h);
    publish('shutdown_reply', content, h);
    publish('status', { execution_state: 'idle' }, h);
    if (shuttingDown) return;
    shuttingDown = true;
    const deadline = Date.now() + SHUTDOWN_FLUSH_MS;
    const waitFlushed = () => {
      if (Date.now() < deadline && Object.values(sockets).some((s) => s.pending())) {
        setTimeout(waitFlushed, 10);
        return;
      }
      parentPort.postMessage({ t: 'shutdown' });
      setTimeout(interrupt, 300); // a synchronous cell must yield to see the message
      setTimeout(() => process.kill(process.pid, 'SIGKILL'), SHUTDOWN_GRACE_MS);
    };
    waitFlushed();
  }

  parentPort.on('message', (m) => {
    switch (m.t) {
      case 'send': {
        flushStreams();
        let content = m.content;
        const parentId = (m.parent || {}).msg_id || '';
        if (m.ch === 'shell' && m.msgType === 'execute_reply') {
          // content comes from the main thread as JSON text.
          if (droppedBytes && droppedFor === parentId) content = JSON.stringify({ ...JSON.parse(content), berth_output_dropped: droppedBytes });
          droppedFor = '';
          droppedBytes = 0;
        }
        const frames = serialize(m.msgType, content, m.parent, m.metadata, m.idents, m.msgId);
        if (m.ch === 'iopub') {
          frames.unshift(Buffer.from(`kernel.${sessionId}.${m.msgType}`));
          if (m.msgType === 'status') iopub.send(frames, true);
          else sendOutput(frames, parentId, frames[frames.length - 1].length);
        } else {
          sockets[m.ch].send(frames);
        }
        break;
      }
      case 'stream':
        streamWrite(m.name, m.text, m.parent);
        break;
      case 'shutdown_shell':
        shutdownRequest(shell, m.idents, m.msg);
        break;
    }
  });

  (async () => {
    const transport = conn.transport || 'tcp';
    const ip = conn.ip || '127.0.0.1';
    for (const [sock, field] of [[shell, 'shell_port'], [control, 'control_port'], [stdin, 'stdin_port'], [iopub, 'iopub_port'], [hb, 'hb_port']]) {
      const port = Number(conn[field] || 0);
      if (transport === 'tcp' && !port) throw new Error(`the connection file has no ${field}`);
      try {
        await sock.listen(transport, ip, port);
      } catch (e) {
        throw new Error(`cannot bind the ${sock.name} channel to ${ip}:${port}: ${e.message}`);
      }
    }
    parentPort.postMessage({ t: 'ready', paths: [shell, control, stdin, iopub, hb].map((s) => s.path).filter(Boolean) });
    publish('status', { execution_state: 'starting' }, {});
  })().catch((e) => parentPort.postMessage({ t: 'fatal', error: e.message }));
}

// ---------------------------------------------------------------------------
// The main thread: cells.

function mainThread() {
  const fs = require('fs');
  const path = require('path');
  const vm = require('vm');
  const util = require('util');
  const crypto = require('crypto');
  const { createRequire, builtinModules } = require('module');
  const { pathToFileURL } = require('url');
  const { StringDecoder } = require('string_decoder');

  const args = process.argv.slice(2);
  let connFile = null;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '-f' || args[i] === '--connection-file') connFile = args[++i];
    else if (args[i].startsWith('--connection-file=')) connFile = args[i].slice('--connection-file='.length);
  }
  if (!connFile) {
    log('usage: node berth_kernel.js -f CONNECTION_FILE');
    process.exit(2);
  }
  const conn = JSON.parse(fs.readFileSync(connFile, 'utf8'));
  if (!conn.key) {
    log('the connection file has no key; refusing to run unsigned');
    process.exit(2);
  }
  if ((conn.signature_scheme || 'hmac-sha256') !== 'hmac-sha256') {
    log(`signature scheme ${JSON.stringify(conn.signature_scheme)} is not supported; use hmac-sha256`);
    process.exit(2);
  }
  if (!['tcp', 'ipc'].includes(conn.transport || 'tcp')) {
    log(`transport ${JSON.stringify(conn.transport)} is not supported; use tcp or ipc`);
    process.exit(2);
  }

  const kernelInfo = {
    status: 'ok',
    protocol_version: PROTOCOL_VERSION,
    implementation: 'berth',
    implementation_version: KERNEL_VERSION,
    language_info: {
      name: 'javascript',
      version: process.versions.node,
      mimetype: 'application/javascript',
      file_extension: '.js',
      codemirror_mode: 'javascript',
      pygments_lexer: 'javascript',
    },
    banner: `berth JavaScript kernel ${KERNEL_VERSION} (Node.js ${process.version})`,
    help_links: [],
  };
  const sessionId = crypto.randomUUID();
  let socketPaths = [];

  const worker = new Worker(__filename, {
    workerData: { conn, sessionId, kernelInfo },
    stdout: true,
    stderr: true,
  });
  worker.stdout.on('data', (d) => log(`io: ${d}`));
  worker.stderr.on('data', (d) => log(`io: ${d}`));
  worker.on('error', (e) => {
    log(`I/O thread failed: ${e && e.stack}`);
    exit(1);
  });
  worker.on('exit', (code) => {
    log(`I/O thread exited (${code})`);
    exit(1);
  });

  function exit(code) {
    for (const p of socketPaths) {
      try {
        fs.unlinkSync(p);
      } catch (e) {
        // gone already
      }
    }
    process.exit(code);
  }

  // -- sending ---------------------------------------------------------------

  let parent = {};
  let parentIdents = [];

  function safeJSON(v) {
    const seen = new WeakSet();
    return JSON.stringify(v, (k, x) => {
      if (typeof x === 'bigint') return x.toString();
      if (x && typeof x === 'object') {
        if (seen.has(x)) return '[Circular]';
        seen.add(x);
      }
      return x;
    });
  }

  function send(ch, msgType, content, opts = {}) {
    worker.postMessage({
      t: 'send',
      ch,
      msgType,
      content: safeJSON(content),
      parent: opts.parent || parent,
      metadata: opts.metadata || {},
      idents: opts.idents || [],
      msgId: opts.msgId,
    });
  }

  function publish(msgType, content, p) {
    send('iopub', msgType, content, { parent: p || parent });
  }

  // -- cell stdio --------------------------------------------------------------

  function streamWriter(name) {
    const decoder = new StringDecoder('utf8');
    return function write(chunk, encoding, cb) {
      if (typeof encoding === 'function') {
        cb = encoding;
        encoding = undefined;
      }
      let text;
      if (typeof chunk === 'string') {
        text = encoding && encoding !== 'utf8' && encoding !== 'utf-8' ? Buffer.from(chunk, encoding).toString('utf8') : chunk;
      } else {
        text = decoder.write(Buffer.from(chunk.buffer ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength) : chunk));
      }
      if (text) worker.postMessage({ t: 'stream', name, text, parent });
      if (cb) process.nextTick(cb);
      return true;
    };
  }
  process.stdout.write = streamWriter('stdout');
  process.stderr.write = streamWriter('stderr');

  // -- display -----------------------------------------------------------------

  const REPRS = [
    ['text/html', '_repr_html_'],
    ['text/markdown', '_repr_markdown_'],
    ['image/svg+xml', '_repr_svg_'],
    ['image/png', '_repr_png_'],
    ['image/jpeg', '_repr_jpeg_'],
    ['text/latex', '_repr_latex_'],
    ['application/json', '_repr_json_'],
  ];

  function inspect(v) {
    return util.inspect(v, { colors: false, depth: 4, maxArrayLength: 200, maxStringLength: 100000, breakLength: 80 });
  }

  function mimebundle(v) {
    const data = {};
    const metadata = {};
    if (v !== null && (typeof v === 'object' || typeof v === 'function')) {
      if (typeof v._repr_mimebundle_ === 'function') {
        const r = v._repr_mimebundle_();
        if (r && typeof r === 'object') Object.assign(data, r);
      }
      for (const [mime, name] of REPRS) {
        if (mime in data || typeof v[name] !== 'function') continue;
        let r = v[name]();
        if (r === undefined || r === null) continue;
        if ((mime === 'image/png' || mime === 'image/jpeg') && typeof r !== 'string') r = Buffer.from(r).toString('base64');
        data[mime] = mime === 'application/json' ? r : String(r);
      }
    }
    if (!('text/plain' in data)) data['text/plain'] = inspect(v);
    return { data, metadata };
  }

  function publishDisplay(data, metadata, displayId, update) {
    const transient = displayId ? { display_id: displayId } : {};
    publish(update ? 'update_display_data' : 'display_data', { data, metadata: metadata || {}, transient });
  }

  // display(...values) shows values: text/plain from util.inspect and
  // rich formats from _repr_html_ and friends. display.html(s) and the
  // other helpers send one MIME type.
  function display(...values) {
    for (const v of values) {
      const b = mimebundle(v);
      publishDisplay(b.data, b.metadata);
    }
  }
  const bytesBase64 = (v) => (typeof v === 'string' ? v : Buffer.from(v).toString('base64'));
  display.mime = (data, metadata, opts = {}) => {
    const id = opts.display_id === true ? crypto.randomUUID() : opts.display_id;
    publishDisplay(data, metadata, id, !!opts.update);
    return id ? { display_id: id, update: (d, m) => publishDisplay(d, m, id, true) } : undefined;
  };
  display.text = (s) => display.mime({ 'text/plain': String(s) });
  display.html = (s) => display.mime({ 'text/html': String(s), 'text/plain': '<HTML>' });
  display.markdown = (s) => display.mime({ 'text/markdown': String(s), 'text/plain': String(s) });
  display.svg = (s) => display.mime({ 'image/svg+xml': String(s), 'text/plain': '<SVG>' });
  display.png = (b) => display.mime({ 'image/png': bytesBase64(b), 'text/plain': '<PNG image>' });
  display.jpeg = (b) => display.mime({ 'image/jpeg': bytesBase64(b), 'text/plain': '<JPEG image>' });
  display.json = (v) => display.mime({ 'application/json': v, 'text/plain': inspect(v) });
  display.clear = (wait = false) => publish('clear_output', { wait: !!wait });

  // -- input and tool ------------------------------------------------------------

  class StdinNotImplementedError extends Error {}
  StdinNotImplementedError.prototype.name = 'StdinNotImplementedError';
  class ToolError extends Error {
    constructor(tool, message) {
      super(message);
      this.tool = tool;
    }
  }
  ToolError.prototype.name = 'ToolError';

  const inputWaiters = new Map();
  let allowStdin = false;

  function requestInput(prompt, password) {
    if (!allowStdin) {
      return Promise.reject(new StdinNotImplementedError('input was called, but this frontend does not support input requests.'));
    }
    const msgId = crypto.randomUUID().replace(/-/g, '');
    return new Promise((resolve, reject) => {
      inputWaiters.set(msgId, { resolve, reject });
      send('stdin', 'input_request', { prompt, password: !!password }, { idents: parentIdents, msgId });
    });
  }

  function onInputReply(m) {
    let w = inputWaiters.get(m.parentId);
    let id = m.parentId;
    if (!w && !m.parentId && inputWaiters.size === 1) [[id, w]] = inputWaiters; // a client that sets no parent
    if (!w) return;
    inputWaiters.delete(id);
    w.resolve(m.value);
  }

  // input(prompt) asks the client for a line; it returns a promise.
  function input(prompt = '') {
    return requestInput(String(prompt), false);
  }

  // tool(name, args) calls one of berth's tools and resolves to its
  // result; a failed call rejects with ToolError.
  async function tool(name, args = {}) {
    if (!allowStdin) {
      throw new ToolError(name, 'tool() needs a controller that answers input requests; this cell was run without stdin');
    }
    const raw = await requestInput(JSON.stringify({ berth_tool: String(name), args }), false);
    let r;
    try {
      r = JSON.parse(raw);
    } catch (e) {
      throw new ToolError(name, `tool ${name}: the reply is not JSON: ${raw.slice(0, 200)}`);
    }
    if (!r || typeof r !== 'object') throw new ToolError(name, `tool ${name}: the reply is not an object: ${raw.slice(0, 200)}`);
    if (r.ok) return r.result;
    throw new ToolError(name, String(r.error || `tool ${name} failed`));
  }

  // -- modules -----------------------------------------------------------------

  let requireFor = { cwd: null, fn: null };
  const cwdRequire = () => {
    const cwd = process.cwd();
    if (requireFor.cwd !== cwd) requireFor = { cwd, fn: createRequire(path.join(cwd, '__berth_cell__.js')) };
    return requireFor.fn;
  };

  function importModule(spec) {
    spec = String(spec);
    if (spec.startsWith('node:') || builtinModules.includes(spec) || /^[a-z][a-z0-9+.-]*:/i.test(spec)) return import(spec);
    if (spec.startsWith('.') || spec.startsWith('/')) return import(pathToFileURL(path.resolve(process.cwd(), spec)).href);
    let resolved;
    try {
      resolved = cwdRequire().resolve(spec);
    } catch (e) {
      return import(spec);
    }
    return import(pathToFileURL(resolved).href);
  }

  const helpers = { import: importModule };
  Object.defineProperty(globalThis, '__berth', { value: helpers, enumerable: false, configurable: false, writable: false });
  const globals = { display, input, tool, ToolError, StdinNotImplementedError };
  for (const [k, v] of Object.entries(globals)) {
    Object.defineProperty(globalThis, k, { value: v, enumerable: false, configurable: true, writable: true });
  }
  Object.defineProperty(globalThis, 'require', {
    get: () => cwdRequire(),
    set: (v) => Object.defineProperty(globalThis, 'require', { value: v, writable: true, configurable: true }),
    enumerable: false,
    configurable: true,
  });

  // -- interrupts and stray errors -------------------------------------------------

  let cellInterrupt = null; // rejects the running async cell

  function interruptError() {
    const e = new Error('the cell was interrupted');
    e.name = 'KeyboardInterrupt';
    e.berthInterrupt = true;
    return e;
  }

  // An interrupt_request arrives twice: as SIGINT and as a message from
  // the sockets thread. Whichever comes second within INTERRUPT_PAIR_MS of
  // one that interrupted the cell is its companion and is ignored (it must
  // not hit the next cell); one that finds no cell to interrupt counts for
  // nothing, so its companion still can.
  const INTERRUPT_PAIR_MS = 1000;
  let interruptedAt = 0;
  let interruptedBy = '';

  function onInterrupt(by) {
    const now = Date.now();
    if (interruptedBy && interruptedBy !== by && now - interruptedAt < INTERRUPT_PAIR_MS) {
      interruptedBy = '';
      return;
    }
    if (!cellInterrupt) return;
    interruptedAt = now;
    interruptedBy = by;
    cellInterrupt();
  }

  process.on('SIGINT', () => onInterrupt('signal'));
  process.on('uncaughtException', (e) => {
    process.stderr.write(`Uncaught ${e && e.stack ? cleanStack(e.stack).join('\n') : inspect(e)}\n`);
  });
  process.on('unhandledRejection', (e) => {
    process.stderr.write(`Unhandled promise rejection: ${e && e.stack ? cleanStack(e.stack).join('\n') : inspect(e)}\n`);
  });

  function cleanStack(stack) {
    return String(stack)
      .split('\n')
      .filter((l) => !(l.includes(__filename) || /^\s+at (.*\()?node:/.test(l) || /^\s+at new Script /.test(l)));
  }

  function errorContent(e) {
    if (e && (e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED' || e.berthInterrupt)) {
      return { ename: 'KeyboardInterrupt', evalue: 'the cell was interrupted', traceback: ['KeyboardInterrupt: the cell was interrupted'] };
    }
    if (e && typeof e === 'object' && typeof e.stack === 'string') {
      const ename = String(e.name || (e.constructor && e.constructor.name) || 'Error');
      return { ename, evalue: String(e.message ?? ''), traceback: cleanStack(e.stack) };
    }
    return { ename: 'Error', evalue: inspect(e), traceback: [`Uncaught ${inspect(e)}`] };
  }

  // -- running cells ---------------------------------------------------------------

  const NOTHING = Symbol('nothing');
  const mainLoader = vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;

  function compile(src, filename) {
    const opts = { filename };
    if (mainLoader) opts.importModuleDynamically = mainLoader;
    return new vm.Script(src, opts);
  }

  async function runCell(code, filename) {
    let plan;
    try {
      plan = planCell(code);
    } catch (e) {
      log(`cell rewrite failed: ${e && e.stack}`);
      plan = { sync: code, async: null, hasAwait: /\bawait\b/.test(code), lastIsExpr: false };
    }
    const candidates = [{ src: plan.sync, async: false, echo: plan.lastIsExpr }];
    if (plan.async) candidates.push({ src: plan.async, async: true, echo: plan.lastIsExpr });
    candidates.push({ src: code, async: false, echo: plan.lastIsExpr, fallback: true });
    if (plan.hasAwait) candidates.push({ src: asyncWrap(code), async: true, echo: false, fallback: true });
    let script = null;
    let chosen = null;
    for (const c of candidates) {
      try {
        script = compile(c.src, filename);
        chosen = c;
        break;
      } catch (e) {
        if (!(e instanceof SyntaxError)) throw e;
      }
    }
    if (!script) {
      compile(plan.hasAwait ? asyncWrap(code) : code, filename); // throws the error about the cell as written
      throw new SyntaxError('the cell does not compile');
    }
    if (chosen.fallback && code.trim()) {
      log(`cell rewrite did not compile; ran ${filename} as written (top-level declarations may not persist)`);
    }
    let value;
    try {
      value = script.runInThisContext({ breakOnSigint: true, displayErrors: true });
    } catch (e) {
      if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
        interruptedAt = Date.now(); // SIGINT broke the synchronous part
        interruptedBy = 'signal';
      }
      throw e;
    }
    if (chosen.async) {
      value.catch(() => {}); // an interrupted cell's promise may reject later
      value = await new Promise((resolve, reject) => {
        cellInterrupt = () => reject(interruptError());
        value.then(resolve, reject);
      }).finally(() => {
        cellInterrupt = null;
      });
    }
    return chosen.echo ? value : NOTHING;
  }

  let executionCount = 0;
  let autoUnderscore = undefined;

  function setUnderscore(v) {
    const own = Object.getOwnPropertyDescriptor(globalThis, '_');
    if (own && own.value !== autoUnderscore) return; // the user owns _
    autoUnderscore = v;
    try {
      globalThis._ = v;
    } catch (e) {
      // read-only _: leave it
    }
  }

  async function execute(idents, msg) {
    const c = msg.content || {};
    const code = String(c.code || '');
    const silent = !!c.silent;
    const storeHistory = c.store_history === undefined ? !silent : !!c.store_history;
    const stopOnError = c.stop_on_error === undefined ? true : !!c.stop_on_error;
    allowStdin = !!c.allow_stdin;
    const started = isoNow();
    if (!silent && storeHistory) executionCount++;
    if (!silent) publish('execute_input', { code, execution_count: executionCount });
    let error = null;
    try {
      const value = await runCell(code, `<cell-${executionCount}>`);
      if (value !== NOTHING && value !== undefined && !silent) {
        setUnderscore(value);
        const b = mimebundle(value);
        publish('execute_result', { data: b.data, metadata: b.metadata, execution_count: executionCount });
      }
    } catch (e) {
      error = errorContent(e);
      publish('error', error);
    }
    for (const [id, w] of inputWaiters) {
      inputWaiters.delete(id);
      w.reject(interruptError());
    }
    const userExpressions = {};
    for (const [name, expr] of Object.entries(c.user_expressions || {})) {
      try {
        const b = mimebundle(vm.runInThisContext(String(expr)));
        userExpressions[name] = { status: 'ok', data: b.data, metadata: b.metadata };
      } catch (e) {
        userExpressions[name] = { status: 'error', ...errorContent(e) };
      }
    }
    let content;
    if (!error) {
      content = { status: 'ok', execution_count: executionCount, user_expressions: userExpressions, payload: [] };
    } else {
      content = {
        ...error,
        status: 'error',
        execution_count: executionCount,
        user_expressions: userExpressions,
        payload: [],
        engine_info: { engine_uuid: sessionId, engine_id: -1, method: 'execute' },
      };
    }
    const metadata = { started, dependencies_met: true, engine: sessionId, status: content.status };
    send('shell', 'execute_reply', content, { idents, metadata });
    if (error && stopOnError) abortQueued();
  }

  function abortQueued() {
    const keep = [];
    for (const item of queue.splice(0)) {
      if (item.msg.header.msg_type !== 'execute_request') {
        keep.push(item);
        continue;
      }
      const h = item.msg.header;
      publish('status', { execution_state: 'busy' }, h);
      send('shell', 'execute_reply', { status: 'aborted', execution_count: executionCount, user_expressions: {}, payload: [] }, {
        idents: item.idents,
        parent: h,
        metadata: { status: 'aborted', dependencies_met: false, engine: sessionId, started: isoNow() },
      });
      publish('status', { execution_state: 'idle' }, h);
    }
    queue.push(...keep);
  }

  function isComplete(code) {
    try {
      compile(code, '<is_complete>');
      return { status: 'complete' };
    } catch (e) {
      if (/await is only valid/.test(e.message)) {
        try {
          compile(asyncWrap(code), '<is_complete>');
          return { status: 'complete' };
        } catch (e2) {
          e = e2;
        }
      }
      if (/Unexpected end of input|Unterminated template|missing \) after|Unterminated string/.test(e.message)) {
        return { status: 'incomplete', indent: '' };
      }
      return { status: 'invalid' };
    }
  }

  // -- the shell queue -----------------------------------------------------------------

  const queue = [];
  let pumping = false;

  async function pump() {
    if (pumping) return;
    pumping = true;
    while (queue.length) {
      const item = queue.shift();
      try {
        await dispatchShell(item.idents, item.msg);
      } catch (e) {
        log(`internal error handling a shell message: ${e && e.stack}`);
      }
    }
    pumping = false;
  }

  async function dispatchShell(idents, msg) {
    const h = msg.header;
    const c = msg.content || {};
    parent = h;
    parentIdents = idents;
    publish('status', { execution_state: 'busy' });
    try {
      switch (h.msg_type) {
        case 'execute_request':
          await execute(idents, msg);
          break;
        case 'kernel_info_request':
          send('shell', 'kernel_info_reply', kernelInfo, { idents });
          break;
        case 'is_complete_request':
          send('shell', 'is_complete_reply', isComplete(String(c.code || '')), { idents });
          break;
        case 'complete_request': {
          const pos = c.cursor_pos ?? String(c.code || '').length;
          send('shell', 'complete_reply', { status: 'ok', matches: [], cursor_start: pos, cursor_end: pos, metadata: {} }, { idents });
          break;
        }
        case 'inspect_request':
          send('shell', 'inspect_reply', { status: 'ok', found: false, data: {}, metadata: {} }, { idents });
          break;
        case 'history_request':
          send('shell', 'history_reply', { status: 'ok', history: [] }, { idents });
          break;
        case 'comm_info_request':
          send('shell', 'comm_info_reply', { status: 'ok', comms: {} }, { idents });
          break;
        case 'comm_open':
          publish('comm_close', { comm_id: c.comm_id || '', data: {} });
          break;
        case 'shutdown_request': // clients before protocol 5 sent it on shell
          worker.postMessage({ t: 'shutdown_shell', idents, msg });
          break;
        case 'comm_msg':
        case 'comm_close':
          break;
        default:
          log(`ignored shell message ${JSON.stringify(h.msg_type)}`);
      }
    } finally {
      publish('status', { execution_state: 'idle' });
    }
  }

  worker.on('message', (m) => {
    switch (m.t) {
      case 'shell':
        m.idents = m.idents.map((i) => Buffer.from(i));
        queue.push(m);
        pump();
        break;
      case 'input_reply':
        onInputReply(m);
        break;
      case 'interrupt':
        onInterrupt('message');
        break;
      case 'ready':
        socketPaths = m.paths;
        break;
      case 'shutdown':
        exit(0);
        break;
      case 'fatal':
        log(m.error);
        exit(1);
        break;
    }
  });
}

// ---------------------------------------------------------------------------
// Cell rewriting. A small tokenizer finds the top-level statements; it
// knows strings, templates, comments, regular expressions and brackets,
// which is all the rewriting needs. When a rewrite does not compile the
// cell runs as written.

const PUNCTUATORS = [
  '>>>=', '...', '===', '!==', '**=', '<<=', '>>=', '>>>', '&&=', '||=', '??=',
  '=>', '==', '!=', '<=', '>=', '&&', '||', '??', '?.', '++', '--', '+=', '-=', '*=', '/=', '%=', '&=', '|=', '^=', '**', '<<', '>>',
];
const BEFORE_EXPRESSION = new Set(['return', 'typeof', 'instanceof', 'in', 'of', 'new', 'delete', 'void', 'throw', 'case', 'do', 'else', 'yield', 'await', 'extends']);
const STATEMENT_KEYWORDS = new Set(['var', 'let', 'const', 'function', 'class', 'if', 'for', 'while', 'do', 'try', 'switch', 'return', 'throw', 'break', 'continue', 'import', 'export', 'debugger', 'with']);
const NOT_CONTINUING = new Set(['{', '!', '~', '++', '--', ';', '}', ')', ']']);

function isNewline(c) {
  return c === '\n' || c === '\r' || c === '\u2028' || c === '\u2029';
}

function isIdentChar(c) {
  return c !== undefined && (/[\w$]/.test(c) || c.charCodeAt(0) > 0x7f);
}

function regexAllowed(prev) {
  if (!prev) return true;
  if (prev.type === 'name') return BEFORE_EXPRESSION.has(prev.v);
  if (prev.type !== 'punc') return false;
  return !(prev.v === ')' || prev.v === ']' || prev.v === '++' || prev.v === '--');
}

// lex tokenizes src from i. Nested (inside a template's ${}) it stops
// after the unmatched '}' and returns its end.
function lex(src, i, nested) {
  const toks = [];
  const n = src.length;
  let nl = false;
  let depth = 0;
  while (i < n) {
    const c = src[i];
    if (isNewline(c)) {
      nl = true;
      i++;
      continue;
    }
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (c === '/' && src[i + 1] === '/') {
      while (i < n && !isNewline(src[i])) i++;
      continue;
    }
    if (c === '/' && src[i + 1] === '*') {
      const j = src.indexOf('*/', i + 2);
      const end = j < 0 ? n : j + 2;
      if (/[\n\r\u2028\u2029]/.test(src.slice(i, end))) nl = true;
      i = end;
      continue;
    }
    if (i === 0 && c === '#' && src[1] === '!') {
      while (i < n && !isNewline(src[i])) i++;
      continue;
    }
    const start = i;
    let type = 'punc';
    if (c === '"' || c === "'") {
      i++;
      while (i < n && src[i] !== c && !isNewline(src[i])) i += src[i] === '\\' ? 2 : 1;
      i++;
      type = 'str';
    } else if (c === '`') {
      i++;
      while (i < n && src[i] !== '`') {
        if (src[i] === '\\') i += 2;
        else if (src[i] === '$' && src[i + 1] === '{') i = lex(src, i + 2, true).end;
        else i++;
      }
      i++;
      type = 'tmpl';
    } else if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(src[i + 1] || ''))) {
      i++;
      while (i < n && (/[\w.]/.test(src[i]) || ((src[i] === '+' || src[i] === '-') && /[eE]/.test(src[i - 1]) && !/^0[xX]/.test(src.slice(start, i))))) i++;
      type = 'num';
    } else if (isIdentChar(c) || c === '#' || c === '\\') {
      i++;
      while (i < n && (isIdentChar(src[i]) || src[i] === '\\')) i++;
      type = 'name';
    } else if (c === '/' && regexAllowed(toks[toks.length - 1])) {
      i++;
      let inClass = false;
      while (i < n && !isNewline(src[i])) {
        if (src[i] === '\\') {
          i += 2;
          continue;
        }
        if (src[i] === '[') inClass = true;
        else if (src[i] === ']') inClass = false;
        else if (src[i] === '/' && !inClass) break;
        i++;
      }
      i++;
      while (i < n && isIdentChar(src[i])) i++;
      type = 'regex';
    } else {
      const p = PUNCTUATORS.find((q) => src.startsWith(q, i));
      i += p ? p.length : 1;
      if (nested) {
        if (c === '{') depth++;
        else if (c === '}') {
          if (depth === 0) return { toks, end: i };
          depth--;
        }
      }
    }
    toks.push({ type, v: src.slice(start, Math.min(i, n)), s: start, e: Math.min(i, n), nl });
    nl = false;
  }
  return { toks, end: n };
}

function tokenize(src) {
  const toks = lex(src, 0, false).toks;
  const stack = [];
  toks.forEach((t, k) => {
    t.depth = stack.length;
    if (t.type !== 'punc') return;
    if (t.v === '(' || t.v === '[' || t.v === '{') stack.push(k);
    else if (t.v === ')' || t.v === ']' || t.v === '}') {
      const o = stack.pop();
      if (o !== undefined) {
        toks[o].match = k;
        t.match = o;
      }
      t.depth = stack.length;
    }
  });
  return toks;
}

function endsExpression(t) {
  if (t.type === 'name') return !BEFORE_EXPRESSION.has(t.v);
  if (t.type !== 'punc') return true;
  return t.v === ')' || t.v === ']' || t.v === '}' || t.v === '++' || t.v === '--';
}

function continues(t) {
  if (t.type === 'tmpl') return true;
  if (t.type === 'name') return t.v === 'in' || t.v === 'instanceof' || t.v === 'of';
  return t.type === 'punc' && !NOT_CONTINUING.has(t.v);
}

// startsStatement reports whether token k (at depth 0) begins a
// top-level statement.
function startsStatement(toks, k) {
  const t = toks[k];
  if (t.depth !== 0) return false;
  if (k === 0) return true;
  const p = toks[k - 1];
  if (p.v === ';' && p.type === 'punc') return true;
  if (p.v === '}' && p.type === 'punc' && p.depth === 0) return !continues(t) && !['else', 'catch', 'finally'].includes(t.v);
  return t.nl && endsExpression(p) && !continues(t) && !['else', 'catch', 'finally'].includes(t.v);
}

// statementEnd returns the index of the last token of the statement
// starting at k (a trailing ';' included).
function statementEnd(toks, k) {
  for (let j = k + 1; j < toks.length; j++) {
    if (toks[j].depth === 0 && toks[j].type === 'punc' && toks[j].v === ';') return j;
    if (startsStatement(toks, j)) return j - 1;
  }
  return toks.length - 1;
}

// patternNames adds the names bound by the pattern opened at toks[a].
function patternNames(toks, a, out) {
  const open = toks[a];
  const close = open.match === undefined ? toks.length : open.match;
  const d = open.depth + 1;
  const target = (s, e) => {
    if (s >= e) return;
    if (toks[s].type === 'name') out.push(toks[s].v);
    else if (toks[s].v === '{' || toks[s].v === '[') patternNames(toks, s, out);
  };
  let k = a + 1;
  while (k < close) {
    let e = k;
    while (e < close && !(toks[e].v === ',' && toks[e].depth === d)) e++;
    let s = k;
    if (s < e && toks[s].v === '...') s++;
    if (open.v === '{') {
      let colon = -1;
      for (let j = s; j < e; j++) {
        if (toks[j].depth !== d) continue;
        if (toks[j].v === '=') break;
        if (toks[j].v === ':') {
          colon = j;
          break;
        }
      }
      if (colon < 0) {
        if (s < e && toks[s].type === 'name') out.push(toks[s].v);
      } else {
        target(colon + 1, e);
      }
    } else {
      target(s, e);
    }
    k = e + 1;
  }
}

// declarators splits a let/const/var declaration (keyword at k, last
// token at end) and returns the names it binds.
function declarationNames(toks, k, end) {
  const names = [];
  let j = k + 1;
  while (j <= end) {
    const t = toks[j];
    if (t.type === 'name') names.push(t.v);
    else if ((t.v === '{' || t.v === '[') && t.match !== undefined) patternNames(toks, j, names);
    while (j <= end && !(toks[j].v === ',' && toks[j].depth === 0)) j++;
    j++;
  }
  return names;
}

function applyEdits(src, edits) {
  edits.sort((a, b) => a.at - b.at || (a.order || 0) - (b.order || 0));
  let out = '';
  let pos = 0;
  for (const e of edits) {
    out += src.slice(pos, e.at) + e.text;
    pos = e.at + (e.del || 0);
  }
  return out + src.slice(pos);
}

function asyncWrap(src) {
  return `(async () => { ${src}\n})()`;
}

// rewriteImports turns top-level import statements into awaited dynamic
// imports bound with var, and import(...) into the kernel's resolver.
function rewriteImports(src) {
  const toks = tokenize(src);
  const edits = [];
  let found = false;
  toks.forEach((t, k) => {
    if (t.type !== 'name' || t.v !== 'import') return;
    const next = toks[k + 1];
    if (next && next.v === '(') {
      edits.push({ at: t.s, del: t.e - t.s, text: '__berth.import' });
      return;
    }
    if (!startsStatement(toks, k) || !next || next.v === '.') return;
    if (next.type === 'str') {
      edits.push({ at: t.s, del: next.e - t.s, text: `await __berth.import(${next.v})` });
      found = true;
      return;
    }
    let from = -1;
    for (let j = k + 1; j < toks.length && toks[j].v !== ';'; j++) {
      if (toks[j].depth === 0 && toks[j].v === 'from' && toks[j + 1] && toks[j + 1].type === 'str') {
        from = j;
        break;
      }
    }
    if (from < 0) return;
    const last = from + 1;
    const spec = toks[last].v;
    let def = null;
    let star = null;
    const named = [];
    for (let j = k + 1; j < from; j++) {
      const x = toks[j];
      if (x.v === '*' && toks[j + 1] && toks[j + 1].v === 'as') {
        star = toks[j + 2].v;
        j += 2;
      } else if (x.v === '{') {
        for (let q = j + 1; q < x.match; q++) {
          if (toks[q].v === ',') continue;
          const name = toks[q].v;
          if (toks[q + 1] && toks[q + 1].v === 'as') {
            named.push(`${name}: ${toks[q + 2].v}`);
            q += 2;
          } else {
            named.push(name);
          }
        }
        j = x.match;
      } else if (x.type === 'name') {
        def = x.v;
      }
    }
    const mod = `await __berth.import(${spec})`;
    let text;
    if (star) text = `var ${star} = ${mod}${def ? `, ${def} = ${star}.default` : ''}`;
    else text = `var {${[def ? `default: ${def}` : null, ...named].filter(Boolean).join(', ')}} = ${mod}`;
    edits.push({ at: t.s, del: toks[last].e - t.s, text });
    found = true;
  });
  return { src: edits.length ? applyEdits(src, edits) : src, found };
}

// planCell returns the cell rewritten to run as a script (sync) and, when
// it awaits at top level, inside an async function (async), plus whether
// its last statement is an expression whose value is echoed.
function planCell(code) {
  const imp = rewriteImports(code);
  let src = imp.src;
  let toks = tokenize(src);
  // A cell that is one object literal, like the Node REPL.
  if (toks.length && toks[0].v === '{' && toks[0].match === toks.length - 1) {
    src = `(${src}\n)`;
    toks = tokenize(src);
  }
  const hasAwait = imp.found || toks.some((t) => t.type === 'name' && t.v === 'await');
  const starts = [];
  for (let k = 0; k < toks.length; k++) if (startsStatement(toks, k)) starts.push(k);

  const syncEdits = [];
  const asyncEdits = [];
  const hoisted = [];
  const functions = [];
  for (const k of starts) {
    const t = toks[k];
    const next = toks[k + 1];
    if (t.type !== 'name' || !next) continue;
    if (t.v === 'var' || t.v === 'const' || (t.v === 'let' && (next.type === 'name' || next.v === '[' || next.v === '{'))) {
      const end = statementEnd(toks, k);
      const last = toks[end].v === ';' && toks[end].type === 'punc' ? end - 1 : end;
      if (t.v !== 'var') syncEdits.push({ at: t.s, del: t.e - t.s, text: 'var' });
      hoisted.push(...declarationNames(toks, k, last));
      asyncEdits.push({ at: t.s, del: t.e - t.s, text: 'void (' });
      asyncEdits.push({ at: toks[last].e, text: ')', order: -1 });
    } else if (t.v === 'class' && next.type === 'name' && next.v !== 'extends') {
      let body = k + 1;
      while (body < toks.length && !(toks[body].v === '{' && toks[body].depth === 0)) body++;
      const close = toks[body] && toks[body].match;
      if (close === undefined) continue;
      hoisted.push(next.v);
      syncEdits.push({ at: t.s, text: `var ${next.v} = ` });
      syncEdits.push({ at: toks[close].e, text: ';', order: -1 });
      asyncEdits.push({ at: t.s, text: `void (${next.v} = ` });
      asyncEdits.push({ at: toks[close].e, text: ')', order: -1 });
    } else if (t.v === 'function' || (t.v === 'async' && next.v === 'function' && !next.nl)) {
      let j = t.v === 'async' ? k + 2 : k + 1;
      if (toks[j] && toks[j].v === '*') j++;
      if (toks[j] && toks[j].type === 'name') functions.push(toks[j].v);
    }
  }

  let lastIsExpr = false;
  const L = starts[starts.length - 1];
  if (L !== undefined) {
    const t = toks[L];
    const isLabel = toks[L + 1] && toks[L + 1].v === ':' && t.type === 'name';
    const asyncFn = t.v === 'async' && toks[L + 1] && toks[L + 1].v === 'function';
    lastIsExpr = !(t.type === 'name' && STATEMENT_KEYWORDS.has(t.v)) && !asyncFn && !isLabel && !(t.type === 'punc' && (t.v === '{' || t.v === ';'));
  }

  const sync = applyEdits(src, syncEdits.slice());
  let async = null;
  if (hasAwait) {
    const edits = asyncEdits.slice();
    if (lastIsExpr) {
      const lastTok = toks[toks.length - 1];
      const endTok = lastTok.v === ';' && lastTok.type === 'punc' && lastTok.depth === 0 ? toks[toks.length - 2] : lastTok;
      edits.push({ at: toks[L].s, text: 'return (', order: 1 });
      edits.push({ at: endTok.e, text: '\n)', order: -2 });
    }
    const names = [...new Set([...hoisted, ...functions])];
    const head = names.length ? `var ${names.join(', ')}; ` : '';
    const hoistFns = functions.map((f) => `globalThis[${JSON.stringify(f)}] = ${f}; `).join('');
    async = `${head}(async () => { ${hoistFns}${applyEdits(src, edits)}\n})()`;
  }
  return { sync, async, hasAwait, lastIsExpr };
}

module.exports = { planCell };
