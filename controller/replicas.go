package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Several replicas: with Config.Leases, berth is one of several replicas
// sharing Config.Store (on Kubernetes: runstore/kubestore). Each run is
// served by the replica holding its lease; Locate tells the API which
// replica that is, so that a request reaching another one is forwarded
// there; a run whose holder stopped renewing (the replica died) or let go
// (it shut down) is taken over by the next replica that needs it — for a
// request (Locate) or on the periodic sweep — exactly as a restarted berth
// adopts its runs.

// ErrMoving: the run's replica cannot be confirmed or reached now (it is
// being handed over between replicas, or the store does not answer); the
// run is kept, and the call should be retried in a few seconds.
var ErrMoving = errors.New("the run is moving between berth replicas")

const (
	// sweepInterval is how often a replica looks for runs whose holder
	// stopped renewing their leases, and takes them over, so that a run
	// nobody calls is still served (its idle expiry, its resident's
	// grace) after its replica died.
	sweepInterval = 15 * time.Second
	// MovingRetry is how long a caller told ErrMoving should wait before
	// it retries, in seconds (the API's Retry-After).
	MovingRetry = 2
	// remoteTTL is how long Locate trusts what a run's lease said of its
	// replica without reading it again: a lease lasts 20 s, a replica that
	// lets a run go stops answering for it (and Misdirected drops the
	// entry), so a request forwarded on a stale entry is answered
	// run_moving, never served twice.
	remoteTTL = 3 * time.Second
	// maxRemotes bounds the runs whose replica Locate remembers.
	maxRemotes = 4096
)

// remote is what Locate remembers of a run another replica serves.
type remote struct {
	Remote
	tenant string
	until  time.Time
}

// Remote is the replica that serves a run this berth does not.
type Remote struct {
	// Identity names the replica (its pod name).
	Identity string
	// Address is where it serves: a URL such as http://10.0.0.7:8080.
	Address string
}

// Locate finds who serves run id for tenant: this berth (the run), another
// replica (Remote, for the caller to forward the request to), or nobody
// (an error, as Lookup's). A run whose holder is gone is taken over here
// first. Without Config.Leases it is Lookup.
func (c *Controller) Locate(ctx context.Context, tenant, id string) (*Run, *Remote, error) {
	r, err := c.Lookup(tenant, id)
	leases := c.cfg.Leases
	if leases == nil {
		return r, nil, err
	}
	switch {
	case err == nil:
		if leases.Holds(id) {
			return r, nil, nil
		}
		// Renewals failed for a while (the API server did not answer):
		// serve on only if the lease is still, or again, this replica's.
		ok, aerr := leases.Acquire(ctx, id)
		if aerr != nil {
			return nil, nil, fmt.Errorf("controller: run %s: cannot confirm that this replica still serves it (%v): %w; retry in a few seconds", id, aerr, ErrMoving)
		}
		if ok {
			return r, nil, nil
		}
		c.handOver(r)
	case !errors.Is(err, ErrUnknownRun) && !errors.Is(err, ErrRestarting):
		// expired or gone here; a run this replica is letting go of
		// (ErrRestarting) is looked for where the other replicas find it.
		return nil, nil, err
	}
	if rm, ok := c.remembered(tenant, id); ok {
		return nil, &rm, nil
	}
	return c.locateStored(ctx, tenant, id)
}

// remembered returns the replica Locate found serving run id within
// remoteTTL, if tenant may see the run.
func (c *Controller) remembered(tenant, id string) (Remote, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.remotes[id]
	if !ok || time.Now().After(e.until) {
		delete(c.remotes, id)
		return Remote{}, false
	}
	if tenant != AllTenants && e.tenant != tenant {
		return Remote{}, false
	}
	return e.Remote, true
}

// remember notes that replica rm serves run id of tenant.
func (c *Controller) remember(id, tenant string, rm Remote) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.remotes) >= maxRemotes {
		for k, e := range c.remotes {
			if now.After(e.until) {
				delete(c.remotes, k)
			}
		}
		if len(c.remotes) >= maxRemotes {
			return // all fresh: look the next ones up
		}
	}
	c.remotes[id] = remote{Remote: rm, tenant: tenant, until: now.Add(remoteTTL)}
}

// Misdirected forgets where run id was served: a request forwarded there
// was not answered, or answered that the run moved.
func (c *Controller) Misdirected(id string) {
	c.mu.Lock()
	delete(c.remotes, id)
	c.mu.Unlock()
}

