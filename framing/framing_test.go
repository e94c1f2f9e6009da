package framing

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestReader(t *testing.T) {
	big := strings.Repeat("x", 200<<10) // several body chunks
	tests := []struct {
		name    string
		in      string
		want    []string // bodies, in order
		wantErr error    // error after the bodies; nil means io.EOF
	}{
		{name: "one", in: "Content-Length: 2\r\n\r\n{}", want: []string{"{}"}},
		{name: "two", in: "Content-Length: 1\r\n\r\naContent-Length: 3\r\n\r\nbcd", want: []string{"a", "bcd"}},
		{name: "content type first", in: "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\nok", want: []string{"ok"}},
		{name: "case and spaces", in: "content-length:   5  \r\n\r\nhello", want: []string{"hello"}},
		{name: "bare newlines", in: "Content-Length: 2\n\nhi", want: []string{"hi"}},
		{name: "empty body", in: "Content-Length: 0\r\n\r\n", want: []string{""}},
		{name: "large body", in: "Content-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n" + big, want: []string{big}},
		{name: "empty stream", in: ""},
		{name: "missing length", in: "Content-Type: x\r\n\r\n{}", wantErr: ErrHeader},
		{name: "blank first line", in: "\r\n", wantErr: ErrHeader},
		{name: "negative", in: "Content-Length: -1\r\n\r\n", wantErr: ErrHeader},
		{name: "huge negative", in: "Content-Length: -99999999999999999999999\r\n\r\n", wantErr: ErrHeader},
		{name: "plus sign", in: "Content-Length: +2\r\n\r\n{}", wantErr: ErrHeader},
		{name: "not a number", in: "Content-Length: 0x10\r\n\r\n", wantErr: ErrHeader},
		{name: "empty value", in: "Content-Length:\r\n\r\n", wantErr: ErrHeader},
		{name: "no colon", in: "Content-Length 2\r\n\r\n{}", wantErr: ErrHeader},
		{name: "twice", in: "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", wantErr: ErrHeader},
		{name: "over cap", in: fmt.Sprintf("Content-Length: %d\r\n\r\n", MaxFrame+1), wantErr: ErrFrameTooLarge},
		{name: "int64 max", in: "Content-Length: 9223372036854775807\r\n\r\n", wantErr: ErrFrameTooLarge},
		{name: "beyond int64", in: "Content-Length: 99999999999999999999999\r\n\r\n", wantErr: ErrFrameTooLarge},
		{name: "long header line", in: "X-Junk: " + strings.Repeat("a", MaxHeaderLine) + "\r\nContent-Length: 2\r\n\r\n{}", wantErr: ErrHeader},
		{name: "unterminated header over buffer", in: strings.Repeat("a", readBufferSize*2), wantErr: ErrHeader},
		{name: "too many headers", in: strings.Repeat("X-A: b\r\n", MaxHeaders+1) + "Content-Length: 2\r\n\r\n{}", wantErr: ErrHeader},
		{name: "eof in header", in: "Content-Length: 2\r\n", wantErr: io.ErrUnexpectedEOF},
		{name: "eof in body", in: "Content-Length: 10\r\n\r\nabc", want: nil, wantErr: io.ErrUnexpectedEOF},
		{name: "good then bad", in: "Content-Length: 1\r\n\r\naContent-Length: x\r\n\r\n", want: []string{"a"}, wantErr: ErrHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in))
			for i, want := range tt.want {
				got, err := r.ReadFrame()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if string(got) != want {
					t.Fatalf("frame %d = %.40q, want %.40q", i, got, want)
				}
			}
			wantErr := tt.wantErr
			if wantErr == nil {
				wantErr = io.EOF
			}
			_, err := r.ReadFrame()
			if !errors.Is(err, wantErr) {
				t.Fatalf("after %d frames: err = %v, want %v", len(tt.want), err, wantErr)
			}
			// Errors are sticky.
			if _, err2 := r.ReadFrame(); !errors.Is(err2, wantErr) {
				t.Fatalf("second read after error: err = %v, want %v", err2, wantErr)
			}
		})
	}
}

