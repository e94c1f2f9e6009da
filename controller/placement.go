package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"berth.dev/berth/sandbox"
)

// HostPlacement says whether runs may be placed on the host.
type HostPlacement string

// The host placements. The zero value is HostFallback, or HostExplicit
// when Config.NoHostFallback is set.
const (
	// HostOff: no run is placed on the host; "auto" without a container
	// fails with sandbox.ErrNotFound and an explicit "host" with
	// ErrPlacement.
	HostOff HostPlacement = "off"
	// HostExplicit: only a run opened with "sandbox":"host" is placed on
	// the host; "auto" without a container fails.
	HostExplicit HostPlacement = "explicit"
	// HostFallback: "host" is accepted, and "auto" falls back to the host
	// when the conversation has no container.
	HostFallback HostPlacement = "fallback"
)

// ParseHostPlacement parses off, explicit or fallback; "" is the zero
// value (the default).
func ParseHostPlacement(s string) (HostPlacement, error) {
	switch p := HostPlacement(s); p {
	case "", HostOff, HostExplicit, HostFallback:
		return p, nil
	}
	return "", fmt.Errorf("host placement %q: use off, explicit or fallback", s)
}

// KubePodLabelKey is the pod label naming a conversation that kube://
// references carry (sandbox/kube and sandbox/containerd's pods); it is
// used in messages.
const KubePodLabelKey = "berth.dev/conversation"

// ErrPlacement: the berth's placement policy refuses this sandbox (host
// placement off, a host workspace outside the host roots, a container
// not labelled with the run's conversation). HTTP 403 placement_refused.
var ErrPlacement = errors.New("placement refused")

// hostPlacement is the effective policy of cfg.
func (cfg *Config) hostPlacement() HostPlacement {
	p := cfg.HostPlacement
	if p == "" {
		p = HostFallback
	}
	if p == HostFallback && cfg.NoHostFallback {
		p = HostExplicit // the stricter of the two settings
	}
	return p
}

// resolveRoots cleans and resolves the symbolic links of each host root,
// which must be an existing directory. nil stays nil (anywhere); an empty
// list stays empty (nowhere).
func resolveRoots(roots []string) ([]string, error) {
	if roots == nil {
		return nil, nil
	}
	out := make([]string, 0, len(roots))
	for _, r := range roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("controller: host root %q: %w", r, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("controller: host root %q cannot be resolved: %w; name an existing directory", r, err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("controller: host root %q (%s) is not a directory; name the directory host workspaces must lie under", r, real)
		}
		out = append(out, real)
	}
	return out, nil
}

// checkHostRoot returns the workspace abs with its symbolic links
// resolved when it lies under one of the host roots, and an error
// wrapping ErrPlacement otherwise. Without roots (nil) abs is returned
// as it is.
func (c *Controller) checkHostRoot(abs string) (string, error) {
	if c.hostRoots == nil {
		return abs, nil
	}
	if len(c.hostRoots) == 0 {
		return "", fmt.Errorf("controller: host workspace %s refused: this berth names no host root, so no host workspace is allowed: ask the operator to name one with --host-root DIR, or run the conversation in a container labelled %s=<conversation id>: %w",
			abs, c.cfg.LabelKey, ErrPlacement)
	}
	underRoot := func(p string) bool {
		for _, root := range c.hostRoots {
			if within(root, p) {
				return true
			}
		}
		return false
	}
	real, err := filepath.EvalSymlinks(abs)
	switch {
	case err != nil && underRoot(abs):
		return "", fmt.Errorf("controller: host workspace %s cannot be resolved: %w; pass an existing directory under %s", abs, err, strings.Join(c.hostRoots, ", "))
	case err != nil:
		// Refused as any path outside the roots is, whether it exists or
		// not: the answer must not tell which host paths exist.
		real = abs
	case underRoot(real):
		return real, nil
	}
	shown := abs
	if real != abs {
		shown = fmt.Sprintf("%s (which resolves to %s)", abs, real)
	}
	return "", fmt.Errorf("controller: host workspace %s refused: it is not under a host root of this berth (%s): pass a workspace under one of them, or ask the operator to add one with --host-root: %w",
		shown, strings.Join(c.hostRoots, ", "), ErrPlacement)
}

// within reports whether path is root or lies under it; both are clean
// and absolute.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// hostOffError is the refusal of an explicit host run when host
// placement is off.
func (c *Controller) hostOffError(conv string) error {
	if conv == "" {
		conv = "<conversation id>"
	}
	return fmt.Errorf("controller: sandbox \"host\" refused: host placement is off on this berth: run the conversation in a container labelled %s=%s, or ask the operator for --host-placement explicit: %w",
		c.cfg.LabelKey, conv, ErrPlacement)
}

