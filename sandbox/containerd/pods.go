package containerd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"

	"berth.dev/berth/sandbox"
)

// CRINamespace is the containerd namespace in which the CRI plugin runs a
// kubelet's pods.
const CRINamespace = "k8s.io"

// Pods serves "kube://NAMESPACE/POD[/CONTAINER]" references through the
// node's containerd instead of the API server: berth as a node agent
// reaches the pods of its own node by the labels the kubelet's CRI puts on
// their containers. It sees only pods on that node. It is a
// [sandbox.Provider] with scheme "kube"; it uses its Provider's client and
// options.
type Pods struct {
	p    *Provider
	node string // for messages; may be empty
}

var _ sandbox.Provider = (*Pods)(nil)

// Pods returns the provider of kube:// references on this containerd.
// node names the node in error messages, when known.
func (p *Provider) Pods(node string) *Pods { return &Pods{p: p, node: node} }

// Scheme returns "kube".
func (q *Pods) Scheme() string { return sandbox.PodScheme }

// onNode phrases where q looks, for messages.
func (q *Pods) onNode() string {
	if q.node != "" {
		return "on node " + q.node
	}
	return "on this node"
}

// Open opens the container of a pod on this node. ref is
// "NAMESPACE/POD[/CONTAINER]"; without CONTAINER the pod must have one
// running container. The sandbox's Ref is the full kube:// reference.
func (q *Pods) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	r, err := sandbox.ParsePodRef(ref)
	if err != nil {
		return nil, err
	}
	found, err := q.p.containers(ctx, []string{CRINamespace}, func(c containers.Container) (string, bool) {
		return "", c.Labels[criKind] != "sandbox" &&
			c.Labels[criPodNamespace] == r.Namespace && c.Labels[criPodName] == r.Pod
	})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("containerd: no running pod %s/%s %s (berth runs as a node agent and reaches only the pods of its own node, through containerd namespace %s); check kubectl get pod -n %s %s -o wide, then call the berth of the pod's node or one in API mode: %w",
			r.Namespace, r.Pod, q.onNode(), CRINamespace, r.Namespace, r.Pod, sandbox.ErrNotFound)
	}
	c, err := pick(r, found)
	if err != nil {
		return nil, err
	}
	r.Container = c.labels[criContainerName]
	sb, err := q.p.open(ctx, c.ns, c.id, sandbox.PodScheme+"://"+r.String())
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// pick chooses the container ref names among the running containers of
// its pod.
func pick(r sandbox.PodRef, found []candidate) (candidate, error) {
	var names []string
	for _, c := range found {
		name := c.labels[criContainerName]
		if r.Container != "" && name == r.Container {
			return c, nil
		}
		names = append(names, name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if r.Container == "" && len(names) == 1 {
		return found[0], nil
	}
	if r.Container == "" {
		return candidate{}, fmt.Errorf("containerd: pod %s/%s runs %d containers (%s); name one: kube://%s/%s/%s: %w",
			r.Namespace, r.Pod, len(names), strings.Join(names, ", "), r.Namespace, r.Pod, names[0], sandbox.ErrNotFound)
	}
	return candidate{}, fmt.Errorf("containerd: pod %s/%s has no running container %q; its running containers: %s: %w",
		r.Namespace, r.Pod, r.Container, strings.Join(names, ", "), sandbox.ErrNotFound)
}

// Locate returns "NAMESPACE/POD/CONTAINER" of the one running container,
// on this node, of a pod labelled berth.dev/conversation=conversation (and
// berth.dev/tenant=tenant when owner.Tenant is set), or with the
// provider's label keys, or a container labelled so itself.
func (q *Pods) Locate(ctx context.Context, owner sandbox.Owner) (string, error) {
	found, err := q.p.conversation(ctx, owner, []string{CRINamespace})
	if err != nil {
		return "", err
	}
	var refs []string
	for _, c := range found {
		refs = append(refs, c.labels[criPodNamespace]+"/"+c.labels[criPodName]+"/"+c.labels[criContainerName])
	}
	slices.Sort(refs)
	refs = slices.Compact(refs)
	switch len(refs) {
	case 0:
		return "", fmt.Errorf("containerd: no running pod %s is labelled %s (berth runs as a node agent and sees only its own node's pods); label the conversation's pod so, or call the berth of the node it runs on: %w",
			q.onNode(), owner.Selector(PodLabelKey), sandbox.ErrNotFound)
	case 1:
		return refs[0], nil
	}
	return "", fmt.Errorf("containerd: %d running containers %s are labelled %s: %s; give the pod one container or open one with kube://NAMESPACE/POD/CONTAINER",
		len(refs), q.onNode(), owner.Selector(PodLabelKey), strings.Join(refs, ", "))
}

// Ping asks the node's containerd whether it answers ([Provider.Ping]).
func (q *Pods) Ping(ctx context.Context) error { return q.p.Ping(ctx) }
