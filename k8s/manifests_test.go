// Package k8s_test renders berth's kustomize overlays with the kustomize Go
// API, decodes every object strictly with client-go's scheme and checks what
// docs/kubernetes.md promises of them: least-privilege RBAC equal to
// kube.Rules() in each sandbox namespace and to kubestore.Rules() in
// berth's own, a fail-closed token and peer key, probes, the
// NetworkPolicies, the scrape annotations, the security contexts, berth's
// command line, and for the replicas overlay what sharing runs needs (the
// kube run store, the peer key, the pod's identity, a rollout that keeps a
// replica up).
package k8s_test

import (
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"berth.dev/berth/runstore/kubestore"
	"berth.dev/berth/sandbox/kube"
)

// berthFlags are the flags `berth serve` accepts (cmd/berth: the global
// flags of the root command and serve's own). A manifest passing any other
// flag would make berth exit at start. Keep this the one list.
var berthFlags = []struct {
	name string
	kind flagKind
}{
	// berth's persistent flags (cmd/berth/main.go)
	{"label-key", stringFlag},
	{"no-host-fallback", boolFlag},
	{"docker-host", stringFlag},
	{"verbose", boolFlag},
	{"kube", stringFlag},
	{"kube-namespaces", listFlag},
	{"containerd-address", stringFlag},
	{"containerd-fifo-dir", stringFlag},
	{"node-name", stringFlag},
	{"host-placement", stringFlag},
	{"host-root", listFlag},
	{"allow-unlabelled", boolFlag},
	{"host-user", stringFlag},
	{"host-env", listFlag},
	// serve's own (cmd/berth/serve.go)
	{"addr", stringFlag},
	{"token-file", stringFlag},
	{"operator-token-file", stringFlag},
	{"mode", stringFlag},
	{"state-dir", stringFlag},
	{"close-runs-on-exit", boolFlag},
	{"resident-grace", stringFlag},
	{"store", stringFlag},
	{"store-namespace", stringFlag},
	{"replica", stringFlag},
	{"advertise", stringFlag},
	{"peer-key-file", stringFlag},
	{"metrics-addr", stringFlag},
	{"tls-cert-file", stringFlag},
	{"tls-key-file", stringFlag},
	{"service-accounts-file", stringFlag},
	{"service-account-audience", stringFlag},
}

type flagKind int

const (
	stringFlag flagKind = iota
	boolFlag            // takes no value
	listFlag            // comma-separated, may repeat (a pflag StringSlice)
)

const (
	berthNamespace   = "berth"
	sandboxNamespace = "berth-sandboxes"
	tokenSecret      = "berth-token"
	tokenKey         = "token"
	operatorTokenKey = "operator-token"
	image            = "berth:dev"
	harnessLabel     = "berth.dev/harness"
	// harnessNamespace is the harness namespace the NetworkPolicy names
	// as shipped (docs/kubernetes.md says how to add one).
	harnessNamespace = "berth-harness"
	// namespaceNameLabel is the label the API server sets on every
	// namespace to its name.
	namespaceNameLabel = "kubernetes.io/metadata.name"
	peerSecret         = "berth-peer"
	peerKey            = "key"
	// minReplicas: with one replica a restart leaves nobody to take its runs.
	minReplicas = 2
	// minGrace: on SIGTERM a replica detaches its runs, stores them and
	// releases their Leases after the requests in flight (up to 10 s); a pod
	// killed before that leaves its runs to the Leases' 20 s expiry.
	minGrace = 30
)

// operatorFiles are the secrets the operator writes before `kubectl apply
// -k` (paths under k8s/, ignored by git), with the content the tests use.
var operatorFiles = map[string]string{
	"base/token":                     "test-token\n",
	"base/operator-token":            "test-operator-token\n",
	"overlays/api-replicas/peer-key": "test-peer-key-0123456789abcdef0123456789abcdef\n",
}

// overlay is one deployment mode and what only it must satisfy.
type overlay struct {
	dir  string
	kube string // the value of --kube
	// shared: the replicas share their runs through the API server
	// (--store=kube) and forward requests to each other.
	shared bool
	// secrets are the operator's files (keys of operatorFiles) it needs.
	secrets []string
	check   func(t *testing.T, m *manifests, w workload)
}

var overlays = []overlay{
	{dir: "overlays/api", kube: "api", secrets: []string{"base/token", "base/operator-token"}, check: checkAPI},
	{dir: "overlays/api-replicas", kube: "api", shared: true, secrets: []string{"base/token", "base/operator-token", "overlays/api-replicas/peer-key"}, check: checkReplicas},
	{dir: "overlays/node-agent", kube: "node", secrets: []string{"base/token", "base/operator-token"}, check: checkNodeAgent},
}

func TestOverlays(t *testing.T) {
	for _, o := range overlays {
		t.Run(o.dir, func(t *testing.T) {
			m := render(t, o.dir)
			w := m.workload(t)
			checkCommon(t, m, w, o)
			o.check(t, m, w)
		})
	}
}

// TestTokenFailsClosed: without one of the operator's secret files (the
// tokens, the replicas' peer key) nothing renders, so `kubectl apply -k`
// applies nothing, and no secret is shipped.
func TestTokenFailsClosed(t *testing.T) {
	for f := range operatorFiles {
		if _, err := os.Lstat(f); err == nil {
			t.Logf("k8s/%s exists here (an operator's secret); the checks below use a copy without it", f)
		}
	}
	for _, o := range overlays {
		for _, f := range o.secrets {
			t.Run(o.dir+"/without "+f, func(t *testing.T) {
				dir := copyTree(t)
				if err := os.Remove(filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
				_, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, o.dir))
				if err == nil {
					t.Fatalf("the overlay renders without k8s/%s; it must fail so that no Secret without it is applied", f)
				}
				if !strings.Contains(err.Error(), path.Base(f)) {
					t.Errorf("the error does not name the missing file %s: %v", path.Base(f), err)
				}
			})
		}
	}
	ignore, err := os.ReadFile(".gitignore")
	for f := range operatorFiles {
		if err != nil || !slices.Contains(strings.Fields(string(ignore)), "/"+f) {
			t.Errorf("k8s/.gitignore must list /%s so that an operator's secret is never committed (err %v)", f, err)
		}
	}
}

