package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/controller/mcpserver"
	"berth.dev/berth/kubeauth"
	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
	"berth.dev/berth/tools/permission"
)

// DefaultAddr is where berth serve listens by default.
const DefaultAddr = "127.0.0.1:7450"

// EnvToken names the environment variable holding the bearer token.
const EnvToken = "BERTH_TOKEN"

// EnvOperatorToken names the environment variable holding the operator's
// bearer token (hosted mode's one-tenant shorthand).
const EnvOperatorToken = "BERTH_OPERATOR_TOKEN"

// shutdownGrace bounds how long a graceful shutdown waits for requests in
// flight after their runs were closed.
const shutdownGrace = 10 * time.Second

type serveFlags struct {
	addr              string
	tokenFile         string
	tokensFile        string
	operatorTokenFile string
	maxConns          int
	readTimeout       time.Duration
	maxRunsPerTenant  int
	maxCallsPerTenant int
	maxStreams        int
	maxMCPSessions    int
	runIdleExpiry     time.Duration
	stateDir          string
	closeOnExit       bool
	residentGrace     time.Duration
	store             string
	replicas          replicaFlags
	metricsAddr       string
	tlsCertFile       string
	tlsKeyFile        string
	saFile            string
	saAudience        string
}

// serveConfig is what berth serve is configured with beyond the
// one-tenant token: more credentials, the server's limits and the
// controller's per-tenant caps.
type serveConfig struct {
	creds    []httpapi.Credential // from --tokens-file
	operator string               // the operator token of the one-tenant shorthand
	limits   httpapi.Limits
	tune     func(*controller.Config)
	// stateDir is the run store's directory (--state-dir); empty keeps
	// runs in memory only, and they end with berth.
	stateDir string
	// closeOnExit closes every run at shutdown even with a store
	// (--close-runs-on-exit).
	closeOnExit bool
	// store is --store: storeDir (stateDir) or storeKube (replicas).
	store    string
	replicas replicaFlags
	// reload reads the credentials' sources again (the token files and
	// the tokens file) for a reload; reloadFiles are the files it reads,
	// watched for changes. Nil: nothing to reload.
	reload      func() (token, operator string, creds []httpapi.Credential, err error)
	reloadFiles []string
	// metrics, when set, is the listener of --metrics-addr: GET /metrics
	// without a token, nothing else.
	metrics net.Listener
	// certs, when set, serve the API over TLS (--tls-cert-file).
	certs *certReloader
	// accounts, when set, authenticate service-account tokens
	// (--service-accounts-file).
	accounts *serviceAccounts
}

// serveOption sets part of a serveConfig.
type serveOption func(*serveConfig)

