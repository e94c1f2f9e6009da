// Package controller owns berth's runs: it places each run in a sandbox
// (the conversation's container, or the host), builds the run's tool
// registry, routes every tool call through that registry's level gate and
// the run's permission gate (tools/permission), gives each run a question
// port (package questions) for ask_user and permission cards, and closes
// everything a run started when the run ends.
//
// The controller sees sandboxes only through [sandbox.Provider]; which
// backends exist (host, docker, …) is decided by whoever builds the
// [Config], normally cmd/berth.
package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/questions"
	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/permission"
)

// DefaultLabelKey is the container label whose value is a conversation id.
const DefaultLabelKey = "berth.conversation"

// HostScheme is the scheme of the host provider and the reference "host".
const HostScheme = "host"

// AutoSandbox is the sandbox reference that places a run by conversation id.
const AutoSandbox = "auto"

// DefaultCloseGrace is how long Close waits for in-flight calls of a run to
// return after cancelling them, before it closes the sandbox under them.
const DefaultCloseGrace = 5 * time.Second

// Errors of the controller. Test them with errors.Is.
var (
	// ErrUnknownRun: no open run has this id (it never existed or was closed).
	ErrUnknownRun = errors.New("unknown run")
	// ErrBadSpec: a RunSpec field is malformed (HTTP 400).
	ErrBadSpec = errors.New("bad run spec")
	// ErrClosed: the controller is shutting down and opens no more runs.
	ErrClosed = errors.New("controller closed")
	// ErrAdopting: berth restarted a moment ago and is still taking this
	// stored run over (Controller.BeginAdopt); the run is kept, and the
	// call should be retried after AdoptingRetry seconds (HTTP 503
	// adopting, with Retry-After).
	ErrAdopting = errors.New("the run is being adopted")
	// ErrRestarting: berth is shutting down and hands the run over to the
	// next berth on its state directory (Controller.Detach); the run, its
	// kernels and what they run are kept. A call in flight when berth let
	// go of the run is not answered by this berth: what it started goes on
	// in the kept processes. Retry after RestartingRetry seconds (HTTP 503
	// restarting, with Retry-After).
	ErrRestarting = errors.New("berth is restarting")
)

// RestartingRetry is how long a caller told ErrRestarting should wait
// before it retries, in seconds (the API's Retry-After).
const RestartingRetry = 5

// Binder registers the tools of one run into r. It runs once, in Open, after
// the run's sandbox and workspace FS are open. Resources that must end with
// the run are handed to env.OnClose.
type Binder func(ctx context.Context, r *tools.Registry, env *Env) error

// Env is what a [Binder] gets to wire a run's tools.
type Env struct {
	// RunID is the run's id.
	RunID string
	// Spec is the run's spec, with defaults filled in.
	Spec RunSpec
	// Sandbox is the run's sandbox. The run closes it; binders must not.
	Sandbox sandbox.Sandbox
	// Workspace is the sandbox FS rooted at Spec.Workspace.
	Workspace sandbox.FS
	// Context lives as long as the run: it is cancelled when the run closes.
	// Resources started for the run (language servers, kernels) use it.
	Context context.Context
	// Logger logs with the run's id attached.
	Logger *slog.Logger
	// Questions is the run's question port: numbered question and
	// permission cards and the run's event stream. Nil when
	// Config.NoQuestions is set (no surface to draw cards on). Binders may
	// Publish their own event types on it.
	Questions *questions.Port
	// Gate is the run's permission gate. The controller installs it on the
	// run's registry after the binders ran, so it is the outermost
	// middleware; a binder that builds a sub-registry (a worker's tools)
	// Uses Gate.Wrap on it to share the same policy and "allow for this
	// run" decisions.
	Gate *permission.Gate
	// Workers is set by the binder that wires a run's background worker
	// tools (vibe_*), so the API can list the workers, take a hosting
	// platform's reports about them and check a call's worker identity.
	// Nil when the run has none.
	Workers Workers

	closers   *[]ender
	reporters *[]tools.Reporter
	claims    *claims
	durable   *durable                   // nil without Config.Store
	adopted   map[string]json.RawMessage // an adopted run's stored state, per resource
	problems  *[]string                  // what could not be adopted; nil outside open
}

// Problem reports something of an adopted run's resources that could not
// be taken over (the run serves on without it); Controller.Adopt's report
// lists it.
func (e *Env) Problem(msg string) {
	if e.problems != nil {
		*e.problems = append(*e.problems, msg)
	}
}

// ender ends one binder's resources: close when the run closes, detach
// when berth shuts down and the run lives on (Controller.Detach).
type ender struct{ close, detach func() error }

// Claim takes the conversation-wide resource kind ("debug": one debug
// session per conversation, DBG-3) for this run, or fails with an error
// wrapping ErrClaimed that names the run holding it. A run without a
// conversation id has nothing to share and always gets it. Call release
// when the resource ends; the run's close releases what it still holds.
func (e *Env) Claim(kind string) (release func(), err error) {
	if e.Spec.ConversationID == "" || e.claims == nil {
		return func() {}, nil
	}
	return e.claims.take(claimKey{tenant: e.Spec.Tenant, conversation: e.Spec.ConversationID, kind: kind}, e.RunID)
}

// OnClose registers fn to run when the run closes, after the run's context
// is cancelled and before the sandbox is closed. The closers of a run run
// concurrently (each binder's resources are its own), so closing a run
// takes as long as its slowest closer, not the sum of them; the run's
// question port closes after all of them.
func (e *Env) OnClose(fn func() error) { *e.closers = append(*e.closers, ender{fn, fn}) }

// OnCloseOrDetach is OnClose for a resource that can outlive berth: close
// runs when the run closes, detach instead when berth shuts down and the
// run lives on in the store for the next berth to adopt (Env.Persist,
// Env.Adopted).
func (e *Env) OnCloseOrDetach(close, detach func() error) {
	*e.closers = append(*e.closers, ender{close, detach})
}

// AddResources registers fn to report the live resources a binder started
// for the run (language servers, kernels, …), shown by GET
// /v1/runs/{id}/resources and the operator console. fn must not block.
func (e *Env) AddResources(fn tools.Reporter) { *e.reporters = append(*e.reporters, fn) }

