package sandbox

import (
	"strings"
	"testing"
)

func TestTenantLabelKey(t *testing.T) {
	for key, want := range map[string]string{
		"berth.conversation":          "berth.tenant",
		"berth.dev/conversation":      "berth.dev/tenant",
		"example.com/berth.chat":      "example.com/berth.tenant",
		"conversation":                "tenant",
		"acme.io/conversation-id":     "acme.io/tenant",
		"com.example.berth.convo-key": "com.example.berth.tenant",
	} {
		if got := TenantLabelKey(key); got != want {
			t.Errorf("TenantLabelKey(%q) = %q, want %q", key, got, want)
		}
	}
	for _, bad := range []string{"", "tenant", "berth.tenant", "berth.dev/tenant"} {
		if err := CheckLabelKey("test", bad); err == nil {
			t.Errorf("CheckLabelKey(%q) accepted a key whose tenant key is itself", bad)
		}
	}
	if err := CheckLabelKey("test", "berth.conversation"); err != nil {
		t.Errorf("CheckLabelKey(berth.conversation): %v", err)
	}
}

// TestOwnerMatches is the rule every provider applies to one container's
// or pod's labels: the conversation always, the tenant when asked for,
// both under the keys of one label key.
func TestOwnerMatches(t *testing.T) {
	const key = "berth.conversation"
	one := Owner{Conversation: "c1"}
	a, b := Owner{Conversation: "c1", Tenant: "a"}, Owner{Conversation: "c1", Tenant: "b"}
	tests := []struct {
		name   string
		labels map[string]string
		owner  Owner
		want   bool
	}{
		{"one tenant, conversation label", map[string]string{key: "c1"}, one, true},
		{"one tenant, a tenant label is not asked for", map[string]string{key: "c1", "berth.tenant": "a"}, one, true},
		{"one tenant, another conversation", map[string]string{key: "c2"}, one, false},
		{"tenant a, both labels", map[string]string{key: "c1", "berth.tenant": "a"}, a, true},
		{"tenant b, a's container", map[string]string{key: "c1", "berth.tenant": "a"}, b, false},
		{"tenant a, no tenant label", map[string]string{key: "c1"}, a, false},
		{"tenant a, tenant label alone", map[string]string{"berth.tenant": "a"}, a, false},
		{"tenant a, the pod keys' tenant", map[string]string{key: "c1", "berth.dev/tenant": "a"}, a, false},
		{"no conversation matches nothing", map[string]string{key: ""}, Owner{}, false},
	}
	for _, tt := range tests {
		if got := tt.owner.Matches(key, tt.labels); got != tt.want {
			t.Errorf("%s: %+v.Matches(%v) = %v, want %v", tt.name, tt.owner, tt.labels, got, tt.want)
		}
	}
	if got := a.Selector("berth.dev/conversation"); got != "berth.dev/conversation=c1,berth.dev/tenant=a" {
		t.Errorf("Selector = %q", got)
	}
	if got := one.Selector(key); strings.Contains(got, "tenant") {
		t.Errorf("Selector without a tenant = %q", got)
	}
}
