package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
	"berth.dev/berth/sandbox/shim/agent"
)

// inspectTimeout bounds the engine calls berth makes on its own behalf
// without a caller context: the exit-code inspection after a stream ended
// and the state inspection that explains a failed call.
const inspectTimeout = 10 * time.Second

// stopSettle is how long a program killed by a signal waits for the engine
// to report its container stopped, before its end counts as the program's
// own; see [Transport.settle].
const stopSettle = 2 * time.Second

// Transport is a [shim.Transport] over the Docker Engine API for one running
// container: Exec is exec create + attach on a hijacked connection, Place
// copies the agent in with the archive API. It is safe for concurrent use.
type Transport struct {
	cli *client.Client
	id  string // full container id

	once shim.PlaceOnce // Place's serialisation and cache
}

var _ shim.Transport = (*Transport)(nil)

// NewTransport returns a transport into the container with the given full id.
// cli stays owned by the caller, who closes it after the transport's last use.
func NewTransport(cli *client.Client, containerID string) *Transport {
	return &Transport{
		cli: cli,
		id:  containerID,
	}
}

// ContainerID returns the full id of the transport's container.
func (t *Transport) ContainerID() string { return t.id }

// Exec starts spec.Args in the container, without a TTY, with stdin, stdout
// and stderr attached. ctx bounds only the start; the returned stream lives
// until the program ends or the stream is closed.
func (t *Transport) Exec(ctx context.Context, spec shim.ExecSpec) (shim.Stream, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("docker: exec: no program given; pass the program and its arguments in Args")
	}
	created, err := t.cli.ExecCreate(ctx, t.id, client.ExecCreateOptions{
		User:         spec.User,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Env:          spec.Env,
		WorkingDir:   spec.Dir,
		Cmd:          spec.Args,
	})
	if err != nil {
		return nil, t.explain(ctx, "exec "+spec.Args[0], err)
	}
	att, err := t.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, t.explain(ctx, "attach to exec "+spec.Args[0], err)
	}
	return newStream(t, created.ID, spec.Args[0], att.HijackedResponse), nil
}

// stream is one exec's hijacked connection, demultiplexed by its readers
// (see demux).
type stream struct {
	t      *Transport
	execID string
	prog   string
	conn   net.Conn
	stdin  *stdinWriter
	out    *demux

	closeOnce sync.Once
	closed    chan struct{} // closed by Close

	waitOnce sync.Once
	code     int
	waitErr  error
}

// connBuffer is the read buffer over an exec's connection.
const connBuffer = 64 << 10

func newStream(t *Transport, execID, prog string, hr client.HijackedResponse) *stream {
	// A plain socket with nothing read ahead is read and written with raw
	// system calls (see agent.RawFile); a wrapped one (TLS, or data the
	// engine's client buffered) through the connection.
	var src io.Reader = hr.Reader
	raw := agent.NewRawFile(hr.Conn, "docker exec "+prog)
	if raw != nil && hr.Reader.Buffered() == 0 {
		src = bufio.NewReaderSize(raw, connBuffer)
	} else {
		raw = nil
	}
	// Without a TTY the engine always multiplexes; API 1.41 mislabels the
	// media type, so it is not consulted.
	return &stream{
		t:      t,
		execID: execID,
		prog:   prog,
		conn:   hr.Conn,
		stdin:  &stdinWriter{hr: hr, raw: raw},
		out:    newDemux(src),
		closed: make(chan struct{}),
	}
}

func (s *stream) Stdin() io.WriteCloser { return s.stdin }

// Stdout reads the program's stdout. Reading it drives the connection: the
// program's stderr reaches Stderr only while Stdout is read (or Wait reads
// ahead; see demux.drain).
func (s *stream) Stdout() io.Reader { return demuxReader{d: s.out} }
func (s *stream) Stderr() io.Reader { return demuxReader{d: s.out, stderr: true} }

// Close tears the connection down; readers then see io.ErrClosedPipe
// instead of EOF.
func (s *stream) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.out.close()
		s.conn.Close()
	})
	return nil
}

func (s *stream) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Wait waits for the end of the output, then asks the engine for the exit
// code. When the program did not end on its own (the stream broke, the
// container stopped) the error says why and wraps sandbox.ErrGone when the
// container is no longer usable.
func (s *stream) Wait() (int, error) {
	s.waitOnce.Do(func() {
		s.out.drain()
		<-s.out.done
		s.code, s.waitErr = s.result()
	})
	return s.code, s.waitErr
}