// Config configures a [Controller].
type Config struct {
	// Providers open sandboxes, one per scheme. For "auto" placement their
	// Locate methods are asked in this order; the host provider (scheme
	// "host") is never asked to locate, it is the fallback.
	Providers []sandbox.Provider

	// LabelKey is the container label that names a conversation; it is used
	// in messages (providers do the matching). Empty means DefaultLabelKey.
	LabelKey string

	// NoHostFallback disables placing a run on the host when its
	// conversation has no container: such a run fails with ErrNotFound.
	// An explicit "sandbox":"host" is still accepted: it is HostPlacement
	// HostExplicit, and a platform that must never run on the host sets
	// HostPlacement HostOff. The host is used only when a provider with
	// scheme "host" is configured.
	NoHostFallback bool

	// HostPlacement says whether runs may be placed on the host: HostOff,
	// HostExplicit or HostFallback. Empty is HostFallback, or
	// HostExplicit with NoHostFallback; HostFallback with NoHostFallback
	// is HostExplicit too.
	HostPlacement HostPlacement

	// HostRoots are the directories host workspaces must lie under, after
	// cleaning and resolving symbolic links (of the workspace and of the
	// roots, which must exist); a workspace elsewhere is refused with
	// ErrPlacement. Nil allows any workspace; an empty non-nil list
	// allows none (a hosted berth whose operator named no root).
	HostRoots []string

	// AllowUnlabelled accepts an explicit container reference
	// (docker://, containerd://, kube://) to a container that is not the
	// one labelled with the run's conversation, or a run without a
	// conversation id. By default such a run is refused with
	// ErrPlacement.
	AllowUnlabelled bool

	// RequireTenantLabel makes a container belong to a tenant as well as
	// to a conversation: a run is placed, by "auto" or by an explicit
	// reference, only in a container (or pod) that also carries the
	// tenant label sandbox.TenantLabelKey(LabelKey)=RunSpec.Tenant
	// (berth.tenant, berth.dev/tenant for pods). Set it when several
	// tenants share this berth: conversation ids are chosen by the
	// callers, so without it one tenant opens runs in another's
	// containers by naming their conversation. A run without a tenant
	// is then refused a container.
	RequireTenantLabel bool

	// HostUser names who the host provider runs processes as (the uid of
	// --host-user; empty: berth's own user). A host run's record keeps
	// it, and Adopt refuses a host run recorded under another.
	HostUser string

	// KnownTenants are the tenants the current credentials may open runs
	// for; Adopt refuses a stored run of any other tenant. Nil: any.
	KnownTenants []string

	// Tools wire each run's tools, in order. Nil means DefaultTools.
	Tools []Binder

	// DefaultWorkspace is the workspace of a host run whose spec names
	// none; empty means berth's working directory.
	DefaultWorkspace string

	// Registerer receives the controller's metrics; nil registers nothing.
	Registerer prometheus.Registerer

	// Logger receives lifecycle logs; nil discards them.
	Logger *slog.Logger

	// CloseGrace overrides DefaultCloseGrace.
	CloseGrace time.Duration

	// LSPRequestTimeout bounds each request to a language server of the
	// default tools (lsp.Options.RequestTimeout): a server that does not
	// answer within it makes the call fail, naming the server and saying
	// to call lsp reload. 0 means lsp.DefaultRequestTimeout. It applies
	// when Tools is nil; a caller that sets Tools wires LSPToolsWith
	// itself.
	LSPRequestTimeout time.Duration

	// Mode is how berth is deployed; it picks the default Permissions:
	// permission.ModeLocal (the default: every level allowed) or
	// permission.ModeHosted (read allowed; write and exec ask the operator
	// through a permission card). `berth serve` defaults to hosted.
	Mode permission.Mode

	// Permissions overrides the mode's default policy
	// (permission.DefaultPolicy(Mode)).
	Permissions *permission.Policy

	// PermissionTimeout overrides permission.DefaultTimeout: how long a
	// permission card waits before the call is refused.
	PermissionTimeout time.Duration

	// Vibe configures the vibe_* workers of runs opened with Vibe set.
	Vibe VibeConfig

	// NoQuestions opens runs without a question port: no ask_user, no
	// events, and every permission "ask" is refused (no approver). For
	// one-shot commands with nobody to show a card to.
	NoQuestions bool

	// MaxRunsPerTenant caps the runs one tenant (RunSpec.Tenant) may have
	// open; 0 means DefaultMaxRunsPerTenant, negative unlimited. Opening
	// one more fails with ErrTooMany.
	MaxRunsPerTenant int
	// MaxCallsPerTenant caps one tenant's tool calls in flight over all
	// its runs; 0 means DefaultMaxCallsPerTenant, negative unlimited. A
	// call beyond it fails with ErrTooMany without starting.
	MaxCallsPerTenant int
	// IdleExpiry closes a run nobody used for this long (no call started
	// or ended, no call in flight, nobody on its event stream); 0 means
	// DefaultIdleExpiry, negative never. Its id then answers
	// ErrRunExpired.
	IdleExpiry time.Duration
	// SessionRunExpiry closes an adopted run whose MCP session (RunSpec.
	// Session) ended with the berth before, once nobody used it for this
	// long; 0 means DefaultSessionRunExpiry. It applies only while
	// IdleExpiry is not negative, and never beyond IdleExpiry.
	SessionRunExpiry time.Duration

	// Store keeps what a restarted berth needs to adopt the runs (the run
	// table, each run's resident supervisor, its resources' state); with
	// it a run outlives the berth process that serves it: Detach leaves
	// the runs running, Adopt takes them over. Nil keeps runs in memory
	// only: they end with berth. The controller does not close it.
	Store runstore.Store
	// Instance names this berth in the store's records (the replica that
	// serves a run); empty means none.
	Instance string
	// ResidentGrace is how long a run's resident supervisor keeps its
	// processes while no berth is attached; zero means
	// sandbox.DefaultResidentGrace.
	ResidentGrace time.Duration
	// Leases make this berth one of several replicas sharing Store (see
	// Locate): each run is served by the replica holding its lease.
	// They need Store and an Instance that names this replica in them.
	// Nil: this berth alone serves every run in Store.
	Leases runstore.Leases
}

