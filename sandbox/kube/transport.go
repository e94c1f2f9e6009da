package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// stopSettle is how long a program that was killed or cut off waits for
// the pod to show that it is being deleted, before its end counts as the
// program's own; see [Transport.settle].
const stopSettle = 2 * time.Second

// Transport is a [shim.Transport] over the pods/exec subresource for one
// container of a running pod: Exec is a pod exec session (WebSocket,
// falling back to SPDY for API servers that do not speak it), and Place
// pipes the agent in through an exec of sh. It is safe for concurrent use.
type Transport struct {
	cfg                *rest.Config
	core               *podClient
	ns, pod, container string
	uid                types.UID // the pod opened; another uid is a new pod
	containerID        string    // the container's runtime id when opened

	spdyOnly atomic.Bool // the API server refused a WebSocket upgrade once

	once shim.PlaceOnce // Place's serialisation and cache
}

var _ shim.Transport = (*Transport)(nil)

// Ref returns "NAMESPACE/POD/CONTAINER".
func (t *Transport) Ref() string { return t.ns + "/" + t.pod + "/" + t.container }

func (t *Transport) name() string {
	return "container " + t.container + " of pod " + t.ns + "/" + t.pod
}

// check returns nil when the pod opened still runs, is not being deleted
// and its container runs as when opened; else an error wrapping
// sandbox.ErrGone. A done ctx is replaced so that the answer still comes.
func (t *Transport) check(ctx context.Context) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer cancel()
	}
	pod, err := getPod(ctx, t.core, t.ns, t.pod)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: pod %s/%s was deleted; open the conversation's new pod: %w", t.ns, t.pod, sandbox.ErrGone)
	}
	if err != nil {
		return apiError(t.cfg.Host, "get pod "+t.ns+"/"+t.pod, t.ns, err)
	}
	if t.uid != "" && pod.UID != t.uid {
		return fmt.Errorf("kube: pod %s/%s was deleted and replaced by a new pod of the same name; open it again: %w", t.ns, t.pod, sandbox.ErrGone)
	}
	id, err := containerState(pod, t.container)
	if err != nil {
		if errors.Is(err, sandbox.ErrGone) {
			return err
		}
		return fmt.Errorf("%v: %w", err, sandbox.ErrGone)
	}
	if t.containerID != "" && id != t.containerID {
		return fmt.Errorf("kube: %s restarted since berth opened it, so its processes and the files outside its volumes are gone; open it again: %w", t.name(), sandbox.ErrGone)
	}
	return nil
}

// settle is check for a program that was killed or cut off: the exec may
// end before the API server shows the pod being deleted, so when the pod
// still looks alive, settle asks again until stopSettle passed.
func (t *Transport) settle(ctx context.Context) error {
	deadline := time.Now().Add(stopSettle)
	for {
		err := t.check(ctx)
		if err != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// explain turns the error of a failed exec into one wrapping
// sandbox.ErrGone when the container is no longer usable or the API server
// cannot be reached, else err with context.
func (t *Transport) explain(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("kube: %s in %s: %w", op, t.name(), err)
	}
	if gone := t.check(ctx); gone != nil {
		if errors.Is(gone, sandbox.ErrGone) {
			return fmt.Errorf("%w (%s failed: %v)", gone, op, err)
		}
		return fmt.Errorf("kube: %s in %s: %w (and checking the pod failed: %v)", op, t.name(), err, gone)
	}
	c := cause(err)
	if unreachable(c) {
		return fmt.Errorf("kube: %s in %s: the connection to the API server or the kubelet broke (%v); check that the cluster runs: %w: %w", op, t.name(), err, sandbox.ErrUnavailable, sandbox.ErrGone)
	}
	if apierrors.IsForbidden(c) {
		return fmt.Errorf("kube: %s in %s: %w; grant berth's account the rules of kube.Rules() (pods/exec create) in namespace %s", op, t.name(), err, t.ns)
	}
	return fmt.Errorf("kube: %s in %s: %w", op, t.name(), err)
}

// cause unwraps an upgrade failure, which hides the API server's answer.
func cause(err error) error {
	var uf *httpstream.UpgradeFailureError
	if errors.As(err, &uf) && uf.Cause != nil {
		return uf.Cause
	}
	return err
}

// wrapScript runs every program of a pod exec as its child, applying Env
// and Dir, which a pod exec does not set:
//
//	sh -c wrapScript berth-exec N KEY=VALUE... DIR PROGRAM ARGS...
//
// The shell stays the program's parent and holds the session's stdout and
// stderr until the program ended. The container runtime's exec (the CRI's,
// behind the kubelet) closes the program's stdin as soon as its stdout
// ends; the agent lets go of stdout when its child exits, before it sends
// the exit status on stderr, and takes a closed stdin as berth gone, so
// without the shell the exit status was lost about every other time.
const wrapScript = `n=$1; shift
while [ "$n" -gt 0 ]; do export "$1" || exit 126; shift; n=$((n-1)); done
if [ -n "$1" ]; then cd -- "$1" || exit 126; fi
shift
"$@"
exit $?`

// command returns the command line of spec for a pod exec.
func command(spec shim.ExecSpec) ([]string, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("kube: exec: no program given; pass the program and its arguments in Args")
	}
	if spec.User != "" {
		return nil, fmt.Errorf("kube: exec %s as user %q: a pod exec runs as the container's user, set by the pod's securityContext (runAsUser); leave Cmd.User empty or change the pod: %w",
			spec.Args[0], spec.User, sandbox.ErrUnsupported)
	}
	args := []string{"sh", "-c", wrapScript, "berth-exec", strconv.Itoa(len(spec.Env))}
	args = append(args, spec.Env...)
	args = append(args, spec.Dir)
	return append(args, spec.Args...), nil
}

