package agent

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		typ     byte
		payload []byte
	}{
		{"empty", TypeStdinEOF, nil},
		{"small", TypeStdout, []byte("hello")},
		{"max", TypeData, bytes.Repeat([]byte{7}, MaxPayload)},
		{"numbers", TypeExit, PutUint32s(43, 0)},
	}
	var buf bytes.Buffer
	for _, tc := range tests {
		if err := WriteFrame(&buf, tc.typ, tc.payload); err != nil {
			t.Fatalf("%s: WriteFrame: %v", tc.name, err)
		}
	}
	r := NewReader(&buf)
	for _, tc := range tests {
		typ, p, err := r.Next()
		if err != nil || typ != tc.typ || !bytes.Equal(p, tc.payload) {
			t.Fatalf("%s: Next = %q, %d bytes, %v", tc.name, typ, len(p), err)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at the end = %v, want io.EOF", err)
	}
}

func TestFrameErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"truncated header", []byte{'o', 0, 0}, io.ErrUnexpectedEOF},
		{"truncated payload", []byte{'o', 0, 0, 0, 5, 'a'}, io.ErrUnexpectedEOF},
		{"too large", []byte{'o', 0xff, 0, 0, 0}, ErrFrameTooLarge},
	}
	for _, tc := range tests {
		_, _, err := NewReader(bytes.NewReader(tc.in)).Next()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := WriteFrame(io.Discard, 'o', make([]byte, MaxPayload+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("WriteFrame of too much = %v", err)
	}
	if _, err := Uint32s([]byte{1, 2, 3}, 1); err == nil {
		t.Error("Uint32s accepted a short payload")
	}
}

func FuzzFrame(f *testing.F) {
	f.Add([]byte{'o', 0, 0, 0, 2, 'h', 'i'})
	f.Add([]byte{'x', 0, 0, 0, 8, 0, 0, 0, 43, 0, 0, 0, 0})
	f.Add([]byte{'o', 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		var out bytes.Buffer
		for {
			typ, p, err := r.Next()
			if err != nil {
				break
			}
			if len(p) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(p))
			}
			if err := WriteFrame(&out, typ, p); err != nil {
				t.Fatal(err)
			}
		}
		// Every frame read re-encodes to the same bytes.
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("re-encoded frames differ from the input")
		}
	})
}
