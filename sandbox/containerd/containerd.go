// Package containerd is the containerd backend of package sandbox. It runs
// processes and serves files inside an existing container with a running
// task through berth's agent (sandbox/shim), which it places in the
// container and reaches over task exec streams (FIFOs). It never creates,
// starts, restarts or removes a container or a task.
//
// References are "containerd://NAMESPACE/ID": "moby" for containers that
// dockerd runs, "k8s.io" for the ones the CRI plugin runs for a kubelet.
// The client must run on the machine of the containerd daemon, as root: the
// FIFOs of exec streams are created on this machine and opened by the
// daemon's runtime shim.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// Scheme is the reference scheme of containerd sandboxes:
// "containerd://NAMESPACE/ID".
const Scheme = "containerd"

// DefaultLabelKey is the container label that names a conversation:
// berth.conversation=<conversation id>, as for the Docker backend.
const DefaultLabelKey = "berth.conversation"

// PodLabelKey is the pod label that names a conversation for containers
// the CRI plugin runs (namespace k8s.io), as the Kubernetes locator uses it.
const PodLabelKey = "berth.dev/conversation"

// CRI labels the kubelet puts on containers and pod sandboxes.
const (
	criKind          = "io.cri-containerd.kind" // "sandbox" or "container"
	criPodNamespace  = "io.kubernetes.pod.namespace"
	criPodName       = "io.kubernetes.pod.name"
	criPodUID        = "io.kubernetes.pod.uid"
	criContainerName = "io.kubernetes.container.name"
)

// EnvAddress names the environment variable that overrides the socket
// path, as the ctr tool reads it.
const EnvAddress = "CONTAINERD_ADDRESS"

// defaultAddresses are the sockets tried, in order, when neither
// [WithAddress] nor $CONTAINERD_ADDRESS names one: a standalone containerd,
// then the one dockerd runs itself.
var defaultAddresses = []string{"/run/containerd/containerd.sock", "/var/run/docker/containerd/containerd.sock"}

// callTimeout bounds the calls berth makes on its own behalf without a
// caller context (connecting, cleanup after an exec, explaining a failure).
const callTimeout = 10 * time.Second

// DefaultAddress returns the containerd socket berth uses without
// [WithAddress]: $CONTAINERD_ADDRESS, else the first socket of
// /run/containerd/containerd.sock and /var/run/docker/containerd/containerd.sock
// that exists, else "" when there is none.
func DefaultAddress() string {
	if a := os.Getenv(EnvAddress); a != "" {
		return a
	}
	for _, a := range defaultAddresses {
		if fi, err := os.Stat(a); err == nil && fi.Mode().Type() == os.ModeSocket {
			return a
		}
	}
	return ""
}

// Option configures a [Provider].
type Option func(*options)

type options struct {
	address  string
	labelKey string
	fifoDir  string
	agent    *shim.Binary
	fsReply  time.Duration
}

// WithAddress makes the provider talk to the containerd socket at address
// instead of [DefaultAddress].
func WithAddress(address string) Option { return func(o *options) { o.address = address } }

// WithLabelKey sets the container label [Provider.Locate] matches, instead
// of [DefaultLabelKey].
func WithLabelKey(key string) Option { return func(o *options) { o.labelKey = key } }

// WithFIFODir makes exec streams create their FIFOs in dir instead of
// containerd's default /run/containerd/fifo. The daemon's runtime shim
// opens them by path, so dir must name the same directory for berth and
// for containerd: a node agent in a pod mounts a host directory at the
// same path.
func WithFIFODir(dir string) Option { return func(o *options) { o.fifoDir = dir } }

// WithAgent makes sandboxes place bin as their agent instead of the one
// [shim.Locate] finds or builds.
func WithAgent(bin *shim.Binary) Option { return func(o *options) { o.agent = bin } }

// WithFSReplyTimeout sets how long a file server in the container may send
// nothing before a call gives it up (shim.Options.FSReplyTimeout); zero
// means shim.DefaultFSReplyTimeout.
func WithFSReplyTimeout(d time.Duration) Option { return func(o *options) { o.fsReply = d } }