// TestStrictDecoding keeps the decoder honest: an unknown field or kind fails.
func TestStrictDecoding(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		ok   bool
	}{
		{"known", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n", true},
		{"unknown field", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\nautomountToken: false\n", false},
		{"unknown kind", "apiVersion: v1\nkind: Sandbox\nmetadata:\n  name: a\n", false},
		{"duplicate field", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  name: b\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decode([]byte(tt.yaml))
			if (err == nil) != tt.ok {
				t.Errorf("decode: err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// manifests are the decoded objects of one rendered overlay.
type manifests struct {
	objs []runtime.Object
}

func objects[T runtime.Object](m *manifests) []T {
	var out []T
	for _, o := range m.objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// workload is berth's pod template and the object that owns it.
type workload struct {
	kind string
	meta metav1.ObjectMeta
	pod  corev1.PodTemplateSpec
	sel  *metav1.LabelSelector
}

func (m *manifests) workload(t *testing.T) workload {
	t.Helper()
	var ws []workload
	for _, d := range objects[*appsv1.Deployment](m) {
		ws = append(ws, workload{"Deployment", d.ObjectMeta, d.Spec.Template, d.Spec.Selector})
	}
	for _, d := range objects[*appsv1.DaemonSet](m) {
		ws = append(ws, workload{"DaemonSet", d.ObjectMeta, d.Spec.Template, d.Spec.Selector})
	}
	if len(ws) != 1 {
		t.Fatalf("want exactly one Deployment or DaemonSet, got %d", len(ws))
	}
	return ws[0]
}

// container returns berth's container.
func (w workload) container(t *testing.T) corev1.Container {
	t.Helper()
	if n := len(w.pod.Spec.Containers); n != 1 {
		t.Fatalf("%s %s: want one container, got %d", w.kind, w.meta.Name, n)
	}
	return w.pod.Spec.Containers[0]
}

// render builds overlay dir from a copy of k8s/ holding a test token.
func render(t *testing.T, dir string) *manifests {
	t.Helper()
	root := copyTree(t)
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(root, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := &manifests{}
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		obj, err := decode(y)
		if err != nil {
			t.Fatalf("%s does not decode strictly with client-go's scheme: %v\n%s", r.CurId(), err, y)
		}
		m.objs = append(m.objs, obj)
	}
	if len(m.objs) == 0 {
		t.Fatalf("%s renders no objects", dir)
	}
	return m
}

var strictCodecs = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)

// decode decodes one object; unknown kinds and fields and duplicate keys
// are errors.
func decode(y []byte) (runtime.Object, error) {
	obj, _, err := strictCodecs.UniversalDeserializer().Decode(y, nil, nil)
	return obj, err
}

// copyTree copies the k8s directory (manifests only) into a temporary
// directory and writes the test's operatorFiles there, so that the test
// neither needs nor touches an operator's secrets.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, p), 0o755)
		}
		if _, secret := operatorFiles[filepath.ToSlash(p)]; secret || strings.HasSuffix(p, ".go") || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, p), data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy k8s/: %v", err)
	}
	for f, content := range operatorFiles {
		if err := os.WriteFile(filepath.Join(dst, filepath.FromSlash(f)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// serveArgs parses berth's container command line like berth would: the
// command is berth, the first argument is serve, every flag is one berth
// knows. It returns the flag values set.
func serveArgs(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	if !slices.Equal(c.Command, []string{"berth"}) {
		t.Fatalf("container %s: command = %q, want [berth]", c.Name, c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container %s: args = %q, want serve first", c.Name, c.Args)
	}
	fset := pflag.NewFlagSet("berth serve", pflag.ContinueOnError)
	fset.SetOutput(nopWriter{})
	for _, f := range berthFlags {
		switch f.kind {
		case boolFlag:
			fset.Bool(f.name, false, "")
		case listFlag:
			fset.StringSlice(f.name, nil, "")
		default:
			fset.String(f.name, "", "")
		}
	}
	if err := fset.Parse(c.Args[1:]); err != nil {
		t.Fatalf("container %s: berth serve would reject its args %q: %v", c.Name, c.Args[1:], err)
	}
	if rest := fset.Args(); len(rest) > 0 {
		t.Fatalf("container %s: berth serve takes no arguments, got %q", c.Name, rest)
	}
	// List flags come back comma-joined.
	set := map[string]string{}
	fset.Visit(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			set[f.Name] = strings.Join(sv.GetSlice(), ",")
			return
		}
		set[f.Name] = f.Value.String()
	})
	return set
}

// show prints what a pointer field holds.
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// showIntOrString prints a count or percentage.
func showIntOrString(p *intstr.IntOrString) string {
	if p == nil {
		return "unset"
	}
	return p.String()
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// httpPort returns the container's port named http.
func httpPort(t *testing.T, c corev1.Container) corev1.ContainerPort {
	t.Helper()
	return namedPort(t, c, "http")
}

// metricsPort returns the container's port named metrics.
func metricsPort(t *testing.T, c corev1.Container) corev1.ContainerPort {
	t.Helper()
	return namedPort(t, c, "metrics")
}

func namedPort(t *testing.T, c corev1.Container, name string) corev1.ContainerPort {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("container %s has no port named %s: %+v", c.Name, name, c.Ports)
	return corev1.ContainerPort{}
}

// resolvePort returns the number a probe or Service port refers to.
func resolvePort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// mountFor returns the mount and volume that hold path inside the container.
func mountFor(w workload, c corev1.Container, p string) (corev1.VolumeMount, corev1.Volume, bool) {
	for _, vm := range c.VolumeMounts {
		if p == vm.MountPath || strings.HasPrefix(p, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			for _, v := range w.pod.Spec.Volumes {
				if v.Name == vm.Name {
					return vm, v, true
				}
			}
		}
	}
	return corev1.VolumeMount{}, corev1.Volume{}, false
}

// inImage maps a path to the one the container's Debian root filesystem
// resolves it to: /var/run is a symlink to /run there.
func inImage(p string) string {
	p = path.Clean(p)
	if p == "/var/run" || strings.HasPrefix(p, "/var/run/") {
		return "/run" + strings.TrimPrefix(p, "/var/run")
	}
	return p
}

// isHarness: the peer admits exactly pods labelled berth.dev/harness=true
// of namespaces named by kubernetes.io/metadata.name, harnessNamespace
// among them: not every namespace, nor one merely labelled by whoever can
// label it.
func isHarness(peer networkingv1.NetworkPolicyPeer) bool {
	if peer.IPBlock != nil || peer.PodSelector == nil || peer.NamespaceSelector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil || !sel.Matches(labels.Set{harnessLabel: "true"}) ||
		sel.Matches(labels.Set{}) || sel.Matches(labels.Set{harnessLabel: "false"}) {
		return false
	}
	return namesNamespaces(peer.NamespaceSelector)
}

// namesNamespaces: the selector admits harnessNamespace, and a namespace
// only by its name (every requirement is on kubernetes.io/metadata.name),
// so neither an unlisted namespace nor one that copies other labels.
func namesNamespaces(ls *metav1.LabelSelector) bool {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil || sel.Empty() {
		return false
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if r.Key() != namespaceNameLabel {
			return false
		}
	}
	return sel.Matches(labels.Set{namespaceNameLabel: harnessNamespace}) &&
		!sel.Matches(labels.Set{namespaceNameLabel: "default"}) &&
		!sel.Matches(labels.Set{namespaceNameLabel: "some-other-namespace"})
}

// isAnyPod: the peer admits every pod of every namespace, and no address
// outside the cluster.
func isAnyPod(peer networkingv1.NetworkPolicyPeer) bool {
	if peer.IPBlock != nil || peer.NamespaceSelector == nil {
		return false
	}
	ns, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
	if err != nil || !ns.Empty() {
		return false
	}
	if peer.PodSelector == nil {
		return true
	}
	pods, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	return err == nil && pods.Empty()
}

// isOwnPods: the peer admits exactly berth's own pods (the workload's
// selector) of the policy's namespace.
func isOwnPods(peer networkingv1.NetworkPolicyPeer, w workload) bool {
	return peer.IPBlock == nil && peer.NamespaceSelector == nil && peer.PodSelector != nil &&
		reflect.DeepEqual(*peer.PodSelector, *w.sel)
}

func checkCommon(t *testing.T, m *manifests, w workload, o overlay) {
	c := w.container(t)
	args := serveArgs(t, c)
	port := httpPort(t, c)
	mport := metricsPort(t, c)

	t.Run("no cluster-wide RBAC", func(t *testing.T) {
		for _, o := range m.objs {
			switch o.(type) {
			case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
				t.Errorf("%T %s: berth needs nothing cluster-wide", o, o.(metav1.Object).GetName())
			}
		}
	})

	t.Run("labels and namespaces", func(t *testing.T) {
		for _, o := range m.objs {
			mo := o.(metav1.Object)
			if got := mo.GetLabels()["app.kubernetes.io/name"]; got != "berth" {
				t.Errorf("%T %s: label app.kubernetes.io/name = %q, want berth", o, mo.GetName(), got)
			}
			if _, ok := o.(*corev1.Namespace); ok {
				continue
			}
			if mo.GetNamespace() == "" {
				t.Errorf("%T %s has no namespace", o, mo.GetName())
			}
		}
		if w.meta.Namespace != berthNamespace {
			t.Errorf("%s %s in namespace %q, want %q", w.kind, w.meta.Name, w.meta.Namespace, berthNamespace)
		}
		sel, err := metav1.LabelSelectorAsSelector(w.sel)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s selector %v does not select its own pod template %v (err %v)", w.kind, w.sel, w.pod.Labels, err)
		}
	})

	t.Run("flags", func(t *testing.T) {
		if got := args["kube"]; got != o.kube {
			t.Errorf("--kube = %q, want %q", got, o.kube)
		}
		// Without it a conversation with no pod runs on the "host": inside
		// berth's container, next to its token.
		if args["no-host-fallback"] != "true" {
			t.Error("--no-host-fallback is not set: tools of a conversation without a pod would run inside berth's own container")
		}
		// Without it an explicit "sandbox":"host" would run inside berth's container.
		if args["host-placement"] != "off" {
			t.Errorf("--host-placement = %q, want off: an explicit host run would run inside berth's own container", args["host-placement"])
		}
		if args["allow-unlabelled"] == "true" {
			t.Error("--allow-unlabelled is set: any caller could open any pod by kube://NAMESPACE/POD")
		}
		switch {
		case o.shared:
			// The runs live in the API server, where every replica finds
			// them; a state directory would be one pod's alone.
			if args["store"] != "kube" {
				t.Errorf("--store = %q, want kube: the replicas must share their runs", args["store"])
			}
			if v, ok := args["state-dir"]; ok {
				t.Errorf("--state-dir = %q with --store=kube: the runs live in the API server, drop the flag", v)
			}
		default:
			// The pod's disk (an emptyDir) does not outlive the pod: a
			// state directory there would leave each run's resident
			// supervisor to its grace after a restart instead of closing
			// it.
			if v, ok := args["state-dir"]; !ok || v != "" {
				t.Errorf("--state-dir = %q (set: %v), want it set empty: a single replica keeps its runs in memory", v, ok)
			}
			if v, ok := args["store"]; ok && v != "dir" {
				t.Errorf("--store = %q: only the replicas overlay shares runs through the API server", v)
			}
		}
		_, p, err := net.SplitHostPort(args["addr"])
		if err != nil {
			t.Fatalf("--addr %q: %v", args["addr"], err)
		}
		if h, _, _ := net.SplitHostPort(args["addr"]); h != "" && h != "0.0.0.0" {
			t.Errorf("--addr %q: berth must listen on the pod IP, not %q", args["addr"], h)
		}
		if p != strconv.Itoa(int(port.ContainerPort)) {
			t.Errorf("--addr %q, container port %d: they must agree", args["addr"], port.ContainerPort)
		}
		if port.Protocol != corev1.ProtocolTCP {
			t.Errorf("port http protocol %q, want TCP", port.Protocol)
		}
		// The metrics listener: its own port, on the pod IP, that the
		// container port named metrics declares.
		h, mp, err := net.SplitHostPort(args["metrics-addr"])
		if err != nil {
			t.Fatalf("--metrics-addr %q: %v; want the metrics listener on the pod, e.g. :9090", args["metrics-addr"], err)
		}
		if h != "" && h != "0.0.0.0" {
			t.Errorf("--metrics-addr %q: a scraper reaches the pod IP, not %q", args["metrics-addr"], h)
		}
		if mp != strconv.Itoa(int(mport.ContainerPort)) || mport.ContainerPort == port.ContainerPort {
			t.Errorf("--metrics-addr %q, container port metrics %d (http %d): they must agree, apart from the API's port", args["metrics-addr"], mport.ContainerPort, port.ContainerPort)
		}
		if mport.Protocol != corev1.ProtocolTCP {
			t.Errorf("port metrics protocol %q, want TCP", mport.Protocol)
		}
		for _, e := range c.Env {
			if e.Name == "BERTH_TOKEN" {
				t.Errorf("the token must come from the Secret file, not $BERTH_TOKEN")
			}
		}
	})

	t.Run("token", func(t *testing.T) {
		file := args["token-file"]
		if file == "" {
			t.Fatal("no --token-file: berth would serve beyond loopback without a token (it refuses to)")
		}
		vm, v, ok := mountFor(w, c, file)
		if !ok {
			t.Fatalf("--token-file %s is on no volume mount", file)
		}
		if v.Secret == nil || v.Secret.SecretName != tokenSecret {
			t.Fatalf("--token-file %s is on volume %s, not on the Secret %s", file, v.Name, tokenSecret)
		}
		if !vm.ReadOnly {
			t.Errorf("the token mount %s is not readOnly", vm.MountPath)
		}
		if vm.MountPath != "/var/run/berth" {
			t.Errorf("token mounted at %s, want /var/run/berth", vm.MountPath)
		}
		key := strings.TrimPrefix(strings.TrimPrefix(file, vm.MountPath), "/")
		if vm.SubPath != "" {
			t.Errorf("token mount uses subPath %q: a subPath mount never sees the Secret change", vm.SubPath)
		}
		if len(v.Secret.Items) > 0 {
			t.Errorf("the token volume remaps keys (%v); mount the key as %s", v.Secret.Items, key)
		}
		var found bool
		for _, s := range objects[*corev1.Secret](m) {
			if s.Name != tokenSecret || s.Namespace != w.meta.Namespace {
				continue
			}
			found = true
			if string(s.Data[key]) != "test-token\n" {
				t.Errorf("Secret %s key %q = %q, want the operator's token file", s.Name, key, s.Data[key])
			}
			if key != tokenKey {
				t.Errorf("--token-file reads key %q, want %q", key, tokenKey)
			}
		}
		if !found {
			t.Errorf("no Secret %s in namespace %s", tokenSecret, w.meta.Namespace)
		}
	})

	// The operator's token answers permission cards; the harness's token
	// (--token-file) cannot, so berth needs both to ask a human at all.
	t.Run("operator token", func(t *testing.T) {
		file := args["operator-token-file"]
		if file == "" {
			t.Fatal("no --operator-token-file: nobody could answer a permission card in hosted mode")
		}
		vm, v, ok := mountFor(w, c, file)
		if !ok || v.Secret == nil || v.Secret.SecretName != tokenSecret {
			t.Fatalf("--operator-token-file %s is not on the Secret %s's mount", file, tokenSecret)
		}
		key := strings.TrimPrefix(strings.TrimPrefix(file, vm.MountPath), "/")
		if key != operatorTokenKey {
			t.Errorf("--operator-token-file reads key %q, want %q", key, operatorTokenKey)
		}
		for _, s := range objects[*corev1.Secret](m) {
			if s.Name == tokenSecret && string(s.Data[key]) != "test-operator-token\n" {
				t.Errorf("Secret %s key %q = %q, want the operator's operator-token file", s.Name, key, s.Data[key])
			}
		}
	})

	t.Run("probes", func(t *testing.T) {
		for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			want := map[string]string{"liveness": "/livez", "readiness": "/readyz"}[name]
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe: want an httpGet on %s, got %+v", name, want, p)
				continue
			}
			if p.HTTPGet.Path != want {
				t.Errorf("%s probe path %q, want %s", name, p.HTTPGet.Path, want)
			}
			if got := resolvePort(c, p.HTTPGet.Port); got != port.ContainerPort {
				t.Errorf("%s probe port %s resolves to %d, want berth's port %d", name, p.HTTPGet.Port.String(), got, port.ContainerPort)
			}
			if p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP {
				t.Errorf("%s probe scheme %q, want HTTP", name, p.HTTPGet.Scheme)
			}
		}
	})

	t.Run("scrape annotations", func(t *testing.T) {
		want := map[string]string{
			"prometheus.io/scrape": "true",
			"prometheus.io/port":   strconv.Itoa(int(mport.ContainerPort)),
			"prometheus.io/path":   "/metrics",
		}
		for k, v := range want {
			if got := w.pod.Annotations[k]; got != v {
				t.Errorf("pod annotation %s = %q, want %q", k, got, v)
			}
		}
	})

	// Harness pods of the named harness namespaces may call berth's API,
	// and nothing else may; with shared runs berth's own pods may too (a
	// replica forwards a request to the one that serves the run), from
	// berth's namespace only. Any pod may scrape the metrics port, and
	// that rule opens nothing else.
	t.Run("network policy", func(t *testing.T) {
		var selecting int
		var harness, peers, scrape bool
		for _, np := range objects[*networkingv1.NetworkPolicy](m) {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
			}
			if np.Namespace != w.meta.Namespace || sel.Empty() || !sel.Matches(labels.Set(w.pod.Labels)) {
				continue
			}
			selecting++
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("NetworkPolicy %s policyTypes %v, want [Ingress]", np.Name, np.Spec.PolicyTypes)
			}
			for ri, rule := range np.Spec.Ingress {
				if len(rule.From) == 0 {
					t.Errorf("NetworkPolicy %s rule %d has no `from`: it would admit every pod", np.Name, ri)
				}
				if len(rule.Ports) == 1 && rule.Ports[0].Port != nil && resolvePort(c, *rule.Ports[0].Port) == mport.ContainerPort &&
					(rule.Ports[0].Protocol == nil || *rule.Ports[0].Protocol == corev1.ProtocolTCP) {
					// The metrics rule: from pods (any), to the metrics port only.
					for i, peer := range rule.From {
						if !isAnyPod(peer) && !isHarness(peer) {
							t.Errorf("NetworkPolicy %s rule %d from[%d] %+v on the metrics port: want pods of any namespace (namespaceSelector: {}), no ipBlock", np.Name, ri, i, peer)
						}
						scrape = scrape || isAnyPod(peer)
					}
					continue
				}
				for i, peer := range rule.From {
					switch {
					case isHarness(peer):
						harness = true
					case o.shared && isOwnPods(peer, w):
						peers = true
					default:
						t.Errorf("NetworkPolicy %s rule %d from[%d] %+v: want only pods labelled %s=true of namespaces named by %s (%s among them), or (replicas) berth's own pods by its selector in its namespace", np.Name, ri, i, peer, harnessLabel, namespaceNameLabel, harnessNamespace)
					}
				}
				if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || resolvePort(c, *rule.Ports[0].Port) != port.ContainerPort ||
					(rule.Ports[0].Protocol != nil && *rule.Ports[0].Protocol != corev1.ProtocolTCP) {
					t.Errorf("NetworkPolicy %s rule %d must open only berth's port %d/TCP, got %+v", np.Name, ri, port.ContainerPort, rule.Ports)
				}
			}
		}
		if selecting == 0 {
			t.Fatal("no NetworkPolicy selects berth's pods: every pod could reach them")
		}
		if !harness {
			t.Errorf("no NetworkPolicy admits harness pods (%s=true)", harnessLabel)
		}
		if o.shared && !peers {
			t.Error("no NetworkPolicy admits berth's own pods: a replica could not forward a request to the one serving the run")
		}
		if !scrape {
			t.Errorf("no NetworkPolicy admits any pod to the metrics port %d: Prometheus could not scrape", mport.ContainerPort)
		}
	})

	t.Run("container", func(t *testing.T) {
		if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("image %s (%s), want %s (IfNotPresent)", c.Image, c.ImagePullPolicy, image)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
			if req.IsZero() || lim.IsZero() {
				t.Errorf("%s: want a request and a limit, got %s / %s", r, req.String(), lim.String())
			} else if req.Cmp(lim) > 0 {
				t.Errorf("%s request %s is above its limit %s", r, req.String(), lim.String())
			}
		}
		sc := c.SecurityContext
		if sc == nil {
			t.Fatal("no container securityContext")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("allowPrivilegeEscalation must be false")
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Error("the container must not be privileged")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Error("readOnlyRootFilesystem must be true")
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("capabilities %+v, want drop [ALL] and add none", sc.Capabilities)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil && w.pod.Spec.SecurityContext != nil {
			seccomp = w.pod.Spec.SecurityContext.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("seccomp profile %+v, want RuntimeDefault", seccomp)
		}
		for _, flag := range []bool{w.pod.Spec.HostNetwork, w.pod.Spec.HostPID, w.pod.Spec.HostIPC} {
			if flag {
				t.Error("berth needs none of hostNetwork, hostPID, hostIPC")
			}
		}
	})

	t.Run("mounts do not overlap", func(t *testing.T) {
		// A mount inside another (after /var/run → /run, as in the image) is
		// shadowed or cannot get its mount point (the outer one is read-only).
		for i, a := range c.VolumeMounts {
			for j, b := range c.VolumeMounts {
				pa, pb := inImage(a.MountPath), inImage(b.MountPath)
				if i != j && (pa == pb || strings.HasPrefix(pb, pa+"/")) {
					t.Errorf("mount %s (%s) contains mount %s (%s) in the image's filesystem", a.Name, a.MountPath, b.Name, b.MountPath)
				}
			}
		}
	})
}

func checkAPI(t *testing.T, m *manifests, w workload) {
	c := w.container(t)
	args := serveArgs(t, c)
	if w.kind != "Deployment" {
		t.Errorf("API mode runs as a Deployment, got a %s", w.kind)
	}

	t.Run("rbac", func(t *testing.T) {
		namespaces := strings.Split(args["kube-namespaces"], ",")
		if args["kube-namespaces"] == "" || !slices.Contains(namespaces, sandboxNamespace) {
			t.Fatalf("--kube-namespaces %q, want it to include %s", args["kube-namespaces"], sandboxNamespace)
		}
		if slices.Contains(namespaces, w.meta.Namespace) {
			t.Fatalf("--kube-namespaces %q includes berth's own namespace %s: sandboxes and berth's run records (Secrets) must not share a namespace", args["kube-namespaces"], w.meta.Namespace)
		}
		roles := objects[*rbacv1.Role](m)
		bindings := objects[*rbacv1.RoleBinding](m)
		// One Role per sandbox namespace, and the run store's in berth's
		// only when berth uses the store (least privilege: a single
		// replica keeps its runs in memory and never touches a Secret or
		// a Lease).
		store := args["store"] == "kube"
		want := len(namespaces)
		if store {
			want++
		}
		if len(roles) != want || len(bindings) != want {
			t.Errorf("want one Role and one RoleBinding per sandbox namespace %q (and with --store=kube one in %s), got %d and %d", namespaces, w.meta.Namespace, len(roles), len(bindings))
		}
		if !store {
			for _, r := range roles {
				if r.Namespace == w.meta.Namespace {
					t.Errorf("Role %s/%s in berth's own namespace without --store=kube: berth uses no Secrets or Leases there; drop k8s/rbac/store from this overlay", r.Namespace, r.Name)
				}
			}
		}
		checked := namespaces
		if store {
			checked = append(checked, w.meta.Namespace)
		}
		for _, ns := range checked {
			want, what := kube.Rules(), "kube.Rules()"
			if ns == w.meta.Namespace {
				want, what = kubestore.Rules(), "kubestore.Rules()"
			}
			var nsRoles []*rbacv1.Role
			for _, r := range roles {
				if r.Namespace == ns {
					nsRoles = append(nsRoles, r)
				}
			}
			if len(nsRoles) != 1 {
				t.Errorf("want one Role in namespace %s (%s), got %d", ns, what, len(nsRoles))
				continue
			}
			role := nsRoles[0]
			if !reflect.DeepEqual(role.Rules, want) {
				t.Errorf("Role %s/%s rules\n  %+v\nwant exactly %s\n  %+v", ns, role.Name, role.Rules, what, want)
			}
			var bound bool
			for _, b := range bindings {
				if b.Namespace != ns || b.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) {
					continue
				}
				want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: w.pod.Spec.ServiceAccountName, Namespace: w.meta.Namespace}}
				if !reflect.DeepEqual(b.Subjects, want) {
					t.Errorf("RoleBinding %s/%s subjects %+v, want only %+v", ns, b.Name, b.Subjects, want)
				}
				bound = true
			}
			if !bound {
				t.Errorf("no RoleBinding in %s grants Role %s", ns, role.Name)
			}
		}
	})

	t.Run("service account", func(t *testing.T) {
		sa := w.pod.Spec.ServiceAccountName
		if sa != "berth" {
			t.Errorf("serviceAccountName %q, want berth", sa)
		}
		if p := w.pod.Spec.AutomountServiceAccountToken; p != nil && !*p {
			t.Error("API mode needs its ServiceAccount token; automountServiceAccountToken is false")
		}
		var found bool
		for _, s := range objects[*corev1.ServiceAccount](m) {
			if s.Name == sa && s.Namespace == w.meta.Namespace {
				found = true
				if s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken && w.pod.Spec.AutomountServiceAccountToken == nil {
					t.Error("the ServiceAccount turns the token off and the pod does not turn it on")
				}
			}
		}
		if !found {
			t.Errorf("no ServiceAccount %s/%s", w.meta.Namespace, sa)
		}
	})

	t.Run("non-root", func(t *testing.T) {
		psc, sc := w.pod.Spec.SecurityContext, c.SecurityContext
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
		if !nonRoot {
			t.Error("API mode must set runAsNonRoot")
		}
		uid := sc.RunAsUser
		if uid == nil && psc != nil {
			uid = psc.RunAsUser
		}
		if uid == nil || *uid == 0 {
			t.Errorf("API mode must run as a numeric non-root uid (the image names no user), got %s", show(uid))
		}
		if psc == nil || psc.FSGroup == nil {
			t.Error("no fsGroup: the non-root user could not read the token file")
		}
	})

	t.Run("pod security", func(t *testing.T) {
		for _, ns := range objects[*corev1.Namespace](m) {
			if ns.Name == w.meta.Namespace {
				if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
					t.Errorf("namespace %s enforces %q, want restricted", ns.Name, got)
				}
			}
		}
	})

	t.Run("service", func(t *testing.T) {
		var found, metrics bool
		for _, s := range objects[*corev1.Service](m) {
			if s.Namespace != w.meta.Namespace || len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.pod.Labels)) {
				continue
			}
			found = true
			for _, p := range s.Spec.Ports {
				want := httpPort(t, c).ContainerPort
				if p.Name == "metrics" {
					want, metrics = metricsPort(t, c).ContainerPort, true
				}
				if got := resolvePort(c, p.TargetPort); got != want {
					t.Errorf("Service %s port %s (%d) targets %s (%d), not berth's port %d", s.Name, p.Name, p.Port, p.TargetPort.String(), got, want)
				}
			}
		}
		if !found {
			t.Error("no Service selects berth's pods")
		}
		if !metrics {
			t.Error("the Service has no port named metrics: a ServiceMonitor or a scrape config by Service could not find berth's metrics")
		}
	})

	t.Run("no host access", func(t *testing.T) {
		for _, v := range w.pod.Spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("volume %s is a hostPath; API mode needs none", v.Name)
			}
		}
	})
}

