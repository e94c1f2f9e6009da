package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/sandboxtest"
	"berth.dev/berth/sandbox/shim"
)

// newProvider returns a provider over the test daemon, closed at cleanup.
func newProvider(t *testing.T, opts ...Option) *Provider {
	t.Helper()
	p, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// open opens container id through p; the sandbox is closed at cleanup.
func open(t *testing.T, p *Provider, id string) *Sandbox {
	t.Helper()
	sb, err := p.Open(context.Background(), id)
	if err != nil {
		t.Fatalf("Open(%s): %v", short(id), err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb.(*Sandbox)
}

// sh runs a shell script in the container through a bare transport.
func sh(t *testing.T, cli *client.Client, id, script string) string {
	t.Helper()
	out, errOut, code, err := run(t, NewTransport(cli, id), shim.ExecSpec{Args: []string{"sh", "-c", script}}, nil)
	if err != nil || code != 0 {
		t.Fatalf("sh %q: code %d err %v stderr %q", script, code, err, errOut)
	}
	return out
}

func TestConformance(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{image: testImage(t, cli)})
	scratch := "/tmp/berth-conformance-" + randomID()
	sh(t, cli, id, "mkdir -p "+scratch)
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("directReads=%v", direct), func(t *testing.T) {
			p := newProvider(t, WithDirectReads(direct))
			sandboxtest.Run(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
				sb, err := p.Open(context.Background(), id)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return sb, sandboxtest.Config{Scratch: scratch, WithFSReplyTimeout: func(t *testing.T, reply time.Duration) sandbox.Sandbox {
					short, err := newProvider(t, WithDirectReads(direct), WithFSReplyTimeout(reply)).Open(context.Background(), id)
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					return short
				}}
			})
		})
	}
}

func TestOpen(t *testing.T) {
	cli := needDocker(t)
	p := newProvider(t)
	ctx := context.Background()

	running := startContainer(t, cli, containerSpec{})
	sb := open(t, p, running)
	if sb.Ref() != "docker://"+running {
		t.Errorf("Ref() = %q, want docker://%s", sb.Ref(), running)
	}
	if err := sb.Check(ctx); err != nil {
		t.Errorf("Check on a running container: %v", err)
	}
	ins, err := cli.ContainerInspect(ctx, running, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := open(t, p, "docker://"+strings.TrimPrefix(ins.Container.Name, "/"))
	if byName.Ref() != sb.Ref() {
		t.Errorf("Open by name: Ref() = %q, want %q", byName.Ref(), sb.Ref())
	}

	stopped := startContainer(t, cli, containerSpec{})
	stopContainer(t, cli, stopped)
	paused := startContainer(t, cli, containerSpec{})
	pauseContainer(t, cli, paused)
	created := startContainer(t, cli, containerSpec{noStart: true})

	tests := []struct {
		name  string
		ref   string
		class error
		says  string
	}{
		{"missing", "berth-no-such-container-" + randomID(), sandbox.ErrNotFound, "berth-no-such-container-"},
		{"stopped", stopped, sandbox.ErrGone, "exited"},
		{"paused", paused, sandbox.ErrGone, "paused"},
		{"never started", created, sandbox.ErrGone, "never started"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := p.Open(ctx, tt.ref)
			if err == nil {
				sb.Close()
				t.Fatalf("Open succeeded")
			}
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), short(tt.ref)) {
				t.Fatalf("Open = %v; want %v saying %q and naming %s", err, tt.class, tt.says, short(tt.ref))
			}
		})
	}
}