// executor returns the executor of one exec session running args.
func (t *Transport) executor(args []string, ws bool) (remotecommand.Executor, error) {
	req := t.core.execRequest(t.ns, t.pod, &corev1.PodExecOptions{
		Container: t.container,
		Command:   args,
		Stdin:     true,
		Stdout:    true,
		Stderr:    true,
	})
	if ws {
		return remotecommand.NewWebSocketExecutor(t.cfg, "GET", req.URL().String())
	}
	return remotecommand.NewSPDYExecutor(t.cfg, "POST", req.URL())
}

// fallback reports whether a failed WebSocket session should be retried
// over SPDY: the upgrade failed, and not because the pod is missing, the
// credentials were rejected or the request is malformed.
func fallback(err error) bool {
	if httpstream.IsHTTPSProxyError(err) {
		return true
	}
	if !httpstream.IsUpgradeFailure(err) {
		return false
	}
	// A refusal is retried too: RBAC authorizes a WebSocket exec (a GET)
	// with the verb get on pods/exec, SPDY (a POST) with create, and a
	// Role may grant only create, as the Kubernetes documentation long
	// showed.
	c := cause(err)
	return !apierrors.IsNotFound(c) && !apierrors.IsUnauthorized(c) && !apierrors.IsBadRequest(c)
}

// Exec starts spec.Args in the container through a pod exec session,
// without a TTY, with stdin, stdout and stderr. spec.Env and spec.Dir are
// applied by an sh wrapper; spec.User is not supported. ctx bounds only the
// start: Exec returns once the session is up; the returned stream lives
// until the program ends or the stream is closed.
func (t *Transport) Exec(ctx context.Context, spec shim.ExecSpec) (shim.Stream, error) {
	args, err := command(spec)
	if err != nil {
		return nil, err
	}
	return t.start(ctx, args, spec.Args[0])
}

// start starts a pod exec session running args as given; prog names the
// program in errors.
func (t *Transport) start(ctx context.Context, args []string, prog string) (*stream, error) {
	s := newStream(t, prog)
	// The session lives for the program's whole life, not only for ctx.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go s.run(sctx, args)
	// A session that is not up within callTimeout will not come: the API
	// server or the kubelet accepted the connection but does not answer.
	timer := time.NewTimer(callTimeout)
	defer timer.Stop()
	select {
	case <-s.started:
		return s, nil
	case <-s.done:
		// The session ended before it read stdin: it failed, or the
		// program ended at once without output.
		if s.err != nil {
			return nil, s.err
		}
		return s, nil
	case <-ctx.Done():
		s.Close()
		<-s.done
		return nil, fmt.Errorf("kube: exec %s in %s: %w", prog, t.name(), ctx.Err())
	case <-timer.C:
		s.Close()
		<-s.done
		return nil, fmt.Errorf("kube: exec %s in %s: the exec session was not set up within %v; check that the API server and the kubelet of the pod's node answer: %w",
			prog, t.name(), callTimeout, sandbox.ErrGone)
	}
}

// stream is one exec session's stdio: a pipe the executor copies stdin
// from, and outPipes it copies stdout and stderr to.
type stream struct {
	t    *Transport
	prog string

	stdinR         *io.PipeReader
	stdinW         *io.PipeWriter
	stdin          *stdinWriter
	stdout, stderr *outPipe

	startOnce sync.Once
	started   chan struct{} // closed when the executor first reads stdin: the session is up

	cancel    context.CancelFunc // ends the session
	closeOnce sync.Once
	closed    chan struct{} // closed by Close

	done chan struct{} // closed by run when code and err are set
	code int
	err  error
}

