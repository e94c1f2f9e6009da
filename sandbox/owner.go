package sandbox

import (
	"fmt"
	"strings"
)

// Owner is whose sandbox a run may use, as the sandbox's labels say: the
// run's conversation and, on a berth that serves several tenants, the
// run's tenant. [Provider.Locate] finds the one running sandbox that
// carries all of it, so the tenant check is the same for "auto" and for
// a reference named explicitly (the controller compares the two).
type Owner struct {
	// Conversation is the conversation id, the value of the conversation
	// label (berth.conversation, berth.dev/conversation for pods).
	Conversation string
	// Tenant, when not empty, must be the value of the tenant label as
	// well ([TenantLabelKey] of the conversation label's key, on the same
	// container or pod). Empty asks for no tenant label: a berth with one
	// tenant.
	Tenant string
}

// TenantLabelKey returns the tenant label key that goes with the
// conversation label key key: key with its last segment (after the last
// "." or "/") replaced by "tenant". berth.conversation gives berth.tenant,
// berth.dev/conversation gives berth.dev/tenant, example.com/conv gives
// example.com/tenant.
func TenantLabelKey(key string) string {
	i := strings.LastIndexAny(key, "./")
	return key[:i+1] + "tenant"
}

// CheckLabelKey refuses a conversation label key whose tenant label key
// ([TenantLabelKey]) would be the same key; what names the caller, for
// the message.
func CheckLabelKey(what, key string) error {
	if key == "" {
		return fmt.Errorf("%s: the label key is empty; pass a key such as berth.conversation", what)
	}
	if TenantLabelKey(key) == key {
		return fmt.Errorf("%s: the label key %q ends in \"tenant\", which is the segment of the tenant label that goes with it; pass a key such as berth.conversation (its tenant label is berth.tenant)", what, key)
	}
	return nil
}

// Selector returns the labels o asks for under the conversation label
// key key, "KEY=VALUE" joined by commas: "berth.conversation=c-42" or
// "berth.conversation=c-42,berth.tenant=acme". It is what messages show
// and, for Docker and Kubernetes, the selector's syntax.
func (o Owner) Selector(key string) string {
	s := key + "=" + o.Conversation
	if o.Tenant != "" {
		s += "," + TenantLabelKey(key) + "=" + o.Tenant
	}
	return s
}

// Matches reports whether labels, the labels of one container or pod,
// carry o under the conversation label key key.
func (o Owner) Matches(key string, labels map[string]string) bool {
	if o.Conversation == "" || labels[key] != o.Conversation {
		return false
	}
	return o.Tenant == "" || labels[TenantLabelKey(key)] == o.Tenant
}
