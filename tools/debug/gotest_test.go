package debug

import (
	"slices"
	"testing"
)

// TestTestArgs: go test's flags in a launch's args reach the test binary
// as -test.NAME; test_run comes first as -test.run; a -run in args with
// test_run is refused; what follows "--" is the tests' own.
func TestTestArgs(t *testing.T) {
	tests := []struct {
		args []string
		run  string
		want []string
		fail bool
	}{
		{nil, "", []string{}, false},
		{nil, "^TestA$", []string{"-test.run", "^TestA$"}, false},
		{[]string{"-v", "-count=1", "-run", "X", "-test.short", "--", "-v", "x"}, "", []string{"-test.v", "-test.count=1", "-test.run", "X", "-test.short", "--", "-v", "x"}, false},
		{[]string{"--timeout", "5s", "-custom"}, "B", []string{"-test.run", "B", "-test.timeout", "5s", "-custom"}, false},
		{[]string{"-test.run=X"}, "Y", nil, true},
		{[]string{"-run", "X"}, "Y", nil, true},
		{[]string{"--", "-run", "X"}, "Y", []string{"-test.run", "Y", "--", "-run", "X"}, false},
	}
	for _, tt := range tests {
		got, err := testArgs(tt.args, tt.run)
		if (err != nil) != tt.fail || !tt.fail && !slices.Equal(got, tt.want) {
			t.Errorf("testArgs(%q, %q) = %q, %v; want %q (fail %v)", tt.args, tt.run, got, err, tt.want, tt.fail)
		}
	}
}

// TestFileTests: a _test.go file's tests as go test names them.
func TestFileTests(t *testing.T) {
	src := `package p

import "testing"

func TestA(t *testing.T) {}
func Testing(t *testing.T) {} // not a test: lower case after Test
func Test(t *testing.T) {}
func TestHelper(x int, t *testing.T) {} // not a test: two parameters
func FuzzB(f *testing.F) {}
func ExampleC() {}
func BenchmarkD(b *testing.B) {}
func (T) TestE(t *testing.T) {}
type T struct{}
`
	got, err := fileTests([]byte(src), "p_test.go")
	if want := []string{"TestA", "Test", "FuzzB", "ExampleC"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("fileTests = %q, %v; want %q", got, err, want)
	}
}
