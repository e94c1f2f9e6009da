package kernel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"berth.dev/berth/kernel/zmtp"
)

// shrink runs text through a shrinker in pieces of n bytes.
func shrink(text []byte, keep, limit, n int) ([]byte, int64) {
	s := newShrinker(keep, limit)
	for len(text) > 0 {
		k := min(n, len(text))
		s.Write(text[:k])
		text = text[k:]
	}
	return s.result()
}

// decodeString decodes a JSON string literal.
func decodeString(t *testing.T, lit []byte) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		t.Fatalf("not a JSON string: %.80q: %v", lit, err)
	}
	return s
}

func TestShrinker(t *testing.T) {
	const keep = 8
	tests := []struct {
		name    string
		in      string
		want    string
		dropped int64
	}{
		{"short strings untouched", `{"a":"hello","b":[1,2,"x"]}`, `{"a":"hello","b":[1,2,"x"]}`, 0},
		{"exactly two ends untouched", `{"t":"0123456789abcdef"}`, `{"t":"0123456789abcdef"}`, 0},
		{"long string keeps its ends", `{"t":"0123456789abcdefghijklmnopqrstuvwxyz"}`, `{"t":"01234567stuvwxyz"}`, 20},
		{"keys and numbers copied", `{"k":1.5e3,"t":"` + strings.Repeat("x", 30) + `","n":null}`, `{"k":1.5e3,"t":"xxxxxxxxxxxxxxxx","n":null}`, 14},
		{"escaped quote does not end the string", `{"t":"\"` + strings.Repeat("y", 30) + `\""}`, `{"t":"\"yyyyyyyyyyyy\""}`, 18},
		{"escape not split at the head", `{"t":"1234567\n` + strings.Repeat("z", 30) + `"}`, `{"t":"1234567\nzzzzzzzz"}`, 22},
		{"escape not split at the tail", `{"t":"` + strings.Repeat("z", 30) + `\u00e9abcd"}`, `{"t":"zzzzzzzzabcd"}`, 24},
		{"utf-8 not split", `{"t":"1234567é` + strings.Repeat("z", 30) + `ééé"}`, `{"t":"1234567ézzééé"}`, 28},
		{"surrogate pair kept whole at the head", `{"t":"1234\ud83d\ude00` + strings.Repeat("z", 30) + `"}`, `{"t":"1234\ud83d\ude00zzzzzzzz"}`, 22},
		{"surrogate pair kept whole at the tail", `{"t":"` + strings.Repeat("z", 30) + `\ud83d\ude00"}`, `{"t":"zzzzzzzz"}`, 26},
		{"no closing quote", `{"t":"abc`, `{}`, 9},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 3, 1000} {
			out, dropped := shrink([]byte(tt.in), keep, 1<<20, n)
			if string(out) != tt.want || dropped != tt.dropped {
				t.Errorf("%s (pieces of %d): got %s dropped %d, want %s dropped %d", tt.name, n, out, dropped, tt.want, tt.dropped)
			}
		}
	}
}

func TestShrinkerOverflow(t *testing.T) {
	in := []byte(`{"a":[` + strings.Repeat("1,", 1000) + `1]}`)
	out, dropped := shrink(in, 8, 100, 64)
	if string(out) != "{}" || dropped != int64(len(in)) {
		t.Errorf("got %s dropped %d, want {} dropped %d", out, dropped, len(in))
	}
}

