package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	"berth.dev/berth/sandbox/sandboxtest"
)

// standaloneImage is the image imported into the standalone containerd:
// the minimal one, which has python3 for the conformance suite's Dial subtests.
const standaloneImage = "berth-test-minimal"

// standalone is a containerd daemon of Debian's package that the test
// starts on its own socket and state, beside dockerd's.
type standalone struct {
	dir, sock string
	cli       *client.Client
}

// startStandalone starts `containerd` with a private root, state and
// socket, without its CRI plugin, and stops it at cleanup. It fails (CI)
// or skips when the program, root or the docker CLI (to export the test
// image) is missing.
func startStandalone(t *testing.T) *standalone {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		fail("a standalone containerd (Debian package containerd) is needed: %v", err)
	}
	if os.Geteuid() != 0 {
		fail("a standalone containerd needs root")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		fail("the docker CLI is needed to export the test image: %v", err)
	}
	// Unix socket paths are short; t.TempDir's can be long.
	dir, err := os.MkdirTemp("", "berth-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	s := &standalone{dir: dir, sock: filepath.Join(dir, "c.sock")}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), s.sock, s.sock+".ttrpc", filepath.Join(dir, "debug.sock"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if s.cli != nil {
			s.cli.Close()
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		// Snapshots of deleted containers are unmounted; anything left
		// mounted below dir would make RemoveAll fail, which says so.
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the standalone containerd's state: %v", err)
		}
	})
	log := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(s.sock); err == nil {
			cli, err := client.New(s.sock, client.WithTimeout(5*time.Second))
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err = cli.Version(ctx)
				cancel()
				if err == nil {
					s.cli = cli
					return s
				}
				cli.Close()
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("containerd exited: %v\n%s", err, log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer on %s within 30s:\n%s", s.sock, log())
		}
	}
}

// importImage exports image from the docker engine and imports it into
// namespace ns of the standalone containerd, as `docker save | ctr images
// import` does, and unpacks it. It returns the image's name there.
func (s *standalone) importImage(t *testing.T, ns, image string) client.Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ns), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "save", image)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	imgs, ierr := s.cli.Import(ctx, out)
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("docker save %s: %v: %s", image, err, stderr.String())
	}
	if ierr != nil {
		t.Fatalf("import %s: %v", image, ierr)
	}
	// The archive holds every tag of the image; take the one asked for.
	want := "docker.io/library/" + image + ":latest"
	var names []string
	for _, im := range imgs {
		names = append(names, im.Name)
		if im.Name != want {
			continue
		}
		img := client.NewImage(s.cli, im)
		if err := img.Unpack(ctx, "overlayfs"); err != nil {
			t.Fatalf("unpack %s: %v", im.Name, err)
		}
		return img
	}
	t.Fatalf("import of %s gave %v, not %s", image, names, want)
	return nil
}

// run makes container id from img in namespace ns with labels, starts its
// task (sleep infinity) and removes both at cleanup.
func (s *standalone) run(t *testing.T, ns string, img client.Image, id string, labels map[string]string) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), ns)
	ctr, err := s.cli.NewContainer(ctx, id,
		client.WithContainerLabels(labels),
		client.WithNewSnapshot(id+"-snapshot", img),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "infinity")))
	if err != nil {
		t.Fatalf("create container %s: %v", id, err)
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
		if err := ctr.Delete(cctx, client.WithSnapshotCleanup); err != nil {
			t.Errorf("delete container %s: %v", id, err)
		}
	})
	task, err := ctr.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatalf("create task %s: %v", id, err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start task %s: %v", id, err)
	}
}

