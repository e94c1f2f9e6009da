package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/containerd"
	"berth.dev/berth/sandbox/docker"
	"berth.dev/berth/sandbox/shim"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/permission"
)

// backends are the providers berth was built with, and what closes them.
type backends struct {
	providers []sandbox.Provider
	closers   []func() error
	// ready are the engines configured explicitly (--docker-host,
	// --containerd-address, --kube api or node), which berth serve's
	// /readyz asks whether they answer.
	ready []httpapi.ReadyCheck
}

// pinger is a provider that can say whether its engine answers.
type pinger interface {
	Ping(ctx context.Context) error
}

// readyEngine adds p's engine to b.ready under name.
func (b *backends) readyEngine(name string, p sandbox.Provider) {
	if pp, ok := p.(pinger); ok {
		b.ready = append(b.ready, httpapi.ReadyCheck{Name: "engine " + name, Check: pp.Ping})
	}
}

func (b *backends) Close() error {
	for _, c := range b.closers {
		c()
	}
	return nil
}

// newBackends returns the Docker provider (or a stand-in that explains why
// Docker cannot be used), the containerd provider when a containerd socket
// exists that berth may open, the Kubernetes provider of the --kube mode,
// and the host provider. The Docker, containerd and Kubernetes providers
// do not contact their daemons until a run asks for them, so berth starts
// and runs on the host on a machine without a container engine. A mode
// asked for explicitly that cannot be configured is an error.
func newBackends(g *globalFlags) (*backends, error) {
	b := &backends{}
	// In a pod (berth deployed in a cluster) there is no Docker engine to
	// ask unless one is named.
	if g.dockerHost != "" || !inCluster() {
		var opts []docker.Option
		if g.dockerHost != "" {
			opts = append(opts, docker.WithHost(g.dockerHost))
		}
		opts = append(opts, docker.WithLabelKey(g.labelKey))
		if p, err := docker.New(opts...); err != nil {
			b.providers = append(b.providers, unavailable{scheme: docker.Scheme, err: err})
			if g.dockerHost != "" {
				b.readyEngine("docker ("+g.dockerHost+")", unavailable{scheme: docker.Scheme, err: err})
			}
		} else {
			b.providers = append(b.providers, p)
			b.closers = append(b.closers, p.Close)
			if g.dockerHost != "" {
				b.readyEngine("docker ("+g.dockerHost+")", p)
			}
		}
	}
	ctrd, err := newContainerd(g)
	if err != nil && g.kube == kubeNode {
		b.Close()
		return nil, fmt.Errorf("berth: --kube node reaches pods through the node's containerd: %w", err)
	}
	if err != nil {
		b.providers = append(b.providers, unavailable{scheme: containerd.Scheme, err: err})
		if g.containerdAddress != "" {
			b.readyEngine("containerd ("+g.containerdAddress+")", unavailable{scheme: containerd.Scheme, err: err})
		}
	} else if ctrd != nil {
		b.providers = append(b.providers, ctrd)
		b.closers = append(b.closers, ctrd.Close)
		if g.containerdAddress != "" {
			b.readyEngine("containerd ("+ctrd.Address()+")", ctrd)
		}
	}
	kp, err := newKube(g, ctrd)
	if err != nil {
		b.Close()
		return nil, err
	}
	if kp != nil && g.kube == kubeAPI {
		b.readyEngine("kube (API server)", kp)
	}
	switch {
	case kp == nil:
	case g.kube == kubeNode:
		// A node agent locates a conversation's pod first, so that the
		// run is known by its kube:// reference, not the containerd id of
		// the pod's container.
		b.providers = append([]sandbox.Provider{kp}, b.providers...)
	default:
		b.providers = append(b.providers, kp)
	}
	hp, err := newHostProvider(g)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.providers = append(b.providers, hp)
	return b, nil
}

