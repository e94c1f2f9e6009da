package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/tools/permission"
)

// DefaultAddr is where berth serve listens by default.
const DefaultAddr = "127.0.0.1:7450"

// EnvToken names the environment variable holding the bearer token.
const EnvToken = "BERTH_TOKEN"

// shutdownGrace bounds how long a graceful shutdown waits for requests in
// flight after their runs were closed.
const shutdownGrace = 10 * time.Second

type serveFlags struct {
	addr      string
	tokenFile string
}

func newServe(g *globalFlags) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Serve the HTTP API (/v1, /healthz, /metrics) and the operator console (/console/)",
		Long: `serve answers the HTTP API of DESIGN.md. Requests under /v1 and /metrics need
"Authorization: Bearer <token>", the token taken from --token-file or else
$BERTH_TOKEN. Without a token berth listens only on a loopback address (and
then checks that the Host header is a loopback name). SIGINT or SIGTERM
closes every run, which kills what the runs started, and exits.

--mode hosted (the default) makes write and exec tools ask the operator
first: a permission card on GET /v1/runs/{id}/events, answered with POST
/v1/runs/{id}/cards/{n}; with nobody connected they are refused. --mode local
runs every tool without asking.

The operator console at http://ADDR/console/ lists the open runs, their live
resources and pending cards, and answers them; it asks for the token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			token, err := loadToken(f.tokenFile, os.Getenv(EnvToken))
			if err != nil {
				return err
			}
			if token == "" && !loopbackAddr(f.addr) {
				return fmt.Errorf("berth: refusing to listen on %s without a token: set %s or --token-file, or listen on 127.0.0.1", f.addr, EnvToken)
			}
			log := g.logger(cmd.ErrOrStderr())
			if token == "" {
				log.Warn("serving without a bearer token: any local process can call berth; set " + EnvToken + " or --token-file")
			}
			ln, err := net.Listen("tcp", f.addr)
			if err != nil {
				return fmt.Errorf("berth: listen on %s: %w", f.addr, err)
			}
			return serve(cmd.Context(), g, ln, token, cmd.ErrOrStderr(), log)
		},
	}
	cmd.Flags().StringVar(&f.addr, "addr", DefaultAddr, "address to listen on")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (default: $"+EnvToken+")")
	cmd.Flags().StringVar(&g.serveMode, "mode", string(permission.ModeHosted), "permission mode: hosted (write and exec tools ask the operator through a permission card) or local (every tool runs)")
	return cmd
}

// serve answers HTTP on ln until ctx is done, then closes every run and
// waits for requests in flight. It closes ln.
func serve(ctx context.Context, g *globalFlags, ln net.Listener, token string, stderr io.Writer, log *slog.Logger) error {
	protectProcess(log)
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
			return fmt.Errorf("berth: --mode: %w", err)
		}
		mode = m
	}
	c, err := newController(g, b, reg, log, "", mode)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{
		Handler:           httpapi.New(c, httpapi.Options{Token: token, LoopbackOnly: token == "", Gatherer: reg, Logger: log}),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	fmt.Fprintf(stderr, "berth: serving on http://%s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		c.Close()
		return fmt.Errorf("berth: serve: %w", err)
	case <-ctx.Done():
	}

	fmt.Fprintln(stderr, "berth: shutting down: closing all runs")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	// Closing the runs cancels their calls, so the requests in flight end.
	cerr := c.Close()
	serr := <-shut
	<-errc // Serve returned http.ErrServerClosed
	if errors.Is(serr, context.DeadlineExceeded) {
		serr = fmt.Errorf("berth: requests still running %s after shutdown began were cut off", shutdownGrace)
		srv.Close()
	}
	return errors.Join(cerr, serr)
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