func TestLocate(t *testing.T) {
	cli := needDocker(t)
	p := newProvider(t)
	ctx := context.Background()

	none := "conv-" + randomID()
	if _, err := p.Locate(ctx, sandbox.Owner{Conversation: none}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Locate with no container = %v, want ErrNotFound", err)
	}

	one := "conv-" + randomID()
	id := startContainer(t, cli, containerSpec{conversation: one})
	// A stopped container of the same conversation is not a candidate.
	stopContainer(t, cli, startContainer(t, cli, containerSpec{conversation: one}))
	if got, err := p.Locate(ctx, sandbox.Owner{Conversation: one}); err != nil || got != id {
		t.Errorf("Locate with one running container = %q, %v; want %s", got, err, id)
	}

	several := "conv-" + randomID()
	a := startContainer(t, cli, containerSpec{conversation: several})
	b := startContainer(t, cli, containerSpec{conversation: several})
	_, err := p.Locate(ctx, sandbox.Owner{Conversation: several})
	if err == nil || errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), short(a)) || !strings.Contains(err.Error(), short(b)) {
		t.Errorf("Locate with two containers = %v; want an error naming %s and %s", err, short(a), short(b))
	}

	// Tenants: a container belongs to the tenant on its label only.
	shared := "conv-" + randomID()
	ofA := startContainer(t, cli, containerSpec{conversation: shared, tenant: "a"})
	ofB := startContainer(t, cli, containerSpec{conversation: shared, tenant: "b"})
	for tenant, want := range map[string]string{"a": ofA, "b": ofB} {
		if got, err := p.Locate(ctx, sandbox.Owner{Conversation: shared, Tenant: tenant}); err != nil || got != want {
			t.Errorf("Locate(%s, tenant %s) = %q, %v; want %s", shared, tenant, got, err, want)
		}
	}
	if _, err := p.Locate(ctx, sandbox.Owner{Conversation: shared, Tenant: "c"}); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "berth.tenant=c") {
		t.Errorf("Locate for a tenant with no container = %v; want ErrNotFound naming berth.tenant=c", err)
	}
	if _, err := p.Locate(ctx, sandbox.Owner{Conversation: one, Tenant: "a"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Locate for a tenant of a container without a tenant label = %v; want ErrNotFound", err)
	}

	// Another label key.
	other := newProvider(t, WithLabelKey("berth.other"))
	if _, err := other.Locate(ctx, sandbox.Owner{Conversation: one}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Locate under another label key = %v, want ErrNotFound", err)
	}
}

// TestStoppedMidRun stops the container under a running process: Wait
// reports ErrGone, and later calls fail fast naming the container.
func TestStoppedMidRun(t *testing.T) {
	cli := needDocker(t)
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("directReads=%v", direct), func(t *testing.T) {
			id := startContainer(t, cli, containerSpec{})
			sb := open(t, newProvider(t, WithDirectReads(direct)), id)
			ctx := context.Background()
			fsys, err := sb.FS(ctx, "/tmp")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := fsys.(*fastFS); ok != (direct && os.Geteuid() == 0) {
				t.Errorf("FS is %T with direct reads %v", fsys, direct)
			}
			var out syncWriter
			out.ready = make(chan struct{})
			proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo ready; exec sleep 1000"}, Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			<-out.ready
			stopContainer(t, cli, id)

			_, err = proc.Wait()
			if !errors.Is(err, sandbox.ErrGone) {
				t.Fatalf("Wait after the container stopped = %v, want ErrGone", err)
			}
			checks := map[string]error{"Check": sb.Check(ctx)}
			_, checks["Start"] = sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}})
			_, checks["ReadFile"] = fsys.ReadFile(ctx, "x")
			checks["WriteFile"] = fsys.WriteFile(ctx, "x", []byte("x"), 0o644)
			_, checks["FS"] = sb.FS(ctx, "/tmp")
			for call, err := range checks {
				if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), short(id)) {
					t.Errorf("%s after the container stopped = %v; want ErrGone naming %s", call, err, short(id))
				}
			}
			var pe *fs.PathError
			if !errors.As(checks["ReadFile"], &pe) {
				t.Errorf("ReadFile error %v is not a *fs.PathError", checks["ReadFile"])
			}
			removeContainer(t, cli, id)
			if err := sb.Check(ctx); !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "removed") {
				t.Errorf("Check after removal = %v, want ErrGone saying removed", err)
			}
		})
	}
}

// TestDirectReadsStayInside opens an FS whose root is a symbolic link in the
// container: the direct path must resolve it inside the container, not on
// the host.
func TestDirectReadsStayInside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("direct reads need root")
	}
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{})
	marker := randomID()
	sh(t, cli, id, "mkdir -p /data/ws && echo "+marker+" > /data/ws/f && ln -s /data/ws /ws && ln -s ../../etc /data/ws/up")
	sb := open(t, newProvider(t), id)
	ctx := context.Background()
	fsys, err := sb.FS(ctx, "/ws")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fsys.(*fastFS); !ok {
		t.Fatalf("FS is %T, want the direct path", fsys)
	}
	b, err := fsys.ReadFile(ctx, "f")
	if err != nil || string(b) != marker+"\n" {
		t.Fatalf("ReadFile(f) = %q, %v; want %q", b, err, marker+"\n")
	}
	if _, err := fsys.ReadFile(ctx, "up/passwd"); !errors.Is(err, sandbox.ErrEscape) {
		t.Fatalf("ReadFile through a link out of the root = %v, want ErrEscape", err)
	}
	// Writes go through the agent and are seen by the direct reads.
	if err := fsys.WriteFile(ctx, "g", []byte("written"), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, err := fsys.ReadFile(ctx, "g"); err != nil || string(b) != "written" {
		t.Fatalf("ReadFile(g) = %q, %v", b, err)
	}
	if got := sh(t, cli, id, "cat /data/ws/g; stat -c %a /data/ws/g"); got != "written640\n" {
		t.Fatalf("the container sees %q", got)
	}
}