func newStream(t *Transport, prog string) *stream {
	s := &stream{t: t, prog: prog, started: make(chan struct{}), closed: make(chan struct{}), done: make(chan struct{})}
	s.stdinR, s.stdinW = io.Pipe()
	s.stdout, s.stderr = newOutPipe(), newOutPipe()
	s.stdin = &stdinWriter{s: s}
	return s
}

func (s *stream) Stdin() io.WriteCloser { return s.stdin }
func (s *stream) Stdout() io.Reader     { return s.stdout }
func (s *stream) Stderr() io.Reader     { return s.stderr }

// Read is the executor's stdin: its first call says the session is up.
func (s *stream) Read(p []byte) (int, error) {
	s.startOnce.Do(func() { close(s.started) })
	return s.stdinR.Read(p)
}

// Close tears the session down at once: its connection closes, readers
// and writers fail with io.ErrClosedPipe, and the program, whose session
// ended, is killed by the container runtime.
func (s *stream) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.cancel()
		s.stdinR.CloseWithError(io.ErrClosedPipe)
		s.stdout.closeRead()
		s.stderr.closeRead()
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

// Wait waits for the program to end and its output to be delivered.
func (s *stream) Wait() (int, error) {
	<-s.done
	return s.code, s.err
}

// run owns the session: it streams until the program ends or Close, then
// ends the pipes and sets the result.
func (s *stream) run(ctx context.Context, args []string) {
	defer close(s.done)
	defer s.cancel()
	// remotecommand logs every copy that a torn-down session cuts short;
	// berth reports what matters through Wait.
	ctx = klog.NewContext(ctx, logr.Discard())
	err := s.stream(ctx, args)
	// Whether the caller closed the stream before it ended by itself; a
	// stream that broke is closed by its reader soon after.
	closed := s.isClosed()
	// The session ended: writes to stdin fail instead of blocking on a
	// pipe nobody reads, and the outputs end once delivered.
	s.stdinR.CloseWithError(io.ErrClosedPipe)
	s.stdout.closeWrite()
	s.stderr.closeWrite()
	s.code, s.err = s.result(err, closed)
}

// stream runs one session, over WebSocket unless the API server refused
// that upgrade, then over SPDY.
func (s *stream) stream(ctx context.Context, args []string) error {
	opts := remotecommand.StreamOptions{Stdin: s, Stdout: s.stdout, Stderr: s.stderr}
	if !s.t.spdyOnly.Load() {
		exe, err := s.t.executor(args, true)
		if err != nil {
			return fmt.Errorf("set up the exec session: %w", err)
		}
		err = exe.StreamWithContext(ctx, opts)
		if err == nil || !fallback(err) || s.isStarted() {
			return err
		}
		s.t.spdyOnly.Store(true)
	}
	exe, err := s.t.executor(args, false)
	if err != nil {
		return fmt.Errorf("set up the exec session: %w", err)
	}
	return exe.StreamWithContext(ctx, opts)
}

func (s *stream) isStarted() bool {
	select {
	case <-s.started:
		return true
	default:
		return false
	}
}

// result turns the session's end into the program's exit code, or an
// error wrapping sandbox.ErrGone when the pod went away.
func (s *stream) result(err error, closed bool) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err == nil {
		return 0, nil
	}
	var ee exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		code := ee.ExitStatus()
		if code >= 128 && !closed {
			// Killed by a signal: possibly because the pod is being
			// deleted, which the caller must learn as ErrGone rather
			// than as an exit status.
			if gone := s.t.settle(ctx); gone != nil {
				return -1, gone
			}
		}
		return code, nil
	}
	if closed {
		return -1, fmt.Errorf("kube: %s in %s: the stream was closed before the program ended", s.prog, s.t.name())
	}
	return -1, s.t.explain(ctx, "exec "+s.prog, err)
}

// stdinWriter writes the program's stdin; Close ends it, so the program
// reads EOF while its output keeps flowing.
type stdinWriter struct {
	s    *stream
	once sync.Once
}

func (w *stdinWriter) Write(p []byte) (int, error) {
	n, err := w.s.stdinW.Write(p)
	if err != nil {
		err = os.ErrClosed
	}
	return n, err
}

func (w *stdinWriter) Close() error {
	w.once.Do(func() { w.s.stdinW.Close() })
	return nil
}
