// Package framing reads and writes the Content-Length framed messages of the
// Language Server Protocol and the Debug Adapter Protocol:
//
//	Content-Length: 17\r\n
//	Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n
//	\r\n
//	{"jsonrpc":"2.0"}
//
// The package knows nothing about JSON: a frame is a byte slice. Every size
// the peer controls is capped by a named constant, and a stream that violates
// the framing is broken for good: a [Reader] returns the same error from then
// on, because the next frame boundary can no longer be found.
//
// [Conn] (conn.go) is the connection both protocols run on: a reader and a
// writer goroutine, an outbox, an end with a reason, and a [Pending] table
// of requests waiting for answers. Packages lsp and dap add only their
// message encoding, their ids and their cancel message, as gopls's
// jsonrpc2_v2 puts its connection over its framer.
package framing

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
)

const (
	// MaxFrame is the largest body a frame may declare or carry (64 MiB).
	// A larger Content-Length breaks the stream: the peer is flooding or
	// confused, and the caller should close the connection.
	MaxFrame = 64 << 20

	// MaxHeaderLine is the longest header line accepted, terminator included.
	MaxHeaderLine = 4096

	// MaxHeaders is the most header lines accepted in one frame. It bounds
	// the work an unterminated header block can cause.
	MaxHeaders = 32

	// readBufferSize is the Reader's buffer; it must exceed MaxHeaderLine.
	readBufferSize = 32 << 10

	// bodyChunk is the first allocation for a body. Larger bodies grow as
	// their bytes actually arrive, so a declared length alone never
	// allocates memory.
	bodyChunk = 64 << 10
)

var (
	// ErrFrameTooLarge reports a Content-Length above MaxFrame.
	ErrFrameTooLarge = errors.New("framing: frame larger than the 64 MiB cap")

	// ErrHeader reports a malformed header block: a missing, repeated,
	// negative or non-numeric Content-Length, a line without a colon, a line
	// over MaxHeaderLine, or more than MaxHeaders lines.
	ErrHeader = errors.New("framing: malformed frame header")
)

// Reader reads frames from a byte stream. It is not safe for concurrent use;
// a connection has one reading goroutine.
type Reader struct {
	br  *bufio.Reader
	err error // sticky: once set, every ReadFrame returns it
}

// NewReader returns a Reader reading from r. The caller keeps ownership of r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, readBufferSize)}
}

// ReadFrame returns the body of the next frame. It returns io.EOF when the
// stream ends cleanly between frames, and an error wrapping
// io.ErrUnexpectedEOF when it ends inside one. Any error is permanent: the
// stream is broken and later calls return the same error.
func (r *Reader) ReadFrame() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	body, err := r.readFrame()
	if err != nil {
		r.err = err
		return nil, err
	}
	return body, nil
}

func (r *Reader) readFrame() ([]byte, error) {
	length := int64(-1)
	for i := 0; ; i++ {
		line, err := r.br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxHeaderLine:
			return nil, fmt.Errorf("%w: header line longer than %d bytes", ErrHeader, MaxHeaderLine)
		case err == io.EOF && i == 0 && len(line) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, fmt.Errorf("framing: stream ended inside a frame header: %w", io.ErrUnexpectedEOF)
		case err != nil:
			return nil, err
		}
		if i >= MaxHeaders {
			return nil, fmt.Errorf("%w: more than %d header lines", ErrHeader, MaxHeaders)
		}
		text := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
		if text == "" {
			break // end of the header block
		}
		name, value, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("%w: header line %q has no colon", ErrHeader, clip(text))
		}
		if !strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			continue // Content-Type and anything else is tolerated
		}
		if length >= 0 {
			return nil, fmt.Errorf("%w: Content-Length given twice", ErrHeader)
		}
		value = strings.TrimSpace(value)
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) || strings.HasPrefix(value, "+") {
			return nil, fmt.Errorf("%w: Content-Length %q is not a decimal number", ErrHeader, clip(value))
		}
		if n < 0 {
			return nil, fmt.Errorf("%w: negative Content-Length %q", ErrHeader, clip(value))
		}
		if n > MaxFrame || err != nil { // ErrRange: beyond int64, surely too large
			return nil, fmt.Errorf("%w: Content-Length %s", ErrFrameTooLarge, clip(value))
		}
		length = n
	}
	if length < 0 {
		return nil, fmt.Errorf("%w: no Content-Length header", ErrHeader)
	}
	return r.readBody(int(length))
}

// readBody reads exactly n bytes, growing the buffer only as data arrives.
func (r *Reader) readBody(n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, bodyChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n-len(buf), cap(buf)))
		}
		m, err := r.br.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err == io.EOF && len(buf) < n {
			return nil, fmt.Errorf("framing: stream ended after %d of %d body bytes: %w", len(buf), n, io.ErrUnexpectedEOF)
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
	}
	return buf, nil
}

// clip shortens peer-controlled text quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Writer writes frames to a byte stream. It is safe for concurrent use: each
// frame is written whole before the next one starts.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	err error // sticky: a failed write may have left half a frame
}

// NewWriter returns a Writer writing to w. The caller keeps ownership of w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w}
}

// WriteFrame writes body as one frame with a Content-Length header. A body
// over MaxFrame is refused without writing anything. After a failed write the
// stream may hold a partial frame, so every later call returns that error.
func (w *Writer) WriteFrame(body []byte) error {
	if len(body) > MaxFrame {
		return fmt.Errorf("%w: refusing to write a %d-byte body", ErrFrameTooLarge, len(body))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	header := "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	var err error
	if len(body) <= bodyChunk {
		// One write keeps small frames in one pipe write.
		frame := make([]byte, 0, len(header)+len(body))
		_, err = w.w.Write(append(append(frame, header...), body...))
	} else if _, err = io.WriteString(w.w, header); err == nil {
		_, err = w.w.Write(body)
	}
	if err != nil {
		w.err = fmt.Errorf("framing: write failed, the stream is broken: %w", err)
		return w.err
	}
	return nil
}