// Provider opens sandboxes in containers with a running containerd task.
// It is safe for concurrent use.
type Provider struct {
	opts options
	cli  *client.Client // for Locate; each Sandbox has its own client
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns a provider for the containerd socket named by [WithAddress]
// or [DefaultAddress]. It does not wait for the daemon.
func New(opts ...Option) (*Provider, error) {
	p := &Provider{opts: options{labelKey: DefaultLabelKey}}
	for _, o := range opts {
		o(&p.opts)
	}
	if err := sandbox.CheckLabelKey("containerd: WithLabelKey", p.opts.labelKey); err != nil {
		return nil, err
	}
	if p.opts.address == "" {
		p.opts.address = DefaultAddress()
	}
	if p.opts.address == "" {
		return nil, fmt.Errorf("containerd: no containerd socket found at %s; start containerd or set $%s: %w",
			strings.Join(defaultAddresses, " or "), EnvAddress, sandbox.ErrUnsupported)
	}
	cli, err := p.newClient()
	if err != nil {
		return nil, err
	}
	p.cli = cli
	return p, nil
}

func (p *Provider) newClient() (*client.Client, error) {
	cli, err := client.New(p.opts.address, client.WithTimeout(callTimeout))
	if err != nil {
		return nil, fmt.Errorf("containerd: connect to %s: %w; check that containerd runs and berth may open its socket (root): %w: %w",
			p.opts.address, err, sandbox.ErrUnavailable, sandbox.ErrGone)
	}
	return cli, nil
}

// Scheme returns "containerd".
func (p *Provider) Scheme() string { return Scheme }

// Address returns the socket the provider talks to.
func (p *Provider) Address() string { return p.opts.address }

// Close releases the provider's client. Sandboxes it opened stay usable
// until they are closed themselves.
func (p *Provider) Close() error { return p.cli.Close() }

// parseRef splits "NAMESPACE/ID" (with or without the scheme).
func parseRef(ref string) (ns, id string, err error) {
	ref = strings.TrimPrefix(ref, Scheme+"://")
	ns, id, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || id == "" || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("containerd: reference %q is not NAMESPACE/ID; use containerd://moby/<container id> for dockerd's containers or containerd://k8s.io/<id> for Kubernetes: %w",
			ref, sandbox.ErrNotFound)
	}
	return ns, id, nil
}

// Open opens the container named by ref, "NAMESPACE/ID". It fails with an
// error wrapping sandbox.ErrNotFound when no such container exists and
// sandbox.ErrGone when it has no running task. ctx bounds the lookup.
func (p *Provider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	ns, id, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	return p.open(ctx, ns, id, Scheme+"://"+ns+"/"+id)
}

// open opens container id of namespace ns as a sandbox known as ref.
func (p *Provider) open(ctx context.Context, ns, id, ref string) (*Sandbox, error) {
	cli, err := p.newClient()
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ctr, err := cli.LoadContainer(namespaces.WithNamespace(lctx, ns), id)
	if err != nil {
		cli.Close()
		err = timeoutError(ctx, lctx, err)
		if errdefs.IsNotFound(err) {
			hint := ""
			if ns == "moby" {
				hint = " (dockerd removes a container from containerd when it stops, so a stopped docker container is not found either; docker ps -a tells)"
			}
			return nil, fmt.Errorf("containerd: no container %q exists in namespace %q%s; list them with ctr -n %s containers ls: %w", id, ns, hint, ns, sandbox.ErrNotFound)
		}
		return nil, daemonError(ns+"/"+short(id), err)
	}
	t := NewTransport(cli, ns, ctr)
	t.fifoDir = p.opts.fifoDir
	if err := t.check(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	return newSandbox(cli, t, p.opts, ref), nil
}

// candidate is a container Locate found.
type candidate struct {
	ns, id, why string
	labels      map[string]string
}

func (c candidate) ref() string { return c.ns + "/" + c.id }

// Locate returns the "NAMESPACE/ID" of the one container with a running
// task that belongs to owner: labelled <label key>=conversation (and,
// when owner.Tenant is set, <tenant key>=tenant; sandbox.TenantLabelKey)
// or berth.dev/conversation=conversation (and berth.dev/tenant=tenant)
// itself (any namespace), or, for containers the CRI plugin runs, in a
// pod whose sandbox carries one of these sets of labels. It fails with an
// error wrapping sandbox.ErrNotFound when none matches and names all
// candidates when several do. ctx bounds the listing.
func (p *Provider) Locate(ctx context.Context, owner sandbox.Owner) (string, error) {
	found, err := p.conversation(ctx, owner, nil)
	if err != nil {
		return "", err
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("containerd: no container with a running task is labelled %s or %s, nor is in a pod labelled so: %w",
			owner.Selector(p.opts.labelKey), owner.Selector(PodLabelKey), sandbox.ErrNotFound)
	case 1:
		return found[0].ref(), nil
	}
	var names []string
	for _, c := range found {
		names = append(names, fmt.Sprintf("%s (%s)", c.ref(), c.why))
	}
	slices.Sort(names)
	return "", fmt.Errorf("containerd: %d running containers are labelled %s: %s; stop all but one or open one with containerd://NAMESPACE/ID",
		len(names), owner.Selector(p.opts.labelKey), strings.Join(names, ", "))
}

// conversation lists the containers with a running task that belong to
// owner (see [Provider.Locate]), in the namespaces nss or, when nil, in
// every namespace.
func (p *Provider) conversation(ctx context.Context, owner sandbox.Owner, nss []string) ([]candidate, error) {
	if owner.Conversation == "" {
		return nil, fmt.Errorf("containerd: empty conversation id: %w", sandbox.ErrNotFound)
	}
	matches := func(labels map[string]string) bool { return p.belongs(owner, labels) }
	// Pods whose sandbox names the conversation, by pod key.
	pods := make(map[string]bool)
	return p.containers(ctx, nss, func(c containers.Container) (string, bool) {
		switch {
		case c.Labels[criKind] == "sandbox":
			if matches(c.Labels) {
				pods[podKey(c)] = true
			}
			return "", false
		case matches(c.Labels):
			return "labelled", true
		case len(pods) > 0 && pods[podKey(c)]:
			return fmt.Sprintf("container %s of pod %s/%s", c.Labels[criContainerName], c.Labels[criPodNamespace], c.Labels[criPodName]), true
		}
		return "", false
	})
}

// belongs reports whether labels, of a container or of a pod's sandbox,
// say it belongs to owner: the conversation and the tenant on the same
// object, under one pair of keys (the provider's label key and its tenant
// key, or berth.dev/conversation and berth.dev/tenant).
func (p *Provider) belongs(owner sandbox.Owner, labels map[string]string) bool {
	return owner.Matches(p.opts.labelKey, labels) || owner.Matches(PodLabelKey, labels)
}

// containers lists, namespace by namespace (nss, or every namespace when
// nil), the containers with a running task that keep selects, with the
// reason it gives. keep sees all of a namespace's pod sandboxes before its
// other containers.
func (p *Provider) containers(ctx context.Context, nss []string, keep func(containers.Container) (string, bool)) ([]candidate, error) {
	// A daemon that does not answer makes calls wait for the connection
	// until their context ends; callTimeout turns that into ErrGone.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if nss == nil {
		var err error
		if nss, err = p.cli.NamespaceService().List(ctx); err != nil {
			return nil, timeoutError(parent, ctx, daemonError("", err))
		}
		slices.Sort(nss)
	}
	var found []candidate
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		ctrs, err := p.cli.ContainerService().List(nctx)
		if err != nil {
			return nil, timeoutError(parent, ctx, daemonError("", err))
		}
		// Sandboxes first, so that keep knows the pods.
		slices.SortStableFunc(ctrs, func(a, b containers.Container) int {
			return boolOrder(a.Labels[criKind] != "sandbox", b.Labels[criKind] != "sandbox")
		})
		for _, c := range ctrs {
			why, ok := keep(c)
			if !ok || !p.running(nctx, c.ID) {
				continue
			}
			found = append(found, candidate{ns: ns, id: c.ID, why: why, labels: c.Labels})
		}
	}
	return found, nil
}

