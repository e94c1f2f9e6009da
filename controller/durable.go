package controller

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Durable runs: with Config.Store set, a run outlives the berth process
// that serves it. Its long-lived processes (kernels) run under a resident
// supervisor in the sandbox (sandbox.Residence), which berth reaches by
// its directory and secret; what a restarted berth needs — the run table,
// the resident's handle, each resource's state (Env.Persist) — is written
// to the store whenever it changes; Detach (berth's shutdown) leaves it all
// running, and Adopt (berth's start) takes the runs over again.

const (
	// persistInterval is how often the controller writes the state of
	// runs that changed outside a call (a card opened by a call still in
	// flight, a card answered); a call's changes are written before it
	// answers.
	persistInterval = 200 * time.Millisecond
	// residentDirPrefix names a run's resident directory in its sandbox:
	// /tmp/berth-run-<run id>.
	residentDirPrefix = "/tmp/berth-run-"
	// adoptTimeout bounds reaching one stored run's sandbox and resident
	// supervisor at adoption; a run that does not get there in time is
	// taken as unavailable and tried again. Its resources (a kernel
	// running a long cell) then take as long as they need.
	adoptTimeout = 60 * time.Second
)

// Persister is a run's resource whose state a restarted berth restores:
// Snapshot is written to the store whenever Generation changes.
type Persister interface {
	Generation() uint64
	Snapshot() ([]byte, error)
}

// durable is a run's side of the store; nil without Config.Store.
type durable struct {
	store  runstore.Store
	holds  func() bool     // whether this replica may write the record (Config.Leases); nil: always
	grace  time.Duration   // the resident's grace (Config.ResidentGrace)
	record runstore.Record // ID, the run table, Resident; State is rebuilt on each write

	resMu sync.Mutex       // guards res, replaced and lost, and serialises its start
	res   sandbox.Resident // the run's resident supervisor, once started or adopted
	// replaced counts the residents started after one died; it names
	// each replacement's directory, so that the dead one's keeper, which
	// removes its directory, never touches the new one's.
	replaced int
	// lost is the note the run's next result carries after its resident
	// died and was replaced; empty once said.
	lost string

	mu    sync.Mutex // guards the fields below and serialises writes
	keys  []string
	pers  map[string]Persister
	gens  map[string]uint64
	dirty bool  // the record changed outside the persisters (the resident)
	err   error // the last write's failure, logged once
}

// Persist registers p as the resource key of the run ("eval",
// "structural", …): its Snapshot goes to the store whenever its
// Generation changes, and a restarted berth hands it back through
// Adopted. Without a store it does nothing.
func (e *Env) Persist(key string, p Persister) {
	if e.durable == nil {
		return
	}
	d := e.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.pers[key]; !dup {
		d.keys = append(d.keys, key)
	}
	d.pers[key] = p
	d.gens[key] = ^uint64(0) // written on the first pass
}

// Adopted returns the state the resource key persisted before berth
// restarted, or nil for a new run (or a resource that saved nothing).
func (e *Env) Adopted(key string) []byte {
	if e.adopted == nil {
		return nil
	}
	return e.adopted[key]
}

// adoptResident hands the state key persisted before berth restarted to
// adopt, with the run's adopted resident supervisor; what adopt cannot
// take over goes to Controller.Adopt's report. It does nothing for a new
// run, or one whose resident was not adopted.
func (e *Env) adoptResident(ctx context.Context, key string, adopt func(context.Context, sandbox.Resident, []byte) error) {
	e.adopt(ctx, key, false, adopt)
}

// adoptState is adoptResident for a resource with state to take over
// whether or not the run has a resident supervisor: adopt is also called
// with a nil resident, for a run that never started one. The debug tool
// is one: its breakpoints, and the note that a session which could not
// outlive berth (delve's, which runs outside the resident) was lost.
func (e *Env) adoptState(ctx context.Context, key string, adopt func(context.Context, sandbox.Resident, []byte) error) {
	e.adopt(ctx, key, true, adopt)
}

