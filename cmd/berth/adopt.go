package main

import (
	"strconv"

	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/sandbox/host"
)

// What a restarted berth checks its stored runs against (controller
// Adopt): who host processes run as, and the tenants its credentials
// name.

// hostUserOf is controller.Config.HostUser for b: the uid of the user
// the host provider runs processes as, "" for berth's own user.
func hostUserOf(b *backends) string {
	for _, p := range b.providers {
		if hp, ok := p.(*host.Provider); ok && hp.Options.User != nil {
			return strconv.FormatUint(uint64(hp.Options.User.Uid), 10)
		}
	}
	return ""
}

// knownTenants is controller.Config.KnownTenants for creds: the tenants
// of the credentials that may open runs (the harness scope); without
// credentials, the one tenant every loopback request is.
func knownTenants(creds []httpapi.Credential) []string {
	if len(creds) == 0 {
		return []string{httpapi.DefaultTenant}
	}
	out := []string{}
	for _, c := range creds {
		if c.Has(httpapi.ScopeHarness) {
			out = append(out, c.Tenant)
		}
	}
	return out
}
