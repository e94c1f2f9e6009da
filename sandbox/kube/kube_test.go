package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
	"berth.dev/berth/sandbox/shim"
	"berth.dev/berth/tests/kubetest"
)

// podWait bounds waiting for a test pod to run (scheduling, starting the
// container from an imported image), only so that a broken cluster fails
// the test instead of hanging it.
const podWait = 3 * time.Minute

// testImage is the image of the test pods: $BERTH_KUBE_IMAGE_PREFIX (else
// docker.io/library/, how images imported from docker are named in the
// node's containerd) + berth-test-python:latest. python3 lets the Dial
// subtests of the conformance suite run.
func testImage() string {
	prefix, ok := os.LookupEnv("BERTH_KUBE_IMAGE_PREFIX")
	if !ok {
		prefix = "docker.io/library/"
	}
	return prefix + "berth-test-python:latest"
}

// cluster is the real cluster of $KUBECONFIG, with an admin client that
// makes and removes the test objects.
type cluster struct {
	cfg *rest.Config
	cs  *kubernetes.Clientset
}

// need returns the cluster, or fails (CI=true) or skips the test when
// $KUBECONFIG names none that answers.
func need(t *testing.T) *cluster {
	t.Helper()
	cfg, cs := kubetest.Need(t)
	return &cluster{cfg: cfg, cs: cs}
}

func randomID() string {
	var b [5]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// namespace makes a namespace for the test, removed at cleanup, with a
// default service account (a cluster without a controller-manager makes
// none, and pods cannot be created without it).
func (c *cluster) namespace(t *testing.T) string {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	ns := "berth-kube-" + randomID()
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the default service account of %s: %v", ns, err)
	}
	return ns
}

// podSpec describes a test pod.
type podSpec struct {
	labels, annotations map[string]string
	containers          []string // names; default "main"
	image               string   // default testImage()
	noWait              bool     // do not wait for it to run
}

