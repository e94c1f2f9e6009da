package dap

import (
	"fmt"
	"io"
	"regexp"

	"berth.dev/berth/framing"
)

// Resynchronising a stream that may start inside a message.
const (
	// resyncChunk is how much is read at a time while looking for the
	// first header.
	resyncChunk = 32 << 10
	// resyncKeep is how much of the scanned bytes is kept while no header
	// was found: enough for a header line cut in two by a read.
	resyncKeep = 64
	// maxResyncSkip is the most bytes skipped before the first header; a
	// stream with no header in that much is not speaking DAP.
	maxResyncSkip = framing.MaxFrame + 1<<20
)

// headerLine is a Content-Length header line. A JSON body never holds a
// raw line break (JSON escapes it inside strings, and outside them
// "Content-Length:" is not JSON), so this cannot match inside a body.
var headerLine = regexp.MustCompile(`(?i)Content-Length:[ \t]*[0-9]+\r?\n`)

// resyncReader reads a stream that may start in the middle of a message,
// as an adapter's output does when the previous reader (a berth that was
// killed) consumed part of a message: bytes before the first Content-Length
// header line are skipped, and from there on the stream is passed through
// untouched.
type resyncReader struct {
	r       io.Reader
	pending []byte // bytes from the first header on, not yet returned
	synced  bool
	skipped int64
	logf    func(format string, args ...any)
}

func (s *resyncReader) Read(p []byte) (int, error) {
	if s.synced {
		if len(s.pending) > 0 {
			n := copy(p, s.pending)
			s.pending = s.pending[n:]
			return n, nil
		}
		return s.r.Read(p)
	}
	buf := make([]byte, 0, resyncChunk)
	for {
		if m := headerLine.FindIndex(buf); m != nil {
			s.skip(int64(m[0]))
			s.pending, s.synced = buf[m[0]:], true
			return s.Read(p)
		}
		if len(buf) > resyncKeep {
			cut := len(buf) - resyncKeep
			s.skipped += int64(cut)
			buf = append(buf[:0], buf[cut:]...)
			if s.skipped > maxResyncSkip {
				return 0, fmt.Errorf("dap: no DAP message header in the first %d bytes of the adapter's output; it does not speak DAP here", s.skipped)
			}
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := s.r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if m := headerLine.FindIndex(buf); m != nil {
				s.skip(int64(m[0]))
				s.pending, s.synced = buf[m[0]:], true
				return s.Read(p)
			}
			if s.skipped+int64(len(buf)) > 0 && s.logf != nil {
				s.logf("dap: the adapter's output ended after %d bytes with no complete message header", s.skipped+int64(len(buf)))
			}
			return 0, err
		}
	}
}

// skip records n more bytes skipped before the first header.
func (s *resyncReader) skip(n int64) {
	s.skipped += n
	if s.skipped > 0 && s.logf != nil {
		s.logf("dap: skipped %d bytes before the first message header: the previous client had read part of that message", s.skipped)
	}
}

// resyncStream is a stream whose reads are resynchronised.
type resyncStream struct {
	*resyncReader
	io.WriteCloser
}

// withResync returns rw with reads that skip to the first message header.
func withResync(rw io.ReadWriteCloser, logf func(string, ...any)) io.ReadWriteCloser {
	return resyncStream{resyncReader: &resyncReader{r: rw, logf: logf}, WriteCloser: rw}
}
