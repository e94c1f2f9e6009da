package sandbox

import (
	"fmt"
	"strings"
)

// PodScheme is the reference scheme of Kubernetes pods:
// "kube://NAMESPACE/POD[/CONTAINER]". Both ways berth reaches a pod serve
// it: through the API server (sandbox/kube) or, as a node agent, through
// the node's containerd (sandbox/containerd).
const PodScheme = "kube"

// PodRef names a container of a Kubernetes pod.
type PodRef struct {
	Namespace string
	Pod       string
	Container string // empty: the pod's default container
}

// String returns "NAMESPACE/POD" or "NAMESPACE/POD/CONTAINER", without the
// scheme.
func (r PodRef) String() string {
	s := r.Namespace + "/" + r.Pod
	if r.Container != "" {
		s += "/" + r.Container
	}
	return s
}

// ParsePodRef parses "NAMESPACE/POD[/CONTAINER]", with or without the
// "kube://" scheme. A malformed reference is an error wrapping ErrNotFound
// that shows the expected form.
func ParsePodRef(ref string) (PodRef, error) {
	rest := strings.TrimPrefix(ref, PodScheme+"://")
	parts := strings.Split(rest, "/")
	ok := (len(parts) == 2 || len(parts) == 3) && parts[0] != "" && parts[1] != ""
	if ok && len(parts) == 3 && parts[2] == "" {
		ok = false
	}
	if !ok {
		return PodRef{}, fmt.Errorf("kube: reference %q is not NAMESPACE/POD or NAMESPACE/POD/CONTAINER; use kube://default/my-pod or kube://default/my-pod/main: %w", ref, ErrNotFound)
	}
	r := PodRef{Namespace: parts[0], Pod: parts[1]}
	if len(parts) == 3 {
		r.Container = parts[2]
	}
	return r, nil
}
