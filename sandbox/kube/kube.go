package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// DefaultLabelKey is the pod label that names a conversation:
// berth.dev/conversation=<conversation id>, as the containerd backend reads
// it for pods in node-agent mode.
const DefaultLabelKey = "berth.dev/conversation"

// DefaultContainerAnnotation names the container a reference without one
// opens, as for kubectl exec.
const DefaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// callTimeout bounds each API call berth makes, so that an API server that
// does not answer is reported as sandbox.ErrGone instead of hanging.
const callTimeout = 15 * time.Second

// Option configures a [Provider].
type Option func(*options)

type options struct {
	config     *rest.Config
	kubeconfig string
	namespaces []string
	labelKey   string
	agent      *shim.Binary
	fsReply    time.Duration
}

// WithRESTConfig makes the provider use cfg (copied) to reach the API
// server, instead of a kubeconfig or the in-cluster account.
func WithRESTConfig(cfg *rest.Config) Option { return func(o *options) { o.config = cfg } }

// WithKubeconfig makes the provider read the cluster and credentials from
// the kubeconfig file at path (its current context).
func WithKubeconfig(path string) Option { return func(o *options) { o.kubeconfig = path } }

// WithNamespaces limits [Provider.Locate] to pods in these namespaces;
// without it Locate looks in all namespaces, which needs a ClusterRole.
func WithNamespaces(ns ...string) Option {
	return func(o *options) { o.namespaces = append(o.namespaces, ns...) }
}

// WithLabelKey sets the pod label [Provider.Locate] matches, instead of
// [DefaultLabelKey].
func WithLabelKey(key string) Option { return func(o *options) { o.labelKey = key } }

// WithAgent makes sandboxes place bin as their agent instead of the one
// [shim.Locate] finds or builds.
func WithAgent(bin *shim.Binary) Option { return func(o *options) { o.agent = bin } }

// WithFSReplyTimeout sets how long a file server in the pod may send
// nothing before a call gives it up (shim.Options.FSReplyTimeout); zero
// means shim.DefaultFSReplyTimeout.
func WithFSReplyTimeout(d time.Duration) Option { return func(o *options) { o.fsReply = d } }

// Provider opens sandboxes in containers of running pods through the API
// server. It is safe for concurrent use.
type Provider struct {
	opts   options
	cfg    *rest.Config
	source string // where cfg came from, for error messages
	core   *podClient
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns a provider for the cluster named by the options or found as
// the package documentation describes. It does not contact the API server.
// Without any configuration it fails with an error wrapping
// sandbox.ErrUnsupported.
func New(opts ...Option) (*Provider, error) {
	p := &Provider{opts: options{labelKey: DefaultLabelKey}}
	for _, o := range opts {
		o(&p.opts)
	}
	if err := sandbox.CheckLabelKey("kube: WithLabelKey", p.opts.labelKey); err != nil {
		return nil, err
	}
	if errs := validation.IsQualifiedName(p.opts.labelKey); len(errs) > 0 {
		return nil, fmt.Errorf("kube: %q is not a valid label key (%s); pass one such as berth.dev/conversation to WithLabelKey", p.opts.labelKey, strings.Join(errs, "; "))
	}
	for _, ns := range p.opts.namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("kube: %q is not a namespace name (%s); check WithNamespaces", ns, strings.Join(errs, "; "))
		}
	}
	cfg, source, err := loadConfig(&p.opts)
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// client-go's default (5 per second) would hold back every Check
		// and Open of a busy berth.
		cfg.QPS, cfg.Burst = 50, 100
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "berth"
	}
	core, err := newPodClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: configure the client for %s (from %s): %w", cfg.Host, source, err)
	}
	p.cfg, p.source, p.core = cfg, source, core
	return p, nil
}