// boolOrder orders false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// podKey identifies the pod of a CRI container or sandbox.
func podKey(c containers.Container) string {
	if uid := c.Labels[criPodUID]; uid != "" {
		return uid
	}
	if c.Labels[criPodName] == "" {
		return ""
	}
	return c.Labels[criPodNamespace] + "/" + c.Labels[criPodName]
}

// running reports whether container id (in ctx's namespace) has a running
// task.
func (p *Provider) running(ctx context.Context, id string) bool {
	ctr, err := p.cli.LoadContainer(ctx, id)
	if err != nil {
		return false
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return false
	}
	st, err := task.Status(ctx)
	return err == nil && st.Status == client.Running
}

// timeoutError turns err into one wrapping sandbox.ErrGone when bounded,
// the context of a call derived from parent with callTimeout, timed out
// while parent did not: containerd did not answer.
func timeoutError(parent, bounded context.Context, err error) error {
	if errors.Is(err, sandbox.ErrGone) || parent.Err() != nil || bounded.Err() == nil {
		return err
	}
	return fmt.Errorf("containerd: no answer within %v (%v); check that containerd runs and its socket: %w: %w", callTimeout, err, sandbox.ErrUnavailable, sandbox.ErrGone)
}

// daemonError wraps a failure to talk to containerd; an unreachable daemon
// is ErrGone.
func daemonError(what string, err error) error {
	if what != "" {
		what = " about container " + what
	}
	if errdefs.IsUnavailable(err) {
		return fmt.Errorf("containerd: cannot reach containerd%s (%v); check that it runs and its socket: %w: %w", what, err, sandbox.ErrUnavailable, sandbox.ErrGone)
	}
	return fmt.Errorf("containerd: asking containerd%s: %w", what, err)
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Ping asks containerd for its version, for berth serve's readiness: an
// error says the daemon cannot be reached.
func (p *Provider) Ping(ctx context.Context) error {
	if _, err := p.cli.Version(ctx); err != nil {
		return fmt.Errorf("containerd: %s does not answer: %w", p.opts.address, err)
	}
	return nil
}
