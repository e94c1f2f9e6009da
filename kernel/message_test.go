package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// The expected digests were computed independently with Python's hmac
// module and cross-checked with jupyter_client's Session.sign:
//
//	hmac.new(key.encode(), digestmod=hashlib.sha256); h.update(header);
//	h.update(parent); h.update(metadata); h.update(content); h.hexdigest()
var hmacVectors = []struct {
	name                              string
	key                               Key
	header, parent, metadata, content string
	want                              string
}{
	{
		name:     "kernel_info_request",
		key:      "secret-key",
		header:   `{"msg_id":"1","session":"s","username":"u","date":"2024-01-01T00:00:00.000000Z","msg_type":"kernel_info_request","version":"5.3"}`,
		parent:   `{}`,
		metadata: `{}`,
		content:  `{}`,
		want:     "f27d97fadf10e048c2d16a7655efcb19f3ba77c8fa144167410229605639dd9c",
	},
	{
		name:     "256-bit hex key, all parts set",
		key:      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		header:   `{"msg_id":"a","msg_type":"execute_request"}`,
		parent:   `{"msg_id":"p"}`,
		metadata: `{"k":1}`,
		content:  `{"code":"1+1","silent":false}`,
		want:     "d8e16edd08244e3e21029361b23def21c6bdd5e398172c8d8bafdc08aa0cf433",
	},
	{
		name: "empty parts",
		key:  "k",
		want: "8bb990c40a7d61cb97597a942125025be50ac8beb74436e3735b98893a7f6620",
	},
}

func TestSignVectors(t *testing.T) {
	for _, v := range hmacVectors {
		t.Run(v.name, func(t *testing.T) {
			c, err := NewCodec(v.key)
			if err != nil {
				t.Fatal(err)
			}
			got := c.Sign([]byte(v.header), []byte(v.parent), []byte(v.metadata), []byte(v.content))
			if string(got) != v.want {
				t.Errorf("Sign = %s, want %s", got, v.want)
			}
		})
	}
}

func TestDecodeVector(t *testing.T) {
	v := hmacVectors[0]
	c, _ := NewCodec(v.key)
	frames := [][]byte{[]byte("topic"), []byte(Delimiter), []byte(v.want), []byte(v.header), []byte(v.parent), []byte(v.metadata), []byte(v.content), []byte("buf")}
	m, err := c.Decode(frames)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.MsgType != "kernel_info_request" || m.Header.MsgID != "1" || !m.ParentHeader.IsZero() {
		t.Errorf("decoded header %+v parent %+v", m.Header, m.ParentHeader)
	}
	if len(m.Identities) != 1 || string(m.Identities[0]) != "topic" || len(m.Buffers) != 1 || string(m.Buffers[0]) != "buf" {
		t.Errorf("identities %q buffers %q", m.Identities, m.Buffers)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	c, _ := NewCodec("round-trip-key")
	in := &Message{
		Identities:   [][]byte{[]byte("id1")},
		Header:       Header{MsgID: "m1", Session: "s", Username: "u", Date: timestamp(), MsgType: "execute_request", Version: ProtocolVersion},
		ParentHeader: Header{MsgID: "p1", MsgType: "x"},
		Content:      json.RawMessage(`{"code":"print(1)"}`),
		Buffers:      [][]byte{{0, 1, 2}},
	}
	frames, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(frames[1]) != Delimiter || string(frames[5]) != "{}" {
		t.Fatalf("frames %q", frames)
	}
	out, err := c.Decode(frames)
	if err != nil {
		t.Fatal(err)
	}
	if out.Header != in.Header || out.ParentHeader != in.ParentHeader || string(out.Content) != string(in.Content) || !bytes.Equal(out.Buffers[0], in.Buffers[0]) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}

func TestDecodeRejects(t *testing.T) {
	c, _ := NewCodec("k")
	good := func() [][]byte {
		f, err := c.Encode(&Message{Header: Header{MsgID: "1", MsgType: "status"}, Content: json.RawMessage(`{"execution_state":"idle"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	resign := func(f [][]byte) [][]byte {
		f[1] = c.Sign(f[2], f[3], f[4], f[5])
		return f
	}
	other, _ := NewCodec("other-key")
	tests := []struct {
		name   string
		frames func() [][]byte
		want   error
	}{
		{"no delimiter", func() [][]byte { return good()[1:] }, ErrMalformed},
		{"too few frames", func() [][]byte { return good()[:5] }, ErrMalformed},
		{"wrong key", func() [][]byte {
			f := good()
			f[1] = other.Sign(f[2], f[3], f[4], f[5])
			return f
		}, ErrBadSignature},
		{"tampered content", func() [][]byte { f := good(); f[5] = []byte(`{"execution_state":"busy"}`); return f }, ErrBadSignature},
		{"uppercase hex", func() [][]byte { f := good(); f[1] = bytes.ToUpper(f[1]); return f }, ErrBadSignature},
		{"empty signature", func() [][]byte { f := good(); f[1] = nil; return f }, ErrBadSignature},
		{"header not json", func() [][]byte { f := good(); f[2] = []byte("nope"); return resign(f) }, ErrMalformed},
		{"header without type", func() [][]byte { f := good(); f[2] = []byte(`{"msg_id":"1"}`); return resign(f) }, ErrMalformed},
		{"content not object", func() [][]byte { f := good(); f[5] = []byte(`[1]`); return resign(f) }, ErrMalformed},
		{"metadata not json", func() [][]byte { f := good(); f[4] = []byte(`{`); return resign(f) }, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := c.Decode(tt.frames())
			if !errors.Is(err, tt.want) {
				t.Errorf("Decode = %v, %v; want %v", m, err, tt.want)
			}
		})
	}
}

func TestNewCodecRefusesEmptyKey(t *testing.T) {
	if _, err := NewCodec(""); err == nil {
		t.Fatal("NewCodec(\"\") succeeded")
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to
// frames that decode to the same message.
func FuzzDecode(f *testing.F) {
	c, _ := NewCodec("fuzz-key")
	seed, _ := c.Encode(&Message{
		Identities: [][]byte{[]byte("t")},
		Header:     Header{MsgID: "1", MsgType: "stream"},
		Content:    json.RawMessage(`{"name":"stdout","text":"hi"}`),
	})
	f.Add(bytes.Join(seed, []byte{0}))
	f.Add([]byte(Delimiter))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		frames := bytes.Split(data, []byte{0})
		// Also try the input with a valid signature, so the fuzzer gets past the HMAC.
		for i, fr := range frames {
			if string(fr) == Delimiter && len(frames) >= i+6 {
				signed := append([][]byte(nil), frames...)
				signed[i+1] = c.Sign(frames[i+2], frames[i+3], frames[i+4], frames[i+5])
				check(t, c, signed)
				break
			}
		}
		check(t, c, frames)
	})
}

func check(t *testing.T, c *Codec, frames [][]byte) {
	m, err := c.Decode(frames)
	if err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("Decode error %v is neither ErrMalformed nor ErrBadSignature", err)
		}
		return
	}
	again, err := c.Encode(m)
	if err != nil {
		t.Fatalf("Encode of a decoded message: %v", err)
	}
	m2, err := c.Decode(again)
	if err != nil {
		t.Fatalf("re-encoded message does not decode: %v", err)
	}
	if m2.Header != m.Header || m2.ParentHeader != m.ParentHeader {
		t.Fatalf("re-encode changed headers: %+v vs %+v", m2, m)
	}
}