// newContainerd returns the containerd provider for --containerd-address
// or the default socket, nil when there is no socket berth may open.
func newContainerd(g *globalFlags) (*containerd.Provider, error) {
	addr := g.containerdAddress
	if addr == "" {
		addr = containerd.DefaultAddress()
	}
	if addr == "" {
		if g.containerdAddress == "" && g.kube != kubeNode {
			return nil, nil
		}
		return nil, fmt.Errorf("no containerd socket: pass --containerd-address")
	}
	if g.containerdAddress == "" && syscall.Access(addr, 2 /* W_OK */) != nil {
		return nil, nil // someone else's socket, found by default
	}
	if fi, err := os.Stat(addr); err != nil || fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("no containerd socket at %s; pass --containerd-address with the socket's path (a node agent mounts the node's /run/containerd/containerd.sock)", addr)
	}
	opts := []containerd.Option{containerd.WithAddress(addr), containerd.WithLabelKey(g.labelKey)}
	if g.containerdFIFODir != "" {
		opts = append(opts, containerd.WithFIFODir(g.containerdFIFODir))
	}
	return containerd.New(opts...)
}

// newController wires a controller over the backends. mode is the
// permission mode of berth serve; empty is a one-shot command (call,
// tools): local mode and no question port, since nobody could see a card.
// The placement policy is newPlacementPolicy's, logged once by serve.
// tune, when given, sets more of the configuration (berth serve's
// per-tenant caps and idle expiry).
func newController(g *globalFlags, b *backends, reg prometheus.Registerer, log *slog.Logger, defaultWorkspace string, mode permission.Mode, tune ...func(*controller.Config)) (*controller.Controller, error) {
	policy, err := newPlacementPolicy(g, mode)
	if err != nil {
		return nil, err
	}
	if g.labelKey != "" { // empty: the controller's default
		if err := sandbox.CheckLabelKey("berth: --label-key", g.labelKey); err != nil {
			return nil, err
		}
	}
	if g.lspRequestTimeout < 0 {
		return nil, fmt.Errorf("berth: --lsp-request-timeout %v is negative: pass a duration such as 30s (0: the default, %v)", g.lspRequestTimeout, lsp.DefaultRequestTimeout)
	}
	cfg := controller.Config{
		Providers:         b.providers,
		LabelKey:          g.labelKey,
		NoHostFallback:    g.noHostFallback,
		HostPlacement:     policy.host,
		HostRoots:         policy.roots,
		AllowUnlabelled:   policy.allowUnlabelled,
		HostUser:          hostUserOf(b),
		DefaultWorkspace:  defaultWorkspace,
		Registerer:        reg,
		Logger:            log,
		Mode:              mode,
		NoQuestions:       mode == "",
		LSPRequestTimeout: g.lspRequestTimeout,
	}
	for _, t := range tune {
		t(&cfg)
	}
	c, err := controller.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("berth: %w", err)
	}
	if mode != "" {
		policy.log(log)
	}
	return c, nil
}

// unavailable stands in for a provider that could not be configured: every
// use says why. Its errors wrap sandbox.ErrUnavailable (and so ErrGone):
// the engine may only have been away as berth started (containerd
// restarting), so a stored run in it is kept, not taken for gone, and the
// next start of berth adopts it.
type unavailable struct {
	scheme string
	err    error
}

func (u unavailable) Scheme() string { return u.scheme }

func (u unavailable) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	return nil, u.error()
}

func (u unavailable) Locate(ctx context.Context, owner sandbox.Owner) (string, error) {
	return "", u.error()
}

// Ping fails: the provider could not be set up at start, and berth does
// not set it up again (readiness says so until berth restarts).
func (u unavailable) Ping(context.Context) error { return u.error() }

func (u unavailable) error() error {
	return fmt.Errorf("berth: %s sandboxes are unavailable: %v; this berth set its %s provider up at start, so restart berth once the engine answers: %w: %w",
		u.scheme, u.err, u.scheme, sandbox.ErrUnavailable, sandbox.ErrGone)
}

// prepareAgent starts finding berth's sandbox agent for this machine's
// architecture when serve or mcp start: a berth without a prebuilt agent
// (a developer's `go run`) builds it now, saying so in the log, rather than
// at the first tool call.
func prepareAgent(log *slog.Logger) {
	shim.Prepare(runtime.GOARCH, func(level slog.Level, msg string) {
		log.Log(context.Background(), level, msg)
	})
}