// RunSpec says where and how to open a run.
type RunSpec struct {
	// ConversationID names the conversation; "auto" placement finds its
	// container by the label LabelKey=ConversationID.
	ConversationID string `json:"conversation_id,omitempty"`
	// Workspace is the absolute path of the checkout inside the sandbox.
	// Required for a container; a host run defaults to Config.DefaultWorkspace.
	Workspace string `json:"workspace,omitempty"`
	// Sandbox is "auto" (the default), "host", or "SCHEME://REF" of a
	// configured provider, such as "docker://NAME-or-ID".
	Sandbox string `json:"sandbox,omitempty"`
	// Mode is the run's surface: "default" (the default), "plan" or
	// "readonly". It is a ceiling, not only a default: a call that names a
	// surface allowing more than the mode is refused (a plan-mode run can
	// never write, whatever its calls claim).
	Mode tools.Surface `json:"mode,omitempty"`
	// Vibe enables the vibe_* worker tools where they are wired.
	Vibe bool `json:"vibe,omitempty"`
	// Prewarm names kernels ("python", "javascript") and language servers
	// ("lsp:go", "lsp:python", "lsp:typescript": lsp: and a language id)
	// to start in the background as the run opens, so that its first eval
	// finds its kernel up and its first lsp call its server started.
	// Starting one is decided by the run's permission gate as a call of
	// eval, or of lsp; a mode that cannot run exec-level tools cannot
	// prewarm kernels. A language server is the one for the workspace
	// root (its markers there choose it).
	Prewarm []string `json:"prewarm,omitempty"`
	// Tenant owns the run: only it (and AllTenants) finds the run with
	// Lookup and ListFor, and the run counts against its caps. It is set
	// by the API from the caller's credential, never from the body.
	Tenant string `json:"-"`
	// Session marks a run an MCP session opened for itself (/v1/mcp) and
	// closes when it ends. The session lives in this berth's memory only:
	// after a restart it cannot come back, so the next berth closes the
	// adopted run once it is unused for Config.SessionRunExpiry, not
	// IdleExpiry. It is set by the API, never from a body.
	Session bool `json:"-"`
}

// RunInfo describes an open run.
type RunInfo struct {
	ID             string        `json:"id"`
	Sandbox        string        `json:"sandbox"`
	Workspace      string        `json:"workspace"`
	ConversationID string        `json:"conversation_id,omitempty"`
	Mode           tools.Surface `json:"mode"`
	Vibe           bool          `json:"vibe,omitempty"`
	Tenant         string        `json:"tenant,omitempty"`
	Opened         time.Time     `json:"opened"`
	// Placement says how the sandbox was chosen, for a human: for example
	// "docker: container labelled berth.conversation=c-42" or
	// "host: no container labelled berth.conversation=c-42".
	Placement string `json:"placement,omitempty"`
}

// Controller holds the open runs. It is safe for concurrent use.
type Controller struct {
	cfg       Config
	providers map[string]sandbox.Provider
	schemes   []string // in Config order
	log       *slog.Logger
	m         *metrics

	mu      sync.Mutex
	runs    map[string]*Run
	closed  bool
	tenants map[string]*tenantUse // tenants holding runs or calls
	// expired remembers the last MaxExpiredRemembered expired runs;
	// expiredOrder is a ring of their ids, oldest at expiredNext once full.
	expired      map[string]expiredRun
	expiredOrder []string
	expiredNext  int

	stopJanitor chan struct{} // closed by Close; nil without expiry
	janitorDone chan struct{}
	stopPersist chan struct{} // closed by Close; nil without a store
	persistDone chan struct{}
	stopSweep   chan struct{} // closed by Close; nil without leases
	sweepDone   chan struct{}
	taking      map[string]chan struct{} // runs being taken over, closed when done
	remotes     map[string]remote        // runs other replicas serve, as Locate found them
	bg          sync.WaitGroup           // hand-overs (Lost) and adoptions (BeginAdopt) under way
	// adopting are the stored runs BeginAdopt is taking over, until each
	// is served, found gone, or given up; Lookup answers for them.
	adopting map[string]*pending
	// leaving holds the runs Detach hands over to the next berth, by id,
	// with their tenants: Lookup answers ErrRestarting for them.
	leaving map[string]string
	// life ends when the controller stops (stopBackground): adoptions
	// under way and their retries end with it.
	life     context.Context
	lifeStop context.CancelFunc

	hostRoots []string // Config.HostRoots resolved; nil: anywhere

	claims claims // conversation-wide resources of the runs (Env.Claim)
}