// pod makes a pod running sleep infinity in every container, removed at
// cleanup, and waits until all its containers run.
func (c *cluster) pod(t *testing.T, ns, name string, spec podSpec) *corev1.Pod {
	t.Helper()
	if len(spec.containers) == 0 {
		spec.containers = []string{"main"}
	}
	if spec.image == "" {
		spec.image = testImage()
	}
	no := false
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: spec.labels, Annotations: spec.annotations},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyNever,
		},
	}
	for _, cn := range spec.containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: cn, Image: spec.image, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sleep", "infinity"},
		})
	}
	ctx := ctxT(t, podWait)
	if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { c.deletePod(ns, name) })
	if spec.noWait {
		return p
	}
	for {
		got, err := c.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			running := got.Status.Phase == corev1.PodRunning
			for _, cs := range got.Status.ContainerStatuses {
				running = running && cs.State.Running != nil
			}
			if running && len(got.Status.ContainerStatuses) == len(spec.containers) {
				return got
			}
			if got.Status.Phase == corev1.PodFailed || got.Status.Phase == corev1.PodSucceeded {
				t.Fatalf("pod %s/%s ended: %+v", ns, name, got.Status)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s did not run within %v (image %s; set $BERTH_KUBE_IMAGE_PREFIX if the node names it otherwise): %v, %+v", ns, name, podWait, spec.image, err, got.Status)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *cluster) deletePod(ns, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zero := int64(0)
	c.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// agent locates the agent once for all tests.
func agent(t *testing.T) *shim.Binary {
	t.Helper()
	bin, err := shim.Locate(ctxT(t, 5*time.Minute), "")
	if err != nil {
		t.Fatalf("locate the agent: %v", err)
	}
	return bin
}

func newProvider(t *testing.T, opts ...Option) *Provider {
	t.Helper()
	p, err := New(append([]Option{WithAgent(agent(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs args in sb and returns its stdout.
func run(t *testing.T, sb sandbox.Sandbox, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	proc, err := sb.Start(ctxT(t, time.Minute), &sandbox.Cmd{Args: args, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("Start(%q): %v", args, err)
	}
	st, err := proc.Wait()
	if err != nil || !st.Success() {
		t.Fatalf("%q: %v, %v (stderr %q)", args, st, err, errOut.String())
	}
	return out.String()
}

func TestConformance(t *testing.T) {
	c := need(t)
	ns := c.namespace(t)
	c.pod(t, ns, "conformance", podSpec{})
	p := newProvider(t)
	ref := "kube://" + ns + "/conformance"
	scratch := "/tmp/berth-conformance-" + randomID()
	sb, err := p.Open(ctxT(t, time.Minute), ref)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, "mkdir", "-p", scratch)
	sb.Close()
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		sb, err := p.Open(context.Background(), ref)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return sb, sandboxtest.Config{Scratch: scratch}
	})
}

func TestOpen(t *testing.T) {
	c := need(t)
	ns := c.namespace(t)
	p := newProvider(t)
	ctx := ctxT(t, 5*time.Minute)
	c.pod(t, ns, "single", podSpec{})
	c.pod(t, ns, "multi", podSpec{containers: []string{"one", "two"}})
	c.pod(t, ns, "annotated", podSpec{containers: []string{"one", "two"}, annotations: map[string]string{DefaultContainerAnnotation: "two"}})
	c.pod(t, ns, "pending", podSpec{image: "docker.io/library/berth-no-such-image:" + randomID(), noWait: true})

	opens := []struct{ ref, want string }{
		{"kube://" + ns + "/single", "kube://" + ns + "/single/main"},
		{ns + "/single/main", "kube://" + ns + "/single/main"},
		{"kube://" + ns + "/multi/two", "kube://" + ns + "/multi/two"},
		{"kube://" + ns + "/annotated", "kube://" + ns + "/annotated/two"},
	}
	for _, o := range opens {
		sb, err := p.Open(ctx, o.ref)
		if err != nil {
			t.Errorf("Open(%q): %v", o.ref, err)
			continue
		}
		if sb.Ref() != o.want {
			t.Errorf("Open(%q).Ref() = %q, want %q", o.ref, sb.Ref(), o.want)
		}
		if err := sb.Check(ctx); err != nil {
			t.Errorf("Check on %s: %v", o.ref, err)
		}
		name := o.want[strings.LastIndex(o.want, "/")+1:]
		var out bytes.Buffer
		proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo $HOSTNAME"}, Stdout: &out})
		if err == nil {
			_, err = proc.Wait()
		}
		if err != nil {
			t.Errorf("run in %s (%s): %v", o.ref, name, err)
		}
		if _, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"id"}, User: "1000"}); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("Start as another user = %v; want ErrUnsupported", err)
		}
		sb.Close()
	}

	tests := []struct {
		name  string
		ref   string
		class error
		says  []string
	}{
		{"missing pod", ns + "/berth-no-such-pod", sandbox.ErrNotFound, []string{"no pod", "berth-no-such-pod", "kubectl get pods"}},
		{"missing namespace", "berth-no-such-ns-" + randomID() + "/pod", sandbox.ErrNotFound, []string{"no pod"}},
		{"missing container", ns + "/single/nope", sandbox.ErrNotFound, []string{`no container "nope"`, "main"}},
		{"several containers", "kube://" + ns + "/multi", nil, []string{"one, two", "kube://" + ns + "/multi/one", DefaultContainerAnnotation}},
		{"pending", ns + "/pending", sandbox.ErrGone, []string{"not running"}},
		{"malformed", "kube://" + ns, sandbox.ErrNotFound, []string{"NAMESPACE/POD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := p.Open(ctx, tt.ref)
			if err == nil {
				sb.Close()
				t.Fatal("Open succeeded")
			}
			if tt.class != nil && !errors.Is(err, tt.class) {
				t.Errorf("Open = %v; want %v", err, tt.class)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Open = %v; want it to say %q", err, s)
				}
			}
		})
	}
}

func TestLocate(t *testing.T) {
	c := need(t)
	ns := c.namespace(t)
	one, two := "one-"+randomID(), "two-"+randomID()
	c.pod(t, ns, "one", podSpec{labels: map[string]string{DefaultLabelKey: one}})
	c.pod(t, ns, "two-a", podSpec{labels: map[string]string{DefaultLabelKey: two}})
	c.pod(t, ns, "two-b", podSpec{labels: map[string]string{DefaultLabelKey: two}})
	c.pod(t, ns, "other-key", podSpec{labels: map[string]string{"example.com/conv": one}})
	ctx := ctxT(t, time.Minute)

	for name, p := range map[string]*Provider{
		"all namespaces": newProvider(t),
		"one namespace":  newProvider(t, WithNamespaces(ns)),
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := p.Locate(ctx, sandbox.Owner{Conversation: one}); err != nil || got != ns+"/one/main" {
				t.Errorf("Locate(one) = %q, %v; want %s/one/main", got, err, ns)
			}
			_, err := p.Locate(ctx, sandbox.Owner{Conversation: two})
			if err == nil || errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), ns+"/two-a/main") || !strings.Contains(err.Error(), ns+"/two-b/main") {
				t.Errorf("Locate(two) = %v; want an error naming both pods", err)
			}
			if got, err := p.Locate(ctx, sandbox.Owner{Conversation: "none-" + randomID()}); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("Locate(none) = %q, %v; want ErrNotFound", got, err)
			}
		})
	}
	other := newProvider(t, WithLabelKey("example.com/conv"), WithNamespaces(ns))
	if got, err := other.Locate(ctx, sandbox.Owner{Conversation: one}); err != nil || got != ns+"/other-key/main" {
		t.Errorf("Locate with another label key = %q, %v; want %s/other-key/main", got, err, ns)
	}
	// A labelled pod that does not run is no sandbox, but is named.
	three := "three-" + randomID()
	c.pod(t, ns, "three", podSpec{labels: map[string]string{DefaultLabelKey: three}, image: "docker.io/library/berth-no-such-image:" + randomID(), noWait: true})
	if _, err := newProvider(t, WithNamespaces(ns)).Locate(ctx, sandbox.Owner{Conversation: three}); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), ns+"/three") {
		t.Errorf("Locate of a pod that does not run = %v; want ErrNotFound naming it", err)
	}
}

