package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
)

// Adoption in the background: a restarted berth serves at once while it
// takes the stored runs over. A run still being adopted answers
// ErrAdopting (HTTP 503 adopting, Retry-After); a run whose sandbox is
// unavailable (paused, its engine not answering) is kept — in the store
// and in Lookup's answers, as sandbox.ErrUnavailable — and tried again
// with the backoff of a live run's unavailable sandbox until it is adopted
// or found gone.

const (
	// AdoptingRetry is how long a caller told ErrAdopting should wait
	// before it retries, in seconds (the API's Retry-After).
	AdoptingRetry = 2
	// maxAdopting bounds the stored runs adopted at once.
	maxAdopting = 8
)

// pending is a stored run BeginAdopt has not taken over yet.
type pending struct {
	tenant string
	// unavailable is what the run answers once a try found its sandbox
	// unavailable, through the later tries; nil before.
	unavailable error
}

// answerLocked is what Lookup answers for the pending run id; closed
// says the controller shuts down.
func (p *pending) answerLocked(id string, closed bool) error {
	if closed {
		return fmt.Errorf("controller: run %s: this berth is shutting down before it took the run over (%w); the run lives on: retry the call in a few seconds, when the next berth serves it", id, ErrClosed)
	}
	if p.unavailable != nil {
		return p.unavailable
	}
	return fmt.Errorf("controller: run %s: berth restarted a moment ago and is taking the run over: %w; the run is kept, retry in %d seconds", id, ErrAdopting, AdoptingRetry)
}

// Adoption is an adoption under way (BeginAdopt).
type Adoption struct {
	done chan struct{} // closed once every run had its first try
	mu   sync.Mutex
	rep  AdoptReport
}

// Done is closed once every stored run had its first try.
func (a *Adoption) Done() <-chan struct{} { return a.done }

// Report waits for Done, or for ctx, and returns what the first tries
// did.
func (a *Adoption) Report(ctx context.Context) (AdoptReport, error) {
	select {
	case <-a.done:
	case <-ctx.Done():
		return AdoptReport{}, ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rep, nil
}

// Adopt is BeginAdopt, returning once every stored run had its first
// try: what is adopted then is served, and a run whose sandbox is
// unavailable is in the report's Unavailable and still tried again in the
// background.
func (c *Controller) Adopt(ctx context.Context) (AdoptReport, error) {
	a, err := c.BeginAdopt(ctx)
	if err != nil {
		return AdoptReport{}, err
	}
	return a.Report(context.Background())
}

// BeginAdopt takes over the runs in Config.Store that an earlier berth
// left, in the background: it reads the store, makes every stored run
// answer ErrAdopting, and returns. For each run, it opens the sandbox
// again, reattaches to its resident supervisor and hands each resource its
// stored state (Env.Adopted). A run whose sandbox is gone, or whose
// resident supervisor is no longer there (the container restarted, or
// berth was away longer than the resident's grace), is removed from the
// store and its id answers sandbox_gone. A run whose sandbox is
// unavailable, or whose adoption did not finish within adoptTimeout (an
// engine that stalls), is kept and tried again, with the backoff
// between UnavailableRetryMin and UnavailableRetryMax, until ctx ends or
// the controller stops. Call it once, after New; serve as it runs.
//
// A record is a claim, not a fact: before anything of a run is opened,
// today's policy is applied to it again (adoptable), and nothing a
// damaged record says (one whose integrity check fails, or that does not
// decode) is acted on: it is reported, kept aside, and only the resident
// supervisor the store's sealed index names for it is ended
// (damagedRecord). Such runs are Refused.
func (c *Controller) BeginAdopt(ctx context.Context) (*Adoption, error) {
	a := &Adoption{done: make(chan struct{}), rep: AdoptReport{Gone: map[string]string{}, Unavailable: map[string]string{},
		Failed: map[string]string{}, Refused: map[string]string{}}}
	if c.cfg.Store == nil {
		close(a.done)
		return a, nil
	}
	recs, bad, err := c.cfg.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("controller: read the run store: %w", err)
	}
	var leftovers []runstore.Record // of damaged records, to end
	for _, u := range bad {
		why, known := c.damagedRecord(ctx, u)
		a.rep.Refused[u.ID] = why
		if known != nil {
			leftovers = append(leftovers, *known)
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("controller: %w: berth is shutting down", ErrClosed)
	}
	for _, rec := range recs {
		if _, served := c.runs[rec.ID]; !served {
			c.adopting[rec.ID] = &pending{tenant: rec.Tenant}
		}
	}
	// Under c.mu, with closed false: stopBackground's Wait comes after.
	c.bg.Add(1)
	c.mu.Unlock()

	// Derived from ctx, so that its end reaches each try at once (a try
	// cut short keeps its run), and ended by the controller's stop too.
	actx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.life, cancel)
	go func() { // owned by the controller: stopBackground ends and waits for it
		defer c.bg.Done()
		defer cancel()
		defer stop()
		var wg sync.WaitGroup
		sem := make(chan struct{}, maxAdopting)
		var firsts sync.WaitGroup
		for _, rec := range recs {
			firsts.Add(1)
			wg.Go(func() { c.adoptRun(actx, rec, sem, a, firsts.Done) })
		}
		for _, rec := range leftovers {
			firsts.Go(func() { c.endLeftovers(actx, rec, sem) })
		}
		firsts.Wait()
		close(a.done)
		wg.Wait()
	}()
	return a, nil
}