// locateStored finds a run this replica does not serve in the store: its
// live holder, or, when its lease lapsed, this replica after taking it
// over.
func (c *Controller) locateStored(ctx context.Context, tenant, id string) (*Run, *Remote, error) {
	rec, err := c.cfg.Store.Get(ctx, id)
	switch {
	case errors.Is(err, runstore.ErrNotFound):
		return nil, nil, unknownRun(id)
	case errors.Is(err, runstore.ErrForged) && tenant == AllTenants:
		return nil, nil, refused(id, err.Error())
	case errors.Is(err, runstore.ErrForged):
		return nil, nil, unknownRun(id) // its tenant is not to be believed
	case err != nil:
		return nil, nil, fmt.Errorf("controller: run %s: the run store does not answer (%v): %w; retry in a few seconds", id, err, ErrMoving)
	case tenant != AllTenants && rec.Tenant != tenant:
		return nil, nil, unknownRun(id)
	}
	for range 3 {
		o, err := c.cfg.Leases.Owner(ctx, id)
		if err != nil {
			return nil, nil, fmt.Errorf("controller: run %s: cannot read which replica serves it (%v): %w; retry in a few seconds", id, err, ErrMoving)
		}
		if o.Live && o.Identity != c.cfg.Instance {
			if o.Address == "" {
				return nil, nil, fmt.Errorf("controller: run %s is served by replica %s, which wrote no address to forward to: %w; retry in a few seconds", id, o.Identity, ErrMoving)
			}
			rm := Remote{Identity: o.Identity, Address: o.Address}
			c.remember(id, rec.Tenant, rm)
			return nil, &rm, nil
		}
		r, elsewhere, err := c.takeOver(ctx, rec)
		if err != nil {
			if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrGone) || errors.Is(err, ErrClosed) {
				return nil, nil, err // sandbox_unavailable (kept), sandbox_gone, shutting_down
			}
			return nil, nil, fmt.Errorf("controller: run %s: taking it over from a replica that stopped serving it failed: %v: %w; retry in a few seconds", id, err, ErrMoving)
		}
		if !elsewhere {
			return r, nil, nil
		}
		// Another replica took it first: look again, to forward there.
	}
	return nil, nil, fmt.Errorf("controller: run %s: its lease kept changing hands: %w; retry in a few seconds", id, ErrMoving)
}

// takeOver adopts rec once its lease is this replica's: elsewhere is true
// (and r nil) when another live replica holds it. Concurrent takeovers of
// one run wait for the first; a run already served here is returned.
func (c *Controller) takeOver(ctx context.Context, rec runstore.Record) (r *Run, elsewhere bool, err error) {
	r, problems, elsewhere, err := c.adoptExclusive(ctx, rec)
	for _, p := range problems {
		c.log.Warn("run taken over without one of its resources", "run", rec.ID, "problem", p)
	}
	if err == nil && !elsewhere {
		c.log.Info("run taken over from a replica that stopped serving it", "run", rec.ID, "previous", rec.Owner)
	}
	return r, elsewhere, err
}

// adoptExclusive adopts rec (adoptLeased), one adoption of a run at a
// time: a concurrent one waits for the first, and a run already served
// here is returned as it is, with no problems.
func (c *Controller) adoptExclusive(ctx context.Context, rec runstore.Record) (r *Run, problems []string, elsewhere bool, err error) {
	for {
		c.mu.Lock()
		if c.closed {
			// Shutting down: another replica takes the run.
			c.mu.Unlock()
			return nil, nil, false, fmt.Errorf("controller: run %s: %w: this berth is shutting down", rec.ID, ErrClosed)
		}
		if r, ok := c.runs[rec.ID]; ok {
			c.mu.Unlock()
			return r, nil, false, nil
		}
		wait, busy := c.taking[rec.ID]
		if !busy {
			c.taking[rec.ID] = make(chan struct{})
		}
		c.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, nil, false, ctx.Err()
		}
	}
	defer func() {
		c.mu.Lock()
		close(c.taking[rec.ID])
		delete(c.taking, rec.ID)
		c.mu.Unlock()
	}()
	problems, elsewhere, err = c.adoptLeased(ctx, rec)
	if err != nil || elsewhere {
		return nil, problems, elsewhere, err
	}
	c.mu.Lock()
	r, ok := c.runs[rec.ID]
	c.mu.Unlock()
	if !ok {
		// Adopted and closed at once (a DELETE, the janitor).
		return nil, problems, false, unknownRun(rec.ID)
	}
	return r, problems, false, nil
}

