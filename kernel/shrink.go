package kernel

import "unicode/utf8"

// How much of one message the client holds. A cell that prints one 100 MB
// line arrives as one 100 MB content frame; the client never holds it:
// the frame is read in pieces, each piece goes into the HMAC and through
// a shrinker that keeps every long JSON string's head and tail and counts
// what it drops ([Message.Dropped], [Event.Dropped]).
const (
	// MaxString is the longest JSON string (raw, as on the wire) a
	// rewritten content keeps whole; a longer one keeps its first and last
	// MaxString/2 bytes, cut on UTF-8 and escape boundaries. 64 KiB per
	// end is at least 10,922 decoded bytes even if every character is a
	// six-byte \u escape, so tools/eval's head and tail (10,000 bytes
	// each) are served exactly.
	MaxString = 128 << 10
	// MaxContent is the largest content frame read whole; a larger one is
	// rewritten while it streams (strings cut as MaxString says) into at
	// most MaxContent bytes. When even that does not fit (say a huge
	// array of numbers) the content is dropped entirely and becomes {}.
	//
	// One huge message costs the client about 3 × MaxContent plus a
	// constant: the rewritten content, the event decoded from it, and the
	// strings a caller keeps from it; the constant is the read buffers
	// and the other frames (header, parent, metadata, each at most
	// [MaxHeader]).
	MaxContent = 1 << 20
	// MaxHeader bounds the header, parent header and metadata frames. A
	// larger header is malformed; larger metadata is verified and then
	// replaced by {}.
	MaxHeader = 64 << 10
	// readPiece is how much of a long frame is read at a time.
	readPiece = 32 << 10
)

// shrinker rewrites JSON text as it streams: outside strings it copies,
// and each string longer than 2×keep raw bytes keeps only its first and
// last keep bytes (at token boundaries). It counts the decoded bytes it
// drops. Input that is not JSON comes out as some other non-JSON, which
// the decoder then refuses.
type shrinker struct {
	keep  int // raw bytes kept at each end of a long string
	limit int // the output's cap

	out      []byte
	overflow bool  // the output would pass limit: everything is dropped
	in       int64 // bytes written in

	inString bool
	tok      strToken // the current string's tokenizer
	strRaw   int      // raw bytes of the current string body
	strDec   int64    // decoded bytes of the current string body
	head     int      // the string's head bytes copied to out
	headDone bool
	headDec  int64 // decoded bytes of the head

	// ring holds the latest keep raw bytes past the head, with a mark at
	// each position a kept tail may start at.
	ring   []byte
	marks  []bool
	rpos   int   // next write position
	rlen   int   // bytes in the ring
	rtotal int64 // bytes that went into the ring for this string

	dropped int64 // decoded bytes dropped so far
}

func newShrinker(keep, limit int) *shrinker {
	return &shrinker{keep: keep, limit: limit, ring: make([]byte, keep), marks: make([]bool, keep)}
}

// Write takes the next piece of the JSON text; it never fails.
func (s *shrinker) Write(p []byte) (int, error) {
	s.in += int64(len(p))
	if s.overflow {
		return len(p), nil
	}
	for i := 0; i < len(p); {
		if !s.inString {
			// Copy up to and including the next quote.
			j := i
			for j < len(p) && p[j] != '"' {
				j++
			}
			if j < len(p) {
				j++ // the opening quote
				s.emit(p[i:j])
				s.startString()
			} else {
				s.emit(p[i:j])
			}
			i = j
			continue
		}
		if s.headDone && !s.tok.esc && s.tok.hex == 0 {
			// Fast path through the part that may be dropped: a run of
			// plain ASCII, each byte a token of its own.
			j := i
			for j < len(p) && p[j] < 0x80 && p[j] != '\\' && p[j] != '"' {
				j++
			}
			if j > i {
				s.ringPlain(p[i:j])
				i = j
				continue
			}
		}
		b := p[i]
		i++
		start, dec, end := s.tok.step(b)
		if end {
			s.endString()
			s.emit([]byte{'"'})
			continue
		}
		s.strRaw++
		s.strDec += int64(dec)
		if !s.headDone {
			if start && s.head >= s.keep {
				s.headDone = true
			} else {
				s.emit([]byte{b})
				s.head++
				s.headDec += int64(dec)
				continue
			}
		}
		s.ring[s.rpos] = b
		s.marks[s.rpos] = start
		s.rpos = (s.rpos + 1) % len(s.ring)
		s.rlen = min(s.rlen+1, len(s.ring))
		s.rtotal++
	}
	return len(p), nil
}

