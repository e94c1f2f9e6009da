package docker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"
)

// muxFrame is one frame of the engine's multiplexed exec output.
func muxFrame(stream byte, payload string) string {
	h := make([]byte, demuxHeader)
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
	return string(h) + payload
}

// readBoth drains a demux's two sides as a caller of a stream must,
// concurrently, and returns what each read and the stdout reader's error.
func readBoth(d *demux, stdoutChunk int) (stdout, stderr string, err error) {
	var errBuf bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(&errBuf, demuxReader{d: d, stderr: true})
	}()
	var out bytes.Buffer
	buf := make([]byte, stdoutChunk)
	for {
		n, rerr := demuxReader{d: d}.Read(buf)
		out.Write(buf[:n])
		if rerr != nil {
			if rerr != io.EOF {
				err = rerr
			}
			break
		}
	}
	wg.Wait()
	return out.String(), errBuf.String(), err
}

func TestDemux(t *testing.T) {
	bigErr := strings.Repeat("e", maxStderrBacklog+12345)
	tests := []struct {
		name        string
		in          string
		chunk       int  // stdout read size
		oneByte     bool // the connection returns one byte per read
		wantOut     string
		wantErr     string
		wantReadErr string // the stdout reader's error, also the stream's copy error
	}{
		{name: "interleaved", in: muxFrame(1, "out1 ") + muxFrame(2, "err1 ") + muxFrame(1, "out2") + muxFrame(2, "err2"),
			chunk: 64, wantOut: "out1 out2", wantErr: "err1 err2"},
		{name: "stdin stream is stdout", in: muxFrame(0, "zero") + muxFrame(1, "one"), chunk: 64, wantOut: "zeroone"},
		{name: "small reads split frames", in: muxFrame(1, "hello, world") + muxFrame(2, "oops"), chunk: 3,
			wantOut: "hello, world", wantErr: "oops"},
		{name: "one byte at a time from the connection", in: muxFrame(1, "abc") + muxFrame(2, "de") + muxFrame(1, "f"),
			chunk: 64, oneByte: true, wantOut: "abcf", wantErr: "de"},
		{name: "empty frames", in: muxFrame(1, "") + muxFrame(2, "") + muxFrame(1, "x"), chunk: 64, wantOut: "x"},
		{name: "stderr beyond the backlog", in: muxFrame(2, bigErr) + muxFrame(1, "done"), chunk: 64,
			wantOut: "done", wantErr: bigErr},
		{name: "truncated frame ends cleanly as with stdcopy", in: muxFrame(1, "whole") + muxFrame(1, "cut")[:demuxHeader+1],
			chunk: 64, wantOut: "whole" + "c"},
		{name: "system error", in: muxFrame(1, "before") + muxFrame(3, "boom") + muxFrame(1, "after"), chunk: 64,
			wantOut: "before", wantReadErr: "error from daemon in stream: boom"},
		{name: "unknown stream", in: muxFrame(1, "a") + muxFrame(9, "b"), chunk: 64, wantOut: "a",
			wantReadErr: "unrecognized stream 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var src io.Reader = strings.NewReader(tt.in)
			if tt.oneByte {
				src = iotest.OneByteReader(src)
			}
			d := newDemux(src)
			out, errOut, err := readBoth(d, tt.chunk)
			if out != tt.wantOut || errOut != tt.wantErr {
				t.Errorf("stdout %.40q stderr %.40q (%d bytes), want %.40q and %.40q (%d bytes)", out, errOut, len(errOut), tt.wantOut, tt.wantErr, len(tt.wantErr))
			}
			select {
			case <-d.done:
			default:
				t.Fatal("the demux did not end after stdout reached its end")
			}
			for _, e := range []error{err, d.copyErr} {
				if tt.wantReadErr == "" && e != nil || tt.wantReadErr != "" && (e == nil || !strings.Contains(e.Error(), tt.wantReadErr)) {
					t.Errorf("error %v, want one containing %q", e, tt.wantReadErr)
				}
			}
		})
	}
}

// TestDemuxClose runs in a synctest bubble: the connection is an io.Pipe,
// so synctest.Wait sees when both readers wait.
func TestDemuxClose(t *testing.T) { synctest.Test(t, testDemuxClose) }

