package kernel

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProtocolVersion is the Jupyter messaging protocol this client speaks.
const ProtocolVersion = "5.3"

// Delimiter separates routing identities from the signed message.
const Delimiter = "<IDS|MSG>"

// Channel names one of the five kernel sockets.
type Channel string

// The five channels of a Jupyter kernel.
const (
	Shell     Channel = "shell"
	IOPub     Channel = "iopub"
	Stdin     Channel = "stdin"
	Control   Channel = "control"
	Heartbeat Channel = "hb"
)

// Codec errors, tested with errors.Is.
var (
	// ErrBadSignature: the message's HMAC does not match; it was dropped.
	ErrBadSignature = errors.New("kernel: message signature does not match the connection key")
	// ErrMalformed: the frames are not a Jupyter message.
	ErrMalformed = errors.New("kernel: malformed message")
)

// Header is a Jupyter message header (and parent header).
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// IsZero reports whether h is the empty header `{}`.
func (h Header) IsZero() bool { return h == Header{} }

// Message is one decoded Jupyter message. Metadata and Content are kept as
// raw JSON; Identities are the routing frames before [Delimiter] (the topic
// on IOPub).
type Message struct {
	Identities   [][]byte
	Header       Header
	ParentHeader Header
	Metadata     json.RawMessage
	Content      json.RawMessage
	Buffers      [][]byte
	// Dropped is how many bytes of the content's strings the client cut
	// while receiving it: long strings keep their head and tail (see
	// [MaxString]). 0 for a message received whole.
	Dropped int64
}

// Codec signs and verifies messages with one connection's key
// (HMAC-SHA256 over header, parent_header, metadata and content, in that
// order, as a lowercase hex digest). A Codec is safe for concurrent use.
type Codec struct {
	key []byte
}

// NewCodec returns a codec for key. An empty key is refused: this client
// never talks to an unsigned kernel.
func NewCodec(key Key) (*Codec, error) {
	if key == "" {
		return nil, errors.New("kernel: empty key; unsigned kernels are refused, generate a key with NewKey")
	}
	return &Codec{key: []byte(key)}, nil
}

// Sign returns the hex HMAC-SHA256 digest of the four signed frames.
func (c *Codec) Sign(header, parent, metadata, content []byte) []byte {
	mac := hmac.New(sha256.New, c.key)
	mac.Write(header)
	mac.Write(parent)
	mac.Write(metadata)
	mac.Write(content)
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// Encode returns the wire frames of m: identities, [Delimiter], signature,
// header, parent header (`{}` when zero), metadata and content (`{}` when
// empty), then buffers.
func (c *Codec) Encode(m *Message) ([][]byte, error) {
	header, err := json.Marshal(m.Header)
	if err != nil {
		return nil, fmt.Errorf("kernel: encode header: %w", err)
	}
	parent := []byte("{}")
	if !m.ParentHeader.IsZero() {
		if parent, err = json.Marshal(m.ParentHeader); err != nil {
			return nil, fmt.Errorf("kernel: encode parent header: %w", err)
		}
	}
	metadata, content := orEmpty(m.Metadata), orEmpty(m.Content)
	frames := make([][]byte, 0, len(m.Identities)+6+len(m.Buffers))
	frames = append(frames, m.Identities...)
	frames = append(frames, []byte(Delimiter), c.Sign(header, parent, metadata, content), header, parent, metadata, content)
	frames = append(frames, m.Buffers...)
	return frames, nil
}

func orEmpty(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}

// Decode verifies and parses wire frames. The signature is checked with
// hmac.Equal before anything is parsed; a mismatch returns
// [ErrBadSignature], anything else that is not a message returns
// [ErrMalformed]. The returned message shares the frames' memory.
func (c *Codec) Decode(frames [][]byte) (*Message, error) {
	d := -1
	for i, f := range frames {
		if string(f) == Delimiter {
			d = i
			break
		}
	}
	if d < 0 {
		return nil, fmt.Errorf("%w: no %s delimiter in %d frames", ErrMalformed, Delimiter, len(frames))
	}
	if len(frames) < d+6 {
		return nil, fmt.Errorf("%w: %d frames after the delimiter, want at least 5", ErrMalformed, len(frames)-d-1)
	}
	sig, header, parent, metadata, content := frames[d+1], frames[d+2], frames[d+3], frames[d+4], frames[d+5]
	if !hmac.Equal(c.Sign(header, parent, metadata, content), sig) {
		return nil, ErrBadSignature
	}
	return parseMessage(frames[:d], header, parent, metadata, content, frames[d+6:])
}

// parseMessage parses the verified frames of a message.
func parseMessage(idents [][]byte, header, parent, metadata, content []byte, buffers [][]byte) (*Message, error) {
	m := &Message{Identities: idents, Buffers: buffers}
	if err := json.Unmarshal(header, &m.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if m.Header.MsgType == "" || m.Header.MsgID == "" {
		return nil, fmt.Errorf("%w: header lacks msg_type or msg_id", ErrMalformed)
	}
	if err := json.Unmarshal(parent, &m.ParentHeader); err != nil {
		return nil, fmt.Errorf("%w: parent header: %v", ErrMalformed, err)
	}
	if !isObject(metadata) {
		return nil, fmt.Errorf("%w: metadata is not a JSON object", ErrMalformed)
	}
	if !isObject(content) {
		return nil, fmt.Errorf("%w: content is not a JSON object", ErrMalformed)
	}
	m.Metadata, m.Content = metadata, content
	return m, nil
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0] == '{' && json.Valid(b)
}

// newID returns a random message or session id (uuid4 text form).
func newID() string {
	var u [16]byte
	rand.Read(u[:]) // never fails: crypto/rand crashes the program instead
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[:4], u[4:6], u[6:8], u[8:10], u[10:])
}

// timestamp is the header date format (ISO 8601, microseconds, UTC).
func timestamp() string {
	return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
}