// TestPodDeleted deletes the pod while a sandbox is open: the running
// process, Check and new processes fail with ErrGone.
func TestPodDeleted(t *testing.T) {
	c := need(t)
	ns := c.namespace(t)
	c.pod(t, ns, "doomed", podSpec{})
	p := newProvider(t)
	ctx := ctxT(t, 2*time.Minute)
	sb, err := p.Open(ctx, ns+"/doomed")
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	marker := "started-" + randomID()
	out := &markBuffer{marker: marker, seen: make(chan struct{})}
	proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo " + marker + "; exec sleep 1000"}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.seen:
	case <-ctx.Done():
		t.Fatal("the process never started")
	}
	c.deletePod(ns, "doomed")

	type res struct {
		st  sandbox.ExitStatus
		err error
	}
	done := make(chan res, 1)
	go func() { st, err := proc.Wait(); done <- res{st, err} }()
	select {
	case r := <-done:
		t.Logf("Wait after the pod was deleted: %v, %v", r.st, r.err)
		if !errors.Is(r.err, sandbox.ErrGone) {
			t.Errorf("Wait after the pod was deleted = %v, %v; want ErrGone", r.st, r.err)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return after the pod was deleted")
	}
	if err := sb.Check(ctx); !errors.Is(err, sandbox.ErrGone) {
		t.Errorf("Check after the pod was deleted = %v; want ErrGone", err)
	}
	if proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrGone) {
		if err == nil {
			proc.Wait()
		}
		t.Errorf("Start after the pod was deleted = %v; want ErrGone", err)
	}
	if _, err := p.Open(ctx, ns+"/doomed"); !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrGone) {
		t.Errorf("Open after the pod was deleted = %v; want ErrNotFound or ErrGone", err)
	}
}

// markBuffer reports when a marker was written.
type markBuffer struct {
	bytes.Buffer
	marker string
	seen   chan struct{}
	closed bool
}

func (b *markBuffer) Write(p []byte) (int, error) {
	n, err := b.Buffer.Write(p)
	if !b.closed && strings.Contains(b.String(), b.marker) {
		b.closed = true
		close(b.seen)
	}
	return n, err
}

// TestPlace places the agent through fresh transports: the second finds
// the first copy and does not send it again.
func TestPlace(t *testing.T) {
	c := need(t)
	ns := c.namespace(t)
	c.pod(t, ns, "place", podSpec{})
	p := newProvider(t)
	ctx := ctxT(t, 2*time.Minute)
	bin := agent(t)
	inode := func() (string, string) {
		sb, err := p.Open(ctx, ns+"/place")
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		path, err := sb.(*Sandbox).tr.Place(ctx, bin)
		if err != nil {
			t.Fatalf("Place: %v", err)
		}
		return path, strings.TrimSpace(run(t, sb, "stat", "-c", "%i", path))
	}
	p1, i1 := inode()
	p2, i2 := inode()
	if p1 != p2 || i1 != i2 {
		t.Errorf("second Place gave %s (inode %s), first %s (inode %s); want the same file, not a new copy", p2, i2, p1, i1)
	}

	// The runtime's answer to a missing program, which Place reads as a
	// container without sh.
	sb, err := p.Open(ctx, ns+"/place")
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	tr := sb.(*Sandbox).tr
	st, err := tr.start(ctx, []string{"berth-no-such-sh"}, "berth-no-such-sh")
	if err == nil {
		st.Stdin().Close()
		go io.Copy(io.Discard, st.Stdout())
		go io.Copy(io.Discard, st.Stderr())
		var code int
		code, err = st.Wait()
		if err == nil {
			err = fmt.Errorf("exit code %d", code)
		}
	}
	t.Logf("exec of a missing program: %v", err)
	if nerr := tr.noShell(err, "", ""); !errors.Is(nerr, sandbox.ErrUnsupported) || !strings.Contains(nerr.Error(), "has no sh") {
		t.Errorf("noShell = %v; want ErrUnsupported saying the container has no sh", nerr)
	}
}