// TestReaderDoesNotTrustDeclaredLength declares the largest allowed frame
// but sends three bytes: the reader must not allocate the declared size.
func TestReaderDoesNotTrustDeclaredLength(t *testing.T) {
	in := fmt.Sprintf("Content-Length: %d\r\n\r\nabc", MaxFrame)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := NewReader(strings.NewReader(in))
	if _, err := r.ReadFrame(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want unexpected EOF", err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("allocated %d bytes for a 3-byte body declared as %d", got, MaxFrame)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	bodies := []string{"{}", "", strings.Repeat("y", bodyChunk+10), "ünïcode"}
	for _, b := range bodies {
		if err := w.WriteFrame([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(buf.String(), "Content-Length: 2\r\n\r\n{}Content-Length: 0\r\n\r\n") {
		t.Fatalf("wire = %.60q", buf.String())
	}
	r := NewReader(&buf)
	for i, want := range bodies {
		got, err := r.ReadFrame()
		if err != nil || string(got) != want {
			t.Fatalf("frame %d = %.20q, %v; want %.20q", i, got, err, want)
		}
	}
}

func TestWriterRefusesOversize(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteFrame(make([]byte, MaxFrame+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %d bytes for a refused frame", buf.Len())
	}
	if err := w.WriteFrame([]byte("ok")); err != nil {
		t.Fatalf("a refused frame must not break the writer: %v", err)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, io.ErrClosedPipe
	}
	f.n--
	return len(p), nil
}

func TestWriterErrorIsSticky(t *testing.T) {
	w := NewWriter(&failWriter{n: 1})
	if err := w.WriteFrame([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrame([]byte("b")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("err = %v, want closed pipe", err)
	}
	if err := w.WriteFrame([]byte("c")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("later err = %v, want the same broken-stream error", err)
	}
}

func TestWriterConcurrent(t *testing.T) {
	pr, pw := io.Pipe()
	w := NewWriter(pw)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				body := strings.Repeat(string(rune('a'+i)), 1+j*97%bodyChunk*2)
				if err := w.WriteFrame([]byte(body)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); pw.Close() }()
	r := NewReader(pr)
	n := 0
	for {
		body, err := r.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Trim(string(body), string(body[:1])) != "" {
			t.Fatalf("frame %d mixes writers", n)
		}
		n++
	}
	if n != writers*each {
		t.Fatalf("read %d frames, want %d", n, writers*each)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("Content-Length: 2\r\n\r\n{}"))
	f.Add([]byte("Content-Type: x\r\ncontent-length: 1\r\n\r\naContent-Length: 0\r\n\r\n"))
	f.Add([]byte("Content-Length: 9223372036854775807\r\n\r\n"))
	f.Add([]byte("Content-Length: -1\r\n\r\n"))
	f.Add([]byte("Content-Length: 5\n\nabc"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		var bodies [][]byte
		var consumed int
		for {
			body, err := r.ReadFrame()
			if err != nil {
				if _, err2 := r.ReadFrame(); err2 != err {
					t.Fatalf("error not sticky: %v then %v", err, err2)
				}
				break
			}
			if len(body) > MaxFrame {
				t.Fatalf("body of %d bytes over the cap", len(body))
			}
			consumed += len(body)
			if consumed > len(in) {
				t.Fatalf("returned more body bytes (%d) than the input has (%d)", consumed, len(in))
			}
			bodies = append(bodies, body)
		}
		// Whatever was read re-encodes into frames that read back the same.
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, b := range bodies {
			if err := w.WriteFrame(b); err != nil {
				t.Fatal(err)
			}
		}
		r2 := NewReader(&buf)
		for i, want := range bodies {
			got, err := r2.ReadFrame()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("re-read frame %d: %v", i, err)
			}
		}
		if _, err := r2.ReadFrame(); err != io.EOF {
			t.Fatalf("re-read end: %v, want EOF", err)
		}
	})
}
