package controller

import (
	"errors"
	"fmt"
	"sort"
)

// AllTenants is the tenant of an operator who sees every tenant's runs:
// Lookup and ListFor with it answer for any run.
const AllTenants = "*"

// Per-tenant caps, used when Config leaves them zero. A negative Config
// value means unlimited.
const (
	// DefaultMaxRunsPerTenant is how many runs one tenant may have open
	// (each holds a sandbox, descriptors and whatever its tools started).
	DefaultMaxRunsPerTenant = 64
	// DefaultMaxCallsPerTenant is how many tool calls of one tenant may
	// be in flight at once, over all its runs.
	DefaultMaxCallsPerTenant = 32
)

var (
	// ErrTooMany: a per-tenant cap (open runs, calls in flight) is reached
	// (HTTP 429). The message says what to close or wait for.
	ErrTooMany = errors.New("too many")
	// ErrRunExpired: the run was closed after being idle for
	// Config.IdleExpiry (HTTP 404 run_expired). Open a new run.
	ErrRunExpired = errors.New("run expired")
)

// tenantUse counts what one tenant holds. Guarded by Controller.mu.
type tenantUse struct {
	runs  int // open runs plus runs being opened
	calls int // calls in flight
}

func (c *Controller) useLocked(tenant string) *tenantUse {
	u := c.tenants[tenant]
	if u == nil {
		u = &tenantUse{}
		c.tenants[tenant] = u
	}
	return u
}

// dropIdleLocked forgets a tenant that holds nothing, so the map does not
// grow with every tenant ever seen.
func (c *Controller) dropIdleLocked(tenant string) {
	if u := c.tenants[tenant]; u != nil && u.runs == 0 && u.calls == 0 {
		delete(c.tenants, tenant)
	}
}

// tenantName is a tenant as messages show it.
func tenantName(tenant string) string {
	if tenant == "" {
		return "the default tenant"
	}
	return fmt.Sprintf("tenant %q", tenant)
}

// reserveRun takes one of the tenant's run slots for a run being opened.
// The caller gives it back with releaseRun when Open fails; on success
// the slot belongs to the run and remove gives it back.
func (c *Controller) reserveRun(tenant string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("controller: %w: berth is shutting down", ErrClosed)
	}
	u := c.useLocked(tenant)
	if max := c.cfg.MaxRunsPerTenant; max >= 0 && u.runs >= max {
		c.dropIdleLocked(tenant)
		return fmt.Errorf("controller: %s has %d runs open, the most this berth allows: close one with DELETE /v1/runs/{id}, or wait for idle runs to expire%s: %w",
			tenantName(tenant), u.runs, c.expiryHint(), ErrTooMany)
	}
	u.runs++
	return nil
}

func (c *Controller) releaseRun(tenant string) {
	c.mu.Lock()
	if u := c.tenants[tenant]; u != nil {
		u.runs--
		c.dropIdleLocked(tenant)
	}
	c.mu.Unlock()
}

func (c *Controller) expiryHint() string {
	if c.cfg.IdleExpiry < 0 {
		return " (idle runs never expire on this berth)"
	}
	return fmt.Sprintf(" (after %s unused)", c.cfg.IdleExpiry)
}

// acquireCall takes one of the tenant's call slots; releaseCall gives it
// back when the call returns.
func (c *Controller) acquireCall(tenant, runID, tool string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.useLocked(tenant)
	if max := c.cfg.MaxCallsPerTenant; max >= 0 && u.calls >= max {
		c.dropIdleLocked(tenant)
		return fmt.Errorf("controller: %s has %d tool calls in flight, the most this berth allows, so %s in run %s was not started: wait for a call to return, then call again: %w",
			tenantName(tenant), u.calls, tool, runID, ErrTooMany)
	}
	u.calls++
	return nil
}

func (c *Controller) releaseCall(tenant string) {
	c.mu.Lock()
	if u := c.tenants[tenant]; u != nil {
		u.calls--
		c.dropIdleLocked(tenant)
	}
	c.mu.Unlock()
}

// Lookup returns the open run with this id if tenant may see it: its own
// runs, or every run for AllTenants. A run that does not exist and a run
// of another tenant answer the same ErrUnknownRun, with the same message,
// so that a tenant cannot learn which ids exist. A run of the tenant that
// expired answers ErrRunExpired; one a restarted berth is still taking
// over answers ErrAdopting, or, while its sandbox is unavailable, an error
// wrapping sandbox.ErrUnavailable.
func (c *Controller) Lookup(tenant, id string) (*Run, error) {
	c.mu.Lock()
	r, ok := c.runs[id]
	exp, wasExpired := c.expired[id]
	var pend error
	// A run found gone (or refused) answers so at once, while its
	// adoption still ends what it left.
	if p := c.adopting[id]; !ok && !wasExpired && p != nil && (tenant == AllTenants || p.tenant == tenant) {
		pend = p.answerLocked(id, c.closed)
	}
	if t, leaving := c.leaving[id]; !ok && pend == nil && leaving && (tenant == AllTenants || t == tenant) {
		pend = restartingError(id)
	}
	c.mu.Unlock()
	if ok && (tenant == AllTenants || r.info.Tenant == tenant) {
		return r, nil
	}
	if pend != nil {
		return nil, pend
	}
	if !ok && wasExpired && (tenant == AllTenants || exp.tenant == tenant) {
		if exp.gone != nil {
			return nil, exp.gone
		}
		return nil, expiredError(id, exp.idle)
	}
	return nil, unknownRun(id)
}

func unknownRun(id string) error {
	return fmt.Errorf("controller: %w %q: open a run with POST /v1/runs (it may have been closed)", ErrUnknownRun, id)
}

// ListFor returns the open runs of tenant (every run for AllTenants),
// oldest first.
func (c *Controller) ListFor(tenant string) []RunInfo {
	c.mu.Lock()
	out := make([]RunInfo, 0, len(c.runs))
	for _, r := range c.runs {
		if tenant == AllTenants || r.info.Tenant == tenant {
			out = append(out, r.Info())
		}
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Opened.Equal(out[j].Opened) {
			return out[i].Opened.Before(out[j].Opened)
		}
		return out[i].ID < out[j].ID
	})
	return out
}