func (s *stream) result() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	ins, err := s.t.cli.ExecInspect(ctx, s.execID, client.ExecInspectOptions{})
	if err != nil {
		return -1, s.t.explain(ctx, "inspect exec "+s.prog, err)
	}
	// berth cut the stream itself before it ended (a failed start, a
	// refused Dial, a silent file server, Close): the program's end is
	// then unknown by berth's own doing, no sign that the container
	// stopped, so the container is checked once and not awaited.
	cut := errors.Is(s.out.copyErr, errStreamClosed)
	if s.out.copyErr == nil && ins.Running {
		// The engine ended the stream, so the program closed its output;
		// the engine records the exec's end a moment later.
		ins = s.awaitEnd(ctx, ins)
	}
	if s.out.copyErr != nil || ins.Running {
		if cut {
			if gone := s.t.check(ctx); gone != nil {
				return -1, gone
			}
			return -1, fmt.Errorf("docker: %s in container %s: the stream was closed before the program ended", s.prog, short(s.t.id))
		}
		if gone := s.t.settle(ctx); gone != nil {
			return -1, gone
		}
		if s.out.copyErr != nil {
			return -1, fmt.Errorf("docker: %s in container %s: output stream broke: %w", s.prog, short(s.t.id), s.out.copyErr)
		}
		return -1, fmt.Errorf("docker: %s in container %s: the engine closed the stream while the program still runs", s.prog, short(s.t.id))
	}
	if ins.ExitCode >= 128 {
		// Killed by a signal: possibly because the container stopped, which
		// the caller must learn as ErrGone rather than as an exit status.
		settle := s.t.settle
		if cut {
			settle = s.t.check // berth's own kill after it cut the stream
		}
		if gone := settle(ctx); gone != nil {
			return -1, gone
		}
	}
	return ins.ExitCode, nil
}

// execEndWait bounds how long an exec whose stream ended cleanly may still
// be recorded as running; execEndPoll is how often it is asked meanwhile.
const (
	execEndWait = time.Second
	execEndPoll = 20 * time.Millisecond
)

// awaitEnd asks the engine again, for up to execEndWait, until it records
// the end of the exec whose stream ended; it returns the last answer.
func (s *stream) awaitEnd(ctx context.Context, ins client.ExecInspectResult) client.ExecInspectResult {
	deadline := time.NewTimer(execEndWait)
	defer deadline.Stop()
	tick := time.NewTicker(execEndPoll)
	defer tick.Stop()
	for ins.Running {
		select {
		case <-deadline.C:
			return ins
		case <-ctx.Done():
			return ins
		case <-tick.C:
		}
		next, err := s.t.cli.ExecInspect(ctx, s.execID, client.ExecInspectOptions{})
		if err != nil {
			return ins
		}
		ins = next
	}
	return ins
}

// stdinWriter writes to the hijacked connection; Close half-closes it so the
// program reads EOF while its output keeps flowing.
type stdinWriter struct {
	hr     client.HijackedResponse
	raw    *agent.RawFile // the connection's socket, or nil
	mu     sync.Mutex
	closed bool
}

func (w *stdinWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return 0, os.ErrClosed
	}
	if w.raw != nil {
		return w.raw.Write(p)
	}
	return w.hr.Conn.Write(p)
}

func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.hr.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("docker: close stdin: %w", err)
	}
	return nil
}

// Place copies the agent binary into the container, once per container and
// binary hash, at <dir>/shim-<hash12>/berth-shim for the first directory of
// shim.PlaceDirs that the engine can write, and returns that path. A copy already
// there with the right content is reused.
func (t *Transport) Place(ctx context.Context, bin *shim.Binary) (string, error) {
	return t.once.Place(ctx, bin, "docker: place agent in container "+short(t.id), t.place)
}

func (t *Transport) place(ctx context.Context, bin *shim.Binary) (string, error) {
	data, sum, err := bin.Verified()
	if err != nil {
		return "", fmt.Errorf("docker: place agent: %w", err)
	}
	rel := bin.PlaceName()
	// The archive API also works on a stopped container; placing the agent
	// there would only postpone the error.
	if gone := t.check(ctx); gone != nil {
		return "", gone
	}

	// A copy placed earlier (by this or another berth process) is reused
	// when its content matches.
	for _, dir := range shim.PlaceDirs {
		target := path.Join(dir, rel)
		same, err := t.sameFile(ctx, target, sum)
		if err != nil {
			return "", err
		}
		if same {
			return target, nil
		}
	}

	var failures []string
	for _, dir := range shim.PlaceDirs {
		// The archive is extracted into the directory's parent ("/", "/tmp",
		// "/dev/shm"); the directories below it come with the archive.
		parent, base := path.Split(dir)
		tarball, err := agentTar(path.Join(base, rel), data)
		if err != nil {
			return "", err
		}
		_, err = t.cli.CopyToContainer(ctx, t.id, client.CopyToContainerOptions{
			DestinationPath: parent,
			Content:         bytes.NewReader(tarball),
		})
		if err == nil {
			return path.Join(dir, rel), nil
		}
		if ctx.Err() != nil || client.IsErrConnectionFailed(err) {
			return "", t.explain(ctx, "place agent", err)
		}
		// Not writable, or not there (an image without /tmp): the next
		// directory may do, unless the container itself went away.
		if gone := t.check(ctx); gone != nil {
			return "", gone
		}
		failures = append(failures, fmt.Sprintf("%s: %v", dir, err))
	}
	why := "no directory of " + strings.Join(shim.PlaceDirs, ", ") + " is writable"
	if t.readOnlyRoot(ctx) {
		why = "the container's root filesystem is read-only and " + why
	}
	return "", fmt.Errorf("docker: container %s: %s, so berth cannot place its supervisor (berth-shim); mount a writable volume at /tmp or run the container without --read-only (%s): %w",
		short(t.id), why, strings.Join(failures, "; "), sandbox.ErrUnsupported)
}