// New returns a controller. It fails when two providers share a scheme or
// a metric cannot be registered.
func New(cfg Config) (*Controller, error) {
	if cfg.LabelKey == "" {
		cfg.LabelKey = DefaultLabelKey
	}
	if cfg.Tools == nil {
		cfg.Tools = append(defaultTools(lsp.Options{RequestTimeout: cfg.LSPRequestTimeout}), VibeTools(cfg.Vibe))
	}
	if cfg.CloseGrace <= 0 {
		cfg.CloseGrace = DefaultCloseGrace
	}
	if cfg.MaxRunsPerTenant == 0 {
		cfg.MaxRunsPerTenant = DefaultMaxRunsPerTenant
	}
	if cfg.MaxCallsPerTenant == 0 {
		cfg.MaxCallsPerTenant = DefaultMaxCallsPerTenant
	}
	if cfg.IdleExpiry == 0 {
		cfg.IdleExpiry = DefaultIdleExpiry
	}
	if cfg.SessionRunExpiry <= 0 {
		cfg.SessionRunExpiry = DefaultSessionRunExpiry
	}
	mode, err := permission.ParseMode(string(cfg.Mode))
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	if _, err := ParseHostPlacement(string(cfg.HostPlacement)); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	roots, err := resolveRoots(cfg.HostRoots)
	if err != nil {
		return nil, err
	}
	cfg.Mode = mode
	if cfg.Permissions == nil {
		p := permission.DefaultPolicy(cfg.Mode)
		cfg.Permissions = &p
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Leases != nil && (cfg.Store == nil || cfg.Instance == "") {
		return nil, errors.New("controller: Leases need a Store they cover and an Instance naming this replica in them")
	}
	c := &Controller{cfg: cfg, providers: map[string]sandbox.Provider{}, log: log, runs: map[string]*Run{},
		tenants: map[string]*tenantUse{}, expired: map[string]expiredRun{}, hostRoots: roots, taking: map[string]chan struct{}{}, remotes: map[string]remote{},
		adopting: map[string]*pending{}}
	c.life, c.lifeStop = context.WithCancel(context.Background())
	for _, p := range cfg.Providers {
		s := p.Scheme()
		if _, dup := c.providers[s]; dup {
			return nil, fmt.Errorf("controller: two sandbox providers for scheme %q: configure one", s)
		}
		c.providers[s] = p
		c.schemes = append(c.schemes, s)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	c.m = m
	if cfg.IdleExpiry > 0 {
		c.stopJanitor, c.janitorDone = make(chan struct{}), make(chan struct{})
		go c.janitor(c.stopJanitor, c.janitorDone)
	}
	if cfg.Store != nil {
		c.stopPersist, c.persistDone = make(chan struct{}), make(chan struct{})
		go c.persister(c.stopPersist, c.persistDone)
	}
	if cfg.Leases != nil {
		c.stopSweep, c.sweepDone = make(chan struct{}), make(chan struct{})
		go c.sweeper(c.stopSweep, c.sweepDone)
	}
	return c, nil
}

// Open places a run, opens its sandbox and workspace, and wires its tools.
// ctx bounds only the opening; the run lives until Close.
func (c *Controller) Open(ctx context.Context, spec RunSpec) (*Run, error) {
	if spec.Mode == "" {
		spec.Mode = tools.SurfaceDefault
	}
	if _, err := tools.ParseSurface(string(spec.Mode)); err != nil {
		return nil, fmt.Errorf("controller: mode %q is not a surface: use default, plan or readonly: %w", spec.Mode, ErrBadSpec)
	}
	if spec.Sandbox == "" {
		spec.Sandbox = AutoSandbox
	}
	if err := checkPrewarm(&spec); err != nil {
		return nil, err
	}
	if err := c.reserveRun(spec.Tenant); err != nil {
		return nil, err
	}
	reserved := true // until the run is registered, which takes the slot over
	defer func() {
		if reserved {
			c.releaseRun(spec.Tenant)
		}
	}()

	sb, placement, err := c.place(ctx, spec)
	if err != nil {
		return nil, err
	}
	reserved = false // open takes the slot over
	r, _, err := c.open(ctx, spec, sb, placement, nil, nil)
	if err != nil {
		return nil, err
	}
	r.log.Info("run opened", "workspace", r.info.Workspace, "conversation", spec.ConversationID, "placement", placement)
	return r, nil
}

// open opens the workspace of sb, wires the run's tools and registers the
// run. It owns sb (closed on failure) and the tenant's run slot, which it
// reserves for an adopted run (rec set, with the resident res when the run
// had one) and takes over from Open otherwise. It returns what could not be
// adopted of an adopted run's resources.
func (c *Controller) open(ctx context.Context, spec RunSpec, sb sandbox.Sandbox, placement string, rec *runstore.Record, res sandbox.Resident) (*Run, []string, error) {
	if rec != nil {
		if err := c.reserveRun(spec.Tenant); err != nil {
			sb.Close()
			return nil, nil, err
		}
	}
	reserved := true
	defer func() {
		if reserved {
			c.releaseRun(spec.Tenant)
		}
	}()
	ref := sb.Ref()
	ws, err := c.workspace(spec.Workspace, ref)
	if err != nil {
		sb.Close()
		return nil, nil, err
	}
	spec.Workspace = ws
	fsys, err := sb.FS(ctx, ws)
	if err != nil {
		sb.Close()
		return nil, nil, fmt.Errorf("controller: open workspace %s in %s: %w", ws, ref, err)
	}

	var id string
	opened := time.Now()
	if rec != nil {
		id, opened = rec.ID, rec.Opened
	} else if id, err = newID(); err != nil {
		sb.Close()
		return nil, nil, err
	} else if c.cfg.Leases != nil {
		// A new run is this replica's before anything of it is stored.
		if ok, err := c.cfg.Leases.Acquire(ctx, id); !ok || err != nil {
			sb.Close()
			return nil, nil, fmt.Errorf("controller: take the new run's lease in the run store: %v (held elsewhere: %v): %w; retry", err, !ok && err == nil, ErrMoving)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r := &Run{
		c:      c,
		id:     id,
		sb:     sb,
		reg:    tools.NewRegistry(),
		cancel: cancel,
		ctx:    runCtx,
		log:    c.log.With("run", id, "sandbox", ref),
		info: RunInfo{
			ID: id, Sandbox: ref, Workspace: ws, ConversationID: spec.ConversationID,
			Mode: spec.Mode, Vibe: spec.Vibe, Tenant: spec.Tenant, Opened: opened, Placement: placement,
		},
	}
	r.lastUsed = time.Now()
	r.session = spec.Session
	if rec != nil && spec.Session {
		// Its MCP session ended with the berth before and cannot come
		// back: it is closed once unused for the short expiry.
		r.idleLimit = c.cfg.SessionRunExpiry
	}
	base := runstore.Record{ID: id, Tenant: spec.Tenant, Conversation: spec.ConversationID, Sandbox: ref, Workspace: ws,
		Mode: string(spec.Mode), Vibe: spec.Vibe, Placement: placement, Opened: opened, Session: spec.Session}
	if rec != nil {
		base.Resident = rec.Resident
	}
	if ref == HostScheme {
		base.User = c.cfg.HostUser
	}
	r.durable = c.newDurable(base)
	if r.durable != nil && res != nil {
		r.durable.res = res
	}
	env := &Env{RunID: id, Spec: spec, Sandbox: sb, Workspace: fsys, Context: runCtx, Logger: r.log, closers: &r.closers, reporters: &r.reporters, claims: &c.claims, durable: r.durable}
	if rec != nil {
		env.adopted = rec.State
	}
	var problems []string
	if !c.cfg.NoQuestions {
		r.questions = questions.New()
		if b := env.Adopted("questions"); b != nil {
			if err := r.questions.Restore(b); err != nil {
				problems = append(problems, fmt.Sprintf("run %s: its cards and events could not be restored: %v", id, err))
			}
		}
		env.Questions = r.questions
		env.Persist("questions", r.questions)
	}
	env.Gate = permission.New(*c.cfg.Permissions, r.questions, permission.Options{Timeout: c.cfg.PermissionTimeout, Audit: r.audit})
	if b := env.Adopted("permission"); b != nil {
		if err := env.Gate.Restore(b); err != nil {
			problems = append(problems, fmt.Sprintf("run %s: %v", id, err))
		}
	}
	env.Persist("permission", env.Gate)
	env.problems = &problems
	for _, bind := range c.cfg.Tools {
		if err := bind(ctx, r.reg, env); err != nil {
			if rec != nil {
				// An adopted run that could not be wired again is let go,
				// never closed: its record and its resident's processes
				// stay for the next try (the next start, another replica).
				r.leave(false)
			} else {
				r.closeResources()
			}
			return nil, problems, fmt.Errorf("controller: wire tools for run in %s: %w", ref, err)
		}
	}
	r.reg.Use(env.Gate.Wrap) // outermost: before diagnostics on write and the rest
	r.env = env

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if rec != nil {
			// Shutting down while adopting: leave the run for the next
			// berth as the store has it (what this adoption took over may
			// be incomplete: nothing of it is written).
			r.leave(false)
			return nil, problems, fmt.Errorf("controller: %w: berth is shutting down", ErrClosed)
		}
		r.closeResources()
		return nil, problems, fmt.Errorf("controller: %w: berth is shutting down", ErrClosed)
	}
	c.runs[id] = r
	reserved = false
	c.mu.Unlock()
	r.persist(ctx)
	c.m.runsOpen.Inc()
	c.m.runsOpened.WithLabelValues(scheme(ref)).Inc()
	return r, problems, nil
}

// place resolves spec.Sandbox to an open sandbox and says how it chose.
func (c *Controller) place(ctx context.Context, spec RunSpec) (sandbox.Sandbox, string, error) {
	ref := spec.Sandbox
	if ref != AutoSandbox {
		sch, rest, err := splitRef(ref)
		if err != nil {
			return nil, "", err
		}
		if sch == HostScheme && c.cfg.hostPlacement() == HostOff {
			return nil, "", c.hostOffError(spec.ConversationID)
		}
		p, ok := c.providers[sch]
		if !ok {
			return nil, "", fmt.Errorf("controller: sandbox %q: no %s provider is configured (configured: %s): %w",
				ref, sch, c.schemeList(), ErrBadSpec)
		}
		sb, err := p.Open(ctx, rest)
		if err != nil {
			return nil, "", fmt.Errorf("controller: open sandbox %s: %w", ref, err)
		}
		if err := c.checkLabelled(ctx, p, sch, sb, spec); err != nil {
			return nil, "", err
		}
		return sb, sch + namedExplicitly, nil
	}

	owner := c.owner(spec)
	label := c.labels("", owner)
	var tried []string
	if spec.ConversationID != "" {
		if err := c.checkOwner(spec); err != nil {
			return nil, "", err
		}
		for _, sch := range c.schemes {
			if sch == HostScheme {
				continue
			}
			p := c.providers[sch]
			label := c.labels(sch, owner)
			found, err := p.Locate(ctx, owner)
			switch {
			case err == nil:
				full := sch + "://" + found
				sb, err := p.Open(ctx, found)
				if err != nil {
					return nil, "", fmt.Errorf("controller: open sandbox %s (labelled %s): %w", full, label, err)
				}
				return sb, fmt.Sprintf("%s: container labelled %s", sch, label), nil
			case errors.Is(err, sandbox.ErrNotFound):
				tried = append(tried, fmt.Sprintf("%s: no container labelled %s", sch, label))
			case errors.Is(err, sandbox.ErrGone):
				// The engine cannot be reached: treat it as absent, but say so.
				c.log.Warn("sandbox provider unreachable during placement", "scheme", sch, "conversation", spec.ConversationID, "err", err)
				tried = append(tried, fmt.Sprintf("%s: unreachable (%v)", sch, err))
			default:
				// Several candidates, or a failure that must not silently
				// put the run on the host.
				return nil, "", fmt.Errorf("controller: locate the sandbox of conversation %q: %w", spec.ConversationID, err)
			}
		}
	} else {
		tried = append(tried, "no conversation id given, so no container was looked up")
	}

	host, ok := c.providers[HostScheme]
	if placement := c.cfg.hostPlacement(); placement != HostFallback || !ok {
		why := "host fallback is disabled"
		switch {
		case !ok:
			why = "no host provider is configured"
		case placement == HostOff:
			why = "host placement is off on this berth"
		}
		return nil, "", fmt.Errorf("controller: no sandbox for conversation %q (%s) and %s: start the conversation's container with label %s or name one with sandbox docker://NAME: %w",
			spec.ConversationID, strings.Join(tried, "; "), why, label, sandbox.ErrNotFound)
	}
	sb, err := host.Open(ctx, "")
	if err != nil {
		return nil, "", fmt.Errorf("controller: open the host sandbox (fallback after: %s): %w", strings.Join(tried, "; "), err)
	}
	return sb, "host: " + strings.Join(tried, "; "), nil
}

// workspace checks and defaults the workspace path for the sandbox ref.
func (c *Controller) workspace(ws, ref string) (string, error) {
	if ref == HostScheme {
		if ws == "" {
			ws = c.cfg.DefaultWorkspace
		}
		abs, err := filepath.Abs(ws) // "" is the working directory
		if err != nil {
			return "", fmt.Errorf("controller: workspace %q: %w", ws, err)
		}
		return c.checkHostRoot(abs)
	}
	if ws == "" {
		return "", fmt.Errorf("controller: the run is placed in %s and needs a workspace: pass the absolute path of the checkout inside the container (for example /workspace): %w", ref, ErrBadSpec)
	}
	if !path.IsAbs(ws) {
		return "", fmt.Errorf("controller: workspace %q in %s is not absolute: pass a path starting with /: %w", ws, ref, ErrBadSpec)
	}
	return path.Clean(ws), nil
}

func (c *Controller) schemeList() string {
	if len(c.schemes) == 0 {
		return "none"
	}
	return strings.Join(c.schemes, ", ")
}

// splitRef splits "scheme://rest" or "host".
func splitRef(ref string) (scheme, rest string, err error) {
	if ref == HostScheme {
		return HostScheme, "", nil
	}
	sch, rest, ok := strings.Cut(ref, "://")
	if !ok || sch == "" || rest == "" {
		return "", "", fmt.Errorf("controller: sandbox %q: use auto, host, or SCHEME://REF such as docker://NAME: %w", ref, ErrBadSpec)
	}
	return sch, rest, nil
}

func scheme(ref string) string {
	if sch, _, ok := strings.Cut(ref, "://"); ok {
		return sch
	}
	return ref
}

// Get returns the open run with this id, whatever its tenant: Lookup
// with AllTenants. It answers ErrRunExpired for a run that expired.
func (c *Controller) Get(id string) (*Run, error) { return c.Lookup(AllTenants, id) }

// List returns every tenant's open runs, oldest first: ListFor with
// AllTenants.
func (c *Controller) List() []RunInfo { return c.ListFor(AllTenants) }

// Close closes every run and refuses new ones. It returns the errors of
// the runs that did not close cleanly.
func (c *Controller) Close() error {
	c.stopBackground()
	return c.eachRun((*Run).Close)
}

// eachRun calls end for every open run, all at once, and joins their
// errors.
func (c *Controller) eachRun(end func(*Run) error) error {
	runs := c.openRuns()
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() { errs[i] = end(r) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopBackground refuses new runs and stops the janitor and the
// persister, once.
func (c *Controller) stopBackground() {
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	c.mu.Unlock()
	if !first {
		return
	}
	c.lifeStop()
	if c.stopJanitor != nil {
		close(c.stopJanitor)
		<-c.janitorDone
	}
	if c.stopSweep != nil {
		close(c.stopSweep)
		<-c.sweepDone
	}
	c.bg.Wait()
	if c.stopPersist != nil {
		close(c.stopPersist)
		<-c.persistDone
	}
}

func (c *Controller) remove(id string) {
	c.mu.Lock()
	r, ok := c.runs[id]
	delete(c.runs, id)
	if ok {
		if u := c.tenants[r.info.Tenant]; u != nil {
			u.runs--
			c.dropIdleLocked(r.info.Tenant)
		}
	}
	c.mu.Unlock()
	if ok {
		c.m.runsOpen.Dec()
	}
}

func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("controller: make a run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Run is one conversation's run: a sandbox, a workspace and a tool
// registry. It is safe for concurrent use.
type Run struct {
	c    *Controller
	id   string
	sb   sandbox.Sandbox
	reg  *tools.Registry
	info RunInfo
	// questions is nil when Config.NoQuestions is set.
	questions *questions.Port
	env       *Env // as the binders left it
	log       *slog.Logger
	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc

	closers   []ender          // written only during Open
	durable   *durable         // nil without Config.Store
	reporters []tools.Reporter // written only during Open

	calls sync.WaitGroup // in-flight calls

	mu         sync.Mutex
	closing    bool // Close has begun: new calls are refused
	detaching  bool // berth is shutting down and the run lives on
	handedOver bool // detaching because another replica serves the run now
	// letGo is set once a detach (not a hand-over) begins letting go of
	// the run's resources: a call answering after it was cut off by the
	// detach, not by what it ran.
	letGo bool
	gone  error // set once the sandbox was found gone
	// unavailable is set while the sandbox is paused or its engine does not
	// answer (sandbox.ErrUnavailable): calls fail fast until retryAt, then
	// one Check decides; backoff doubles up to UnavailableRetryMax.
	unavailable error
	retryAt     time.Time
	backoff     time.Duration
	inflight    int       // calls in flight (what calls counts)
	lastUsed    time.Time // when a call last started or ended
	// idleLimit, when set, closes the run once idle this long if that is
	// sooner than Config.IdleExpiry (an adopted run of an MCP session).
	idleLimit time.Duration
	session   bool          // RunSpec.Session
	expired   time.Duration // the idle time after which the janitor closed the run; 0: not expired

	closeMu  sync.Mutex // serialises Close
	done     bool
	closeErr error
}

// ID returns the run's id: 32 hex digits.
func (r *Run) ID() string { return r.id }

// Sandbox returns the resolved sandbox reference, such as "host" or
// "docker://<full id>".
func (r *Run) Sandbox() string { return r.info.Sandbox }

// Info describes the run.
func (r *Run) Info() RunInfo { return r.info }

// Workers returns the run's background workers, or nil when the run has
// no worker tools.
func (r *Run) Workers() Workers { return r.env.Workers }

// Workers is a run's background workers as the HTTP API reaches them. The
// binder that wires the worker tools sets [Env.Workers]; defaults.go wires
// tools/vibe's Supervisor.
type Workers interface {
	// Workers returns a snapshot of the workers, in spawn order, as a value
	// the API encodes as JSON.
	Workers() any
	// Report takes a hosting platform's report about a worker it runs:
	// status "running" (result a progress note), "done" or "failed". Its
	// error wraps [ErrUnknownWorker] for an id the run does not know.
	Report(workerID, status, result string) error
	// Authorize checks the worker identity a tool call presents and returns
	// the surface the worker may call at.
	Authorize(workerID, token string) (tools.Surface, error)
}

// ErrUnknownWorker is what [Workers.Report] wraps for a worker id the run
// does not know.
var ErrUnknownWorker = errors.New("no such worker")

// Resources returns a snapshot of the run's live resources, as the
// binders' reporters (Env.AddResources) see them, in registration order.
func (r *Run) Resources() []tools.Resource {
	out := []tools.Resource{}
	for _, rep := range r.reporters {
		out = append(out, rep()...)
	}
	return out
}

// Questions returns the run's question port: its cards and event stream.
// It is nil when Config.NoQuestions is set.
func (r *Run) Questions() *questions.Port { return r.questions }

// Tools lists the tools the surface may see; an empty surface is the run's
// mode, and a surface above the mode sees only what the mode allows. An
// unknown surface sees nothing.
func (r *Run) Tools(s tools.Surface) []tools.Info {
	if s == "" || s.MaxLevel() > r.info.Mode.MaxLevel() {
		s = r.info.Mode
	}
	return r.reg.List(s)
}

// audit records a permission decision: counted, logged, and published on
// the run's events. A read-level call the policy allows is only counted
// and logged at debug level: it is every read.
func (r *Run) audit(a permission.Audit) {
	r.c.m.decisions.WithLabelValues(a.Level, a.Outcome).Inc()
	attrs := []any{"tenant", r.info.Tenant, "tool", a.Tool, "tool_level", a.Level, "surface", a.Surface, "outcome", a.Outcome,
		"rule", a.Rule, "call_digest", a.Call, "summary", a.Summary}
	if a.Card > 0 {
		attrs = append(attrs, "card", a.Card, "by", a.By)
	}
	if a.Reason != "" {
		attrs = append(attrs, "reason", a.Reason)
	}
	if a.Outcome == permission.OutcomeAllowed && a.Level == tools.LevelRead.String() {
		r.log.Debug("permission decision", attrs...)
		return
	}
	r.log.Info("permission decision", attrs...)
	if r.questions != nil {
		r.questions.Publish(permission.EventDecision, a) // a closed port drops it
	}
}

// surface picks the surface of a call: the run's mode when s is empty, and
// a refusal when s allows more than the mode.
func (r *Run) surface(s tools.Surface, name string) (tools.Surface, error) {
	if s == "" {
		return r.info.Mode, nil
	}
	if s.MaxLevel() > r.info.Mode.MaxLevel() {
		return "", fmt.Errorf("controller: run %s is in %s mode; the %s surface is not available to it, so %s is refused: %w",
			r.id, r.info.Mode, s, name, tools.ErrDenied)
	}
	return s, nil
}

// Call runs a tool on behalf of a surface (empty: the run's mode). Tool
// failures the model should act on are a Result with IsError; err is a call
// error: tools.ErrUnknownTool, tools.ErrDenied, *tools.InputError,
// ErrTooMany when the run's tenant has MaxCallsPerTenant calls in flight,
// ErrUnknownRun after Close (ErrRunExpired after idle expiry), an error
// wrapping sandbox.ErrGone naming the
// sandbox when it stopped or vanished, or ctx's error. ctx bounds the call;
// closing the run cancels it too.
func (r *Run) Call(ctx context.Context, s tools.Surface, name string, args json.RawMessage) (res *tools.Result, err error) {
	start := time.Now()
	label := name
	level := "unknown"
	if t, ok := r.reg.Lookup(name); ok {
		level = t.Level.String()
	} else {
		label = "_unknown" // keep the metric's cardinality bounded
	}
	defer func() {
		o := outcome(res, err)
		r.c.m.calls.WithLabelValues(label, o).Inc()
		r.c.m.latency.WithLabelValues(label).Observe(time.Since(start).Seconds())
		r.log.Info("tool call", "tenant", r.info.Tenant, "tool", name, "tool_level", level, "surface", s, "outcome", o, "duration", time.Since(start))
	}()

	if s, err = r.surface(s, name); err != nil {
		return nil, err
	}

	if err := r.c.acquireCall(r.info.Tenant, r.id, name); err != nil {
		return nil, err
	}
	defer r.c.releaseCall(r.info.Tenant)

	r.mu.Lock()
	for {
		if r.closing {
			expired, detaching, handedOver := r.expired, r.detaching, r.handedOver
			r.mu.Unlock()
			if expired > 0 {
				return nil, expiredError(r.id, expired)
			}
			if detaching && handedOver {
				return nil, fmt.Errorf("controller: run %s: another berth replica serves the run now: %w; retry the call", r.id, ErrMoving)
			}
			if detaching {
				return nil, restartingError(r.id)
			}
			return nil, fmt.Errorf("controller: run %s is closed: %w; open a new run", r.id, ErrUnknownRun)
		}
		if r.gone != nil {
			gone := r.gone
			r.mu.Unlock()
			return nil, gone
		}
		if r.unavailable == nil {
			break
		}
		if time.Now().Before(r.retryAt) {
			u := r.unavailable
			r.mu.Unlock()
			return nil, u
		}
		r.mu.Unlock()
		// Time to look again: a sandbox that answers is used as before.
		// The run may have closed meanwhile: the loop looks again.
		if err := r.recheck(ctx, name); err != nil {
			return nil, err
		}
		r.mu.Lock()
	}
	r.calls.Add(1)
	r.inflight++
	r.lastUsed = time.Now()
	r.mu.Unlock()
	ended := func() {
		r.mu.Lock()
		r.inflight--
		r.lastUsed = time.Now()
		r.mu.Unlock()
		r.calls.Done()
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(r.ctx, func() { cancel(nil) })
	defer stop()
	unwatch := r.watch(ctx, cancel)
	defer unwatch()

	// The tool runs in a goroutine the run's calls count (Close waits for
	// it), so that a call cut short because the sandbox became unavailable
	// answers at once, whatever the tool's cleanup still waits on: a
	// stream's teardown asks the same engine that does not answer.
	type answer struct {
		res *tools.Result
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		defer ended()
		res, err := r.reg.Call(ctx, s, name, args)
		answered <- answer{res, err}
	}()
	select {
	case a := <-answered:
		res, err = a.res, a.err
	case <-ctx.Done():
		if cause := context.Cause(ctx); errors.Is(cause, sandbox.ErrUnavailable) {
			r.log.Warn("call cut short: the sandbox is unavailable; the tool ends in the background", "tool", name)
			return nil, r.markUnavailable(name, cause)
		}
		a := <-answered // the caller left or the run closed: the tool ends on ctx
		res, err = a.res, a.err
	}
	unwatch()
	r.mu.Lock()
	letGo := r.letGo
	r.mu.Unlock()
	if letGo {
		// Whatever the tool answered, it answered because berth let go of
		// the run under it: what the call started goes on in the kept
		// processes (a cell runs to its end in the kept kernel). The
		// record was written as berth let go; nothing is written after.
		return nil, inFlightRestartingError(r.id, name, r.session)
	}
	// What the call changed is stored before it answers; a result whose
	// change could not be stored says so.
	if perr := r.persist(ctx); perr != nil && res != nil && !errors.Is(perr, ErrMoving) {
		res.AppendText(unsavedNote(perr))
	}
	if r.durable != nil && res != nil {
		if n := r.durable.takeLost(); n != "" {
			res.AppendText(n)
		}
	}
	if r.ctx.Err() != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("controller: run %s was closed during the %s call: %w", r.id, name, ErrUnknownRun)
	}
	if cause := context.Cause(ctx); errors.Is(cause, sandbox.ErrUnavailable) {
		return nil, r.markUnavailable(name, cause)
	}
	if errors.Is(err, sandbox.ErrGone) || (err == nil && res.IsError) || (err != nil && !isCallError(err)) {
		if gone := r.checkGone(ctx, name, err); gone != nil {
			return nil, gone
		}
	}
	return res, err
}

// checkGone asks the sandbox whether it is still usable after a failed
// call. When it is gone, the run remembers it: later calls fail at once,
// without touching the sandbox again.
//
// The check is bounded (sandbox.CheckWithin): an engine that does not
// answer it is unavailable, not gone, and the call does not hang on it. A
// call that met an outage (its error wraps sandbox.ErrUnavailable) which
// is over by the time of the check returns its own error: the sandbox
// answers again, so the run is not marked unavailable.
func (r *Run) checkGone(ctx context.Context, tool string, callErr error) error {
	cerr := sandbox.CheckWithin(ctx, r.sb)
	if cerr == nil || !errors.Is(cerr, sandbox.ErrGone) {
		if cerr == nil && errors.Is(callErr, sandbox.ErrUnavailable) {
			return nil // the outage the call met is over
		}
		if errors.Is(callErr, sandbox.ErrGone) {
			cerr = callErr
		} else {
			return nil
		}
	}
	if errors.Is(cerr, sandbox.ErrUnavailable) {
		return r.markUnavailable(tool, cerr)
	}
	gone := fmt.Errorf("controller: run %s: sandbox %s is gone (%w); berth does not restart containers: open a new run once the container runs again",
		r.id, r.info.Sandbox, cerr)
	r.mu.Lock()
	if r.gone == nil {
		r.gone = gone
	}
	gone = r.gone
	r.mu.Unlock()
	r.log.Warn("sandbox gone", "tool", tool, "err", cerr)
	return gone
}

// A call that has not returned after UnavailableCheckAfter makes the run
// ask its sandbox whether it is still available, then every
// UnavailableCheckEvery: a paused container freezes whatever the call
// waits on, so the call is cut short with a retryable error instead of
// hanging until the pause ends. Each look is bounded by
// sandbox.CheckTimeout, and an engine that does not answer within it
// counts as unavailable too: a call on a hung engine returns within
// UnavailableCheckAfter + sandbox.CheckTimeout.
const (
	UnavailableCheckAfter = 2 * time.Second
	UnavailableCheckEvery = 5 * time.Second
)

// watch looks after a call in flight (see UnavailableCheckAfter): when the
// sandbox becomes unavailable it cancels the call with the sandbox's error
// as the cause. The returned stop ends the watch and waits for it.
func (r *Run) watch(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	// wctx ends with the watch, so that a check in progress when the call
	// returns does not hold the call's answer back.
	wctx, wcancel := context.WithCancel(ctx)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTimer(UnavailableCheckAfter)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			// Bounded by sandbox.CheckTimeout: an engine that does not
			// answer is unavailable, so a hung engine cuts the call short
			// within UnavailableCheckAfter + CheckTimeout.
			err := sandbox.CheckWithin(wctx, r.sb)
			if wctx.Err() != nil {
				return // the call ended first: its own answer stands
			}
			if errors.Is(err, sandbox.ErrUnavailable) {
				cancel(err)
				return
			}
			t.Reset(UnavailableCheckEvery)
		}
	}()
	return func() {
		wcancel()
		<-ended
	}
}

// UnavailableRetryMin and UnavailableRetryMax bound how long a run whose
// sandbox is unavailable (paused, engine not answering) fails calls fast
// before it asks the sandbox again; the wait doubles between the two.
const (
	UnavailableRetryMin = time.Second
	UnavailableRetryMax = 30 * time.Second
)

// markUnavailable records that the sandbox is unavailable for now (cerr
// wraps sandbox.ErrUnavailable) and returns the error calls get until the
// next look: the run is kept.
func (r *Run) markUnavailable(tool string, cerr error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.unavailable != nil && time.Now().Before(r.retryAt):
		return r.unavailable // another call of the same spell noticed first
	case r.backoff == 0:
		r.backoff = UnavailableRetryMin
	default:
		r.backoff = min(2*r.backoff, UnavailableRetryMax)
	}
	r.retryAt = time.Now().Add(r.backoff)
	r.unavailable = fmt.Errorf("controller: run %s: sandbox %s is unavailable (%w); the run and what runs in it are kept: retry in %v, or close the run if the container will not come back",
		r.id, r.info.Sandbox, cerr, r.backoff.Round(time.Second))
	r.log.Warn("sandbox unavailable", "tool", tool, "retry_in", r.backoff, "err", cerr)
	return r.unavailable
}

// recheck asks an unavailable sandbox again: nil when it answers (the run
// is usable as before), else the error for this call — still unavailable
// (the wait grows) or gone (remembered as gone).
func (r *Run) recheck(ctx context.Context, tool string) error {
	cerr := sandbox.CheckWithin(ctx, r.sb) // an engine still not answering is still unavailable
	switch {
	case cerr == nil:
		r.mu.Lock()
		r.unavailable, r.backoff = nil, 0
		r.mu.Unlock()
		r.log.Info("sandbox available again", "tool", tool)
		return nil
	case errors.Is(cerr, sandbox.ErrUnavailable):
		return r.markUnavailable(tool, cerr)
	case errors.Is(cerr, sandbox.ErrGone):
		r.mu.Lock()
		r.unavailable = nil
		r.mu.Unlock()
		return r.checkGone(ctx, tool, cerr)
	}
	return fmt.Errorf("controller: run %s: checking sandbox %s failed: %w", r.id, r.info.Sandbox, cerr)
}

func isCallError(err error) bool {
	var in *tools.InputError
	return errors.Is(err, tools.ErrUnknownTool) || errors.Is(err, tools.ErrDenied) || errors.As(err, &in) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Close cancels the run's in-flight calls, runs its closers and closes its
// sandbox, which kills every process the run started there. It is
// idempotent: later calls return the first result.
func (r *Run) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.done {
		return r.closeErr
	}
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.c.remove(r.id)
	r.cancel()

	r.waitCalls("in-flight calls did not return after cancellation; closing the sandbox under them")
	r.closeErr = r.closeResources()
	r.done = true
	r.log.Info("run closed", "err", r.closeErr)
	return r.closeErr
}

// closeResources runs the closers, all at once, then closes the question
// port (after the resources that publish on it) and the sandbox. Each
// closer bounds its own wait (a kernel's or a server's grace), so the run
// closes within the slowest closer's grace, not the sum of them.
func (r *Run) closeResources() error {
	r.cancel()
	errs := r.runEnders(false)
	if r.questions != nil {
		errs = append(errs, r.questions.Close())
	}
	r.c.claims.releaseRun(r.id) // what the closers did not give back
	errs = append(errs, r.forget())
	if err := r.sb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("controller: close sandbox %s: %w", r.info.Sandbox, err))
	}
	return errors.Join(errs...)
}

// runEnders runs every binder's closer (or, with detach, its detacher),
// all at once, and returns their errors.
func (r *Run) runEnders(detach bool) []error {
	errs := make([]error, len(r.closers))
	var wg sync.WaitGroup
	for i, e := range r.closers {
		fn := e.close
		if detach {
			fn = e.detach
		}
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errs
}

// waitCalls waits for the run's calls in flight, at most the close grace,
// and logs warning when they outlast it.
func (r *Run) waitCalls(warning string) {
	waited := make(chan struct{})
	go func() { r.calls.Wait(); close(waited) }() // ends with the calls
	select {
	case <-waited:
	case <-time.After(r.c.cfg.CloseGrace):
		r.log.Warn(warning, "grace", r.c.cfg.CloseGrace)
	}
}