func (e *Env) adopt(ctx context.Context, key string, withoutResident bool, adopt func(context.Context, sandbox.Resident, []byte) error) {
	b := e.Adopted(key)
	if b == nil || e.durable == nil {
		return
	}
	res := e.durable.held()
	if res == nil && !withoutResident {
		return
	}
	if err := adopt(ctx, res, b); err != nil {
		e.Problem(fmt.Sprintf("run %s: %s: %v", e.RunID, key, err))
	}
}

// Resident returns the run's resident supervisor, starting it in the
// sandbox on first use. It returns nil and no error when the run keeps
// nothing across berth's restarts (no store); an error when the sandbox
// cannot have one, which the caller reports and works around by starting
// its processes as plain ones.
func (e *Env) Resident(ctx context.Context) (sandbox.Resident, error) {
	if e.durable == nil {
		return nil, nil
	}
	return e.durable.resident(ctx, e.Sandbox)
}

func (d *durable) resident(ctx context.Context, sb sandbox.Sandbox) (sandbox.Resident, error) {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if d.res != nil {
		err := residentAlive(ctx, d.res)
		if err == nil {
			return d.res, nil
		}
		if !residentDied(err) {
			return nil, fmt.Errorf("controller: the run's resident supervisor: %w", err)
		}
		// Killed (kill -9, the OOM killer): its programs ended with it
		// (their supervisors have it as their parent-death signal). A
		// new one is placed, and the run's next result says what was lost.
		d.res.Close()
		d.res = nil
		d.replaced++
		d.lost = "note: the run's resident supervisor died (killed inside the sandbox); its kernels and debug sessions ended with it and their state is lost; a new one was started."
	}
	rs, ok := sb.(sandbox.Residence)
	if !ok {
		return nil, fmt.Errorf("the sandbox %s cannot keep processes while berth restarts", sb.Ref())
	}
	secret := make([]byte, sandbox.MinResidentSecret)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	dir := residentDirPrefix + d.record.ID
	if d.replaced > 0 {
		dir = fmt.Sprintf("%s-%d", dir, d.replaced)
	}
	h := &runstore.Resident{Dir: dir, Secret: secret}
	// Written before the resident starts: a berth that dies in between
	// leaves a record the next one adopts (or reports), not an orphan it
	// cannot name.
	d.mu.Lock()
	d.record.Resident = h
	d.mu.Unlock()
	if err := d.write(ctx, true); err != nil {
		return nil, fmt.Errorf("cannot record the run's resident supervisor: %w", err)
	}
	res, err := rs.Resident(ctx, sandbox.ResidentSpec{Dir: h.Dir, Secret: secret, Grace: d.grace})
	if err != nil {
		d.mu.Lock()
		d.record.Resident = nil
		d.dirty = true
		d.mu.Unlock()
		return nil, fmt.Errorf("cannot start the run's resident supervisor in %s: %w", sb.Ref(), err)
	}
	d.res = res
	return res, nil
}

// replacedOf is the replacement count in a resident directory's name
// (residentDirPrefix+id, then "-N" for the Nth replacement).
func replacedOf(dir, id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(dir, residentDirPrefix+id), "-"))
	return n
}

// residentAliveTimeout bounds the look at the run's resident before it is
// handed out.
const residentAliveTimeout = 30 * time.Second

// residentAlive asks res for its processes: nil when it answers.
func residentAlive(ctx context.Context, res sandbox.Resident) error {
	ctx, cancel := context.WithTimeout(ctx, residentAliveTimeout)
	defer cancel()
	_, err := res.Processes(ctx)
	return err
}

// residentDied tells a resident that no longer runs in a sandbox that
// still does (nothing listens at its socket: sandbox.ErrNotFound) from a
// sandbox gone or unavailable, a caller cut short, or berth having let go
// (sandbox.ErrDetached), none of which a new resident would help.
func residentDied(err error) bool {
	return errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrGone) && !errors.Is(err, sandbox.ErrDetached)
}

// takeLost returns the note of a replaced resident once, then "".
func (d *durable) takeLost() string {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	n := d.lost
	d.lost = ""
	return n
}

// held returns the resident, or nil when none was started or adopted.
func (d *durable) held() sandbox.Resident {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	return d.res
}

