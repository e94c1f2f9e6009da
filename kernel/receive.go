package kernel

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	"berth.dev/berth/kernel/zmtp"
)

// Caps of the frames around a message's signed part.
const (
	// maxIdentity bounds one routing identity (or IOPub topic) frame; a
	// longer one is skipped.
	maxIdentity = 1 << 10
	// maxSignature bounds the signature frame (a hex SHA-256 is 64 bytes).
	maxSignature = 128
	// maxBuffers bounds the extra buffer frames of one message, together;
	// past it they are skipped (this client does not use them).
	maxBuffers = MaxContent
)

// frameSource is what receive reads: a ZMTP connection's frames.
type frameSource interface {
	Next() (size uint64, more bool, err error)
	io.Reader
	ReadFrame(max int) ([]byte, bool, error)
}

var _ frameSource = (*zmtp.Conn)(nil)

// received is one message as read off the wire.
type received struct {
	msg *Message
	sig string
	err error // ErrBadSignature or ErrMalformed: the message is dropped
}

// receive reads one message from src with bounded memory: every frame is
// read up to its cap, the content frame past MaxContent is rewritten by
// a shrinker as it streams, and the HMAC is computed over the original
// bytes as they pass. A returned error means the connection failed; a
// message that is bad is reported in received.err.
func (c *Codec) receive(src frameSource) (received, error) {
	var (
		idents  [][]byte
		bad     error
		more    = true
		haveDel bool
	)
	malformed := func(format string, args ...any) {
		if bad == nil {
			bad = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
		}
	}
	// Routing identities up to the delimiter.
	for more && !haveDel {
		var err error
		if _, more, err = src.Next(); err != nil {
			return received{}, err
		}
		b, ok, err := src.ReadFrame(maxIdentity)
		if err != nil {
			return received{}, err
		}
		switch {
		case !ok:
			malformed("an identity frame over %d bytes", maxIdentity)
		case string(b) == Delimiter:
			haveDel = true
		default:
			idents = append(idents, b)
		}
	}
	if !haveDel {
		malformed("no %s delimiter", Delimiter)
		return received{err: bad}, nil
	}
	mac := hmac.New(sha256.New, c.key)
	var (
		sig, header, parent, metadata, content []byte
		buffers                                [][]byte
		bufBytes                               int
		dropped                                int64
	)
	for i := 0; more; i++ {
		var err error
		var size uint64
		if size, more, err = src.Next(); err != nil {
			return received{}, err
		}
		switch i {
		case 0:
			b, ok, err := src.ReadFrame(maxSignature)
			if err != nil {
				return received{}, err
			}
			if !ok {
				malformed("a signature frame over %d bytes", maxSignature)
			}
			sig = b
		case 1, 2, 3:
			b, ok, err := readSigned(src, mac, MaxHeader)
			if err != nil {
				return received{}, err
			}
			switch {
			case ok && i == 1:
				header = b
			case ok && i == 2:
				parent = b
			case ok:
				metadata = b
			case i == 3:
				metadata = []byte("{}") // verified, then left out
			default:
				malformed("a header frame over %d bytes", MaxHeader)
			}
		case 4:
			if size <= MaxContent {
				b, _, err := readSigned(src, mac, MaxContent)
				if err != nil {
					return received{}, err
				}
				content = b
				break
			}
			sh := newShrinker(MaxString/2, MaxContent)
			if _, err := io.CopyBuffer(io.MultiWriter(mac, sh), onlyReader{src}, make([]byte, readPiece)); err != nil {
				return received{}, err
			}
			content, dropped = sh.result()
		default:
			if size > uint64(maxBuffers-bufBytes) {
				continue // skipped by the next Next
			}
			b, _, err := src.ReadFrame(int(size))
			if err != nil {
				return received{}, err
			}
			bufBytes += len(b)
			buffers = append(buffers, b)
		}
	}
	if content == nil {
		malformed("%d frames after the delimiter, want at least 5", 1+len(buffers)+boolInt(sig != nil)+boolInt(header != nil)+boolInt(parent != nil)+boolInt(metadata != nil))
	}
	if bad != nil {
		return received{err: bad}, nil
	}
	want := make([]byte, hex.EncodedLen(sha256.Size))
	hex.Encode(want, mac.Sum(nil))
	if !hmac.Equal(want, sig) {
		return received{err: ErrBadSignature}, nil
	}
	m, err := parseMessage(idents, header, parent, metadata, content, buffers)
	if err != nil {
		return received{err: err}, nil
	}
	m.Dropped = dropped
	return received{msg: m, sig: string(sig)}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readSigned reads the current frame into the HMAC. A frame of at most
// max bytes is also returned; a longer one streams into the HMAC only
// (ok false).
func readSigned(src frameSource, mac hash.Hash, max int) ([]byte, bool, error) {
	b, ok, err := src.ReadFrame(max)
	if err != nil {
		return nil, false, err
	}
	if ok {
		mac.Write(b)
		return b, true, nil
	}
	if _, err := io.CopyBuffer(mac, onlyReader{src}, make([]byte, readPiece)); err != nil {
		return nil, false, err
	}
	return nil, false, nil
}

// onlyReader hides everything but Read, so io.Copy uses the given buffer.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
