package kube

import rbacv1 "k8s.io/api/rbac/v1"

// Rules returns the permissions the backend uses, granted by a Role in each
// namespace whose pods berth serves (API mode): reading pods to open and
// locate them, and opening exec sessions (get for a WebSocket exec, create
// for SPDY), through which it runs every process, serves files and relays
// Dial (berth's agent in the pod relays connections, so it needs no
// port-forward). k8s/ grants exactly these; its test holds them equal.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		// A WebSocket exec is a GET (verb get); SPDY, the fallback, a POST
		// (verb create). Kubernetes 1.37 checks get for WebSocket execs.
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
	}
}
