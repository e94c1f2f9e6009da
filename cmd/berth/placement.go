package main

import (
	"fmt"
	"log/slog"
	"strings"

	"berth.dev/berth/controller"
	"berth.dev/berth/tools/permission"
)

// placementPolicy is where a command lets runs be placed (docs/security.md).
type placementPolicy struct {
	host            controller.HostPlacement
	roots           []string // nil: anywhere; empty: nowhere
	allowUnlabelled bool
}

// newPlacementPolicy picks the placement policy of the flags for a
// command in mode (empty: a one-shot command, call or tools).
//
//   - call, tools and serve --permissions local: host placement fallback
//     (explicit with --no-host-fallback), host workspaces anywhere.
//   - serve --permissions hosted: host placement off, or explicit when
//     --host-user names the user host processes run as; no host root
//     until --host-root names one.
//
// --host-placement and --host-root override these defaults. An explicit
// container reference must carry the run's conversation label in serve
// unless --allow-unlabelled; call and tools, run by the operator at their
// own terminal for one run, accept any container they name.
func newPlacementPolicy(g *globalFlags, mode permission.Mode) (placementPolicy, error) {
	hp, err := controller.ParseHostPlacement(g.hostPlacement)
	if err != nil {
		return placementPolicy{}, fmt.Errorf("berth: --host-placement: %w", err)
	}
	p := placementPolicy{host: hp, allowUnlabelled: g.allowUnlabelled || mode == ""}
	hosted := mode == permission.ModeHosted
	if p.host == "" {
		switch {
		case hosted && g.hostUser == "":
			p.host = controller.HostOff
		case hosted, g.noHostFallback:
			p.host = controller.HostExplicit
		default:
			p.host = controller.HostFallback
		}
	}
	if p.host == controller.HostFallback && g.noHostFallback {
		p.host = controller.HostExplicit // the stricter flag wins, as in the controller
	}
	switch {
	case len(g.hostRoots) > 0:
		p.roots = g.hostRoots
	case hosted:
		p.roots = []string{}
	}
	return p, nil
}

// describe says in one line what the policy allows, for the log at start.
func (p placementPolicy) describe() string {
	var b strings.Builder
	switch p.host {
	case controller.HostOff:
		b.WriteString("host placement off: runs go only into their conversation's container")
	case controller.HostExplicit:
		b.WriteString(`host placement explicit: only "sandbox":"host" runs on the host`)
	default:
		b.WriteString("host placement fallback: auto uses the host when the conversation has no container")
	}
	if p.host != controller.HostOff {
		switch {
		case p.roots == nil:
			b.WriteString("; host workspaces anywhere")
		case len(p.roots) == 0:
			b.WriteString("; no host root is named, so every host workspace is refused (name one with --host-root)")
		default:
			b.WriteString("; host workspaces under " + strings.Join(p.roots, ", "))
		}
	}
	if p.allowUnlabelled {
		b.WriteString("; explicit container references need no conversation label")
	} else {
		b.WriteString("; explicit container references must carry the run's conversation label")
	}
	return b.String()
}

// log logs the policy: a warning when host placement is on but no host
// workspace can be used.
func (p placementPolicy) log(log *slog.Logger) {
	if p.host != controller.HostOff && p.roots != nil && len(p.roots) == 0 {
		log.Warn(p.describe())
		return
	}
	log.Info(p.describe())
}
