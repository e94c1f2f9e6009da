package sealed

import (
	"bytes"
	"strings"
	"testing"
)

type state struct {
	N    int    `json:"n"`
	Name string `json:"name"`
}

func TestRoundTripAndRefusals(t *testing.T) {
	good, err := Marshal("test.v1", state{N: 7, Name: "seven"})
	if err != nil {
		t.Fatal(err)
	}
	var got state
	if err := Unmarshal(good, "test.v1", &got); err != nil || got != (state{7, "seven"}) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name, want string
		data       []byte
		format     string
	}{
		{"garbage", "not readable", []byte("\x00\x01garbage"), "test.v1"},
		{"cut", "not readable", good[:len(good)/2], "test.v1"},
		{"other format", `format is "test.v1"`, good, "test.v2"},
		{"damaged", "damaged", bytes.Replace(good, []byte("seven"), []byte("eight"), 1), "test.v1"},
		{"state of another shape", "state is not readable", mustMarshal(t, "test.v1", []int{1}), "test.v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st state
			err := Unmarshal(tc.data, tc.format, &st)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want one saying %q", err, tc.want)
			}
		})
	}
}

func mustMarshal(t *testing.T, format string, v any) []byte {
	t.Helper()
	b, err := Marshal(format, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
