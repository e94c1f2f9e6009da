package syntax

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// randomEdits returns non-overlapping edits of a text of n bytes, sorted.
func randomEdits(rng *rand.Rand, n int) []Edit {
	var out []Edit
	pos := 0
	for pos <= n && rng.IntN(3) > 0 {
		s := pos + rng.IntN(max(1, (n-pos)/2+1))
		if s > n {
			break
		}
		e := s + rng.IntN(min(4, n-s)+1)
		text := []string{"", "x", "YY", "(z)"}[rng.IntN(4)]
		if s == e && text == "" {
			text = "i"
		}
		out = append(out, Edit{StartByte: s, EndByte: e, Text: text})
		pos = e + 1
	}
	return out
}

// TestCompose: composing two rounds of edits gives one set of edits of the
// original with the same result, on thousands of random cases.
func TestCompose(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for i := range 5000 {
		src := []byte("abcdefghijklmnopqrstuvwxyz"[:rng.IntN(27)])
		first := randomEdits(rng, len(src))
		mid := Apply(src, first)
		second := randomEdits(rng, len(mid))
		want := string(Apply(mid, second))
		got := Compose(src, first, second)
		if s := string(Apply(src, got)); s != want {
			t.Fatalf("case %d: src %q, first %v, second %v: composed %v gives %q, want %q", i, src, first, second, got, s, want)
		}
		for j := 1; j < len(got); j++ {
			if got[j].StartByte < got[j-1].EndByte {
				t.Fatalf("case %d: composed edits overlap: %v", i, got)
			}
		}
	}
	// A second rewrite inside text the first wrote merges with it.
	src := []byte("print(x)\n")
	first := []Edit{{StartByte: 0, EndByte: 8, Text: "log(x)"}}
	second := []Edit{{StartByte: 0, EndByte: 3, Text: "log.info"}}
	if got, want := Compose(src, first, second), []Edit{{StartByte: 0, EndByte: 8, Text: "log.info(x)"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Compose = %v, want %v", got, want)
	}
}

func TestRebase(t *testing.T) {
	src := "0123456789"
	e := func(s, end int, text string) Edit { return Edit{StartByte: s, EndByte: end, Text: text} }
	for _, c := range []struct {
		name         string
		edits, other []Edit
		want         string // the result of both; "" for a conflict
	}{
		{"disjoint, other first", []Edit{e(6, 8, "X")}, []Edit{e(1, 2, "LONG")}, "0LONG2345X89"},
		{"disjoint, other after", []Edit{e(1, 2, "LONG")}, []Edit{e(6, 8, "X")}, "0LONG2345X89"},
		{"touching ranges", []Edit{e(3, 5, "B")}, []Edit{e(1, 3, "A")}, "0AB56789"},
		{"insert at the end of a replacement", []Edit{e(3, 3, "I")}, []Edit{e(1, 3, "A")}, "0AI3456789"},
		{"insert at the start of a replacement", []Edit{e(1, 1, "I")}, []Edit{e(1, 3, "A")}, "0IA3456789"},
		{"several", []Edit{e(0, 1, "a"), e(5, 6, "f"), e(9, 10, "j")}, []Edit{e(2, 3, ""), e(7, 8, "HH")}, "a134f6HH8j"},
		{"overlap", []Edit{e(2, 5, "X")}, []Edit{e(4, 6, "Y")}, ""},
		{"inside", []Edit{e(3, 4, "X")}, []Edit{e(2, 6, "Y")}, ""},
		{"insert inside", []Edit{e(3, 3, "X")}, []Edit{e(2, 6, "Y")}, ""},
		{"same insertion point", []Edit{e(3, 3, "X")}, []Edit{e(3, 3, "Y")}, ""},
	} {
		got, err := Rebase(c.edits, c.other)
		if c.want == "" {
			var ce *ConflictError
			if !errors.As(err, &ce) {
				t.Errorf("%s: Rebase = %v, %v; want a conflict", c.name, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if s := string(Apply(Apply([]byte(src), c.other), got)); s != c.want {
			t.Errorf("%s: %q, want %q", c.name, s, c.want)
		}
	}
}
