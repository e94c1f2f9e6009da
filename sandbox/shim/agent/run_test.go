package agent

import (
	"bytes"
	"io"
	"os"
	"sync"
	"testing"
	"time"
)

// newFeed returns a stdin feed whose child stdin is a pipe, the pipe's
// read end (the child's side), the frames the supervisor sends, and a
// channel closed when the writer goroutine ended.
func newFeed(t *testing.T) (*stdinFeed, *os.File, *bytes.Buffer, chan struct{}) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	stdin, err := newPollFile(w)
	if err != nil {
		t.Fatal(err)
	}
	var frames bytes.Buffer
	s := &supervisor{out: &frames, stdin: stdin, fail: make(chan struct{})}
	f := &stdinFeed{s: s}
	f.cond = sync.NewCond(&f.mu)
	done := make(chan struct{})
	go func() { s.writeStdin(f); close(done) }()
	return f, r, &frames, done
}

// acks sums the TypeStdinAck frames in frames and counts them.
func acks(t *testing.T, frames *bytes.Buffer) (n, total int) {
	t.Helper()
	fr := NewReader(bytes.NewReader(frames.Bytes()))
	for {
		typ, p, err := fr.Next()
		if err == io.EOF {
			return n, total
		}
		if err != nil || typ != TypeStdinAck {
			t.Fatalf("frame %q, %v; want only acknowledgements", typ, err)
		}
		v, err := Uint32s(p, 1)
		if err != nil {
			t.Fatal(err)
		}
		n++
		total += int(v[0])
	}
}

func waitDone(t *testing.T, done chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stdin writer did not end")
	}
}

func TestStdinFeed(t *testing.T) {
	tests := []struct {
		name      string
		chunk     int  // bytes per put
		chunks    int  // puts
		readLater bool // the child starts reading only after every put
		closeRead bool // the child closed its stdin before the data came
		wantAcks  bool // acknowledgement frames are expected
	}{
		// An interactive stream: small messages, the child reading along.
		{name: "small messages unacknowledged", chunk: 100, chunks: 1000, wantAcks: false},
		// Bulk data into a child that does not read yet: every put
		// returns at once, the data waits in the queue, and the
		// acknowledgements come in batches once the child reads.
		{name: "child not reading", chunk: MaxStdinFrame, chunks: 24, readLater: true, wantAcks: true},
		// A child that closed its stdin: the data is dropped but still
		// acknowledged, so that berth does not stall.
		{name: "child closed stdin", chunk: MaxStdinFrame, chunks: 20, closeRead: true, wantAcks: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, r, frames, done := newFeed(t)
			if tt.closeRead {
				r.Close()
			}
			var want bytes.Buffer
			for i := range tt.chunks {
				want.Write(bytes.Repeat([]byte{byte('a' + i%26)}, tt.chunk))
			}
			got := make(chan []byte, 1)
			readAll := func() {
				b, _ := io.ReadAll(r)
				got <- b
			}
			if !tt.readLater && !tt.closeRead {
				go readAll()
			}
			data := want.Bytes()
			for i := range tt.chunks {
				start := time.Now()
				if !f.put(data[i*tt.chunk : (i+1)*tt.chunk]) {
					t.Fatalf("put %d refused", i)
				}
				if d := time.Since(start); d > time.Second {
					t.Fatalf("put %d took %v; it must never wait for the child", i, d)
				}
			}
			f.close()
			if tt.readLater {
				go readAll()
			}
			waitDone(t, done)
			if !tt.closeRead {
				if b := <-got; !bytes.Equal(b, want.Bytes()) {
					t.Fatalf("the child read %d bytes, not the %d sent in order", len(b), want.Len())
				}
			}
			n, total := acks(t, frames)
			if (n > 0) != tt.wantAcks || n > want.Len()/StdinAckBatch {
				t.Errorf("%d acknowledgement frames for %d bytes (batches of %d)", n, want.Len(), StdinAckBatch)
			}
			if unacked := want.Len() - total; unacked < 0 || unacked >= StdinAckBatch {
				t.Errorf("acknowledged %d of %d bytes; at most StdinAckBatch-1 may stay unacknowledged", total, want.Len())
			}
		})
	}
}

func TestStdinFeedOverflow(t *testing.T) {
	f, _, _, done := newFeed(t)
	chunk := make([]byte, MaxStdinFrame)
	refused := false
	for range 2*StdinWindow/MaxStdinFrame + 64 {
		if !f.put(chunk) {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("put accepted more than 2*StdinWindow bytes for a child that does not read")
	}
	f.close()
	// The writer is stuck on the full pipe until the child's side closes.
	select {
	case <-done:
		t.Fatal("the writer ended while its data was not written")
	default:
	}
}