// sameFile reports whether target exists in the container with the content
// whose SHA-256 is sum.
func (t *Transport) sameFile(ctx context.Context, target string, sum [32]byte) (bool, error) {
	st, err := t.cli.ContainerStatPath(ctx, t.id, client.ContainerStatPathOptions{Path: target})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, t.explain(ctx, "look for the agent", err)
	}
	if !st.Stat.Mode.IsRegular() {
		return false, nil
	}
	res, err := t.cli.CopyFromContainer(ctx, t.id, client.CopyFromContainerOptions{SourcePath: target})
	if err != nil {
		return false, t.explain(ctx, "read back the agent", err)
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	hdr, err := tr.Next()
	if err != nil || hdr.Typeflag != tar.TypeReg || hdr.Mode&0o111 == 0 {
		return false, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, tr); err != nil {
		return false, t.explain(ctx, "read back the agent", err)
	}
	return bytes.Equal(h.Sum(nil), sum[:]), nil
}

// agentTar is a tar archive holding the agent at name (with its parent
// directories), executable by every user and owned by root.
func agentTar(name string, data []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dirs := strings.Split(path.Dir(name), "/")
	for i := range dirs {
		err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir,
			Name:     strings.Join(dirs[:i+1], "/") + "/",
			Mode:     0o755,
			ModTime:  now,
		})
		if err != nil {
			return nil, fmt.Errorf("docker: place agent: %w", err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  now,
	}); err != nil {
		return nil, fmt.Errorf("docker: place agent: %w", err)
	}
	if _, err := tw.Write(data); err != nil {
		return nil, fmt.Errorf("docker: place agent: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("docker: place agent: %w", err)
	}
	return buf.Bytes(), nil
}

// Arch returns the architecture of the container's image (its config's
// "architecture", a GOARCH name), for choosing the agent to place; nothing
// runs in the container. ctx bounds the two engine calls.
func (t *Transport) Arch(ctx context.Context) (string, error) {
	ins, err := t.cli.ContainerInspect(ctx, t.id, client.ContainerInspectOptions{})
	if err != nil {
		return "", t.explain(ctx, "inspect for its architecture", err)
	}
	img, err := t.cli.ImageInspect(ctx, ins.Container.Image)
	if err != nil {
		return "", fmt.Errorf("docker: inspect image %s of container %s for its architecture: %w", ins.Container.Image, short(t.id), err)
	}
	if img.Architecture == "" {
		return "", fmt.Errorf("docker: image %s of container %s names no architecture; rebuild it with one (docker build sets it)", ins.Container.Image, short(t.id))
	}
	return img.Architecture, nil
}

var _ shim.Archer = (*Transport)(nil)

func (t *Transport) readOnlyRoot(ctx context.Context) bool {
	ins, err := t.cli.ContainerInspect(ctx, t.id, client.ContainerInspectOptions{})
	return err == nil && ins.Container.HostConfig != nil && ins.Container.HostConfig.ReadonlyRootfs
}

// check inspects the container once and returns an error wrapping
// sandbox.ErrGone when it is not running (or the engine is unreachable),
// and nil when it runs.
func (t *Transport) check(ctx context.Context) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), inspectTimeout)
		defer cancel()
	}
	return inspectState(ctx, t.cli, t.id)
}

// settle is check for a program that was killed or cut off: the engine may
// report the exec's end before it noticed that the container's init died,
// so when the container still looks alive, settle waits up to stopSettle
// for it to stop (a wait on the engine, not polling) before deciding.
func (t *Transport) settle(ctx context.Context) error {
	if gone := t.check(ctx); gone != nil {
		return gone
	}
	wctx, cancel := context.WithTimeout(ctx, stopSettle)
	w := t.cli.ContainerWait(wctx, t.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	// Exactly one of the channels delivers, also when wctx ends.
	select {
	case <-w.Result:
	case <-w.Error:
	}
	cancel()
	return t.check(ctx)
}

// explain turns the error of a failed engine call into one that says what
// happened: when the container stopped, was paused or removed, or the engine
// is unreachable, an error wrapping sandbox.ErrGone; otherwise err with
// context.
func (t *Transport) explain(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("docker: %s in container %s: %w", op, short(t.id), err)
	}
	if gone := t.check(ctx); gone != nil {
		return fmt.Errorf("%w (%s failed: %v)", gone, op, err)
	}
	return fmt.Errorf("docker: %s in container %s: %w", op, short(t.id), err)
}