// owner is what the sandbox of a run of spec must be labelled with: the
// run's conversation and, with Config.RequireTenantLabel, its tenant. It
// is the one placement rule for containers: "auto" locates the sandbox
// by it, and an explicit reference must name the sandbox it locates
// (checkLabelled).
func (c *Controller) owner(spec RunSpec) sandbox.Owner {
	o := sandbox.Owner{Conversation: spec.ConversationID}
	if c.cfg.RequireTenantLabel {
		o.Tenant = spec.Tenant
	}
	return o
}

// labelKey is the conversation label key of the sandboxes of scheme sch,
// for messages.
func (c *Controller) labelKey(sch string) string {
	if sch == sandbox.PodScheme {
		return KubePodLabelKey
	}
	return c.cfg.LabelKey
}

// labels says, for messages, which labels a sandbox of scheme sch must
// carry to belong to o: "berth.conversation=c-42", or
// "berth.conversation=c-42 and berth.tenant=acme".
func (c *Controller) labels(sch string, o sandbox.Owner) string {
	key := c.labelKey(sch)
	conv := o.Conversation
	if conv == "" {
		conv = "<conversation id>"
	}
	s := key + "=" + conv
	if c.cfg.RequireTenantLabel {
		s += " and " + sandbox.TenantLabelKey(key) + "=" + o.Tenant
	}
	return s
}

// checkOwner refuses a run that cannot be placed in a container at all:
// one without a tenant on a berth that requires tenant labels.
func (c *Controller) checkOwner(spec RunSpec) error {
	if c.cfg.RequireTenantLabel && spec.Tenant == "" {
		return fmt.Errorf("controller: sandbox %s refused: this berth serves several tenants and places a run only in a container labelled with its tenant (%s=<tenant>), and the run has no tenant: open it with a tenant's credential: %w",
			spec.Sandbox, sandbox.TenantLabelKey(c.cfg.LabelKey), ErrPlacement)
	}
	return nil
}

// checkLabelled refuses an explicitly named container sb (opened from
// provider p of scheme sch) that is not the container labelled with the
// run's conversation (and tenant, see owner), unless
// Config.AllowUnlabelled. It closes sb when it refuses.
//
// With tenant labels the refusal does not say which of the two labels sb
// lacks: finding out would mean looking for the conversation's container
// without the tenant, and the answer would tell the caller about another
// tenant's containers.
func (c *Controller) checkLabelled(ctx context.Context, p sandbox.Provider, sch string, sb sandbox.Sandbox, spec RunSpec) error {
	if c.cfg.AllowUnlabelled || sch == HostScheme {
		return nil
	}
	owner := c.owner(spec)
	label := c.labels(sch, owner)
	if spec.ConversationID == "" {
		sb.Close()
		return fmt.Errorf("controller: sandbox %s refused: an explicit container reference needs the run's conversation_id, and the container must carry the label %s; pass conversation_id, or ask the operator for --allow-unlabelled: %w",
			spec.Sandbox, label, ErrPlacement)
	}
	if err := c.checkOwner(spec); err != nil {
		sb.Close()
		return err
	}
	located, err := p.Locate(ctx, owner)
	if err == nil && sameContainer(sch, sb.Ref(), sch+"://"+located) {
		return nil
	}
	sb.Close()
	if errors.Is(err, sandbox.ErrUnavailable) {
		// The engine cannot say whose the container is now: not a
		// refusal (an unavailable error wraps ErrGone too).
		return fmt.Errorf("controller: sandbox %s: cannot check its label %s now: %w", spec.Sandbox, label, err)
	}
	why := fmt.Sprintf("the container labelled so is %s://%s", sch, located)
	if err != nil {
		why = err.Error()
	}
	what := "the label " + label + " of the run's conversation"
	if owner.Tenant != "" {
		what = "both labels " + label + ", of the run's conversation and of its tenant"
	}
	return fmt.Errorf("controller: sandbox %s refused: it does not carry %s (%s): label the conversation's container %s, or open the run with sandbox auto; an operator can allow unlabelled references with --allow-unlabelled: %w",
		spec.Sandbox, what, why, label, ErrPlacement)
}

// sameContainer compares the resolved reference of an opened sandbox
// with the reference its provider located: docker's are full ids,
// containerd's NAMESPACE/ID, kube's NAMESPACE/POD/CONTAINER, where the
// label is on the pod, so any container of the located pod is the same.
func sameContainer(sch, opened, located string) bool {
	if sch != sandbox.PodScheme {
		return opened == located
	}
	pod := func(ref string) string {
		parts := strings.SplitN(strings.TrimPrefix(ref, sch+"://"), "/", 3)
		if len(parts) < 2 {
			return ref
		}
		return parts[0] + "/" + parts[1]
	}
	return pod(opened) == pod(located)
}