// ringPlain puts a run of plain ASCII string bytes into the ring.
func (s *shrinker) ringPlain(run []byte) {
	n := len(run)
	s.tok.lastHigh = false
	s.strRaw += n
	s.strDec += int64(n)
	s.rtotal += int64(n)
	s.rlen = min(s.rlen+n, len(s.ring))
	if len(run) > len(s.ring) {
		run = run[len(run)-len(s.ring):]
	}
	for len(run) > 0 {
		k := copy(s.ring[s.rpos:], run)
		for m := s.rpos; m < s.rpos+k; m++ {
			s.marks[m] = true
		}
		s.rpos = (s.rpos + k) % len(s.ring)
		run = run[k:]
	}
}

func (s *shrinker) startString() {
	s.inString = true
	s.tok = strToken{}
	s.strRaw, s.strDec, s.head, s.headDec, s.headDone = 0, 0, 0, 0, false
	s.rpos, s.rlen, s.rtotal = 0, 0, 0
}

// endString writes the kept tail of the string and counts the drop.
func (s *shrinker) endString() {
	s.inString = false
	if s.rtotal == 0 {
		return
	}
	first := (s.rpos - s.rlen + len(s.ring)) % len(s.ring)
	skip := 0
	if s.rtotal > int64(s.rlen) {
		// Bytes were evicted: the tail must start at a token.
		for skip < s.rlen && !s.marks[(first+skip)%len(s.ring)] {
			skip++
		}
	}
	tail := make([]byte, 0, s.rlen-skip)
	for k := skip; k < s.rlen; k++ {
		tail = append(tail, s.ring[(first+k)%len(s.ring)])
	}
	s.emit(tail)
	kept := s.headDec + decodedLen(tail)
	s.dropped += max(s.strDec-kept, 0)
}

// emit appends to the output unless that would pass the limit.
func (s *shrinker) emit(b []byte) {
	if s.overflow {
		return
	}
	if len(s.out)+len(b) > s.limit {
		s.overflow = true
		s.out = nil
		return
	}
	s.out = append(s.out, b...)
}

// result returns the rewritten text and the decoded bytes dropped. When
// the output did not fit, the text is {} and everything counts as
// dropped (raw bytes: nothing was decoded).
func (s *shrinker) result() ([]byte, int64) {
	if s.overflow || s.inString {
		return []byte("{}"), s.in
	}
	return s.out, s.dropped
}

// strToken tokenizes the body of a JSON string one byte at a time: which
// byte starts a token a cut may fall before (a character's first UTF-8
// byte, or an escape's backslash — but never the low half of a \u
// surrogate pair), and how many bytes each token decodes to.
type strToken struct {
	esc      bool // after a backslash
	hex      int  // hex digits of \u still to read (0 when none)
	val      rune
	lastHigh bool // the last token was a \u high surrogate
}

// step takes one byte of a string's body and reports whether it starts a
// token a cut may precede, how many decoded bytes it completes, and
// whether it is the closing quote.
func (t *strToken) step(b byte) (start bool, dec int, end bool) {
	switch {
	case t.hex > 0:
		t.val = t.val<<4 | rune(unhex(b))
		t.hex--
		if t.hex > 0 {
			return false, 0, false
		}
		switch v := t.val; {
		case v >= 0xd800 && v < 0xdc00:
			t.lastHigh = true
			return false, 3, false // U+FFFD unless a low half follows
		case v >= 0xdc00 && v < 0xe000:
			if t.lastHigh {
				t.lastHigh = false
				return false, 1, false // a pair: 4 bytes in all
			}
			return false, 3, false
		default:
			t.lastHigh = false
			return false, utf8.RuneLen(v), false
		}
	case t.esc:
		t.esc = false
		if b == 'u' {
			t.hex, t.val = 4, 0
			return false, 0, false
		}
		t.lastHigh = false
		return false, 1, false
	case b == '\\':
		t.esc = true
		return !t.lastHigh, 0, false
	case b == '"':
		return false, 0, true
	default:
		t.lastHigh = false
		return b&0xc0 != 0x80, 1, false
	}
}

func unhex(b byte) byte {
	switch {
	case '0' <= b && b <= '9':
		return b - '0'
	case 'a' <= b && b <= 'f':
		return b - 'a' + 10
	case 'A' <= b && b <= 'F':
		return b - 'A' + 10
	}
	return 0
}

// decodedLen is how many bytes the raw string body b decodes to.
func decodedLen(b []byte) int64 {
	var t strToken
	var n int64
	for _, c := range b {
		_, dec, _ := t.step(c)
		n += int64(dec)
	}
	return n
}
