package main

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/containerd"
	"berth.dev/berth/sandbox/docker"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools/permission"
)

// backends are the providers berth was built with, and what closes them.
type backends struct {
	providers []sandbox.Provider
	closers   []func() error
}

func (b *backends) Close() error {
	for _, c := range b.closers {
		c()
	}
	return nil
}

// newBackends returns the Docker provider (or a stand-in that explains why
// Docker cannot be used), the containerd provider when a containerd socket
// exists that berth may open, and the host provider. The Docker and
// containerd providers do not contact their daemons until a run asks for
// them, so berth starts and runs on the host on a machine without a
// container engine.
func newBackends(g *globalFlags) *backends {
	b := &backends{}
	var opts []docker.Option
	if g.dockerHost != "" {
		opts = append(opts, docker.WithHost(g.dockerHost))
	}
	opts = append(opts, docker.WithLabelKey(g.labelKey))
	if p, err := docker.New(opts...); err != nil {
		b.providers = append(b.providers, unavailable{scheme: docker.Scheme, err: err})
	} else {
		b.providers = append(b.providers, p)
		b.closers = append(b.closers, p.Close)
	}
	if addr := containerd.DefaultAddress(); addr != "" && syscall.Access(addr, 2 /* W_OK */) == nil {
		if p, err := containerd.New(containerd.WithAddress(addr), containerd.WithLabelKey(g.labelKey)); err != nil {
			b.providers = append(b.providers, unavailable{scheme: containerd.Scheme, err: err})
		} else {
			b.providers = append(b.providers, p)
			b.closers = append(b.closers, p.Close)
		}
	}
	b.providers = append(b.providers, &host.Provider{})
	return b
}

// newController wires a controller over the backends. mode is the
// permission mode of berth serve; empty is a one-shot command (call,
// tools): local mode and no question port, since nobody could see a card.
func newController(g *globalFlags, b *backends, reg prometheus.Registerer, log *slog.Logger, defaultWorkspace string, mode permission.Mode) (*controller.Controller, error) {
	return controller.New(controller.Config{
		Providers:        b.providers,
		LabelKey:         g.labelKey,
		NoHostFallback:   g.noHostFallback,
		DefaultWorkspace: defaultWorkspace,
		Registerer:       reg,
		Logger:           log,
		Mode:             mode,
		NoQuestions:      mode == "",
	})
}

// unavailable stands in for a provider that could not be configured: every
// use says why.
type unavailable struct {
	scheme string
	err    error
}

func (u unavailable) Scheme() string { return u.scheme }

func (u unavailable) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	return nil, fmt.Errorf("berth: %s sandboxes are unavailable: %v: %w", u.scheme, u.err, sandbox.ErrGone)
}

func (u unavailable) Locate(ctx context.Context, conversationID string) (string, error) {
	return "", fmt.Errorf("berth: %s sandboxes are unavailable: %v: %w", u.scheme, u.err, sandbox.ErrGone)
}
