package kube

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// unreachableKubeconfig writes a kubeconfig whose API server does not
// listen (port 1 of loopback) and returns its path.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: not-a-token
contexts:
- name: nowhere
  context:
    cluster: nowhere
    user: nobody
current-context: nowhere
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// noCluster makes the environment name no cluster: no $KUBECONFIG, not in
// a pod, and no ~/.kube/config.
func noCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	old := homeKubeconfig
	homeKubeconfig = filepath.Join(t.TempDir(), "no-such-kubeconfig")
	t.Cleanup(func() { homeKubeconfig = old })
}

func TestNewErrors(t *testing.T) {
	noCluster(t)
	tests := []struct {
		name  string
		opts  []Option
		class error
		says  string
	}{
		{"nothing configured", nil, sandbox.ErrUnsupported, "KUBECONFIG"},
		{"missing kubeconfig", []Option{WithKubeconfig("/nonexistent/berth-kubeconfig")}, nil, "/nonexistent/berth-kubeconfig"},
		{"empty label key", []Option{WithLabelKey("")}, nil, "WithLabelKey"},
		{"bad label key", []Option{WithLabelKey("not a key")}, nil, "not a valid label key"},
		{"bad namespace", []Option{WithNamespaces("Not_A_Namespace")}, nil, "WithNamespaces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.opts...)
			if err == nil {
				t.Fatalf("New succeeded with host %s", p.Host())
			}
			if tt.class != nil && !errors.Is(err, tt.class) {
				t.Errorf("New = %v; want it to wrap %v", err, tt.class)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("New = %v; want it to say %q", err, tt.says)
			}
		})
	}
}

// TestNewOffline checks that New does not contact the API server, and that
// an unreachable one makes Open and Locate fail with ErrGone.
func TestNewOffline(t *testing.T) {
	noCluster(t)
	path := unreachableKubeconfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*callTimeout)
	defer cancel()
	for name, opts := range map[string][]Option{
		"WithKubeconfig": {WithKubeconfig(path)},
		"$KUBECONFIG":    nil,
	} {
		t.Run(name, func(t *testing.T) {
			if opts == nil {
				t.Setenv("KUBECONFIG", path)
			}
			p, err := New(opts...)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if p.Host() != "https://127.0.0.1:1" || p.Scheme() != "kube" {
				t.Errorf("Host() = %q, Scheme() = %q", p.Host(), p.Scheme())
			}
			if sb, err := p.Open(ctx, "kube://default/some-pod"); !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "cannot reach") {
				if sb != nil {
					sb.Close()
				}
				t.Errorf("Open = %v; want ErrGone saying the API server cannot be reached", err)
			}
			if _, err := p.Locate(ctx, sandbox.Owner{Conversation: "conv-1"}); !errors.Is(err, sandbox.ErrGone) {
				t.Errorf("Locate = %v; want ErrGone", err)
			}
		})
	}
}

func TestOpenLocateWithoutCluster(t *testing.T) {
	noCluster(t)
	p, err := New(WithKubeconfig(unreachableKubeconfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ref := range []string{"", "pod-only", "kube://ns/pod/c/extra", "ns//c"} {
		if _, err := p.Open(ctx, ref); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "NAMESPACE/POD") {
			t.Errorf("Open(%q) = %v; want ErrNotFound showing the form", ref, err)
		}
	}
	for _, id := range []string{"", "has spaces", strings.Repeat("x", 64)} {
		if _, err := p.Locate(ctx, sandbox.Owner{Conversation: id}); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Locate(%q) = %v; want ErrNotFound", id, err)
		}
	}
}

// TestPingWithoutCluster: /readyz's check of an API server that does not
// answer fails, naming the server.
func TestPingWithoutCluster(t *testing.T) {
	noCluster(t)
	p, err := New(WithKubeconfig(unreachableKubeconfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Ping(ctx); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Ping = %v; want an error naming the API server https://127.0.0.1:1", err)
	}
}

func pod(containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	p.Status.Phase = corev1.PodRunning
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c, ContainerID: "containerd://" + c, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		})
	}
	return p
}

