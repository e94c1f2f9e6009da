// Package docker is the Docker Engine backend of package sandbox. It runs
// processes and serves files inside an existing, running container through
// berth's agent (sandbox/shim), which it places in the container and reaches
// over exec streams. It never creates, starts, restarts or removes a
// container.
package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// Scheme is the reference scheme of Docker sandboxes: "docker://<id or name>".
const Scheme = "docker"

// DefaultLabelKey is the container label that names a conversation:
// berth.conversation=<conversation id>.
const DefaultLabelKey = "berth.conversation"

// Option configures a [Provider].
type Option func(*options)

type options struct {
	host        string
	labelKey    string
	agent       *shim.Binary
	directReads bool
	fsReply     time.Duration
}

// WithHost makes the provider talk to the engine at host (for example
// "unix:///var/run/docker.sock" or "tcp://10.0.0.2:2375") instead of the one
// named by the environment (DOCKER_HOST and friends).
func WithHost(host string) Option { return func(o *options) { o.host = host } }

// WithLabelKey sets the container label [Provider.Locate] matches, instead
// of [DefaultLabelKey].
func WithLabelKey(key string) Option { return func(o *options) { o.labelKey = key } }

// WithAgent makes sandboxes place bin as their agent instead of the one
// [shim.Locate] finds or builds.
func WithAgent(bin *shim.Binary) Option { return func(o *options) { o.agent = bin } }

// WithFSReplyTimeout sets how long a file server in the container may send
// nothing before a call gives it up (shim.Options.FSReplyTimeout); zero
// means shim.DefaultFSReplyTimeout.
func WithFSReplyTimeout(d time.Duration) Option { return func(o *options) { o.fsReply = d } }

// WithDirectReads turns the direct path on (the default) or off. When on,
// berth runs as root on the engine's machine and the container's default
// user is root, FS reads open the container's files, and Dial connects to
// the container's unix sockets, through /proc/PID/root instead of asking the
// agent; writes, processes and tcp Dials always go through the agent.
func WithDirectReads(on bool) Option { return func(o *options) { o.directReads = on } }

// Provider opens sandboxes in running Docker containers. It is safe for
// concurrent use.
type Provider struct {
	opts options
	cli  *client.Client // for Locate; each Sandbox has its own client
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns a provider for the engine named by the environment (or by
// [WithHost]). It does not contact the engine.
func New(opts ...Option) (*Provider, error) {
	p := &Provider{opts: options{labelKey: DefaultLabelKey, directReads: true}}
	for _, o := range opts {
		o(&p.opts)
	}
	if err := sandbox.CheckLabelKey("docker: WithLabelKey", p.opts.labelKey); err != nil {
		return nil, err
	}
	cli, err := p.newClient()
	if err != nil {
		return nil, err
	}
	p.cli = cli
	return p, nil
}

func (p *Provider) newClient() (*client.Client, error) {
	ops := []client.Opt{client.FromEnv}
	if p.opts.host != "" {
		ops = append(ops, client.WithHost(p.opts.host))
	}
	cli, err := client.New(ops...)
	if err != nil {
		return nil, fmt.Errorf("docker: configure the engine client: %w; check DOCKER_HOST", err)
	}
	return cli, nil
}

// Scheme returns "docker".
func (p *Provider) Scheme() string { return Scheme }

// Close releases the provider's engine client. Sandboxes it opened stay
// usable until they are closed themselves.
func (p *Provider) Close() error { return p.cli.Close() }

// Open opens the running container named by ref (a name or an id). It fails
// with an error wrapping sandbox.ErrNotFound when no such container exists
// and sandbox.ErrGone when it is not running. ctx bounds the inspection.
func (p *Provider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	ref = strings.TrimPrefix(ref, Scheme+"://")
	if ref == "" {
		return nil, fmt.Errorf("docker: empty container reference; use docker://NAME or docker://ID: %w", sandbox.ErrNotFound)
	}
	cli, err := p.newClient()
	if err != nil {
		return nil, err
	}
	ins, err := cli.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if err != nil {
		cli.Close()
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("docker: no container named %q exists; check the name with docker ps: %w", ref, sandbox.ErrNotFound)
		}
		return nil, engineError(ref, err)
	}
	c := ins.Container
	if err := stateError(describe(c.Name, c.ID), c.State); err != nil {
		cli.Close()
		return nil, err
	}
	return newSandbox(cli, c, p.opts), nil
}

// Locate returns the id of the one running container labelled
// <label key>=owner.Conversation and, when owner.Tenant is set, <tenant
// key>=owner.Tenant (sandbox.TenantLabelKey). It fails with an error
// wrapping sandbox.ErrNotFound when none runs and names all candidates
// when several do. ctx bounds the listing.
func (p *Provider) Locate(ctx context.Context, owner sandbox.Owner) (string, error) {
	if owner.Conversation == "" {
		return "", fmt.Errorf("docker: empty conversation id: %w", sandbox.ErrNotFound)
	}
	label := owner.Selector(p.opts.labelKey)
	filters := make(client.Filters).Add("label", p.opts.labelKey+"="+owner.Conversation).Add("status", string(container.StateRunning))
	if owner.Tenant != "" {
		filters.Add("label", sandbox.TenantLabelKey(p.opts.labelKey)+"="+owner.Tenant)
	}
	res, err := p.cli.ContainerList(ctx, client.ContainerListOptions{Filters: filters})
	if err != nil {
		return "", engineError("", err)
	}
	switch len(res.Items) {
	case 0:
		return "", fmt.Errorf("docker: no running container is labelled %s: %w", label, sandbox.ErrNotFound)
	case 1:
		return res.Items[0].ID, nil
	}
	var names []string
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0]
		}
		names = append(names, describe(name, c.ID))
	}
	slices.Sort(names)
	return "", fmt.Errorf("docker: %d running containers are labelled %s: %s; stop all but one or open one by name with docker://NAME",
		len(names), label, strings.Join(names, ", "))
}

