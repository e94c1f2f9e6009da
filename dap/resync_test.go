package dap

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"berth.dev/berth/framing"
)

func frame(body string) string {
	return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// TestResyncReader reads streams that start at a header, inside a body,
// inside a header, and inside a body that quotes a header, whole and one
// byte at a time.
func TestResyncReader(t *testing.T) {
	a := `{"seq":1,"type":"event","event":"output","body":{"output":"Content-Length: 12\r\n\r\nnot a frame"}}`
	b := `{"seq":2,"type":"event","event":"stopped","body":{"reason":"breakpoint","threadId":1}}`
	c := `{"seq":3,"type":"response","request_seq":9,"command":"threads","success":true}`
	whole := frame(a) + frame(b) + frame(c)
	tests := []struct {
		name        string
		in          string
		want        []string
		wantSkipped bool
	}{
		{name: "at a header", in: whole, want: []string{a, b, c}},
		{name: "inside a body quoting a header", in: whole[len(frame(a))-60:], want: []string{b, c}, wantSkipped: true},
		{name: "at the quoted header", in: whole[strings.Index(whole, `Content-Length: 12`):], want: []string{b, c}, wantSkipped: true},
		{name: "inside a header", in: whole[len(frame(a))+3:], want: []string{c}, wantSkipped: true},
		{name: "inside the header's number", in: frame(a)[len("Content-Length: 1"):] + frame(b), want: []string{b}, wantSkipped: true},
		{name: "nothing", in: "", want: nil},
		{name: "no header at all", in: `tail of a body"}}`, want: nil, wantSkipped: true},
		{name: "bare newlines", in: "xx}Content-Length: 2\n\n{}", want: []string{"{}"}, wantSkipped: true},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			name := tt.name
			if oneByte {
				name += " one byte at a time"
			}
			t.Run(name, func(t *testing.T) {
				var src io.Reader = strings.NewReader(tt.in)
				if oneByte {
					src = iotest.OneByteReader(src)
				}
				var logs []string
				rr := &resyncReader{r: src, logf: func(f string, a ...any) { logs = append(logs, f) }}
				fr := framing.NewReader(rr)
				var got []string
				for {
					body, err := fr.ReadFrame()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatalf("after %d frames: %v", len(got), err)
					}
					got = append(got, string(body))
				}
				if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
					t.Errorf("frames = %q, want %q", got, tt.want)
				}
				if (len(logs) > 0) != tt.wantSkipped {
					t.Errorf("logs = %q, want skipping logged: %v", logs, tt.wantSkipped)
				}
			})
		}
	}
}
