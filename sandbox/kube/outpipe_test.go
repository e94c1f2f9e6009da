package kube

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"
)

// TestOutPipe checks that writes before the first read never block (the
// agent's greeting on stderr must not wait behind unread stdout), that
// later writes wait for the reader, and both ends of an outPipe. It runs
// in a synctest bubble: the waits are fake time, which passes only once
// every goroutine of the test waits for good, and synctest.Wait sees the
// reader and the writer wait.
func TestOutPipe(t *testing.T) { synctest.Test(t, testOutPipe) }

func testOutPipe(t *testing.T) {
	p := newOutPipe()
	big := bytes.Repeat([]byte("x"), 4<<20)
	wrote := make(chan error, 1)
	go func() { _, err := p.Write(big); wrote <- err }()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write before the first read blocked")
	}

	// From the first read on, a write returns once it was read.
	buf := make([]byte, 10)
	if n, err := p.Read(buf); n != 10 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	go func() { _, err := p.Write([]byte("tail")); wrote <- err }()
	select {
	case err := <-wrote:
		t.Fatalf("a write returned (%v) while the reader had not taken the earlier output", err)
	case <-time.After(100 * time.Millisecond):
	}
	rest, err := io.ReadAll(io.LimitReader(p, int64(len(big)-10+4)))
	if err != nil || len(rest) != len(big)-10+4 || string(rest[len(rest)-4:]) != "tail" {
		t.Fatalf("ReadAll = %d bytes, %v", len(rest), err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	p.closeWrite()
	if n, err := p.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after closeWrite = %d, %v; want EOF", n, err)
	}
	if _, err := p.Write([]byte("late")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Write after closeWrite = %v", err)
	}

	// closeRead unblocks a waiting writer and fails reads.
	q := newOutPipe()
	q.Read(make([]byte, 0))
	go func() { q.Read(buf[:1]) }()
	go func() { _, err := q.Write([]byte("abcdef")); wrote <- err }()
	synctest.Wait()
	q.closeRead()
	select {
	case err := <-wrote:
		if !errors.Is(err, io.ErrClosedPipe) && err != nil {
			t.Fatalf("Write after closeRead = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("closeRead did not unblock the writer")
	}
	if _, err := q.Read(buf); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Read after closeRead = %v", err)
	}
}
