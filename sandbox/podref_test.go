package sandbox

import (
	"errors"
	"testing"
)

func TestParsePodRef(t *testing.T) {
	tests := []struct {
		in   string
		want PodRef
		bad  bool
	}{
		{in: "kube://default/web", want: PodRef{Namespace: "default", Pod: "web"}},
		{in: "default/web/main", want: PodRef{Namespace: "default", Pod: "web", Container: "main"}},
		{in: "kube://ns/p/c", want: PodRef{Namespace: "ns", Pod: "p", Container: "c"}},
		{in: "kube://default", bad: true},
		{in: "kube:///web", bad: true},
		{in: "default/web/", bad: true},
		{in: "a/b/c/d", bad: true},
		{in: "", bad: true},
	}
	for _, tt := range tests {
		got, err := ParsePodRef(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("ParsePodRef(%q) = %v, %v; want an error wrapping ErrNotFound", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParsePodRef(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if s := got.String(); s != tt.in && "kube://"+s != tt.in {
			t.Errorf("%+v.String() = %q; want it to round-trip %q", got, s, tt.in)
		}
	}
}