// Adopting returns how many stored runs this berth is still taking over.
func (c *Controller) Adopting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id := range c.adopting {
		if _, served := c.runs[id]; !served {
			n++
		}
	}
	return n
}

// adoptRun adopts one stored run, trying again while its sandbox is
// unavailable; the first try's outcome goes to a's report, then first is
// called. ctx ends the tries.
func (c *Controller) adoptRun(ctx context.Context, rec runstore.Record, sem chan struct{}, a *Adoption, first func()) {
	var once sync.Once
	report := func(f func(*AdoptReport)) {
		once.Do(func() {
			a.mu.Lock()
			f(&a.rep)
			a.mu.Unlock()
			first()
		})
	}
	defer report(func(*AdoptReport) {}) // ctx ended before the first try
	defer c.settleUnlessClosed(rec.ID)
	var backoff time.Duration
	for tries := 1; ; tries++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		_, problems, elsewhere, err := c.adoptExclusive(ctx, rec)
		<-sem
		if tries > 1 { // the first try's are in the report
			for _, p := range problems {
				c.log.Warn("adopted run lost a resource", "run", rec.ID, "problem", p)
			}
		}
		uerr := c.unavailableAtAdoption(ctx, rec, err)
		if uerr == nil {
			if tries > 1 {
				c.log.Info("run taken over after its sandbox was unavailable", "run", rec.ID, "tries", tries, "err", err)
			}
			c.settle(rec.ID) // before the report: Adopt's caller sees the outcome
			report(func(rep *AdoptReport) {
				rep.Problems = append(rep.Problems, problems...)
				switch {
				case elsewhere:
					rep.Elsewhere = append(rep.Elsewhere, rec.ID)
				case err == nil:
					rep.Adopted = append(rep.Adopted, rec.ID)
				case errors.Is(err, ErrAdoptRefused):
					rep.Refused[rec.ID] = err.Error()
				case errors.Is(err, sandbox.ErrGone):
					rep.Gone[rec.ID] = err.Error()
				default:
					// Kept in the store: the next start tries again.
					rep.Failed[rec.ID] = err.Error() + "; the run stays in the store and the next start of berth tries again"
				}
			})
			return
		}
		backoff = min(max(2*backoff, UnavailableRetryMin), UnavailableRetryMax)
		answer := fmt.Errorf("controller: run %s: berth restarted and cannot take the run over yet: %w; the run and what runs in it are kept, and berth tries again in %v and on, waiting at most %v between tries: retry then",
			rec.ID, uerr, backoff.Round(time.Second), UnavailableRetryMax)
		c.mu.Lock()
		if p := c.adopting[rec.ID]; p != nil {
			p.unavailable = answer
		}
		c.mu.Unlock()
		report(func(rep *AdoptReport) { rep.Unavailable[rec.ID] = answer.Error() })
		level := slog.LevelWarn // once; the later tries at debug level
		if tries > 1 {
			level = slog.LevelDebug
		}
		c.log.Log(ctx, level, "run not adopted yet: its sandbox is unavailable; trying again", "run", rec.ID, "tries", tries, "retry_in", backoff, "err", err)
		// The run answers so through the next try too: its sandbox was
		// unavailable at the last look.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// unavailableAtAdoption returns the error wrapping sandbox.ErrUnavailable
// that a run answers when err, its adoption's failure, says the sandbox
// may come back: it is unavailable (paused, its engine not answering), or
// the adoption ran out of its own time (adoptTimeout) while ctx lives. It
// returns nil for any other outcome.
func (c *Controller) unavailableAtAdoption(ctx context.Context, rec runstore.Record, err error) error {
	switch {
	case err == nil, ctx.Err() != nil:
		return nil
	case errors.Is(err, sandbox.ErrUnavailable):
		return err
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrAdoptRefused):
		return fmt.Errorf("taking it over did not finish within %v (%w): %w", adoptTimeout, err, sandbox.ErrUnavailable)
	}
	return nil
}

// settle ends run id's adoption: from now on Lookup answers as the run is
// served, gone or unknown.
func (c *Controller) settle(id string) {
	c.mu.Lock()
	delete(c.adopting, id)
	c.mu.Unlock()
}

// settleUnlessClosed is settle, except while the controller shuts down:
// a run whose adoption its shutdown cut short is the next berth's, and
// answers so (answerLocked).
func (c *Controller) settleUnlessClosed(id string) {
	c.mu.Lock()
	if !c.closed {
		delete(c.adopting, id)
	}
	c.mu.Unlock()
}