func newServe(g *globalFlags) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Serve the HTTP API (/v1, /livez, /readyz, /metrics) and the operator console (/console/)",
		Long: `serve answers the HTTP API of docs/http.md ("HTTP API"). Requests under /v1 and /metrics need
"Authorization: Bearer <token>". --tokens-file names the credentials, one
a line: "<sha256-hex-of-token> <tenant> <scope>[,<scope>…]" (make the hash
with: printf %s "$tok" | sha256sum); the scopes are harness (open runs,
call tools, read events, answer question cards), operator (answer
permission and question cards, the console; its tenant may be * for all)
and metrics. A run belongs to the tenant that opened it; another tenant's
run answers 404 on every route.

--token-file or else $BERTH_TOKEN is the one-tenant shorthand: tenant
"default", with every scope in --permissions local and harness+metrics in --permissions
hosted, where the operator's token comes from --operator-token-file or
else $BERTH_OPERATOR_TOKEN (tenant *). Without any token berth listens
only on a loopback address (and then checks that the Host header is a
loopback name).

Runs outlive berth: their state is kept in --state-dir (one berth per
directory), their kernels run under a resident supervisor in the sandbox,
and SIGINT or SIGTERM detaches from them: a berth started again on the same
directory adopts them, kernels with their variables. A call still in
flight then answers 503 restarting (what it started goes on in the kept
kernel; look at its result on the next berth) and event-stream followers
get a restarting event. A resident supervisor
no berth attaches to for --resident-grace ends what it kept. A damaged
run record is logged at error level, kept aside in the state directory's
damaged/, answered 410, and its resident supervisor ended; a damaged
runs.db is moved aside and berth starts with an empty store. With
--close-runs-on-exit, or --state-dir "", SIGINT or SIGTERM closes every run,
which kills what the runs started, and exits.

--permissions hosted (the default) makes write and exec tools ask the operator
first: a permission card on GET /v1/runs/{id}/events, answered with POST
/v1/runs/{id}/cards/{n} by an operator credential; with nobody connected
they are refused. --permissions local runs every tool without asking.

The operator console at http://ADDR/console/ lists the open runs, their live
resources and pending cards, and answers them; it asks for the operator token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, file := range []string{f.tokenFile, f.tokensFile, f.operatorTokenFile} {
				if err := checkTokenFile(file, g.hostUser); err != nil {
					return err
				}
			}
			load := func() (token, operator string, creds []httpapi.Credential, err error) {
				if token, err = loadToken(f.tokenFile, os.Getenv(EnvToken)); err != nil {
					return "", "", nil, err
				}
				if operator, err = loadToken(f.operatorTokenFile, os.Getenv(EnvOperatorToken)); err != nil {
					return "", "", nil, fmt.Errorf("%w (--operator-token-file)", err)
				}
				if f.tokensFile != "" {
					if creds, err = loadTokensFile(f.tokensFile); err != nil {
						return "", "", nil, err
					}
				}
				return token, operator, creds, nil
			}
			token, operator, creds, err := load()
			if err != nil {
				return err
			}
			var accounts *serviceAccounts
			if f.saFile != "" {
				if accounts, err = loadServiceAccounts(f.saFile, f.saAudience); err != nil {
					return err
				}
			}
			if token == "" && operator == "" && len(creds) == 0 && accounts == nil && g.hostUser != "" {
				// Without a token every local process holds every scope, the
				// host user's cells among them: one could approve its own call.
				return fmt.Errorf("berth: --host-user runs tools' processes on this machine, and without a token any of them could call berth and answer its own permission cards: set %s and %s (or --tokens-file)", EnvToken, EnvOperatorToken)
			}
			if token == "" && operator == "" && len(creds) == 0 && accounts == nil && !loopbackAddr(f.addr) {
				return fmt.Errorf("berth: refusing to listen on %s without a token: set %s, --token-file or --tokens-file, or listen on 127.0.0.1", f.addr, EnvToken)
			}
			log := g.loggerAt(cmd.ErrOrStderr(), slog.LevelInfo)
			var certs *certReloader
			if (f.tlsCertFile == "") != (f.tlsKeyFile == "") {
				return errors.New("berth: --tls-cert-file and --tls-key-file go together: pass both (the certificate and its private key), or neither")
			}
			if f.tlsCertFile != "" {
				if f.store == storeKube {
					return errors.New("berth: --tls-cert-file with --store kube: the replicas forward requests to each other over plain HTTP (--advertise), which a TLS listener refuses; serve TLS with one replica, or terminate it in front of berth (a mesh or an ingress)")
				}
				if certs, err = newCertReloader(f.tlsCertFile, f.tlsKeyFile); err != nil {
					return err
				}
			}
			var metricsLn net.Listener
			if f.metricsAddr != "" {
				if metricsLn, err = net.Listen("tcp", f.metricsAddr); err != nil {
					return fmt.Errorf("berth: --metrics-addr: listen on %s: %w", f.metricsAddr, err)
				}
			}
			ln, err := net.Listen("tcp", f.addr)
			if err != nil {
				if metricsLn != nil {
					metricsLn.Close()
				}
				return fmt.Errorf("berth: listen on %s: %w", f.addr, err)
			}
			return serve(cmd.Context(), g, ln, token, g.stderrFor(cmd.ErrOrStderr(), log), log, func(c *serveConfig) {
				c.creds, c.operator = creds, operator
				c.limits = httpapi.Limits{ReadTimeout: f.readTimeout, MaxConns: f.maxConns,
					MaxStreamsPerTenant: f.maxStreams, MaxMCPSessionsPerTenant: f.maxMCPSessions}
				c.tune = func(cfg *controller.Config) {
					cfg.MaxRunsPerTenant, cfg.MaxCallsPerTenant, cfg.IdleExpiry = f.maxRunsPerTenant, f.maxCallsPerTenant, f.runIdleExpiry
					cfg.ResidentGrace = f.residentGrace
				}
				c.stateDir, c.closeOnExit = f.stateDir, f.closeOnExit
				c.store, c.replicas = f.store, f.replicas
				for _, file := range []string{f.tokenFile, f.tokensFile, f.operatorTokenFile} {
					if file != "" {
						c.reloadFiles = append(c.reloadFiles, file)
					}
				}
				c.reload = load
				c.metrics, c.certs, c.accounts = metricsLn, certs, accounts
			})
		},
	}
	cmd.Flags().StringVar(&f.addr, "addr", DefaultAddr, "address to listen on")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding the one-tenant bearer token (default: $"+EnvToken+")")
	cmd.Flags().StringVar(&f.tokensFile, "tokens-file", "", "file of credentials, a line each: <sha256-hex-of-token> <tenant> <scope>[,<scope>…] (scopes: harness, operator, metrics)")
	cmd.Flags().StringVar(&f.operatorTokenFile, "operator-token-file", "", "file holding the operator's bearer token, for every tenant (default: $"+EnvOperatorToken+")")
	cmd.Flags().IntVar(&f.maxConns, "max-conns", httpapi.DefaultMaxConns, "most connections served at once; more wait in the kernel's accept queue")
	cmd.Flags().DurationVar(&f.readTimeout, "read-timeout", httpapi.DefaultReadTimeout, "longest time to read one request, body included")
	cmd.Flags().IntVar(&f.maxRunsPerTenant, "max-runs-per-tenant", controller.DefaultMaxRunsPerTenant, "most runs one tenant may have open (negative: unlimited)")
	cmd.Flags().IntVar(&f.maxCallsPerTenant, "max-calls-per-tenant", controller.DefaultMaxCallsPerTenant, "most tool calls one tenant may have in flight (negative: unlimited)")
	cmd.Flags().IntVar(&f.maxStreams, "max-streams-per-tenant", httpapi.DefaultMaxStreamsPerTenant, "most event streams and MCP GET streams one tenant may hold open, apart from --max-conns (negative: unlimited)")
	cmd.Flags().IntVar(&f.maxMCPSessions, "max-mcp-sessions-per-tenant", mcpserver.DefaultMaxSessionsPerTenant, "most MCP sessions one tenant may have open (negative: unlimited)")
	cmd.Flags().DurationVar(&f.runIdleExpiry, "run-idle-expiry", controller.DefaultIdleExpiry, "close a run nobody used for this long (negative: never)")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", defaultStateDir(), "directory of the run store (runs outlive berth's restarts); \"\" keeps runs in memory only")
	cmd.Flags().BoolVar(&f.closeOnExit, "close-runs-on-exit", false, "close every run at shutdown (kill what it started) instead of leaving it for the next berth")
	cmd.Flags().DurationVar(&f.residentGrace, "resident-grace", sandbox.DefaultResidentGrace, "how long a run's resident supervisor keeps its kernels while no berth is attached")
	cmd.Flags().StringVar(&f.store, "store", storeDir, "where runs are kept: dir (--state-dir, one berth) or kube (Secrets and Leases in the cluster: several replicas share the runs and forward requests to the replica serving each)")
	cmd.Flags().StringVar(&f.replicas.namespace, "store-namespace", "", "--store kube: the namespace of the run records (default: $"+envPodNamespace+", else the pod's own)")
	cmd.Flags().StringVar(&f.replicas.replica, "replica", "", "--store kube: this replica's name in the leases, unique among the replicas (default: $"+envPodName+", else the host name)")
	cmd.Flags().StringVar(&f.replicas.advertise, "advertise", "", "--store kube: the URL the other replicas reach this one at (default: http://$"+envPodIP+":PORT)")
	cmd.Flags().StringVar(&f.replicas.peerKeyFile, "peer-key-file", "", "--store kube: file holding the key (32+ bytes) every replica shares, which signs requests forwarded between them")
	cmd.Flags().StringVar(&g.serveMode, "permissions", string(permission.ModeHosted), "permission mode: hosted (write and exec tools ask the operator through a permission card) or local (every tool runs)")
	// The same setting under its old name, kept for a release: --mode
	// means the surface elsewhere.
	cmd.Flags().StringVar(&g.serveMode, "mode", string(permission.ModeHosted), "permission mode (deprecated: use --permissions)")
	cmd.Flags().MarkDeprecated("mode", "use --permissions (the same values); --mode will be removed in the next release")
	cmd.Flags().StringVar(&f.metricsAddr, "metrics-addr", "", "also serve GET /metrics, WITHOUT a bearer token and nothing else, on this address (e.g. :9090), for a scraper; the --addr listener's /metrics keeps needing the metrics scope")
	cmd.Flags().StringVar(&f.tlsCertFile, "tls-cert-file", "", "serve the API over TLS with this PEM certificate (chain); re-read when it changes, so a rotated certificate is served without a restart")
	cmd.Flags().StringVar(&f.tlsKeyFile, "tls-key-file", "", "the PEM private key of --tls-cert-file")
	cmd.Flags().StringVar(&f.saFile, "service-accounts-file", "", "accept projected Kubernetes service-account tokens, verified by TokenReview, of the service accounts this file maps, a line each: <namespace>/<serviceaccount> <tenant> <scope>[,<scope>…]")
	cmd.Flags().StringVar(&f.saAudience, "service-account-audience", kubeauth.DefaultAudience, "the audience a service-account token must be projected for (--service-accounts-file)")
	return cmd
}

// serve answers HTTP on ln until ctx is done, then closes every run and
// waits for requests in flight. It closes ln. token is the one-tenant
// shorthand (BERTH_TOKEN); opts add the rest of the serve flags.
func serve(ctx context.Context, g *globalFlags, ln net.Listener, token string, stderr io.Writer, log *slog.Logger, opts ...serveOption) error {
	protectProcess(log)
	var cfg serveConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.metrics != nil {
		defer cfg.metrics.Close() // also when serve fails before serving it
	}
	prepareAgent(log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := newBackends(g)
	if err != nil {
		return err
	}
	defer b.Close()
	mode := permission.ModeHosted
	if g.serveMode != "" {
		m, err := permission.ParseMode(g.serveMode)
		if err != nil {
			ln.Close()
			return fmt.Errorf("berth: --permissions: %w", err)
		}
		mode = m
	}
	creds, err := credentials(cfg, token, mode)
	if err != nil {
		ln.Close()
		return err
	}
	// A stored run of a tenant these credentials do not name is not
	// adopted.
	// Every credential that names a tenant: the tokens, and the mapped
	// service accounts (which have no token of their own here).
	named := append(slices.Clone(creds), cfg.accounts.credentials()...)
	tune := []func(*controller.Config){func(c *controller.Config) { c.KnownTenants = knownTenants(named) }}
	if cfg.tune != nil {
		tune = append(tune, cfg.tune)
	}
	if tenants := harnessTenants(named); len(tenants) > 1 {
		tune = append(tune, func(c *controller.Config) { c.RequireTenantLabel = true })
		describeTenantLabels(log, g, tenants)
	}
	var (
		store     *runstore.Dir
		salvaged  []runstore.Record
		rp        *replicated
		storeName string // for messages
	)
	switch cfg.store {
	case storeDir, "":
		if cfg.stateDir == "" {
			break
		}
		st, rep, err := runstore.Open(cfg.stateDir, runstore.Options{})
		if err != nil {
			ln.Close()
			return fmt.Errorf("berth: --state-dir: %w", err)
		}
		defer st.Close()
		if rep.Damage != nil {
			// Runs it held that could not be read are not adopted: their
			// resident supervisors end what they kept after their grace.
			log.Error("run store damaged: "+rep.String()+"; the runs it held that could not be read are lost, and their resident supervisors end what they kept after their grace (--resident-grace)", "moved_to", rep.MovedTo)
		}
		if len(rep.Sealed) > 0 {
			// Once: the records of a berth before records carried a MAC.
			log.Warn(rep.String())
		}
		store, salvaged, storeName = st, rep.Salvaged, cfg.stateDir
		tune = append(tune, func(c *controller.Config) { c.Store = st })
	case storeKube:
		if rp, err = openReplicated(cfg.replicas, ln, log); err != nil {
			ln.Close()
			return err
		}
		defer rp.store.Close()
		storeName = "namespace " + rp.store.Namespace()
		tune = append(tune, func(c *controller.Config) {
			c.Store, c.Leases, c.Instance = rp.store, rp.store, rp.store.Identity()
		})
	default:
		ln.Close()
		return fmt.Errorf("berth: --store %q: use dir (--state-dir) or kube", cfg.store)
	}
	durable := store != nil || rp != nil
	c, err := newController(g, b, reg, log, "", mode, tune...)
	if err != nil {
		ln.Close()
		return err
	}
	var peer *httpapi.Peer
	if rp != nil {
		rp.ctl.Store(c)
		peer = rp.peer
	}
	// The stored runs are taken over in the background while berth serves:
	// a run not adopted yet answers 503 adopting, and /healthz, /readyz
	// and every other run answer at once.
	adopted := make(chan struct{})
	if durable {
		a, err := c.BeginAdopt(ctx)
		if err != nil {
			ln.Close()
			c.Close()
			return fmt.Errorf("berth: adopt the runs of %s: %w", storeName, err)
		}
		go func() { // ends before serve returns: it waits on adopted
			defer close(adopted)
			if rep, err := a.Report(ctx); err == nil {
				describeAdoption(stderr, log, storeName, rep)
			}
			for id, err := range c.Retire(ctx, salvaged) {
				log.Warn("run from the damaged store not adopted", "run", id, "why", err)
			}
		}()
	} else {
		close(adopted)
	}
	defer func() { <-adopted }()
	ready := slices.Clone(b.ready)
	switch {
	case store != nil:
		ready = append([]httpapi.ReadyCheck{{Name: "run store", Check: dirReady(store)}}, ready...)
	case rp != nil:
		ready = append([]httpapi.ReadyCheck{{Name: "run store", Check: storeReady(rp.store)}}, ready...)
	}
	credSet := httpapi.NewCredentialSet(creds)
	if cfg.reload != nil && len(creds) > 0 {
		stop := watchCredentials(ctx, log, cfg, mode, credSet)
		defer stop()
	}
	srv := httpapi.NewServer(c, httpapi.Options{CredentialSet: credSet, Authenticator: cfg.accounts.authenticator(), LoopbackOnly: len(named) == 0, Gatherer: reg, Logger: log, Limits: cfg.limits, Peer: peer, Version: versionString(), Ready: ready, Status: shim.Building},
		context.WithoutCancel(ctx))
	describeCredentials(stderr, log, named, mode)
	lis, scheme := httpapi.ListenLimits(ln, cfg.limits), "http"
	if cfg.certs != nil {
		// The listener does TLS; srv.TLSConfig stays unset, so that Serve
		// does not add HTTP/2 to it (the connection caps count HTTP/1.1
		// requests), and no TLSNextProto is served.
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		lis, scheme = tls.NewListener(lis, cfg.certs.tlsConfig()), "https"
	}
	fmt.Fprintf(stderr, "berth: serving on %s://%s\n", scheme, ln.Addr())

	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(lis) }()
	var msrv *http.Server
	if cfg.metrics != nil {
		msrv = &http.Server{Handler: httpapi.MetricsHandler(reg), ReadHeaderTimeout: httpapi.DefaultReadHeaderTimeout,
			ReadTimeout: httpapi.DefaultReadTimeout, IdleTimeout: httpapi.DefaultIdleTimeout, MaxHeaderBytes: httpapi.DefaultMaxHeaderBytes}
		fmt.Fprintf(stderr, "berth: metrics on http://%s/metrics (no token)\n", cfg.metrics.Addr())
		go func() { errc <- msrv.Serve(httpapi.Listen(cfg.metrics, metricsMaxConns)) }()
	}
	select {
	case err := <-errc:
		c.Close()
		srv.Close()
		if msrv != nil {
			msrv.Close()
		}
		return fmt.Errorf("berth: serve: %w", err)
	case <-ctx.Done():
	}
	if msrv != nil {
		// Metrics stop first: nothing about the runs is served there.
		msrv.Close()
		<-errc
	}

	end := c.Close
	if durable && !cfg.closeOnExit {
		fmt.Fprintf(stderr, "berth: shutting down: the runs live on in %s for the next berth\n", storeName)
		end = c.Detach
	} else {
		fmt.Fprintln(stderr, "berth: shutting down: closing all runs")
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	// Closing the runs cancels their calls, so the requests in flight end;
	// detaching gives them the close grace first.
	cerr := end()
	serr := <-shut
	<-errc // Serve returned http.ErrServerClosed
	if errors.Is(serr, context.DeadlineExceeded) {
		serr = fmt.Errorf("berth: requests still running %s after shutdown began were cut off", shutdownGrace)
		srv.Close()
	}
	return errors.Join(cerr, serr)
}

// metricsMaxConns caps the connections of the --metrics-addr listener:
// scrapers are few.
const metricsMaxConns = 16

// dirReady is /readyz's check of a --state-dir store: the directory is
// still there and a record can be read (a lookup of a run that does not
// exist).
func dirReady(st *runstore.Dir) func(context.Context) error {
	return func(ctx context.Context) error {
		if _, err := os.Stat(st.Path()); err != nil {
			return fmt.Errorf("the state directory is gone (%w): runs can no longer be kept; check the volume of --state-dir", err)
		}
		return storeReady(st)(ctx)
	}
}

// storeReady is /readyz's check of a run store: reading a record that
// does not exist answers ErrNotFound when the store is reachable.
func storeReady(st interface {
	Get(context.Context, string) (runstore.Record, error)
}) func(context.Context) error {
	return func(ctx context.Context) error {
		if _, err := st.Get(ctx, "readyz-probe"); err != nil && !errors.Is(err, runstore.ErrNotFound) {
			return err
		}
		return nil
	}
}

// EnvStateDir names the environment variable that overrides the default
// --state-dir.
const EnvStateDir = "BERTH_STATE_DIR"

// defaultStateDir is --state-dir's default: $BERTH_STATE_DIR, else
// $XDG_STATE_HOME/berth, else ~/.local/state/berth; /var/lib/berth for
// root.
func defaultStateDir() string {
	if d := os.Getenv(EnvStateDir); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "berth")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/berth"
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "berth")
	}
	return ""
}

// describeAdoption says at start which runs berth took over from the
// store, which were gone and which it could not adopt.
func describeAdoption(stderr io.Writer, log *slog.Logger, dir string, rep controller.AdoptReport) {
	if n := len(rep.Adopted) + len(rep.Gone) + len(rep.Unavailable) + len(rep.Failed) + len(rep.Refused) + len(rep.Elsewhere); n == 0 {
		return
	}
	fmt.Fprintf(stderr, "berth: adopted %d run(s) from %s\n", len(rep.Adopted), dir)
	if n := len(rep.Elsewhere); n > 0 {
		fmt.Fprintf(stderr, "berth: %d run(s) are served by other replicas; their requests are forwarded there\n", n)
	}
	for id, why := range rep.Gone {
		log.Warn("run not adopted: its sandbox is gone", "run", id, "why", why)
	}
	for id, why := range rep.Unavailable {
		log.Warn("run not adopted yet: its sandbox is unavailable; berth tries again", "run", id, "why", why)
	}
	for id, why := range rep.Failed {
		log.Warn("run not adopted", "run", id, "why", why)
	}
	// Refused runs were logged by the controller (Error), with the reason.
	for _, p := range rep.Problems {
		log.Warn("adopted run lost a resource", "problem", p)
	}
}

// credentials are the credentials berth serve accepts: the tokens file's,
// the one-tenant token (every scope in local mode, harness and metrics in
// hosted mode, where an operator answers the permission cards) and the
// operator token (every tenant).
func credentials(cfg serveConfig, token string, mode permission.Mode) ([]httpapi.Credential, error) {
	creds := append([]httpapi.Credential(nil), cfg.creds...)
	if token != "" {
		scopes := httpapi.Scopes
		if mode == permission.ModeHosted {
			scopes = []httpapi.Scope{httpapi.ScopeHarness, httpapi.ScopeMetrics}
		}
		creds = append(creds, httpapi.TokenCredential(token, httpapi.DefaultTenant, scopes...))
	}
	if cfg.operator != "" {
		if cfg.operator == token {
			return nil, fmt.Errorf("berth: the operator token is the harness token (%s): give the operator a token of its own, or the harness could approve its own calls", EnvToken)
		}
		creds = append(creds, httpapi.TokenCredential(cfg.operator, httpapi.AllTenants, httpapi.ScopeOperator))
	}
	seen := map[[32]byte]bool{}
	for _, c := range creds {
		if seen[c.Hash] {
			return nil, errors.New("berth: the same token is configured twice (--tokens-file, the token file or $" + EnvToken + ", the operator token): give every credential its own token")
		}
		seen[c.Hash] = true
	}
	return creds, nil
}

// harnessTenants returns the tenants, sorted, that credentials of creds
// may open runs for.
func harnessTenants(creds []httpapi.Credential) []string {
	var tenants []string
	for _, c := range creds {
		if c.Has(httpapi.ScopeHarness) && !slices.Contains(tenants, c.Tenant) {
			tenants = append(tenants, c.Tenant)
		}
	}
	slices.Sort(tenants)
	return tenants
}

// describeTenantLabels says at start that, with several tenants, a
// container belongs to a tenant only by its label, and warns when
// --allow-unlabelled lifts that check for explicit references.
func describeTenantLabels(log *slog.Logger, g *globalFlags, tenants []string) {
	conv := g.labelKey
	if conv == "" {
		conv = controller.DefaultLabelKey
	}
	log.Info(fmt.Sprintf("several tenants (%s): a run is placed only in a container labelled with its tenant as well as its conversation (%s=<tenant> with %s=<conversation id>; pods %s=<tenant> with %s=<conversation id>)",
		strings.Join(tenants, ", "), sandbox.TenantLabelKey(conv), conv, sandbox.TenantLabelKey(controller.KubePodLabelKey), controller.KubePodLabelKey))
	if g.allowUnlabelled {
		log.Warn("--allow-unlabelled with several tenants: an explicit docker://, containerd:// or kube:// reference is not checked for any label, so every tenant can open runs in every container it can name; drop --allow-unlabelled")
	}
}

// describeCredentials says at start which credentials berth accepts and
// warns about a setup in which nobody can answer a permission card, or
// anybody can.
func describeCredentials(stderr io.Writer, log *slog.Logger, creds []httpapi.Credential, mode permission.Mode) {
	if len(creds) == 0 {
		log.Warn("serving without a bearer token: any local process can call berth and answer its permission cards; set " + EnvToken + ", --token-file or --tokens-file")
		return
	}
	var list []string
	operator := false
	for _, c := range creds {
		operator = operator || c.Has(httpapi.ScopeOperator)
		if c.Subject != "" {
			list = append(list, c.Subject+" (token verified by TokenReview) "+c.String())
			continue
		}
		list = append(list, c.String())
	}
	fmt.Fprintf(stderr, "berth: credentials: %s\n", strings.Join(list, "; "))
	if mode == permission.ModeHosted && !operator {
		log.Warn("no operator credential: nobody can answer permission cards, so write and exec calls are refused or time out; set " + EnvOperatorToken + ", --operator-token-file, or an operator line in --tokens-file")
	}
}

// loadTokensFile reads the credentials of --tokens-file.
func loadTokensFile(file string) ([]httpapi.Credential, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("berth: read the tokens file: %w", err)
	}
	defer fh.Close()
	creds, err := httpapi.ParseTokens(fh)
	if err != nil {
		return nil, fmt.Errorf("berth: --tokens-file %s: %w", file, err)
	}
	return creds, nil
}

// loadToken returns the token from the file when one is named, else env.
func loadToken(file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("berth: read the token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("berth: token file %s is empty: write the bearer token into it", file)
	}
	return tok, nil
}

// loopbackAddr reports whether addr's host is a loopback address or
// "localhost". An empty host (":7450") listens everywhere: not loopback.
func loopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// credentialsPoll is how often berth serve looks whether a credential
// file changed.
const credentialsPoll = 2 * time.Second

// watchCredentials reloads the credentials into set when a credential
// file changes or berth gets SIGHUP, without closing any run: rotating a
// token is one file write. A reload that fails, that would leave no
// credential, or that changes which tenants may open runs (which decides
// the tenant labels placement requires) is refused and logged, and the
// credentials in use stay. It returns the function that stops watching.
func watchCredentials(ctx context.Context, log *slog.Logger, cfg serveConfig, mode permission.Mode, set *httpapi.CredentialSet) func() {
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	stamp := func() string {
		var b strings.Builder
		for _, f := range cfg.reloadFiles {
			if fi, err := os.Stat(f); err == nil {
				fmt.Fprintf(&b, "%s %d %d %v;", f, fi.Size(), fi.ModTime().UnixNano(), fi.Sys())
			}
		}
		return b.String()
	}
	tenants := harnessTenants(set.List())
	reload := func(why string) {
		tok, op, creds, err := cfg.reload()
		if err == nil {
			c := cfg
			c.creds, c.operator = creds, op
			creds, err = credentials(c, tok, mode)
		}
		switch {
		case err != nil:
			log.Error("credentials not reloaded: the ones in use stay", "why", why, "err", err)
		case len(creds) == 0:
			log.Error("credentials not reloaded: the files name none, and berth does not stop authenticating while it runs; the ones in use stay", "why", why)
		case !slices.Equal(harnessTenants(creds), tenants):
			log.Error("credentials not reloaded: they change which tenants may open runs, which takes a restart (placement's tenant labels depend on it); the ones in use stay",
				"why", why, "tenants", tenants, "new_tenants", harnessTenants(creds))
		default:
			set.Set(creds)
			log.Info("credentials reloaded", "why", why, "credentials", len(creds))
		}
	}
	done := make(chan struct{})
	go func() { // ends with ctx: owned by the returned stop
		defer close(done)
		defer signal.Stop(hup)
		last := stamp()
		tick := time.NewTicker(credentialsPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				last = stamp()
				reload("SIGHUP")
			case <-tick.C:
				if s := stamp(); s != last {
					last = s
					reload("a credential file changed")
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