// adoptLeased adopts rec when this replica gets its lease (always without
// Config.Leases). A run whose sandbox is gone is removed from the store;
// one that fails otherwise lets its lease go, for another try.
func (c *Controller) adoptLeased(ctx context.Context, rec runstore.Record) (problems []string, elsewhere bool, err error) {
	bounded, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	if c.cfg.Leases != nil {
		ok, err := c.cfg.Leases.Acquire(bounded, rec.ID)
		if err != nil {
			return nil, false, fmt.Errorf("controller: run %s: take its lease: %w", rec.ID, err)
		}
		if !ok {
			return nil, true, nil
		}
	}
	problems, err = c.adopt(ctx, bounded, rec)
	switch {
	case err == nil:
	case errors.Is(err, ErrAdoptRefused):
		// Refused by today's policy: the record is berth's own, so what
		// the run left in its sandbox is ended where berth can reach it.
		c.rememberGone(rec.ID, rec.Tenant, err)
		end := "its resident supervisor and what ran under it were ended"
		if rec.Resident == nil {
			end = "it had no resident supervisor"
		} else if rerr := c.retire(context.WithoutCancel(ctx), rec); rerr != nil {
			end = fmt.Sprintf("its resident supervisor could not be ended (%v) and ends by itself after its grace", rerr)
		}
		c.log.Error("run not adopted: today's policy refuses its record", "run", rec.ID, "tenant", rec.Tenant, "sandbox", rec.Sandbox, "why", err, "resident", end)
		c.cfg.Store.Delete(context.WithoutCancel(ctx), rec.ID)
		err = fmt.Errorf("%w; %s", err, end)
	case errors.Is(err, sandbox.ErrUnavailable):
		// Paused, or its engine does not answer: the run is kept (an
		// unavailable sandbox's error wraps ErrGone too, so this comes
		// first), and its lease goes for the next try.
		c.release(rec.ID)
	case errors.Is(err, sandbox.ErrGone) && bounded.Err() == nil:
		// Gone for certain, not an answer cut short (berth shutting
		// down, the adoption's time running out).
		c.rememberGone(rec.ID, rec.Tenant, err)
		c.cfg.Store.Delete(context.WithoutCancel(ctx), rec.ID)
	default:
		c.release(rec.ID)
	}
	return problems, false, err
}

// release lets run id's lease go, if there are leases.
func (c *Controller) release(id string) error {
	if c.cfg.Leases == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), adoptTimeout)
	defer cancel()
	if err := c.cfg.Leases.Release(ctx, id); err != nil {
		return fmt.Errorf("controller: run %s: let its lease go: %w", id, err)
	}
	return nil
}

// Lost is told (by the store's renewals) that another replica holds run
// id's lease now: this replica stops serving the run without ending
// anything of it.
func (c *Controller) Lost(id string) {
	c.mu.Lock()
	r, ok := c.runs[id]
	c.mu.Unlock()
	if ok {
		c.handOver(r)
	}
}

// handOver lets go of r, which another replica serves now, in the
// background (the caller may be the store's renewal loop).
func (c *Controller) handOver(r *Run) {
	c.bg.Go(func() {
		if err := r.leave(false); err != nil {
			r.log.Warn("handing the run over to another replica left something behind", "err", err)
		}
	})
}

// sweeper takes over, every sweepInterval, the stored runs whose leases
// lapsed, until stop is closed.
func (c *Controller) sweeper(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // ends with sweeper: cancel
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		c.sweep(ctx)
	}
}

// sweep takes over every stored run nobody serves.
func (c *Controller) sweep(ctx context.Context) {
	recs, _, err := c.cfg.Store.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot list the run store to take over runs of replicas that stopped", "err", err)
		}
		return
	}
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		if _, err := c.Lookup(AllTenants, rec.ID); err == nil {
			continue
		}
		o, err := c.cfg.Leases.Owner(ctx, rec.ID)
		if err != nil || (o.Live && o.Identity != c.cfg.Instance) {
			continue
		}
		if _, _, err := c.takeOver(ctx, rec); err != nil && ctx.Err() == nil {
			c.log.Warn("cannot take over a run of a replica that stopped", "run", rec.ID, "err", err)
		}
	}
}

// ListStored returns the runs of tenant (every run for AllTenants) that
// any replica serves, oldest first: ListFor, and with Config.Leases the
// store's other records too.
func (c *Controller) ListStored(ctx context.Context, tenant string) ([]RunInfo, error) {
	local := c.ListFor(tenant)
	if c.cfg.Leases == nil {
		return local, nil
	}
	recs, _, err := c.cfg.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("controller: list the runs of every replica: the run store does not answer (%v): %w; retry in a few seconds", err, ErrMoving)
	}
	seen := make(map[string]bool, len(local))
	for _, ri := range local {
		seen[ri.ID] = true
	}
	out := local
	for _, rec := range recs {
		if seen[rec.ID] || (tenant != AllTenants && rec.Tenant != tenant) {
			continue
		}
		out = append(out, RunInfo{ID: rec.ID, Sandbox: rec.Sandbox, Workspace: rec.Workspace, ConversationID: rec.Conversation,
			Mode: tools.Surface(rec.Mode), Vibe: rec.Vibe, Tenant: rec.Tenant, Opened: rec.Opened, Placement: rec.Placement})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Opened.Equal(out[j].Opened) {
			return out[i].Opened.Before(out[j].Opened)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