// checkReplicas: API mode (checkAPI) with several replicas sharing runs
// through the API server.
func checkReplicas(t *testing.T, m *manifests, w workload) {
	checkAPI(t, m, w)
	c := w.container(t)
	args := serveArgs(t, c)
	deps := objects[*appsv1.Deployment](m)
	if len(deps) != 1 {
		t.Fatalf("want one Deployment, got %d", len(deps))
	}
	d := deps[0]

	t.Run("replicas", func(t *testing.T) {
		if d.Spec.Replicas == nil || *d.Spec.Replicas < minReplicas {
			t.Errorf("replicas %s, want at least %d: with one, a restart leaves nobody to take its runs", show(d.Spec.Replicas), minReplicas)
		}
	})

	// A rollout must not stop a replica before its successor is ready.
	t.Run("rollout", func(t *testing.T) {
		st := d.Spec.Strategy
		if st.Type != appsv1.RollingUpdateDeploymentStrategyType || st.RollingUpdate == nil {
			t.Fatalf("strategy %+v, want RollingUpdate (Recreate stops every replica at once)", st)
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		unavailable, err := intstr.GetScaledValueFromIntOrPercent(st.RollingUpdate.MaxUnavailable, replicas, false)
		if st.RollingUpdate.MaxUnavailable == nil || err != nil || unavailable != 0 {
			t.Errorf("maxUnavailable %s (err %v), want 0", showIntOrString(st.RollingUpdate.MaxUnavailable), err)
		}
		surge, err := intstr.GetScaledValueFromIntOrPercent(st.RollingUpdate.MaxSurge, replicas, true)
		if st.RollingUpdate.MaxSurge == nil || err != nil || surge < 1 {
			t.Errorf("maxSurge %s (err %v), want at least 1: with maxUnavailable 0 the rollout could not start", showIntOrString(st.RollingUpdate.MaxSurge), err)
		}
		if g := w.pod.Spec.TerminationGracePeriodSeconds; g == nil || *g < minGrace {
			t.Errorf("terminationGracePeriodSeconds %s, want at least %d: a replica stopping detaches and releases its runs", show(g), minGrace)
		}
	})

	t.Run("disruption budget", func(t *testing.T) {
		var found bool
		for _, pdb := range objects[*policyv1.PodDisruptionBudget](m) {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || pdb.Namespace != w.meta.Namespace || sel.Empty() || !sel.Matches(labels.Set(w.pod.Labels)) {
				continue
			}
			found = true
			replicas := int(*d.Spec.Replicas)
			if pdb.Spec.MinAvailable == nil {
				t.Errorf("PodDisruptionBudget %s: want minAvailable", pdb.Name)
				continue
			}
			n, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, replicas, true)
			if err != nil || n < 1 || n >= replicas {
				t.Errorf("PodDisruptionBudget %s minAvailable %s of %d replicas (err %v): want at least 1 and fewer than the replicas, or no drain could evict any", pdb.Name, pdb.Spec.MinAvailable.String(), replicas, err)
			}
		}
		if !found {
			t.Error("no PodDisruptionBudget keeps a replica up during a drain")
		}
	})

	// Each replica's name in the Leases, its namespace and the address the
	// others forward to: from the flags, or from the downward API.
	t.Run("identity", func(t *testing.T) {
		for _, tt := range []struct{ flag, env, field string }{
			{"replica", "POD_NAME", "metadata.name"},
			{"store-namespace", "POD_NAMESPACE", "metadata.namespace"},
			{"advertise", "POD_IP", "status.podIP"},
		} {
			if _, ok := args[tt.flag]; ok {
				continue
			}
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == tt.env })
			if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != tt.field {
				t.Errorf("no --%s and no $%s from the downward API (fieldRef %s)", tt.flag, tt.env, tt.field)
			}
		}
	})

	// The key forwarded requests are signed with: the same Secret in every
	// replica, from the operator's file, on a read-only mount only berth's
	// group can read.
	t.Run("peer key", func(t *testing.T) {
		file := args["peer-key-file"]
		if file == "" {
			t.Fatal("no --peer-key-file: berth refuses --store=kube without it")
		}
		vm, v, ok := mountFor(w, c, file)
		if !ok || v.Secret == nil || v.Secret.SecretName != peerSecret {
			t.Fatalf("--peer-key-file %s is not on a mount of the Secret %s", file, peerSecret)
		}
		if !vm.ReadOnly || vm.SubPath != "" || len(v.Secret.Items) > 0 {
			t.Errorf("peer key mount %s: readOnly %v, subPath %q, items %v; want read-only, whole Secret", vm.MountPath, vm.ReadOnly, vm.SubPath, v.Secret.Items)
		}
		if mode := v.Secret.DefaultMode; mode == nil || *mode&0o007 != 0 {
			t.Errorf("peer key defaultMode %s, want no access for others (0440)", show(mode))
		}
		key := strings.TrimPrefix(strings.TrimPrefix(file, vm.MountPath), "/")
		if key != peerKey {
			t.Errorf("--peer-key-file reads key %q, want %q", key, peerKey)
		}
		var found bool
		for _, s := range objects[*corev1.Secret](m) {
			if s.Name == peerSecret && s.Namespace == w.meta.Namespace {
				found = true
				if got, want := string(s.Data[key]), operatorFiles["overlays/api-replicas/peer-key"]; got != want {
					t.Errorf("Secret %s key %q = %q, want the operator's peer-key file", s.Name, key, got)
				}
			}
		}
		if !found {
			t.Errorf("no Secret %s in namespace %s", peerSecret, w.meta.Namespace)
		}
	})

	// The replicas' command line is API mode's (a patch replaces the whole
	// list) but for the run store's flags: the two must not drift apart.
	t.Run("args as in overlays/api", func(t *testing.T) {
		single := render(t, "overlays/api")
		want := serveArgs(t, single.workload(t).container(t))
		delete(want, "state-dir")
		got := maps.Clone(args)
		for _, f := range []string{"store", "store-namespace", "replica", "advertise", "peer-key-file"} {
			delete(got, f)
		}
		if !maps.Equal(got, want) {
			t.Errorf("args differ from overlays/api's beyond the run store's flags:\n  replicas %v\n  api      %v", got, want)
		}
	})
}