// FuzzShrinker: for any JSON string, the shrunk string decodes to a
// prefix and a suffix of the original whose lengths and the drop count
// add up; a string within two ends is untouched; the output is valid
// JSON within its limit; each kept end holds at least keep/6 bytes.
func FuzzShrinker(f *testing.F) {
	f.Add("hello", []byte("x"), uint8(4), uint8(3))
	f.Add(strings.Repeat("é", 40), []byte(`a\"b\\c\u00e9\ud83d\ude00`), uint8(8), uint8(1))
	f.Add("", []byte(strings.Repeat(`\ud83d\ude00`, 10)), uint8(13), uint8(7))
	f.Fuzz(func(t *testing.T, s string, raw []byte, keep8, piece8 uint8) {
		keep, piece := int(keep8)%64+12, int(piece8)%16+1
		lits := [][]byte{}
		if b, err := json.Marshal(s); err == nil {
			lits = append(lits, b)
		}
		if lit := append(append([]byte{'"'}, raw...), '"'); utf8.Valid(raw) && json.Valid(lit) {
			lits = append(lits, lit)
		}
		for _, lit := range lits {
			in := append(append([]byte(`{"t":`), lit...), '}')
			out, dropped := shrink(in, keep, 1<<20, piece)
			var got, orig struct{ T string }
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("output %q is not JSON: %v (input %q)", out, err, in)
			}
			json.Unmarshal(in, &orig)
			if len(lit)-2 <= 2*keep && (dropped != 0 || !bytes.Equal(out, in)) {
				t.Fatalf("a %d-byte string (keep %d) was changed: %q → %q", len(lit)-2, keep, in, out)
			}
			p := commonPrefix(got.T, orig.T)
			q := commonPrefix(reverse(got.T), reverse(orig.T))
			if p+q < len(got.T) || int64(len(got.T))+dropped != int64(len(orig.T)) {
				t.Fatalf("%q shrunk to %q, dropped %d: not a head and tail (prefix %d, suffix %d)", orig.T, got.T, dropped, p, q)
			}
			if dropped > 0 && (p < keep/6 || q < (keep-11)/6) {
				t.Fatalf("%q shrunk to %q keeps %d and %d bytes at its ends, want at least %d", orig.T, got.T, p, q, keep/6)
			}
		}
	})
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// wire encodes frames as a ZMTP peer sends them.
func wire(frames [][]byte) []byte {
	var b []byte
	for i, f := range frames {
		flags := byte(0)
		if i < len(frames)-1 {
			flags |= 1
		}
		flags |= 2
		b = append(b, flags)
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// frameReader is a frameSource over encoded frames (zmtp.Conn's reading
// half, without a handshake).
func frameReader(t *testing.T, b []byte) frameSource {
	t.Helper()
	return zmtp.Frames(bytes.NewReader(b))
}

// TestReceiveCutsAndVerifies: a content frame over MaxContent is cut
// while it streams and still verified over its original bytes; a tampered
// one is refused; the drop is carried on the message.
func TestReceiveCutsAndVerifies(t *testing.T) {
	codec, _ := NewCodec("key")
	text := "<" + strings.Repeat("x", 3*MaxContent) + ">"
	content, _ := json.Marshal(map[string]string{"name": "stdout", "text": text})
	m := &Message{Identities: [][]byte{[]byte("stream.stdout")}, Header: Header{MsgID: "1", MsgType: "stream"}, Content: content}
	frames, err := codec.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	r, err := codec.receive(frameReader(t, wire(frames)))
	if err != nil || r.err != nil {
		t.Fatalf("receive: %v %v", err, r.err)
	}
	ev, ok := decodeEvent(r.msg)
	if !ok {
		t.Fatal("not an event")
	}
	if len(ev.Text) > MaxString+12 || !strings.HasPrefix(ev.Text, "<xxx") || !strings.HasSuffix(ev.Text, "xxx>") {
		t.Errorf("text %d bytes %.20q…", len(ev.Text), ev.Text)
	}
	if ev.Dropped != int64(len(text)-len(ev.Text)) {
		t.Errorf("Dropped %d, want %d", ev.Dropped, len(text)-len(ev.Text))
	}

	tampered := wire(frames)
	tampered[len(tampered)-MaxContent] ^= 1 // a byte deep in the part that is cut
	r, err = codec.receive(frameReader(t, tampered))
	if err != nil || !errors.Is(r.err, ErrBadSignature) {
		t.Errorf("tampered: %v %v, want ErrBadSignature", err, r.err)
	}

	// Small messages come through whole, and a stream of them stays in step.
	small, _ := codec.Encode(&Message{Header: Header{MsgID: "2", MsgType: "status"}, Content: json.RawMessage(`{"execution_state":"idle"}`)})
	src := frameReader(t, append(wire(small), wire(small)...))
	for i := 0; i < 2; i++ {
		r, err = codec.receive(src)
		if err != nil || r.err != nil || r.msg.Dropped != 0 || string(r.msg.Content) != `{"execution_state":"idle"}` {
			t.Fatalf("small message %d: %v %v %+v", i, err, r.err, r.msg)
		}
	}
	if _, err := codec.receive(src); err != io.EOF {
		t.Errorf("after the last message: %v, want io.EOF", err)
	}
}