// TestLeastPrivilege runs the backend as a service account granted exactly
// Rules() in one namespace, proving the rules suffice.
func TestLeastPrivilege(t *testing.T) {
	c := need(t)
	ns := c.namespace(t)
	conv := "least-" + randomID()
	c.pod(t, ns, "target", podSpec{labels: map[string]string{DefaultLabelKey: conv}})
	ctx := ctxT(t, 3*time.Minute)

	const sa = "berth-test"
	cfg := c.account(t, ns, sa, Rules())
	p := newProvider(t, WithRESTConfig(cfg), WithNamespaces(ns))
	// The authorizer learns of the new binding from a watch; wait for it.
	var sb sandbox.Sandbox
	var err error
	for {
		sb, err = p.Open(ctx, "kube://"+ns+"/target")
		if err == nil || !apierrors.IsForbidden(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Open as %s: %v", sa, err)
	}
	defer sb.Close()
	if got := run(t, sb, "sh", "-c", "echo hello; echo err >&2"); got != "hello\n" {
		t.Errorf("stdout %q, want hello", got)
	}
	if sb.(*Sandbox).tr.spdyOnly.Load() {
		t.Errorf("the exec fell back to SPDY; with Rules() it goes over WebSocket")
	}
	fsys, err := sb.FS(ctx, "/etc")
	if err != nil {
		t.Fatalf("FS as %s: %v", sa, err)
	}
	if _, err := fsys.ReadFile(ctx, "hostname"); err != nil {
		t.Errorf("ReadFile as %s: %v", sa, err)
	}
	if err := sb.Check(ctx); err != nil {
		t.Errorf("Check as %s: %v", sa, err)
	}
	// berth serve's /readyz asks the API server for its version with the
	// same account, which holds nothing beyond Rules().
	if err := p.Ping(ctx); err != nil {
		t.Errorf("Ping as %s: %v", sa, err)
	}
	if got, err := p.Locate(ctx, sandbox.Owner{Conversation: conv}); err != nil || got != ns+"/target/main" {
		t.Errorf("Locate as %s = %q, %v; want %s/target/main", sa, got, err, ns)
	}

	// The rules are all it has: listing pods in all namespaces is refused,
	// which shows that the cluster enforces RBAC at all.
	wide := newProvider(t, WithRESTConfig(cfg))
	_, err = wide.Locate(ctx, sandbox.Owner{Conversation: conv})
	if err == nil {
		fail := t.Skipf
		if os.Getenv("CI") == "true" {
			fail = t.Fatalf
		}
		fail("the cluster let a service account with a namespaced Role list pods in all namespaces: it does not enforce RBAC, so this test proves nothing")
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "WithNamespaces") {
		t.Errorf("Locate in all namespaces as %s = %v; want a refusal that points at WithNamespaces", sa, err)
	}
	// A Role that grants exec only with create, as the Kubernetes
	// documentation long showed, still works: the WebSocket exec is
	// refused and the backend falls back to SPDY.
	spdyRules := Rules()
	for i := range spdyRules {
		if slices.Contains(spdyRules[i].Resources, "pods/exec") {
			spdyRules[i].Verbs = []string{"create"}
		}
	}
	spdy := newProvider(t, WithRESTConfig(c.account(t, ns, "berth-spdy", spdyRules)), WithNamespaces(ns))
	for {
		sb, err = spdy.Open(ctx, "kube://"+ns+"/target")
		if err == nil || !apierrors.IsForbidden(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Open as berth-spdy: %v", err)
	}
	defer sb.Close()
	if got := run(t, sb, "echo", "over spdy"); got != "over spdy\n" {
		t.Errorf("stdout %q over SPDY", got)
	}
	if !sb.(*Sandbox).tr.spdyOnly.Load() {
		t.Errorf("the exec went over WebSocket though the Role grants no get on pods/exec")
	}

	// Rules() itself is the minimum this test exercised.
	var verbs []string
	for _, r := range Rules() {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				verbs = append(verbs, res+":"+v)
			}
		}
	}
	slices.Sort(verbs)
	if want := []string{"pods/exec:create", "pods/exec:get", "pods:get", "pods:list"}; !slices.Equal(verbs, want) {
		t.Errorf("Rules() grants %v; this test exercises exactly %v", verbs, want)
	}
}

// account makes a service account in ns bound to a Role with rules and
// returns a config that authenticates as it with a fresh token.
func (c *cluster) account(t *testing.T, ns, name string, rules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	if _, err := c.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if _, err := c.cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expire := int64(3600)
	tok, err := c.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expire}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.cfg)
	cfg.BearerToken = tok.Status.Token
	return cfg
}