func checkNodeAgent(t *testing.T, m *manifests, w workload) {
	c := w.container(t)
	args := serveArgs(t, c)
	if w.kind != "DaemonSet" {
		t.Errorf("node-agent mode runs as a DaemonSet, got a %s", w.kind)
	}

	t.Run("no RBAC", func(t *testing.T) {
		for _, o := range m.objs {
			switch o.(type) {
			case *rbacv1.Role, *rbacv1.RoleBinding, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
				t.Errorf("%T %s: the node agent never calls the API server and needs no RBAC", o, o.(metav1.Object).GetName())
			}
		}
		if p := w.pod.Spec.AutomountServiceAccountToken; p == nil || *p {
			t.Error("the pod must set automountServiceAccountToken: false")
		}
		for _, s := range objects[*corev1.ServiceAccount](m) {
			if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
				t.Errorf("ServiceAccount %s must set automountServiceAccountToken: false", s.Name)
			}
		}
		if _, ok := args["kube-namespaces"]; ok {
			t.Error("--kube-namespaces is for API mode")
		}
	})

	// hostPath mounts: the flag's path must be the same on the node and in
	// the container.
	tests := []struct {
		flag     string
		typ      corev1.HostPathType
		readOnly bool
	}{
		{"containerd-address", corev1.HostPathSocket, true},
		{"containerd-fifo-dir", corev1.HostPathDirectoryOrCreate, false},
	}
	for _, tt := range tests {
		t.Run("--"+tt.flag, func(t *testing.T) {
			p := args[tt.flag]
			if p == "" {
				t.Fatalf("no --%s", tt.flag)
			}
			var vm *corev1.VolumeMount
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].MountPath == p {
					vm = &c.VolumeMounts[i]
				}
			}
			if vm == nil {
				t.Fatalf("--%s %s is not a mount point", tt.flag, p)
			}
			if vm.SubPath != "" || vm.ReadOnly != tt.readOnly {
				t.Errorf("mount %s: readOnly %v subPath %q, want readOnly %v and no subPath", vm.MountPath, vm.ReadOnly, vm.SubPath, tt.readOnly)
			}
			_, v, _ := mountFor(w, c, p)
			if v.HostPath == nil {
				t.Fatalf("mount %s is volume %s, not a hostPath", p, v.Name)
			}
			if v.HostPath.Path != p {
				t.Errorf("hostPath %s is mounted at %s: the paths must be identical", v.HostPath.Path, p)
			}
			if v.HostPath.Type == nil || *v.HostPath.Type != tt.typ {
				t.Errorf("hostPath %s type %s, want %s", v.HostPath.Path, show(v.HostPath.Type), tt.typ)
			}
		})
	}

	t.Run("every node", func(t *testing.T) {
		all := slices.ContainsFunc(w.pod.Spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Key == "" && tol.Operator == corev1.TolerationOpExists && tol.Effect == ""
		})
		if !all {
			t.Errorf("tolerations %+v do not tolerate every taint", w.pod.Spec.Tolerations)
		}
		if len(w.pod.Spec.NodeSelector) > 0 || w.pod.Spec.Affinity != nil {
			t.Error("a node selector or affinity would leave some nodes without an agent")
		}
	})

	t.Run("root for the socket", func(t *testing.T) {
		uid := c.SecurityContext.RunAsUser
		if uid == nil && w.pod.Spec.SecurityContext != nil {
			uid = w.pod.Spec.SecurityContext.RunAsUser
		}
		if uid == nil || *uid != 0 {
			t.Errorf("runAsUser %s: the node agent opens the root-owned containerd socket and must run as 0", show(uid))
		}
	})

	t.Run("pod security", func(t *testing.T) {
		for _, ns := range objects[*corev1.Namespace](m) {
			if ns.Name == w.meta.Namespace {
				if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
					t.Errorf("namespace %s enforces %q; hostPath volumes need privileged", ns.Name, got)
				}
			}
		}
	})
}

// TestFlagTable keeps the flag table free of duplicates.
func TestFlagTable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range berthFlags {
		if seen[f.name] {
			t.Errorf("flag %s listed twice", f.name)
		}
		seen[f.name] = true
	}
}
