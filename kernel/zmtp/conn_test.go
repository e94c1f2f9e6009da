package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// bufConn is a net.Conn over fixed input; what is written is kept.
type bufConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *bufConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *bufConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *bufConn) Close() error                     { return nil }
func (c *bufConn) LocalAddr() net.Addr              { return nil }
func (c *bufConn) RemoteAddr() net.Addr             { return nil }
func (c *bufConn) SetDeadline(time.Time) error      { return nil }
func (c *bufConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }

// readyConn returns a Conn past its handshake that reads in.
func readyConn(in []byte) (*Conn, *bufConn) {
	bc := &bufConn{in: bytes.NewReader(in)}
	return &Conn{nc: bc, r: bufio.NewReaderSize(bc, 16), w: bufio.NewWriter(bc), typ: Dealer}, bc
}

// frame encodes one frame as a peer would send it; long forces the
// 8-byte size.
func frame(flags byte, body string, long bool) []byte {
	if long || len(body) > 255 {
		b := []byte{flags | flagLong}
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
		return append(b, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

func cmd(name, data string) string { return string(rune(len(name))) + name + data }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestFramer(t *testing.T) {
	big := strings.Repeat("x", 300)
	tests := []struct {
		name    string
		in      []byte
		max     int
		want    []string // frames of messages, "|" between messages
		wantErr string   // substring of the final error; "" means io.EOF
		pong    bool
	}{
		{name: "one short frame", in: frame(0, "hi", false), max: 10, want: []string{"hi"}},
		{name: "multipart", in: cat(frame(flagMore, "a", false), frame(flagMore, "", false), frame(0, "c", false)), max: 10, want: []string{"a", "", "c"}},
		{name: "long size for a short body", in: frame(0, "hi", true), max: 10, want: []string{"hi"}},
		{name: "long frame", in: frame(0, big, false), max: 400, want: []string{big}},
		{name: "two messages", in: cat(frame(0, "a", false), frame(0, "b", false)), max: 10, want: []string{"a", "|", "b"}},
		{name: "command between messages is skipped", in: cat(frame(0, "a", false), frame(flagCommand, cmd("HELLO", "x"), false), frame(0, "b", false)), max: 10, want: []string{"a", "|", "b"}},
		{name: "PING is answered", in: cat(frame(flagCommand, cmd("PING", "\x00\x10ctx"), false), frame(0, "a", false)), max: 10, want: []string{"a"}, pong: true},
		{name: "frame over max is refused and skipped", in: cat(frame(0, big, false), frame(0, "b", false)), max: 10, want: []string{"!", "|", "b"}},
		{name: "reserved flag bits", in: frame(0x80, "a", false), max: 10, wantErr: "reserved bits"},
		{name: "command inside a message", in: cat(frame(flagMore, "a", false), frame(flagCommand, cmd("PING", "\x00\x00"), false)), max: 10, wantErr: "command inside a message"},
		{name: "command with MORE", in: frame(flagCommand|flagMore, cmd("X", ""), false), max: 10, wantErr: "command inside a message"},
		{name: "oversize command", in: frame(flagCommand, cmd("X", strings.Repeat("y", MaxCommand)), false), max: 10, wantErr: "over the"},
		{name: "malformed command", in: frame(flagCommand, "\x09ab", false), max: 10, wantErr: "malformed command"},
		{name: "truncated body", in: frame(0, "hello", false)[:4], max: 10, wantErr: "unexpected EOF"},
		{name: "truncated long size", in: []byte{flagLong, 0, 0}, max: 10, wantErr: "unexpected EOF"},
		{name: "EOF inside a message", in: frame(flagMore, "a", false), max: 10, want: nil, wantErr: "unexpected EOF"},
		{name: "absurd size", in: []byte{flagLong, 0xff, 0, 0, 0, 0, 0, 0, 0}, max: 10, wantErr: "not a size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, bc := readyConn(tt.in)
			var got []string
			var err error
			for {
				var frames [][]byte
				frames, err = c.ReadMessage(tt.max)
				if err != nil && !strings.Contains(err.Error(), "message dropped") {
					break
				}
				if len(got) > 0 {
					got = append(got, "|")
				}
				if err != nil {
					got = append(got, "!")
					continue
				}
				for _, f := range frames {
					got = append(got, string(f))
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("frames %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != io.EOF:
				t.Errorf("final error %v, want io.EOF", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("final error %v, want one containing %q", err, tt.wantErr)
			}
			if gotPong := bytes.Contains(bc.out.Bytes(), []byte("\x04PONGctx")); gotPong != tt.pong {
				t.Errorf("PONG sent = %t, want %t (wrote %q)", gotPong, tt.pong, bc.out.Bytes())
			}
		})
	}
}

// TestReadInPieces: a frame is read in pieces the caller sizes, and Next
// skips what the caller left unread.
func TestReadInPieces(t *testing.T) {
	body := strings.Repeat("0123456789", 1000)
	c, _ := readyConn(cat(frame(flagMore, body, false), frame(0, "tail", false)))
	size, more, err := c.Next()
	if err != nil || size != uint64(len(body)) || !more {
		t.Fatalf("Next = %d %t %v", size, more, err)
	}
	p := make([]byte, 7)
	n, err := c.Read(p)
	if err != nil || string(p[:n]) != body[:n] {
		t.Fatalf("Read = %q %v", p[:n], err)
	}
	if _, more, err = c.Next(); err != nil || more {
		t.Fatalf("second Next = %t %v", more, err)
	}
	b, ok, err := c.ReadFrame(4)
	if err != nil || !ok || string(b) != "tail" {
		t.Fatalf("ReadFrame = %q %t %v", b, ok, err)
	}
	if n, err := c.Read(p); n != 0 || err != io.EOF {
		t.Errorf("Read past the frame = %d %v, want 0 EOF", n, err)
	}
}

func TestSendEncodes(t *testing.T) {
	big := strings.Repeat("z", 256)
	tests := []struct {
		typ    SocketType
		frames [][]byte
		want   []byte
	}{
		{Dealer, [][]byte{[]byte("a"), []byte("bc")}, cat(frame(flagMore, "a", false), frame(0, "bc", false))},
		{Dealer, [][]byte{[]byte(big)}, frame(0, big, true)},
		{Req, [][]byte{[]byte("ping")}, cat(frame(flagMore, "", false), frame(0, "ping", false))},
		{Dealer, nil, frame(0, "", false)},
	}
	for _, tt := range tests {
		bc := &bufConn{in: bytes.NewReader(nil)}
		c := &Conn{nc: bc, r: bufio.NewReader(bc), w: bufio.NewWriter(bc), typ: tt.typ}
		if err := c.Send(context.Background(), tt.frames); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bc.out.Bytes(), tt.want) {
			t.Errorf("%s %q: wrote %q, want %q", tt.typ, tt.frames, bc.out.Bytes(), tt.want)
		}
	}
}

// peerGreeting is a ZMTP greeting with the given version and mechanism.
func peerGreeting(major byte, mech string) []byte {
	g := greeting()
	g[10] = major
	copy(g[12:32], make([]byte, 20))
	copy(g[12:32], mech)
	return g
}

func readyCmd(props ...[2]string) []byte {
	return frame(flagCommand, cmd("READY", string(encodeProperties(props))), false)
}

func TestHandshake(t *testing.T) {
	router := readyCmd([2]string{"Socket-Type", "ROUTER"}, [2]string{"Identity", ""})
	tests := []struct {
		name    string
		typ     SocketType
		opts    Options
		peer    []byte // what the peer sends
		wantErr string
		sent    []string // what our side must have sent, beyond the greeting
	}{
		{name: "dealer to router", typ: Dealer, opts: Options{Identity: []byte("me")}, peer: cat(greeting(), router),
			sent: []string{"\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER\x08Identity\x00\x00\x00\x02me"}},
		{name: "sub subscribes", typ: Sub, opts: Options{Subscribe: []string{""}}, peer: cat(greeting(), readyCmd([2]string{"socket-type", "XPUB"})),
			sent: []string{"\x05READY\x0bSocket-Type\x00\x00\x00\x03SUB", "\x01\x01"}},
		{name: "req to rep, 3.1 peer", typ: Req, peer: cat(peerGreeting(3, "NULL"), readyCmd([2]string{"Socket-Type", "REP"}))},
		{name: "not zmtp", typ: Dealer, peer: []byte(strings.Repeat("HTTP/1.1 400\r\n", 10)), wantErr: "no ZMTP signature"},
		{name: "zmtp 2", typ: Dealer, peer: peerGreeting(2, "NULL"), wantErr: "ZMTP 2.0"},
		{name: "curve", typ: Dealer, peer: peerGreeting(3, "CURVE"), wantErr: `"CURVE"`},
		{name: "error command", typ: Dealer, peer: cat(greeting(), frame(flagCommand, cmd("ERROR", "\x04nope"), false)), wantErr: `"nope"`},
		{name: "wrong peer type", typ: Sub, peer: cat(greeting(), router), wantErr: `cannot talk to a "ROUTER"`},
		{name: "message before READY", typ: Dealer, peer: cat(greeting(), frame(0, "x", false)), wantErr: "expected a command"},
		{name: "truncated property", typ: Dealer, peer: cat(greeting(), frame(flagCommand, cmd("READY", "\x0bSocket-Type\x00\x00\x00\x09ROUTER"), false)), wantErr: "longer than the command"},
		{name: "peer hangs up", typ: Dealer, peer: greeting()[:30], wantErr: "read greeting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bc := &bufConn{in: bytes.NewReader(tt.peer)}
			c, err := Handshake(context.Background(), bc, tt.typ, tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.PeerType() == "" {
				t.Error("no peer type")
			}
			out := bc.out.Bytes()
			if !bytes.Equal(out[:greetingSize], greeting()) {
				t.Errorf("greeting %q", out[:greetingSize])
			}
			rest := out[greetingSize:]
			for _, want := range tt.sent {
				if !bytes.Contains(rest, []byte(want)) {
					t.Errorf("sent %q, want it to contain %q", rest, want)
				}
			}
		})
	}
}

// TestHandshakeHonoursContext: a peer that never answers is given up on
// when ctx ends.
func TestHandshakeHonoursContext(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go io.Copy(io.Discard, b) // reads our greeting, never answers
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Handshake(ctx, a, Dealer, Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

// FuzzNextFrame reads arbitrary bytes as frames, in small pieces and
// whole up to a cap: no panic, no frame over its cap, and the reader
// always ends (each round consumes input).
func FuzzNextFrame(f *testing.F) {
	f.Add(frame(0, "hi", false))
	f.Add(cat(frame(flagMore, "a", false), frame(0, strings.Repeat("b", 300), false)))
	f.Add(cat(frame(flagCommand, cmd("PING", "\x00\x01xy"), false), frame(0, "a", false)))
	f.Add([]byte{flagLong, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{flagLong | flagCommand, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 64
		c, _ := readyConn(in)
		for rounds := 0; ; rounds++ {
			if rounds > len(in)+1 {
				t.Fatalf("%d rounds over %d bytes of input", rounds, len(in))
			}
			if rounds%2 == 0 {
				frames, err := c.ReadMessage(max)
				for _, fr := range frames {
					if len(fr) > max {
						t.Fatalf("a %d-byte frame past the %d cap", len(fr), max)
					}
				}
				if err != nil && !strings.Contains(err.Error(), "message dropped") {
					return
				}
				continue
			}
			size, _, err := c.Next()
			if err != nil {
				return
			}
			p := make([]byte, 5)
			var n uint64
			for {
				k, err := c.Read(p)
				n += uint64(k)
				if err == io.EOF {
					break
				}
				if err != nil {
					return
				}
			}
			if n != size {
				t.Fatalf("read %d bytes of a %d-byte frame", n, size)
			}
		}
	})
}