// write writes the record when a persister's generation changed (or
// always with force). Snapshots are taken outside the store's write.
func (d *durable) write(ctx context.Context, force bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := force || d.dirty
	gens := make(map[string]uint64, len(d.keys))
	for _, k := range d.keys {
		g := d.pers[k].Generation()
		gens[k] = g
		if g != d.gens[k] {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if d.holds != nil && !d.holds() {
		return fmt.Errorf("controller: run %s: this replica no longer holds the run's lease, so it does not write its record: %w", d.record.ID, ErrMoving)
	}
	state := make(map[string]json.RawMessage, len(d.keys))
	for _, k := range d.keys {
		b, err := d.pers[k].Snapshot()
		if err != nil {
			return fmt.Errorf("controller: snapshot %s of run %s: %w", k, d.record.ID, err)
		}
		state[k] = b
	}
	rec := d.record
	rec.State = state
	rec.Updated = time.Now().UTC()
	if err := d.store.Put(ctx, rec); err != nil {
		return fmt.Errorf("controller: store run %s: %w", d.record.ID, err)
	}
	d.gens = gens
	d.dirty = false
	return nil
}

// persist writes the run's record if anything changed, logging a failure
// once until a write succeeds again. It returns the write's failure.
func (r *Run) persist(ctx context.Context) error {
	d := r.durable
	if d == nil {
		return nil
	}
	err := d.write(context.WithoutCancel(ctx), false)
	d.mu.Lock()
	first := err != nil && d.err == nil
	d.err = err
	d.mu.Unlock()
	if first {
		r.log.Error("cannot store the run's state; a restart of berth would lose what changed", "err", err)
	}
	return err
}

// unsavedNote is what a call's result says when the run's state it
// changed could not be stored: what a restart of berth would lose, and
// how to shrink the state.
func unsavedNote(err error) string {
	if errors.Is(err, runstore.ErrTooLarge) {
		return "note: berth could not save this run's state, which is now over the run store's size limit (" + err.Error() + "). " +
			"The run goes on, but if berth restarts now, what changed since the last save is lost: apply or discard staged edits (resolve) to shrink it."
	}
	return "note: berth could not save this run's state (" + err.Error() + "); the run goes on, but a restart of berth now would lose what changed since the last save."
}

// persister writes the state of every run that changed, every
// persistInterval, until stop is closed.
func (c *Controller) persister(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(persistInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, r := range c.openRuns() {
			r.persist(context.Background())
		}
	}
}

// openRuns returns the runs open now.
func (c *Controller) openRuns() []*Run {
	c.mu.Lock()
	defer c.mu.Unlock()
	runs := make([]*Run, 0, len(c.runs))
	for _, r := range c.runs {
		runs = append(runs, r)
	}
	return runs
}

// newDurable returns the store side of a new run, or of an adopted one
// (rec from the store).
func (c *Controller) newDurable(rec runstore.Record) *durable {
	if c.cfg.Store == nil {
		return nil
	}
	rec.Owner = c.cfg.Instance
	d := &durable{store: c.cfg.Store, grace: c.cfg.ResidentGrace, record: rec, pers: map[string]Persister{}, gens: map[string]uint64{}, dirty: true}
	if l := c.cfg.Leases; l != nil {
		d.holds = func() bool { return l.Holds(rec.ID) }
	}
	return d
}

// AdoptReport says what Adopt did with each stored run.
type AdoptReport struct {
	// Adopted are the ids of the runs taken over, with every resource
	// that could be.
	Adopted []string
	// Gone are runs whose sandbox (or resident supervisor) is gone; their
	// ids answer sandbox_gone.
	Gone map[string]string
	// Unavailable are runs whose sandbox is unavailable (the container is
	// paused, its engine does not answer, or taking the run over did not
	// finish within adoptTimeout): kept in the store and answered 503
	// sandbox_unavailable, while berth tries again in the background,
	// with the backoff of a live run's unavailable sandbox, until the run
	// is adopted or found gone.
	Unavailable map[string]string
	// Failed are runs that could not be adopted for another reason (kept
	// in the store for the next start).
	Failed map[string]string
	// Refused are runs whose record today's policy refuses (Adopt), or
	// whose stored record is damaged: it fails its integrity check
	// (runstore.ErrForged) or does not decode. None is adopted. A
	// refused run is removed from the store and its resident supervisor
	// ended; its id answers sandbox_gone saying why. A damaged record is
	// kept aside (runstore.Dir.SetAside, in the state directory's
	// damaged/), logged at error level, and the resident supervisor that
	// the store's sealed index names for it is ended; its id answers its
	// tenant, as the index names it, or else only an operator. With
	// leases, a damaged record is left in the store and nothing is ended.
	Refused map[string]string
	// Problems are resources of adopted runs that could not be taken
	// over (the run serves on; the next result of that tool says what was
	// lost).
	Problems []string
	// Elsewhere are runs another live replica serves (Config.Leases):
	// not adopted, and forwarded there.
	Elsewhere []string
}

// adopt takes one stored run over. bounded (ctx with adoptTimeout)
// bounds reaching its sandbox and its resident supervisor; its resources
// are then taken over within ctx alone, so that a kernel running a long
// cell is waited for as long as its heartbeat answers.
func (c *Controller) adopt(ctx, bounded context.Context, rec runstore.Record) ([]string, error) {
	mode, err := tools.ParseSurface(rec.Mode)
	if err != nil {
		return nil, fmt.Errorf("controller: stored run %s has mode %q: %w", rec.ID, rec.Mode, err)
	}
	spec := RunSpec{ConversationID: rec.Conversation, Workspace: rec.Workspace, Sandbox: rec.Sandbox, Mode: mode, Vibe: rec.Vibe, Tenant: rec.Tenant, Session: rec.Session}
	sch, rest, err := splitRef(rec.Sandbox)
	if err != nil {
		return nil, err
	}
	if why := c.adoptable(rec, sch); why != "" {
		return nil, refused(rec.ID, why)
	}
	p, ok := c.providers[sch]
	if !ok {
		return nil, fmt.Errorf("controller: run %s is in %s, and this berth has no %s provider (configured: %s)", rec.ID, rec.Sandbox, sch, c.schemeList())
	}
	sb, err := p.Open(bounded, rest)
	if err != nil {
		if cut := cutShort(bounded, rec.ID, "opening its sandbox", err); cut != nil {
			return nil, cut
		}
		// An unavailable sandbox's error wraps ErrGone too: it is asked
		// first, and such a run is kept.
		if errors.Is(err, sandbox.ErrUnavailable) {
			return nil, fmt.Errorf("controller: run %s: its sandbox %s is unavailable (%w)", rec.ID, rec.Sandbox, err)
		}
		if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrGone) {
			return nil, fmt.Errorf("controller: run %s: its sandbox %s is gone (%w) while berth was down: %w; open a new run", rec.ID, rec.Sandbox, err, sandbox.ErrGone)
		}
		return nil, fmt.Errorf("controller: run %s: open its sandbox %s again: %w", rec.ID, rec.Sandbox, err)
	}
	// The container must still be the conversation's (and the tenant's),
	// by the check an explicit reference gets when a run is opened.
	if err := c.checkLabelled(bounded, p, sch, sb, spec); err != nil { // closes sb
		if cut := cutShort(bounded, rec.ID, "checking its container's labels", err); cut != nil {
			return nil, cut
		}
		if errors.Is(err, sandbox.ErrUnavailable) {
			// The engine could not say whose the container is: no
			// refusal, the run is kept.
			return nil, fmt.Errorf("controller: run %s: %w", rec.ID, err)
		}
		return nil, refused(rec.ID, err.Error())
	}
	var res sandbox.Resident
	residentLost, oldDir := "", "" // the note and the directory of a resident that is gone
	if rec.Resident != nil {
		rs, ok := sb.(sandbox.Residence)
		if !ok {
			sb.Close()
			return nil, fmt.Errorf("controller: run %s: its sandbox %s can no longer hold a resident supervisor", rec.ID, rec.Sandbox)
		}
		res, err = rs.Resident(bounded, sandbox.ResidentSpec{Dir: rec.Resident.Dir, Secret: rec.Resident.Secret, Grace: c.cfg.ResidentGrace, Adopt: true})
		switch {
		case err == nil:
		case cutShort(bounded, rec.ID, "reattaching to its resident supervisor", err) != nil:
			sb.Close()
			return nil, cutShort(bounded, rec.ID, "reattaching to its resident supervisor", err)
		case errors.Is(err, sandbox.ErrUnavailable):
			sb.Close()
			return nil, fmt.Errorf("controller: run %s: reattach to its resident supervisor: its sandbox %s is unavailable (%w)", rec.ID, rec.Sandbox, err)
		case !errors.Is(err, sandbox.ErrNotFound):
			sb.Close()
			return nil, fmt.Errorf("controller: run %s: reattach to its resident supervisor: %w", rec.ID, err)
		default:
			// The sandbox lives but its resident does not: it was killed,
			// the container restarted, or berth was away longer than its
			// grace. The run is taken over without it (its workspace and
			// everything else are there); the kernels and debug sessions
			// the resident held ended with it, which the run's next result
			// says, and the next eval or debug call starts a new one.
			residentLost = fmt.Sprintf("note: when berth restarted, the run's resident supervisor no longer ran in %s (%v: it was killed, the container restarted, or berth was away longer than its grace of %v), so the kernels and debug sessions it held ended and their state is lost; the next eval or debug call starts a new one.",
				rec.Sandbox, err, c.cfg.ResidentGrace)
			oldDir = rec.Resident.Dir
			rec.Resident, res = nil, nil
		}
	}
	r, problems, err := c.open(ctx, spec, sb, rec.Placement, &rec, res)
	if err == nil && residentLost != "" {
		problems = append(problems, fmt.Sprintf("run %s: %s", rec.ID, strings.TrimPrefix(residentLost, "note: ")))
		if r.durable != nil {
			r.durable.resMu.Lock()
			r.durable.lost = residentLost
			// The next resident gets a directory of its own: the dead
			// one's keeper, if it still runs, removes the old one.
			r.durable.replaced = replacedOf(oldDir, rec.ID) + 1
			r.durable.resMu.Unlock()
		}
	}
	if err != nil {
		// The resident is let go, not closed: its processes are the run's,
		// and the record names it for the next try.
		if res != nil && r == nil {
			res.Detach()
		}
		return problems, err
	}
	if err := ctx.Err(); err != nil {
		// Cut short (berth shuts down, the adoption's time ran out): what
		// could not be taken over in time is not lost, so nothing is
		// written; the run is let go for the next try.
		r.leave(false)
		return problems, fmt.Errorf("controller: run %s: its adoption was cut short: %w", rec.ID, err)
	}
	r.log.Info("run adopted", "opened", rec.Opened, "problems", len(problems))
	return problems, nil
}

// ErrAdoptRefused: a stored run was not adopted because today's policy
// refuses what its record says, or its record fails its integrity check.
// Such an error also wraps sandbox.ErrGone: the run cannot come back
// (HTTP 410 sandbox_gone), and the message says why.
var ErrAdoptRefused = errors.New("adoption refused")

// namedExplicitly ends the placement of a run whose sandbox was named in
// its spec (RunInfo.Placement "host: named explicitly").
const namedExplicitly = ": named explicitly"

// adoptable applies today's policy to a stored run in a sandbox of scheme
// sch before anything of it is opened: its tenant must be one the
// current credentials know, and a host run must be one this berth would
// place on the host now (--host-placement), under its host roots, for
// its host user. It returns why not, or "". A container's labels are
// checked once it is opened (checkLabelled).
func (c *Controller) adoptable(rec runstore.Record, sch string) string {
	if c.cfg.KnownTenants != nil && !slices.Contains(c.cfg.KnownTenants, rec.Tenant) {
		return fmt.Sprintf("its tenant %q is not one this berth's credentials name", rec.Tenant)
	}
	if sch != HostScheme {
		return ""
	}
	switch c.cfg.hostPlacement() {
	case HostOff:
		return "it runs on the host, and host placement is off on this berth (--host-placement off)"
	case HostExplicit:
		if !strings.HasSuffix(rec.Placement, namedExplicitly) {
			return fmt.Sprintf("it was placed on the host as auto's fallback (%s), and this berth places a run there only when its spec names the host (--host-placement explicit)", rec.Placement)
		}
	}
	if rec.User != c.cfg.HostUser {
		return fmt.Sprintf("its processes run on the host as %s, and this berth runs host processes as %s (--host-user)", userName(rec.User), userName(c.cfg.HostUser))
	}
	ws, err := c.workspace(rec.Workspace, HostScheme)
	if err != nil {
		return err.Error()
	}
	if ws != rec.Workspace {
		return fmt.Sprintf("its workspace %s resolves to %s now", rec.Workspace, ws)
	}
	return ""
}

// userName shows a Config.HostUser.
func userName(u string) string {
	if u == "" {
		return "berth's own user"
	}
	return "uid " + u
}

// refused is the error of run id, which today's policy refuses to adopt
// for the reason why.
func refused(id, why string) error {
	return fmt.Errorf("controller: run %s was not adopted when berth restarted: %s; open a new run: %w (%w)", id, why, ErrAdoptRefused, sandbox.ErrGone)
}

// setAsider is a Store that keeps a damaged record aside
// (runstore.Dir.SetAside) rather than deleting it.
type setAsider interface {
	SetAside(ctx context.Context, id string) (string, error)
}

// damagedRecord deals with a stored record that List could not return:
// one that fails its integrity check (runstore.ErrForged: its bytes
// changed on disk, by damage or by hand) or does not decode. Nothing the
// record says is acted on. It is reported at error level and counted
// (berth_run_records_damaged_total); without leases it is kept aside
// (runstore.Dir.SetAside; a store that cannot keep it deletes it), and
// its id answers sandbox_gone saying why: to its tenant when the store's
// sealed index still names it (runstore.Unreadable.Known), else to an
// operator only. It returns that answer's message, and the index's word
// on the run when it names a resident supervisor, for endLeftovers. With
// leases the record is left in the store, since a replica of another
// berth version may read and serve it, and nothing is ended.
func (c *Controller) damagedRecord(ctx context.Context, u runstore.Unreadable) (string, *runstore.Record) {
	c.m.recordsDamaged.Inc()
	what := "does not decode"
	if errors.Is(u.Err, runstore.ErrForged) {
		what = "fails its integrity check: its bytes changed outside berth, by damage on disk or by hand"
	}
	if c.cfg.Leases != nil {
		c.log.Error("run not adopted: its stored record "+what+"; it is left in the store for a replica that can read it", "run", u.ID, "why", u.Err)
		return refused(u.ID, fmt.Sprintf("its stored record is damaged: it %s (%v)", what, u.Err)).Error(), nil
	}
	var (
		where string
		kerr  error
	)
	if s, ok := c.cfg.Store.(setAsider); ok {
		where, kerr = s.SetAside(ctx, u.ID)
	} else {
		kerr = c.cfg.Store.Delete(ctx, u.ID)
	}
	tenant, known := AllTenants, u.Known
	left := fmt.Sprintf("what it left running in its sandbox ends by itself once its resident supervisor has had no berth for the grace it was started with (%v on this berth)", c.residentGrace())
	switch {
	case known != nil && known.Resident == nil:
		tenant, known = known.Tenant, nil
		left = "it started no resident supervisor, so nothing of it was left running"
	case known != nil:
		tenant = known.Tenant
		left = "berth ends what it left running in its sandbox " + known.Sandbox
	}
	err := refused(u.ID, fmt.Sprintf("its stored record is damaged: it %s; %s", what, left))
	c.rememberGone(u.ID, tenant, err)
	attrs := []any{"run", u.ID, "why", u.Err, "kept_at", where}
	if known != nil {
		attrs = append(attrs, "sandbox", known.Sandbox)
	}
	c.log.Error("run not adopted: its stored record is damaged; "+left, attrs...)
	if kerr != nil {
		c.log.Error("cannot keep the damaged record aside", "run", u.ID, "err", kerr)
	}
	return err.Error(), known
}

// residentGrace is Config.ResidentGrace, or its default.
func (c *Controller) residentGrace() time.Duration {
	if c.cfg.ResidentGrace > 0 {
		return c.cfg.ResidentGrace
	}
	return sandbox.DefaultResidentGrace
}

// endLeftovers ends the resident supervisor of rec, a run whose record
// was damaged (damagedRecord), with what runs under it; sem bounds it
// with the adoptions. What it cannot end ends by itself after its grace.
func (c *Controller) endLeftovers(ctx context.Context, rec runstore.Record, sem chan struct{}) {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	err := c.retire(ctx, rec)
	<-sem
	if err != nil {
		c.log.Error("cannot end the resident supervisor of the run whose record was damaged; it ends by itself after its grace", "run", rec.ID, "sandbox", rec.Sandbox, "grace", c.residentGrace(), "err", err)
		return
	}
	c.log.Info("ended the resident supervisor of the run whose record was damaged, and what ran under it", "run", rec.ID, "sandbox", rec.Sandbox)
}

// cutShort is the error of an adoption whose context ended while it was
// doing what, whatever err says (an engine may report a lookup it could
// not finish as "not found"): such a run is not known to be gone, so it
// must stay in the store. nil while ctx lives.
func cutShort(ctx context.Context, id, doing string, err error) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("controller: run %s: its adoption was cut short %s (%v): %w", id, doing, err, context.Cause(ctx))
}