func testDemuxClose(t *testing.T) {
	pr, pw := io.Pipe()
	d := newDemux(pr)
	go pw.Write([]byte(muxFrame(1, "first")))
	buf := make([]byte, 64)
	if n, err := (demuxReader{d: d}).Read(buf); err != nil || string(buf[:n]) != "first" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	readErrs := make(chan error, 2)
	go func() { _, err := (demuxReader{d: d}).Read(buf); readErrs <- err }()
	go func() { _, err := (demuxReader{d: d, stderr: true}).Read(make([]byte, 8)); readErrs <- err }()
	synctest.Wait() // both readers wait: one in the connection, one for stderr
	d.close()
	pr.Close() // what closing the connection does to a read inside it
	for range 2 {
		select {
		case err := <-readErrs:
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("read after close: %v, want io.ErrClosedPipe", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a reader stayed blocked after close")
		}
	}
	select {
	case <-d.done:
	default:
		t.Fatal("the demux did not end at close")
	}
	if d.copyErr == nil {
		t.Error("a closed demux reports no copy error; Wait would take the stream for finished")
	}
}

func TestDemuxDrain(t *testing.T) {
	tests := []struct {
		name     string
		stdout   int  // bytes of stdout nobody reads before Wait
		wantWait bool // Wait's drain returns without a reader
	}{
		{name: "little output is read ahead", stdout: 1000, wantWait: true},
		{name: "much output waits for a reader", stdout: 2 * maxStdoutBacklog, wantWait: false},
	}
	for _, tt := range tests {
		// In a synctest bubble the 300 ms given to drain are fake time:
		// they pass as soon as drain waits for good, or not at all.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				want := strings.Repeat("o", tt.stdout)
				var in strings.Builder
				for rest := want; len(rest) > 0; {
					n := min(len(rest), 30000)
					in.WriteString(muxFrame(1, rest[:n]))
					rest = rest[n:]
				}
				in.WriteString(muxFrame(2, "bye"))
				d := newDemux(strings.NewReader(in.String()))
				drained := make(chan struct{})
				go func() { d.drain(); close(drained) }()
				select {
				case <-drained:
					if !tt.wantWait {
						t.Fatal("drain read everything ahead; it must stop at maxStdoutBacklog")
					}
				case <-time.After(300 * time.Millisecond):
					if tt.wantWait {
						t.Fatal("drain did not return for a stream with little output")
					}
				}
				out, errOut, err := readBoth(d, 4096)
				if err != nil || out != want || errOut != "bye" {
					t.Fatalf("read %d bytes of stdout, stderr %q, %v; want %d bytes and %q", len(out), errOut, err, len(want), "bye")
				}
				select {
				case <-drained:
				case <-time.After(5 * time.Second):
					t.Fatal("drain did not return after stdout was read to its end")
				}
			})
		})
	}
}

// TestDemuxStderrFirst: before anyone reads stdout, the stderr reader reads
// the connection itself (the agent's greeting comes on stderr), and stdout
// it met on the way is there for the first stdout Read even while the
// stderr reader waits inside the connection for more. It runs in a
// synctest bubble, so synctest.Wait sees the stderr reader wait there.
func TestDemuxStderrFirst(t *testing.T) { synctest.Test(t, testDemuxStderrFirst) }

func testDemuxStderrFirst(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	d := newDemux(pr)
	go pw.Write([]byte(muxFrame(2, "hello") + muxFrame(1, "ready\n")))
	buf := make([]byte, 64)
	if n, err := (demuxReader{d: d, stderr: true}).Read(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("stderr Read = %q, %v", buf[:n], err)
	}
	// The stderr reader goes back to the connection and waits there.
	go (demuxReader{d: d, stderr: true}).Read(make([]byte, 64))
	synctest.Wait()
	got := make(chan string, 1)
	go func() {
		n, _ := (demuxReader{d: d}).Read(buf)
		got <- string(buf[:n])
	}()
	select {
	case s := <-got:
		if s != "ready\n" {
			t.Fatalf("stdout Read = %q, want %q", s, "ready\n")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first stdout Read waited for more data behind the stderr reader")
	}
}
