package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"berth.dev/berth/sandbox"
)

// taskNamespace holds the containers the tests make directly through
// containerd (dockerd does not copy docker labels to containerd).
const taskNamespace = "berth-test"

// busyboxRoot makes a root file system of the host's static busybox.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	const bb = "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("busybox-static is needed for containerd task tests: %v", err)
		}
		t.Skipf("busybox-static is needed for containerd task tests (apt-get install busybox-static): %v", err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sh", "sleep", "cat", "id", "true"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"tmp", "etc", "proc", "dev", "sys"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	return dir
}

// startTask makes a container with labels in taskNamespace and, unless
// noStart, starts its task (sleep). Both are removed at cleanup. It
// returns the container id.
func startTask(t *testing.T, cli *client.Client, labels map[string]string, noStart bool) string {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), taskNamespace)
	id := "berth-test-" + randomID()
	ctr, err := cli.NewContainer(ctx, id,
		client.WithContainerLabels(labels),
		client.WithNewSpec(oci.WithRootFSPath(busyboxRoot(t)), oci.WithProcessArgs("/bin/sleep", "1000000"), oci.WithEnv([]string{"PATH=/bin"})))
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if task, err := ctr.Task(cctx, nil); err == nil {
			task.Kill(cctx, syscall.SIGKILL)
			if ch, err := task.Wait(cctx); err == nil {
				select {
				case <-ch:
				case <-cctx.Done():
				}
			}
			task.Delete(cctx, client.WithProcessKill)
		}
		ctr.Delete(cctx)
		cli.NamespaceService().Delete(cctx, taskNamespace)
	})
	if noStart {
		return id
	}
	task, err := ctr.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatalf("create task: %v", err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start task: %v", err)
	}
	return id
}

// stopTask kills container id's task and waits until it stopped; the task
// stays (stopped, not deleted).
func stopTask(t *testing.T, cli *client.Client, id string) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), taskNamespace)
	ctr, err := cli.LoadContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := task.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ch
}