// loadConfig finds the cluster: the options, $KUBECONFIG, the in-cluster
// account, ~/.kube/config.
func loadConfig(o *options) (*rest.Config, string, error) {
	if o.config != nil {
		return o.config, "WithRESTConfig", nil
	}
	if o.kubeconfig != "" {
		return kubeconfig(o.kubeconfig, "kubeconfig "+o.kubeconfig)
	}
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		return kubeconfig("", "$KUBECONFIG ("+env+")")
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, "the pod's service account (in-cluster)", nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, "", fmt.Errorf("kube: berth runs in a pod ($KUBERNETES_SERVICE_HOST is set) but cannot use its service account: %v; mount its token (automountServiceAccountToken) or set $KUBECONFIG: %w", err, sandbox.ErrUnsupported)
	}
	return kubeconfig("", homeKubeconfig)
}

// homeKubeconfig is the kubeconfig read when $KUBECONFIG is unset and
// berth does not run in a pod; a variable for tests.
var homeKubeconfig = clientcmd.RecommendedHomeFile

// kubeconfig loads the current context of the kubeconfig at path, or of
// the default loading rules when path is empty.
func kubeconfig(path, source string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	if path == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		rules.Precedence = []string{homeKubeconfig}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", fmt.Errorf("kube: no Kubernetes cluster is configured: %s is missing or has no current context, and berth does not run in a pod; set $KUBECONFIG to a kubeconfig file with a current context (kubectl config use-context), or run berth in a pod with a service account: %w",
				source, sandbox.ErrUnsupported)
		}
		return nil, "", fmt.Errorf("kube: load %s: %w; fix the file or point $KUBECONFIG at another", source, err)
	}
	return cfg, source, nil
}

// Scheme returns "kube".
func (p *Provider) Scheme() string { return sandbox.PodScheme }

// Host returns the API server the provider talks to.
func (p *Provider) Host() string { return p.cfg.Host }

// Open opens the container named by ref, "NAMESPACE/POD[/CONTAINER]" with
// or without "kube://". Without a container it opens the one the pod's
// kubectl.kubernetes.io/default-container annotation names, else the
// pod's only container. It fails with an error wrapping
// sandbox.ErrNotFound when the pod or container does not exist, and
// sandbox.ErrGone when the pod is not running, is being deleted, or the
// container does not run. ctx bounds the lookup.
func (p *Provider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	r, err := sandbox.ParsePodRef(ref)
	if err != nil {
		return nil, err
	}
	pod, err := p.getPod(ctx, r.Namespace, r.Pod)
	if err != nil {
		return nil, err
	}
	if r.Container == "" {
		if r.Container, err = defaultContainer(pod); err != nil {
			return nil, err
		}
	}
	id, err := containerState(pod, r.Container)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg: p.cfg, core: p.core,
		ns: r.Namespace, pod: r.Pod, container: r.Container,
		uid: pod.UID, containerID: id,
	}
	return newSandbox(t, p.opts), nil
}

// getPod gets a pod; a missing one is sandbox.ErrNotFound.
func (p *Provider) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod, err := getPod(ctx, p.core, ns, name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kube: no pod %q exists in namespace %q; list them with kubectl get pods -n %s: %w", name, ns, ns, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, apiError(p.cfg.Host, "get pod "+ns+"/"+name, ns, err)
	}
	return pod, nil
}

// getPod gets a pod within callTimeout.
func getPod(ctx context.Context, core *podClient, ns, name string) (*corev1.Pod, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pod, err := core.get(cctx, ns, name)
	return pod, timeoutError(ctx, cctx, err)
}