// Detach lets go of every run without ending it, for a berth that shuts
// down while its runs live on in the store: calls in flight get the close
// grace to finish, each run's state is written, its resident supervisor
// keeps its processes for the next berth's Adopt, and everything else the
// run started (language servers, file servers) ends. Without a store it
// is Close.
func (c *Controller) Detach() error {
	if c.cfg.Store == nil {
		return c.Close()
	}
	c.stopBackground()
	return c.eachRun(func(r *Run) error {
		err := r.leave(true)
		// Let go of the lease once the state is written, so that another
		// replica takes the run over at once.
		return errors.Join(err, c.release(r.id))
	})
}

// detach is Close for a berth that leaves: the run stays in the store.
func (r *Run) detach() error { return r.leave(true) }

// leave ends this berth's part of the run without ending the run: with
// persist (berth shuts down) its state is written first; without (another
// replica serves it now) nothing is written.
func (r *Run) leave(persist bool) error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.done {
		return r.closeErr
	}
	r.mu.Lock()
	r.closing = true
	r.detaching = true
	r.handedOver = !persist
	r.mu.Unlock()
	if persist {
		r.c.markLeaving(r.id, r.info.Tenant)
	}
	r.c.remove(r.id)

	r.waitCalls("in-flight calls did not return before berth let go of the run; detaching under them")
	var errs []error
	d := r.durable
	if persist {
		r.persist(context.Background())
		d.mu.Lock()
		werr := d.err
		d.mu.Unlock()
		if werr != nil {
			errs = append(errs, werr)
		}
	}
	// A call still in flight now is cut off by the detach, not by what
	// it ran: it answers ErrRestarting, whatever its tool says.
	if persist {
		r.mu.Lock()
		r.letGo = true
		r.mu.Unlock()
	}
	// The detachers first, while the run's context still lives, so that
	// nothing under the resident is killed as the context ends.
	errs = append(errs, r.runEnders(true)...)
	if res := d.held(); res != nil {
		errs = append(errs, res.Detach())
	}
	r.cancel()
	if r.questions != nil {
		if persist {
			// Followers are told berth restarts, not that the run closed;
			// the open cards are kept in the record for the next berth.
			errs = append(errs, r.questions.Detach())
		} else {
			errs = append(errs, r.questions.Close())
		}
	}
	r.c.claims.releaseRun(r.id)
	if err := r.sb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("controller: close sandbox %s: %w", r.info.Sandbox, err))
	}
	r.closeErr = errors.Join(errs...)
	r.done = true
	if persist {
		r.log.Info("run detached: it lives on in the store for the next berth", "err", r.closeErr)
	} else {
		r.log.Info("run handed over: another replica serves it now", "err", r.closeErr)
	}
	return r.closeErr
}