func TestDefaultContainer(t *testing.T) {
	annotated := pod("a", "b")
	annotated.Annotations = map[string]string{DefaultContainerAnnotation: "b"}
	wrong := pod("a", "b")
	wrong.Annotations = map[string]string{DefaultContainerAnnotation: "c"}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
		says string
	}{
		{"one", pod("main"), "main", ""},
		{"annotated", annotated, "b", ""},
		{"two", pod("a", "b"), "", "kube://ns/p/a"},
		{"wrong annotation", wrong, "", `"c"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := defaultContainer(tt.pod)
			if tt.says == "" {
				if err != nil || got != tt.want {
					t.Fatalf("defaultContainer = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("defaultContainer = %q, %v; want an error saying %q", got, err, tt.says)
			}
		})
	}
}

func TestContainerState(t *testing.T) {
	deleting := pod("main")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pending := pod("main")
	pending.Status.Phase = corev1.PodPending
	waiting := pod("main")
	waiting.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}
	ended := pod("main")
	ended.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 3}}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		container string
		class     error
		says      string
	}{
		{"running", pod("main"), "main", nil, ""},
		{"missing container", pod("main"), "other", sandbox.ErrNotFound, "kube://ns/p/main"},
		{"deleting", deleting, "main", sandbox.ErrGone, "being deleted"},
		{"pending", pending, "main", sandbox.ErrGone, "Pending"},
		{"waiting", waiting, "main", sandbox.ErrGone, "ErrImageNeverPull"},
		{"terminated", ended, "main", sandbox.ErrGone, "exit code 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := containerState(tt.pod, tt.container)
			if tt.class == nil {
				if err != nil || id != "containerd://main" {
					t.Fatalf("containerState = %q, %v", id, err)
				}
				return
			}
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("containerState = %v; want %v saying %q", err, tt.class, tt.says)
			}
		})
	}
}

// TestCommand checks the command lines of pod execs, running the Env and
// Dir wrapper with this machine's sh.
func TestCommand(t *testing.T) {
	if _, err := command(shim.ExecSpec{Args: []string{"id"}, User: "1000"}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("command with a user = %v; want ErrUnsupported", err)
	}
	if _, err := command(shim.ExecSpec{}); err == nil {
		t.Error("command without args succeeded")
	}
	if args, err := command(shim.ExecSpec{Args: []string{"/a", "b"}}); err != nil || args[0] != "sh" || strings.Join(args[len(args)-2:], " ") != "/a b" {
		t.Errorf("command without Env and Dir = %q, %v; want the args run by sh", args, err)
	}

	args, err := command(shim.ExecSpec{Args: []string{"sh", "-c", "exit 43"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(args[0], args[1:]...).Run(); err == nil || err.(*exec.ExitError).ExitCode() != 43 {
		t.Errorf("the wrapper's exit for a program exiting 43: %v", err)
	}

	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec shim.ExecSpec
		want string
		code int
	}{
		{"env", shim.ExecSpec{Env: []string{"A=one", "B=two words", "C="}}, "one|two words||", 0},
		{"dir", shim.ExecSpec{Dir: dir}, "|||" + dir, 0},
		{"both", shim.ExecSpec{Env: []string{"A=$(x) `y` 'z'"}, Dir: dir}, "$(x) `y` 'z'|||" + dir, 0},
		{"missing dir", shim.ExecSpec{Dir: filepath.Join(dir, "missing")}, "", 126},
		// sh exits at once on a failing special builtin (dash: code 2).
		{"bad name", shim.ExecSpec{Env: []string{"A-B=1"}}, "", -1},
		{"plain", shim.ExecSpec{}, "|||", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Args = []string{"sh", "-c", `printf '%s|%s|%s|' "$A" "$B" "$C"; if [ -n "$BERTH_DIR" ]; then pwd -P; fi`}
			if tt.spec.Dir != "" {
				tt.spec.Env = append(tt.spec.Env, "BERTH_DIR=1")
			}
			args, err := command(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "A=", "B=", "C="}
			cmd.Stdout = &out
			err = cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code && (tt.code != -1 || code == 0) {
				t.Fatalf("exit code %d, want %d (output %q)", code, tt.code, out.String())
			}
			if got := strings.TrimSuffix(out.String(), "\n"); tt.code == 0 && got != tt.want {
				t.Errorf("output %q, want %q", got, tt.want)
			}
		})
	}
}
