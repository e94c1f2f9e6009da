package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"berth.dev/berth/tools/structural"
)

// jsonMatch is the reference shape of a `berth ast-grep --json` line, as
// encoding/json writes it: a FileMatch whose captures are left out when
// there are none.
type jsonMatch struct {
	structural.FileMatch
	Captures map[string]string `json:"captures,omitempty"`
}

func referenceJSON(t *testing.T, file string, m structural.FileMatch) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	m.File = file
	if err := enc.Encode(jsonMatch{FileMatch: m, Captures: m.Captures}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The hand-written JSON lines are byte for byte encoding/json's.
func TestMatchJSON(t *testing.T) {
	texts := []string{
		"", "plain", `say "hi" \ bye`, "tab\tnl\ncr\rbs\bff\f", "\x00\x01\x1f\x7f",
		"<a href='x'>&amp;</a>", "é ü 日本 🙂", "bad \xff\xfe utf8 \xe2\x82", "line\u2028para\u2029end",
		"fmt.Errorf(\"%w: %s\", err, x)\n\treturn nil, err",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		texts = append(texts, string(b))
	}
	for i, text := range texts {
		m := structural.FileMatch{StartLine: i + 1, StartCol: i % 7, EndLine: i + 3, EndCol: 0, Text: text}
		if i%4 == 3 {
			m.Enclosing = "(*T)." + text
		}
		switch i % 3 {
		case 1:
			m.Captures = map[string]string{"B": text, "A": "x", "ZZ": strings.ToUpper(text)}
		case 2:
			m.Captures = map[string]string{}
		}
		file := "dir/" + text + ".go"
		if got, want := appendMatchJSON([]byte("prefix"), file, m), append([]byte("prefix"), referenceJSON(t, file, m)...); !bytes.Equal(got, want) {
			t.Errorf("text %q:\n got %s\nwant %s", text, got, want)
		}
	}
}