// inspectState returns nil when container id runs, and otherwise an error
// wrapping sandbox.ErrGone that names it and says what happened.
func inspectState(ctx context.Context, cli *client.Client, id string) error {
	ins, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker: container %s was removed; open the conversation's new container: %w", short(id), sandbox.ErrGone)
		}
		return engineError(short(id), err)
	}
	return stateError(describe(ins.Container.Name, ins.Container.ID), ins.Container.State)
}

// stateError returns nil for a running, unpaused container and otherwise an
// error wrapping sandbox.ErrGone that says its state.
func stateError(name string, st *container.State) error {
	if st == nil {
		return fmt.Errorf("docker: container %s reports no state: %w", name, sandbox.ErrGone)
	}
	switch {
	case st.Paused:
		return fmt.Errorf("docker: container %s is paused; exec would block until it is unpaused (docker unpause): %w: %w", name, sandbox.ErrUnavailable, sandbox.ErrGone)
	case st.Restarting:
		return fmt.Errorf("docker: container %s is restarting; open it again once it runs: %w", name, sandbox.ErrGone)
	case st.Running:
		return nil
	case st.Dead:
		return fmt.Errorf("docker: container %s is dead: %w", name, sandbox.ErrGone)
	case st.Status == container.StateCreated:
		return fmt.Errorf("docker: container %s was created but never started; berth does not start containers: %w", name, sandbox.ErrGone)
	}
	msg := fmt.Sprintf("docker: container %s is %s (exit code %d", name, st.Status, st.ExitCode)
	if st.OOMKilled {
		msg += ", killed for running out of memory"
	}
	if st.FinishedAt != "" && !strings.HasPrefix(st.FinishedAt, "0001-") {
		msg += ", finished at " + st.FinishedAt
	}
	return fmt.Errorf("%s); berth does not start containers, so use a running one: %w", msg, sandbox.ErrGone)
}

// engineError wraps a failure to talk to the engine; an unreachable engine
// is ErrGone and ErrUnavailable (it may come back).
func engineError(what string, err error) error {
	if what != "" {
		what = " about container " + what
	}
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("docker: cannot reach the Docker engine%s (%v); check that dockerd runs and DOCKER_HOST: %w: %w", what, err, sandbox.ErrUnavailable, sandbox.ErrGone)
	}
	return fmt.Errorf("docker: asking the engine%s: %w", what, err)
}

// describe names a container for messages: "name (0123456789ab)".
func describe(name, id string) string {
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		return short(id)
	}
	return fmt.Sprintf("%s (%s)", name, short(id))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Ping asks the engine whether it answers (GET /_ping), for berth serve's
// readiness: an error says the engine cannot be reached.
func (p *Provider) Ping(ctx context.Context) error {
	if _, err := p.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("docker: the engine at %s does not answer: %w", p.cli.DaemonHost(), err)
	}
	return nil
}
