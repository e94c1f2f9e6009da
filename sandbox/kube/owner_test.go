package kube

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"berth.dev/berth/sandbox"
)

// TestOwnerSelector: the selector Locate lists pods with asks for the
// tenant label as well as the conversation label when the owner names a
// tenant, so another tenant's pod of the same conversation, or a pod
// without a tenant label, is not listed; without a tenant the
// conversation label alone selects, as with one tenant.
func TestOwnerSelector(t *testing.T) {
	pods := map[string]labels.Set{
		"a's":       {DefaultLabelKey: "c1", "berth.dev/tenant": "a"},
		"b's":       {DefaultLabelKey: "c1", "berth.dev/tenant": "b"},
		"no tenant": {DefaultLabelKey: "c1"},
		"other":     {DefaultLabelKey: "c2", "berth.dev/tenant": "a"},
	}
	tests := []struct {
		owner sandbox.Owner
		want  []string
	}{
		{sandbox.Owner{Conversation: "c1", Tenant: "a"}, []string{"a's"}},
		{sandbox.Owner{Conversation: "c1", Tenant: "b"}, []string{"b's"}},
		{sandbox.Owner{Conversation: "c1", Tenant: "c"}, nil},
		{sandbox.Owner{Conversation: "c1"}, []string{"a's", "b's", "no tenant"}},
	}
	for _, tt := range tests {
		s, err := ownerSelector(DefaultLabelKey, tt.owner)
		if err != nil {
			t.Fatalf("ownerSelector(%+v): %v", tt.owner, err)
		}
		sel, err := labels.Parse(s)
		if err != nil {
			t.Fatalf("selector %q does not parse: %v", s, err)
		}
		var got []string
		for _, name := range []string{"a's", "b's", "no tenant", "other"} {
			if sel.Matches(pods[name]) {
				got = append(got, name)
			}
		}
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%+v: selector %q selects %v, want %v", tt.owner, s, got, tt.want)
		}
	}
	if _, err := ownerSelector(DefaultLabelKey, sandbox.Owner{Conversation: "c1", Tenant: "has spaces"}); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "berth.dev/tenant") {
		t.Errorf("a tenant no label can hold: %v; want ErrNotFound naming berth.dev/tenant", err)
	}
}