// forget ends the run's life in the store once it closed for good: its
// resident supervisor ends (and with it what still ran under it), and its
// record goes.
func (r *Run) forget() error {
	d := r.durable
	if d == nil {
		return nil
	}
	var errs []error
	if res := d.held(); res != nil {
		errs = append(errs, res.Close())
	}
	if err := d.store.Delete(context.Background(), r.id); err != nil {
		errs = append(errs, fmt.Errorf("controller: remove run %s from the store: %w", r.id, err))
	}
	return errors.Join(errs...)
}

// Retire ends what the runs of recs left in their sandboxes — each one's
// resident supervisor, with the kernels and adapters under it — without
// adopting them: records salvaged from a damaged store, which berth does
// not trust enough to serve again. It returns why each run was not
// adopted, and what could not be ended.
func (c *Controller) Retire(ctx context.Context, recs []runstore.Record) map[string]error {
	out := map[string]error{}
	for _, rec := range recs {
		err := fmt.Errorf("controller: run %s was recorded in a damaged run store and is not adopted; open a new run: %w", rec.ID, sandbox.ErrGone)
		c.rememberGone(rec.ID, rec.Tenant, err)
		if rec.Resident == nil {
			out[rec.ID] = err
			continue
		}
		if rerr := c.retire(ctx, rec); rerr != nil {
			err = fmt.Errorf("%w; its resident supervisor could not be ended (%v) and ends by itself after its grace", err, rerr)
		} else {
			err = fmt.Errorf("%w; its resident supervisor and what ran under it were ended", err)
		}
		out[rec.ID] = err
	}
	return out
}

