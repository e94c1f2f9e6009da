package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version printed by "berth-shim version". The
// client refuses an agent that prints something else.
const Version = "berth-shim/2"

// MaxPayload is the largest frame payload either side sends or accepts.
// Larger data (file contents, process output) is split into several frames.
const MaxPayload = 1 << 20

// HeaderSize is one type byte and a four-byte big-endian payload length.
const HeaderSize = 5

// Frame types of the "run" protocol, berth to agent.
const (
	TypeStdin    byte = 'i' // payload: bytes for the child's stdin
	TypeStdinEOF byte = 'e' // close the child's stdin
	TypeSignal   byte = 's' // payload: 4-byte signal number, sent to the process group
)

// Frame types of the "run" protocol, agent to berth. With --direct-stdout
// they come on the agent's stderr and there is no TypeStdout: the program
// writes the agent's stdout itself, and berth takes the end of that stream
// together with TypeExit as the end of the process.
const (
	TypeStarted   byte = 'p' // payload: 4-byte pid of the child
	TypeStdout    byte = 'o' // payload: child's stdout bytes
	TypeStderr    byte = 'r' // payload: child's stderr bytes
	TypeStdinAck  byte = 'a' // payload: 4-byte count of stdin bytes written to the child
	TypeExit      byte = 'x' // payload: 4-byte code, 4-byte signal; always the last frame
	TypeStartFail byte = 'f' // payload: message why the program could not start
)

// Frame types of the "fs" protocol.
const (
	TypeRequest  byte = 'q' // berth to agent: JSON Request
	TypeData     byte = 'd' // file contents, either direction
	TypeDataEnd  byte = 'z' // end of file contents, berth to agent
	TypeInfos    byte = 'n' // agent to berth: JSON []Info (ReadDir, Walk)
	TypeResponse byte = 'y' // agent to berth: JSON Response; ends a request
)

// Frame types of the "watch" protocol, agent to berth; berth sends
// TypePing (resident.go), every ProcessPing, and TypeWatchSync.
const (
	TypeWatchReady       byte = 'w' // payload: 4-byte count of directories watched; every one is
	TypeWatchChanges     byte = 'c' // payload: JSON []string, paths relative to ROOT, sorted
	TypeWatchOverflow    byte = 'l' // changes were lost: berth must rescan; the watch goes on
	TypeWatchUnsupported byte = 'u' // payload: why watching is not possible here; the last frame
	TypeWatchSynced      byte = 'm' // payload: 8-byte mark of a TypeWatchSync; every change made before it was sent before this frame
)

// TypeWatchSync is berth's barrier request in the "watch" protocol, berth
// to agent; payload: an 8-byte big-endian mark, increasing. The agent reads
// what the kernel queued so far, sends what is pending at once, and then
// TypeWatchSynced with the mark (or with a higher one it was asked for
// meanwhile).
const TypeWatchSync byte = 'b'

// StdinWindow is how many stdin bytes berth may send before the agent
// acknowledges them, so the agent never blocks reading its own input while
// the child is not reading stdin.
const StdinWindow = 1 << 20

// StdinAckBatch is how many stdin bytes the agent takes (writes to the child,
// or drops once the child closed its stdin) before it acknowledges them with
// one TypeStdinAck frame. Batching keeps a conversation of small messages
// free of acknowledgements. At most StdinAckBatch-1 taken bytes are ever
// unacknowledged, so when the child took everything berth sent, berth's
// count of unacknowledged bytes is below StdinAckBatch; berth therefore
// keeps every stdin frame at most StdinWindow-StdinAckBatch bytes long, and
// the window always has room for the next one.
const StdinAckBatch = StdinWindow / 4

// MaxStdinFrame is the largest stdin payload berth sends in one frame; see
// StdinAckBatch.
const MaxStdinFrame = 64 << 10

// ErrFrameTooLarge is returned by ReadFrame for a length above MaxPayload.
var ErrFrameTooLarge = errors.New("agent: frame payload exceeds MaxPayload")

// WriteFrame writes one frame. Payloads above MaxPayload are refused. It is
// not safe for concurrent use on one writer; callers serialise.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("agent: write frame %q: %d bytes: %w", typ, len(payload), ErrFrameTooLarge)
	}
	buf := make([]byte, HeaderSize+len(payload))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:HeaderSize], uint32(len(payload)))
	copy(buf[HeaderSize:], payload)
	_, err := w.Write(buf)
	return err
}

// PutHeader writes the header of a frame of type typ with an n-byte
// payload into hdr, which must hold HeaderSize bytes, so that a caller can
// build a frame in one buffer and write it with one call.
func PutHeader(hdr []byte, typ byte, n int) {
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:HeaderSize], uint32(n))
}

// Reader reads frames from a stream.
type Reader struct {
	r    *bufio.Reader
	buf  []byte
	hdr  [HeaderSize]byte // the last header read, whole or in part
	hdrN int
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next reads the next frame. The payload is valid only until the next call.
// A stream that ends between frames returns io.EOF; one that ends inside a
// frame returns io.ErrUnexpectedEOF.
func (fr *Reader) Next() (byte, []byte, error) {
	hdr := &fr.hdr
	var err error
	fr.hdrN, err = io.ReadFull(fr.r, hdr[:])
	if err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("agent: read frame %q: %d bytes: %w", hdr[0], n, ErrFrameTooLarge)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], p, nil
}

// Rest returns, after Next failed, up to max bytes of what the stream held
// at that point, without waiting for more: the header bytes Next consumed
// and what is buffered after them. When the peer wrote a message instead
// of frames (a usage error, a crash), that is the message.
func (fr *Reader) Rest(max int) []byte {
	b := append([]byte(nil), fr.hdr[:fr.hdrN]...)
	if n := min(fr.r.Buffered(), max-len(b)); n > 0 {
		more, _ := fr.r.Peek(n)
		b = append(b, more...)
	}
	return b
}

// PutUint32s encodes numbers as consecutive big-endian 4-byte words.
func PutUint32s(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// Uint32s decodes n big-endian 4-byte words from p.
func Uint32s(p []byte, n int) ([]uint32, error) {
	if len(p) != 4*n {
		return nil, fmt.Errorf("agent: payload of %d bytes, want %d", len(p), 4*n)
	}
	vs := make([]uint32, n)
	for i := range vs {
		vs[i] = binary.BigEndian.Uint32(p[4*i:])
	}
	return vs, nil
}