func TestTasks(t *testing.T) {
	need(t)
	p := newProvider(t)
	ctx := context.Background()

	conv := "tasks-" + randomID()
	labelled := startTask(t, p.cli, map[string]string{DefaultLabelKey: conv}, false)
	podConv := "tasks-pod-" + randomID()
	uid := randomID()
	podLabels := map[string]string{criPodNamespace: "default", criPodName: "web-" + uid, criPodUID: uid}
	withKind := func(kind string, extra map[string]string) map[string]string {
		m := map[string]string{criKind: kind}
		for k, v := range podLabels {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	// A pod sandbox (its pause container) with the conversation label and
	// the pod's one app container, without it.
	startTask(t, p.cli, withKind("sandbox", map[string]string{PodLabelKey: podConv}), false)
	app := startTask(t, p.cli, withKind("container", map[string]string{criContainerName: "app"}), false)
	// Tenant a's container, and tenant a's pod (its sandbox labelled with
	// the pod keys), each of a conversation id tenant b names too.
	tenantConv := "tasks-tenant-" + randomID()
	ofA := startTask(t, p.cli, map[string]string{DefaultLabelKey: tenantConv, "berth.tenant": "a"}, false)
	tenantPodConv := "tasks-tenant-pod-" + randomID()
	uid2 := randomID()
	podA := map[string]string{criPodNamespace: "default", criPodName: "a-" + uid2, criPodUID: uid2}
	startTask(t, p.cli, merge(podA, map[string]string{criKind: "sandbox", PodLabelKey: tenantPodConv, "berth.dev/tenant": "a"}), false)
	appA := startTask(t, p.cli, merge(podA, map[string]string{criKind: "container", criContainerName: "app"}), false)
	stopped := startTask(t, p.cli, map[string]string{DefaultLabelKey: "tasks-stopped-" + randomID()}, false)
	stopTask(t, p.cli, stopped)
	created := startTask(t, p.cli, nil, true)

	t.Run("locate", func(t *testing.T) {
		tests := []struct {
			conv string
			want string
		}{
			{conv, taskNamespace + "/" + labelled},
			{podConv, taskNamespace + "/" + app},
		}
		for _, tt := range tests {
			got, err := p.Locate(ctx, sandbox.Owner{Conversation: tt.conv})
			if err != nil || got != tt.want {
				t.Errorf("Locate(%s) = %q, %v; want %q", tt.conv, got, err, tt.want)
			}
		}
	})

	t.Run("locate with tenants", func(t *testing.T) {
		for _, tt := range []struct {
			owner sandbox.Owner
			want  string // "": ErrNotFound
		}{
			{sandbox.Owner{Conversation: tenantConv, Tenant: "a"}, taskNamespace + "/" + ofA},
			{sandbox.Owner{Conversation: tenantConv, Tenant: "b"}, ""},
			{sandbox.Owner{Conversation: tenantConv}, taskNamespace + "/" + ofA}, // one tenant: the conversation alone
			{sandbox.Owner{Conversation: tenantPodConv, Tenant: "a"}, taskNamespace + "/" + appA},
			{sandbox.Owner{Conversation: tenantPodConv, Tenant: "b"}, ""},
			{sandbox.Owner{Conversation: conv, Tenant: "a"}, ""}, // labelled with the conversation only
		} {
			got, err := p.Locate(ctx, tt.owner)
			switch {
			case tt.want == "" && (!errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "tenant="+tt.owner.Tenant)):
				t.Errorf("Locate(%+v) = %q, %v; want ErrNotFound naming the tenant label", tt.owner, got, err)
			case tt.want != "" && (err != nil || got != tt.want):
				t.Errorf("Locate(%+v) = %q, %v; want %q", tt.owner, got, err, tt.want)
			}
		}
	})

	t.Run("open", func(t *testing.T) {
		tests := []struct {
			name, id string
			class    error
			says     string
		}{
			{"running", labelled, nil, ""},
			{"stopped task", stopped, sandbox.ErrGone, "stopped"},
			{"no task", created, sandbox.ErrGone, "no running task"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				sb, err := p.Open(ctx, "containerd://"+taskNamespace+"/"+tt.id)
				if tt.class == nil {
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					defer sb.Close()
					if err := sb.Check(ctx); err != nil {
						t.Fatalf("Check: %v", err)
					}
					// The agent is placed through the task's root and runs.
					proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}})
					if err != nil {
						t.Fatalf("Start: %v", err)
					}
					if st, err := proc.Wait(); err != nil || !st.Success() {
						t.Fatalf("Wait: %v, %v", st, err)
					}
					return
				}
				if err == nil {
					sb.Close()
					t.Fatal("Open succeeded")
				}
				if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.says) {
					t.Fatalf("Open = %v; want %v saying %q", err, tt.class, tt.says)
				}
			})
		}
	})
}

// merge returns the labels of ms in one map, later ones winning.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// TestBelongs: the one rule both containerd locators (containers and
// pods) apply to a container's or a pod sandbox's labels: conversation and
// tenant on the same object, under one pair of keys.
func TestBelongs(t *testing.T) {
	p := &Provider{opts: options{labelKey: "acme.io/chat"}}
	a := sandbox.Owner{Conversation: "c1", Tenant: "a"}
	for _, tt := range []struct {
		labels map[string]string
		owner  sandbox.Owner
		want   bool
	}{
		{map[string]string{"acme.io/chat": "c1", "acme.io/tenant": "a"}, a, true},
		{map[string]string{PodLabelKey: "c1", "berth.dev/tenant": "a"}, a, true},
		{map[string]string{"acme.io/chat": "c1", "acme.io/tenant": "b"}, a, false},
		{map[string]string{PodLabelKey: "c1", "berth.dev/tenant": "b"}, a, false},
		{map[string]string{"acme.io/chat": "c1"}, a, false},
		{map[string]string{"acme.io/chat": "c1", "berth.dev/tenant": "a"}, a, false}, // keys of two pairs
		{map[string]string{"acme.io/chat": "c1"}, sandbox.Owner{Conversation: "c1"}, true},
		{map[string]string{PodLabelKey: "c1"}, sandbox.Owner{Conversation: "c1"}, true},
	} {
		if got := p.belongs(tt.owner, tt.labels); got != tt.want {
			t.Errorf("belongs(%+v, %v) = %v, want %v", tt.owner, tt.labels, got, tt.want)
		}
	}
}
