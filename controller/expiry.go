package controller

import (
	"fmt"
	"time"
)

// Idle expiry. A run is in use while a tool call of it is in flight or a
// client holds its event stream (its question port has a subscriber);
// otherwise it is idle since its last call started or ended (or since it
// was opened). A run idle for Config.IdleExpiry is closed by the
// controller's janitor through Run.Close, which kills everything it
// started.
const (
	// DefaultIdleExpiry is Config.IdleExpiry when it is zero.
	DefaultIdleExpiry = 4 * time.Hour
	// DefaultSessionRunExpiry is Config.SessionRunExpiry when it is zero:
	// as long as an MCP session that only initialized lives
	// (mcpserver.FirstIdleTimeout).
	DefaultSessionRunExpiry = 2 * time.Minute
	// MaxExpiredRemembered is how many expired run ids the controller
	// remembers, to answer ErrRunExpired instead of ErrUnknownRun; older
	// ones are forgotten first.
	MaxExpiredRemembered = 10000
	// janitorMinInterval and janitorMaxInterval bound how often the
	// janitor looks for idle runs: a quarter of IdleExpiry, within them.
	janitorMinInterval = 5 * time.Millisecond
	janitorMaxInterval = time.Minute
)

// expiredRun is what the controller remembers of an expired run.
type expiredRun struct {
	tenant string
	idle   time.Duration
	gone   error // set instead of idle for a run found gone at adoption
}

func expiredError(id string, idle time.Duration) error {
	return fmt.Errorf("controller: run %s expired after %s idle: %w; open a new run with POST /v1/runs",
		id, idle.Round(time.Millisecond), ErrRunExpired)
}

// janitorInterval is how often the janitor looks for runs idle for expiry.
func janitorInterval(expiry time.Duration) time.Duration {
	return min(max(expiry/4, janitorMinInterval), janitorMaxInterval)
}

// janitor closes idle runs until stop is closed. It is started by New
// when IdleExpiry is positive and stopped by Controller.Close.
func (c *Controller) janitor(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(janitorInterval(min(c.cfg.IdleExpiry, c.cfg.SessionRunExpiry)))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c.expireIdle(now, stop)
		}
	}
}

// expireIdle closes the runs idle for IdleExpiry at now, one at a time,
// stopping early when stop is closed.
func (c *Controller) expireIdle(now time.Time, stop <-chan struct{}) {
	c.mu.Lock()
	runs := make([]*Run, 0, len(c.runs))
	for _, r := range c.runs {
		runs = append(runs, r)
	}
	c.mu.Unlock()
	for _, r := range runs {
		select {
		case <-stop:
			return
		default:
		}
		idle, ok := r.markExpired(now, c.cfg.IdleExpiry)
		if !ok {
			continue
		}
		c.rememberExpired(r.id, r.info.Tenant, idle)
		c.m.runsExpired.Inc()
		r.log.Info("run expired", "idle", idle)
		if err := r.Close(); err != nil {
			r.log.Warn("closing an expired run", "err", err)
		}
	}
}

// markExpired marks the run closing when it is idle for expiry at now:
// no call in flight, nobody on its event stream, and its last use at
// least expiry ago. From then on its calls answer ErrRunExpired.
func (r *Run) markExpired(now time.Time, expiry time.Duration) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.questions != nil && r.questions.Connected() {
		r.lastUsed = now // the idle time starts when the stream ends
		return 0, false
	}
	idle := now.Sub(r.lastUsed)
	if r.idleLimit > 0 && r.idleLimit < expiry {
		expiry = r.idleLimit
	}
	if r.closing || r.inflight > 0 || idle < expiry {
		return 0, false
	}
	r.closing = true
	r.expired = idle
	return idle, true
}

func (r *Run) touch(now time.Time) {
	r.mu.Lock()
	if now.After(r.lastUsed) {
		r.lastUsed = now
	}
	r.mu.Unlock()
}

// rememberExpired records an expired run, forgetting the oldest beyond
// MaxExpiredRemembered.
func (c *Controller) rememberExpired(id, tenant string, idle time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.expiredOrder) < MaxExpiredRemembered {
		c.expiredOrder = append(c.expiredOrder, id)
	} else {
		delete(c.expired, c.expiredOrder[c.expiredNext])
		c.expiredOrder[c.expiredNext] = id
		c.expiredNext = (c.expiredNext + 1) % MaxExpiredRemembered
	}
	c.expired[id] = expiredRun{tenant: tenant, idle: idle}
}

// rememberGone records a stored run that could not be adopted because its
// sandbox is gone: its id answers err (sandbox_gone) from then on.
func (c *Controller) rememberGone(id, tenant string, err error) {
	c.rememberExpired(id, tenant, 0)
	c.mu.Lock()
	c.expired[id] = expiredRun{tenant: tenant, gone: err}
	c.mu.Unlock()
}
