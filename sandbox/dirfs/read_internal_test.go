package dirfs

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadAtMost(t *testing.T) {
	text := strings.Repeat("0123456789", 100) // 1000 bytes
	tests := []struct {
		name        string
		buf         []byte
		hint, limit int64
		want        int // bytes read
		fresh       bool
	}{
		{"hint exact", nil, 1001, 5000, 1000, true},
		{"hint short: the file grew", nil, 10, 5000, 1000, true},
		{"hint zero", nil, 0, 5000, 1000, true},
		{"limit cuts", nil, 1001, 300, 300, true},
		{"buffer reused", make([]byte, 7, 2048), 1001, 5000, 1000, false},
		{"buffer too small", make([]byte, 0, 100), 1001, 5000, 1000, true},
		{"buffer larger than the limit", make([]byte, 0, 4096), 1001, 300, 300, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, half := range []bool{false, true} {
				var r io.Reader = strings.NewReader(text)
				if half {
					r = iotest.HalfReader(r)
				}
				got, err := readAtMost(r, tt.buf, tt.hint, tt.limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != tt.want || !bytes.Equal(got, []byte(text[:tt.want])) {
					t.Fatalf("half=%v: read %d bytes, want %d", half, len(got), tt.want)
				}
				if reused := cap(tt.buf) > 0 && &got[:1][0] == &tt.buf[:1][0]; reused == tt.fresh {
					t.Errorf("half=%v: reused the buffer = %v, want %v", half, reused, !tt.fresh)
				}
			}
		})
	}
}
