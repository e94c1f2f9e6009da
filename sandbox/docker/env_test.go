package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"berth.dev/berth/sandbox"
)

// busyboxImage is the registry-free test image made from Debian's
// busybox-static by importing a tiny root file system.
const busyboxImage = "berth-test-busybox"

// needDocker returns a client for a daemon that answered a real ping. It
// skips the test when none answers, and fails it instead when CI=true.
func needDocker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{})
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker daemon required (CI=true): %v", err)
		}
		t.Skipf("no docker daemon answers: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// testImage is the image the conformance tests run in: $BERTH_TEST_IMAGE,
// else berth-test-minimal when present, else the busybox image.
func testImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	if img := os.Getenv("BERTH_TEST_IMAGE"); img != "" {
		return img
	}
	if _, err := cli.ImageInspect(context.Background(), "berth-test-minimal"); err == nil {
		return "berth-test-minimal"
	}
	return needBusybox(t, cli)
}

// needBusybox makes the busybox image when it is missing and returns its
// name.
func needBusybox(t testing.TB, cli *client.Client) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cli.ImageInspect(ctx, busyboxImage); err == nil {
		return busyboxImage
	}
	const bb = "/bin/busybox"
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("busybox-static is needed to make %s: %v", busyboxImage, err)
		}
		t.Skipf("busybox-static is needed to make %s (apt-get install busybox-static): %v", busyboxImage, err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		t.Helper()
		h.ModTime = time.Now()
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin", "etc", "root", "dev", "proc", "sys", "workspace", "home"} {
		add(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}, nil)
	}
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}, nil)
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755}, data)
	for _, name := range strings.Fields(string(list)) {
		if name == "busybox" {
			continue
		}
		add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + name, Linkname: "busybox", Mode: 0o777}, nil)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644},
		[]byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/group", Mode: 0o644},
		[]byte("root:x:0:\nnogroup:x:65534:\n"))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, busyboxImage, client.ImageImportOptions{
		Changes: []string{"ENV PATH=/bin", "CMD [\"sleep\", \"1000000\"]"},
	})
	if err != nil {
		t.Fatalf("import %s: %v", busyboxImage, err)
	}
	io.Copy(io.Discard, res)
	res.Close()
	if _, err := cli.ImageInspect(ctx, busyboxImage); err != nil {
		t.Fatalf("import %s: %v", busyboxImage, err)
	}
	return busyboxImage
}

// containerSpec tunes startContainer.
type containerSpec struct {
	image        string
	conversation string // value of the berth.conversation label; random when empty
	tenant       string // value of the berth.tenant label; none when empty
	readOnly     bool
	binds        []string
	tmpfs        map[string]string
	noStart      bool
}

// startContainer creates and starts a container that sleeps, without
// network, and removes it when the test ends. The test is the platform
// here: berth itself never creates containers.
func startContainer(t testing.TB, cli *client.Client, spec containerSpec) string {
	t.Helper()
	ctx := context.Background()
	if spec.image == "" {
		spec.image = needBusybox(t, cli)
	}
	if spec.conversation == "" {
		spec.conversation = randomID()
	}
	labels := map[string]string{DefaultLabelKey: spec.conversation}
	if spec.tenant != "" {
		labels[sandbox.TenantLabelKey(DefaultLabelKey)] = spec.tenant
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:  spec.image,
			Cmd:    []string{"sleep", "1000000"},
			Labels: labels,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    "none",
			ReadonlyRootfs: spec.readOnly,
			Binds:          spec.binds,
			Tmpfs:          spec.tmpfs,
		},
		Name: "berth-test-" + randomID(),
	})
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	})
	if !spec.noStart {
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("start container: %v", err)
		}
	}
	return res.ID
}

// stopContainer kills the container at once, as an operator's docker stop
// would after its grace period.
func stopContainer(t testing.TB, cli *client.Client, id string) {
	t.Helper()
	zero := 0
	if _, err := cli.ContainerStop(context.Background(), id, client.ContainerStopOptions{Timeout: &zero}); err != nil {
		t.Fatalf("stop container: %v", err)
	}
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// pauseContainer freezes the container; it is unpaused again when the test
// ends so that its removal does not wait.
func pauseContainer(t testing.TB, cli *client.Client, id string) {
	t.Helper()
	if _, err := cli.ContainerPause(context.Background(), id, client.ContainerPauseOptions{}); err != nil {
		t.Fatalf("pause container: %v", err)
	}
	t.Cleanup(func() { cli.ContainerUnpause(context.Background(), id, client.ContainerUnpauseOptions{}) })
}

func removeContainer(t testing.TB, cli *client.Client, id string) {
	t.Helper()
	if _, err := cli.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatalf("remove container: %v", err)
	}
}