// Locate returns "NAMESPACE/POD/CONTAINER" of the one running pod labelled
// <label key>=owner.Conversation (and <tenant key>=owner.Tenant when it is
// set; sandbox.TenantLabelKey), in the namespaces of [WithNamespaces] or
// all namespaces. The container is the pod's default one. It fails with
// an error wrapping sandbox.ErrNotFound when no pod matches, and names
// all candidates when several do. ctx bounds the listing.
func (p *Provider) Locate(ctx context.Context, owner sandbox.Owner) (string, error) {
	if owner.Conversation == "" {
		return "", fmt.Errorf("kube: empty conversation id: %w", sandbox.ErrNotFound)
	}
	selector, err := ownerSelector(p.opts.labelKey, owner)
	if err != nil {
		return "", err
	}
	nss := p.opts.namespaces
	where := "in namespace " + strings.Join(nss, ", ")
	if len(nss) == 0 {
		nss = []string{metav1.NamespaceAll}
		where = "in any namespace"
	}
	var found, notRunning []string
	var problems []string
	for _, ns := range nss {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		list, err := p.core.list(cctx, ns, selector)
		err = timeoutError(ctx, cctx, err)
		cancel()
		if err != nil {
			return "", apiError(p.cfg.Host, "list pods labelled "+selector+" "+where, ns, err)
		}
		for i := range list.Items {
			pod := &list.Items[i]
			name := pod.Namespace + "/" + pod.Name
			c, err := defaultContainer(pod)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if _, err := containerState(pod, c); err != nil {
				notRunning = append(notRunning, name)
				continue
			}
			found = append(found, name+"/"+c)
		}
	}
	slices.Sort(found)
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return "", fmt.Errorf("kube: %d running pods are labelled %s %s: %s; delete all but one, or open one with kube://NAMESPACE/POD/CONTAINER",
			len(found), selector, where, strings.Join(found, ", "))
	case len(problems) > 0:
		return "", fmt.Errorf("kube: the pods labelled %s %s have no default container: %s: %w", selector, where, strings.Join(problems, "; "), sandbox.ErrNotFound)
	}
	msg := fmt.Sprintf("kube: no running pod is labelled %s %s", selector, where)
	if len(notRunning) > 0 {
		slices.Sort(notRunning)
		msg += fmt.Sprintf(" (%s carry the label but do not run; kubectl describe pod tells why)", strings.Join(notRunning, ", "))
	}
	return "", fmt.Errorf("%s: %w", msg, sandbox.ErrNotFound)
}

// ownerSelector returns the label selector of the pods that belong to
// owner under the conversation label key key: the conversation label and,
// when owner.Tenant is set, the tenant label (sandbox.TenantLabelKey). A
// value no label can hold is an error wrapping sandbox.ErrNotFound.
func ownerSelector(key string, owner sandbox.Owner) (string, error) {
	set := labels.Set{}
	for _, l := range [][2]string{{key, owner.Conversation}, {sandbox.TenantLabelKey(key), owner.Tenant}} {
		key, value := l[0], l[1]
		if value == "" {
			continue // no tenant asked for
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return "", fmt.Errorf("kube: %q cannot be the value of the pod label %s (%s), so no pod can carry it: %w",
				value, key, strings.Join(errs, "; "), sandbox.ErrNotFound)
		}
		set[key] = value
	}
	return labels.SelectorFromSet(set).String(), nil
}

// defaultContainer returns the container a reference without one means.
func defaultContainer(pod *corev1.Pod) (string, error) {
	name := pod.Namespace + "/" + pod.Name
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	if c := pod.Annotations[DefaultContainerAnnotation]; c != "" {
		if !slices.Contains(names, c) && len(names) > 0 {
			return "", fmt.Errorf("kube: pod %s names container %q in its %s annotation, but its containers are %s; fix the annotation or open kube://%s/%s: %w",
				name, c, DefaultContainerAnnotation, strings.Join(names, ", "), name, names[0], sandbox.ErrNotFound)
		}
		return c, nil
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("kube: pod %s has no containers: %w", name, sandbox.ErrNotFound)
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("kube: pod %s has %d containers (%s) and no %s annotation; name one, as in kube://%s/%s",
		name, len(names), strings.Join(names, ", "), DefaultContainerAnnotation, name, names[0])
}

// containerState returns the runtime id of container c of pod when the
// pod runs, is not being deleted and c runs; else an error wrapping
// sandbox.ErrGone, or sandbox.ErrNotFound when the pod has no such
// container.
func containerState(pod *corev1.Pod, c string) (string, error) {
	name := pod.Namespace + "/" + pod.Name
	var names []string
	known := false
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, ct := range cs {
			names = append(names, ct.Name)
			known = known || ct.Name == c
		}
	}
	for _, ct := range pod.Spec.EphemeralContainers {
		names = append(names, ct.Name)
		known = known || ct.Name == c
	}
	if !known && len(names) > 0 {
		return "", fmt.Errorf("kube: pod %s has no container %q; its containers are %s, so open kube://%s/%s: %w",
			name, c, strings.Join(names, ", "), name, names[0], sandbox.ErrNotFound)
	}
	if pod.DeletionTimestamp != nil {
		return "", fmt.Errorf("kube: pod %s is being deleted; open the conversation's new pod: %w", name, sandbox.ErrGone)
	}
	if pod.Status.Phase != corev1.PodRunning {
		what := string(pod.Status.Phase)
		if pod.Status.Reason != "" {
			what += ", " + pod.Status.Reason
		}
		hint := "berth does not start pods, so use a running one"
		if pod.Status.Phase == corev1.PodPending {
			hint = "wait until it runs (kubectl wait --for=condition=Ready pod/" + pod.Name + " -n " + pod.Namespace + ") or see kubectl describe pod"
		}
		return "", fmt.Errorf("kube: pod %s is not running (%s); %s: %w", name, what, hint, sandbox.ErrGone)
	}
	for _, sts := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, st := range sts {
			if st.Name != c {
				continue
			}
			switch s := st.State; {
			case s.Running != nil:
				return st.ContainerID, nil
			case s.Waiting != nil:
				return "", fmt.Errorf("kube: container %s of pod %s is waiting (%s: %s), not running; kubectl describe pod tells why: %w",
					c, name, s.Waiting.Reason, s.Waiting.Message, sandbox.ErrGone)
			case s.Terminated != nil:
				return "", fmt.Errorf("kube: container %s of pod %s has terminated (%s, exit code %d); berth does not restart containers: %w",
					c, name, s.Terminated.Reason, s.Terminated.ExitCode, sandbox.ErrGone)
			}
		}
	}
	return "", fmt.Errorf("kube: container %s of pod %s has not started: %w", c, name, sandbox.ErrGone)
}