// TestStandalone drives a containerd of Debian's package, not dockerd's:
// the test image imported into namespace k8s.io and a pod made as the CRI
// plugin makes one (a sandbox container with the pod's labels and two app
// containers with the CRI labels), found by the locators and opened by
// containerd:// and kube:// references.
func TestStandalone(t *testing.T) {
	s := startStandalone(t)
	img := s.importImage(t, CRINamespace, standaloneImage)
	fifos := filepath.Join(s.dir, "fifo")
	p := newProvider(t, WithAddress(s.sock), WithFIFODir(fifos))
	ctx := context.Background()

	conv := "standalone-" + randomID()
	uid := randomID()
	pod := "web-" + uid
	podLabels := func(kind, container string, extra map[string]string) map[string]string {
		m := map[string]string{criKind: kind, criPodNamespace: "team-a", criPodName: pod, criPodUID: uid}
		if container != "" {
			m[criContainerName] = container
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	sandboxID, mainID, sideID := "pod-"+uid, "main-"+uid, "side-"+uid
	s.run(t, CRINamespace, img, sandboxID, podLabels("sandbox", "", map[string]string{PodLabelKey: conv}))
	s.run(t, CRINamespace, img, mainID, podLabels("container", "main", nil))
	pods := p.Pods("test-node")

	t.Run("locate one container", func(t *testing.T) {
		got, err := p.Locate(ctx, sandbox.Owner{Conversation: conv})
		if want := CRINamespace + "/" + mainID; err != nil || got != want {
			t.Errorf("Locate = %q, %v; want %q", got, err, want)
		}
		got, err = pods.Locate(ctx, sandbox.Owner{Conversation: conv})
		if want := "team-a/" + pod + "/main"; err != nil || got != want {
			t.Errorf("Pods.Locate = %q, %v; want %q", got, err, want)
		}
		ref, err := pods.Locate(ctx, sandbox.Owner{Conversation: "nobody-" + randomID()})
		if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "test-node") {
			t.Errorf("Pods.Locate(unknown) = %q, %v; want ErrNotFound naming the node", ref, err)
		}
	})

	t.Run("open by pod", func(t *testing.T) {
		sb, err := pods.Open(ctx, "kube://team-a/"+pod)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		if got, want := sb.Ref(), "kube://team-a/"+pod+"/main"; got != want {
			t.Errorf("Ref = %q; want %q", got, want)
		}
		// While a program runs, its exec stream's FIFOs are in the
		// configured directory.
		proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(fifos)
		if err != nil || len(entries) == 0 {
			t.Errorf("FIFO dir %s: %d entries, %v; want the exec streams' FIFO sets there", fifos, len(entries), err)
		}
		proc.Signal(ctx, syscall.SIGKILL)
		if st, err := proc.Wait(); err != nil || st.Signal != syscall.SIGKILL {
			t.Fatalf("Wait = %v, %v; want killed", st, err)
		}
	})

	t.Run("conformance", func(t *testing.T) {
		sandboxtest.Run(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
			sb, err := pods.Open(ctx, "team-a/"+pod+"/main")
			if err != nil {
				t.Fatal(err)
			}
			return sb, sandboxtest.Config{Scratch: "/tmp"}
		})
	})

	// A second app container: the pod reference must name one.
	s.run(t, CRINamespace, img, sideID, podLabels("container", "side", nil))
	t.Run("two containers", func(t *testing.T) {
		_, err := pods.Open(ctx, "kube://team-a/"+pod)
		if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "main, side") {
			t.Errorf("Open without a container = %v; want ErrNotFound listing main, side", err)
		}
		sb, err := pods.Open(ctx, "kube://team-a/"+pod+"/side")
		if err != nil {
			t.Fatal(err)
		}
		sb.Close()
		_, err = pods.Locate(ctx, sandbox.Owner{Conversation: conv})
		if err == nil || !strings.Contains(err.Error(), "/main, team-a/") {
			t.Errorf("Pods.Locate with two containers = %v; want an error naming both", err)
		}
		_, err = pods.Open(ctx, "kube://team-a/"+pod+"/nope")
		if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "main, side") {
			t.Errorf("Open of a missing container = %v; want ErrNotFound listing main, side", err)
		}
		_, err = pods.Open(ctx, "kube://team-b/"+pod)
		if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "test-node") {
			t.Errorf("Open of a pod not on the node = %v; want ErrNotFound naming the node", err)
		}
	})
}