// TestContainersUnchanged runs a sequence of backend operations and checks
// that no container was created, started, restarted, stopped or removed.
// Only containers of the test image are compared, so that other users of
// the daemon do not disturb the test; any container berth could make from
// what it sees would use that image too.
func TestContainersUnchanged(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{})
	stopped := startContainer(t, cli, containerSpec{})
	stopContainer(t, cli, stopped)
	ctx := context.Background()
	before := containerStates(t, cli, busyboxImage)

	p := newProvider(t)
	for _, ref := range []string{id, stopped, "berth-no-such-container"} {
		sb, err := p.Open(ctx, ref)
		if err != nil {
			continue
		}
		proc, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 1000 & echo started; wait"}})
		if err != nil {
			t.Fatal(err)
		}
		fsys, err := sb.FS(ctx, "/tmp")
		if err != nil {
			t.Fatal(err)
		}
		if err := fsys.MkdirAll(ctx, "berth-unchanged/d", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fsys.WriteFile(ctx, "berth-unchanged/d/f", []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := fsys.ReadFile(ctx, "berth-unchanged/d/f"); err != nil {
			t.Fatal(err)
		}
		if err := sb.Check(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
		proc.Wait()
	}
	p.Locate(ctx, sandbox.Owner{Conversation: "conv-" + randomID()})

	if after := containerStates(t, cli, busyboxImage); !slices.Equal(before, after) {
		t.Fatalf("containers changed:\nbefore %q\nafter  %q", before, after)
	}
}

// containerStates describes every container: id, state, start time and
// restart count, for the containers of image.
func containerStates(t *testing.T, cli *client.Client, image string) []string {
	t.Helper()
	ctx := context.Background()
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range res.Items {
		if c.Image != image {
			continue
		}
		ins, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			// Another test of the machine removed it meanwhile.
			continue
		}
		st := ins.Container.State
		out = append(out, fmt.Sprintf("%s %s pid=%d started=%s restarts=%d", short(c.ID), st.Status, st.Pid, st.StartedAt, ins.Container.RestartCount))
	}
	slices.Sort(out)
	return out
}

// syncWriter closes ready at the first write.
type syncWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	once  sync.Once
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ready) })
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestDirectDialStaysInside dials unix sockets through the direct path: a
// real socket in the container is connected to directly, and a symbolic
// link in the container that names a socket of the host reaches nothing,
// because the path is resolved inside the container's root.
func TestDirectDialStaysInside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the direct path needs root")
	}
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{image: testImage(t, cli)})
	sb := open(t, newProvider(t), id)
	if sb.init == nil {
		t.Fatal("the direct path is off for a root container seen from the host")
	}
	ctx := context.Background()

	// A host socket that the container names through a link.
	hostSock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	dir := "/tmp/berth-dial-" + randomID()
	sh(t, cli, id, "mkdir -p "+dir+" && ln -s "+hostSock+" "+dir+"/evil.sock && ln -s /proc/1/root"+hostSock+" "+dir+"/magic.sock && echo x > "+dir+"/file")
	for _, name := range []string{"evil.sock", "magic.sock", "file", "missing.sock"} {
		if c, err := sb.Dial(ctx, "unix", dir+"/"+name); err == nil {
			c.Close()
			t.Errorf("Dial(%s) succeeded, want an error", name)
		} else if !strings.Contains(err.Error(), dir+"/"+name) {
			t.Errorf("Dial(%s) error %q does not name the socket", name, err)
		}
	}
	select {
	case <-accepted:
		t.Fatal("a Dial inside the container reached a socket of the host")
	case <-time.After(200 * time.Millisecond):
	}

	// A socket in the container is connected to directly.
	if sh(t, cli, id, "command -v python3 || true") == "" {
		t.Skip("no python3 in the test image to listen on a unix socket")
	}
	const server = "import socket,sys\ns=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)\nc,_=s.accept(); c.sendall(b'hi from inside'); c.close()"
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"python3", "-c", server, dir + "/real.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Wait()
	var c sandbox.Conn
	for i := 0; ; i++ {
		if c, err = sb.Dial(ctx, "unix", dir+"/real.sock"); err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("Dial(real.sock): %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := c.(*localConn); !ok {
		t.Errorf("Dial returned %T, want the direct connection", c)
	}
	if got, err := io.ReadAll(c); err != nil || string(got) != "hi from inside" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err == nil {
		t.Error("the direct connection was still open after the sandbox's Close")
	}
	if _, err := sb.Dial(ctx, "unix", dir+"/real.sock"); err == nil {
		t.Error("Dial after Close succeeded")
	}
}
