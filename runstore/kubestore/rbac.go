package kubestore

import rbacv1 "k8s.io/api/rbac/v1"

// Rules returns the permissions the store uses, granted by a Role in the
// namespace it keeps its objects in (berth's own): the run records'
// Secrets (read one, list them by label at start, create, update,
// delete) and the runs' Leases (read, create, update, delete; it never
// lists them). No watch, no patch, nothing cluster-wide. k8s/rbac/store
// grants exactly these; k8s/manifests_test.go holds them equal.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete", "get", "list", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "delete", "get", "update"}},
	}
}
