// Shapes of Go functions that the statement splitter must split right or
// keep whole; TestPartialParseMatchesWhole compares every pattern's
// matches here with a whole-file parse.
package shapes

import "errors"

var table = map[string]int{"a": 1}

func newConstraints(l []string) interface {
	query(s string) (string, bool)
} {
	exact := map[string]struct{}{}
	for _, c := range l {
		exact[c] = struct{}{}
	}
	return nil
}

func result() struct {
	x int
} {
	var v struct{ x int }
	v.x = len(table)
	return v
}

func oneLine(a, b int) bool { return a == a && b != 0 }

func tail(xs []int) int {
	n := 0
	for i := range xs {
		xs[i] = xs[i] + 1 } ; return n }

func (r *recv) method(
	a int,
	b [len("ab")]byte,
) error {
	if a == a {
		return errors.New("same")
	} else if r != nil {
		r.m[a] = b[0]
	}
Loop:
	for {
		switch {
		case a > 0:
			break Loop
		}
	}
	defer func() {
		r.close(a)
	}()
	return nil
} // method ends here

// between functions: errors.New("not code")

func empty() {
}

func generic[T comparable](x, y T) bool {
	s := []T{
		x,
	}
	s[0] = y
	return x == x
}

type recv struct{ m map[int]byte }

func (r *recv) close(int) {}