// timeoutError turns err into one wrapping sandbox.ErrGone when bounded,
// the context of a call derived from parent with callTimeout, timed out
// while parent did not: the API server did not answer.
func timeoutError(parent, bounded context.Context, err error) error {
	if err == nil || errors.Is(err, sandbox.ErrGone) || parent.Err() != nil || bounded.Err() == nil {
		return err
	}
	return fmt.Errorf("no answer within %v (%v): %w", callTimeout, err, errUnreachable)
}

// errUnreachable marks an API server that did not answer.
var errUnreachable = errors.New("the API server does not answer")

// unreachable reports whether err means the API server (or the kubelet
// behind it) could not be reached or broke the connection.
func unreachable(err error) bool {
	if errors.Is(err, errUnreachable) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}

// apiError wraps the failure of an API call: an unreachable API server is
// sandbox.ErrGone and ErrUnavailable (it may come back); a refusal says which permissions berth needs.
func apiError(host, what, ns string, err error) error {
	switch {
	case unreachable(err):
		return fmt.Errorf("kube: %s: cannot reach the API server at %s (%v); check that the cluster runs and that the kubeconfig or in-cluster account points at it: %w: %w",
			what, host, err, sandbox.ErrUnavailable, sandbox.ErrGone)
	case apierrors.IsForbidden(err):
		where := "namespace " + ns
		if ns == "" {
			where = "all namespaces (a ClusterRole), or limit berth to some with WithNamespaces"
		}
		return fmt.Errorf("kube: %s: %w; grant berth's account the rules of kube.Rules() (pods get and list, pods/exec create) in %s",
			what, err, where)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("kube: %s: the API server rejected berth's credentials: %w; refresh the kubeconfig's token or certificate", what, err)
	}
	return fmt.Errorf("kube: %s: %w", what, err)
}

// ClientConfig finds the cluster as New does without options ($KUBECONFIG,
// the in-cluster account, ~/.kube/config), for other clients of the same
// API server (berth's run store). It returns where the config came from.
func ClientConfig() (*rest.Config, string, error) {
	return loadConfig(&options{})
}

// Ping asks the API server for its version (GET /version, which every
// authenticated client may read), for berth serve's readiness: an error
// says the API server cannot be reached with berth's credentials.
func (p *Provider) Ping(ctx context.Context) error {
	if err := p.core.rc.Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("kube: the API server %s (from %s) does not answer: %w", p.cfg.Host, p.source, err)
	}
	return nil
}