// retire ends one run's resident supervisor.
func (c *Controller) retire(ctx context.Context, rec runstore.Record) error {
	ctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	sch, rest, err := splitRef(rec.Sandbox)
	if err != nil {
		return err
	}
	p, ok := c.providers[sch]
	if !ok {
		return fmt.Errorf("no %s provider", sch)
	}
	sb, err := p.Open(ctx, rest)
	if err != nil {
		return err
	}
	defer sb.Close()
	rs, ok := sb.(sandbox.Residence)
	if !ok {
		return fmt.Errorf("the sandbox %s has no resident supervisors", rec.Sandbox)
	}
	res, err := rs.Resident(ctx, sandbox.ResidentSpec{Dir: rec.Resident.Dir, Secret: rec.Resident.Secret, Adopt: true})
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil // nothing left to end
	}
	if err != nil {
		return err
	}
	return res.Close()
}

// restartingError is what a call to a run this berth is handing over to
// the next berth answers.
func restartingError(id string) error {
	return fmt.Errorf("controller: run %s: %w: this berth is shutting down and the next berth on its state directory takes the run over; the run, its kernels and their state are kept: retry in %d seconds", id, ErrRestarting, RestartingRetry)
}

// inFlightRestartingError is what a call in flight answers when berth let
// go of its run under it (Detach).
func inFlightRestartingError(id, tool string, session bool) error {
	if session {
		return fmt.Errorf("controller: run %s: %w while the %s call ran: this berth does not deliver its result, and this MCP session ends with it (the next berth does not know its session id). What the call started goes on until the next berth closes the session's run, once unused for %s after it restarts (by default): initialize a new session (it opens a new run with a fresh kernel; files the call wrote are in the workspace) and run there what is still needed", id, ErrRestarting, tool, DefaultSessionRunExpiry)
	}
	return fmt.Errorf("controller: run %s: %w while the %s call ran: this berth does not deliver its result. What the call started goes on in the kept sandbox (a cell runs to its end in the kept kernel, which keeps its state). In %d seconds, when the next berth serves the run, look at the result there (the variables the cell set, the files it wrote) instead of running the call again", id, ErrRestarting, tool, RestartingRetry)
}

// markLeaving remembers that the run id of tenant is being handed over
// to the next berth, so that Lookup answers ErrRestarting for it, not
// ErrUnknownRun, until this berth exits.
func (c *Controller) markLeaving(id, tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leaving == nil {
		c.leaving = make(map[string]string)
	}
	c.leaving[id] = tenant
}
