package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyCheck is one condition /readyz checks: Check returns nil while it
// holds, or an error saying what is wrong (the run store cannot be read,
// a container engine does not answer). It runs with ReadyTimeout.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

const (
	// ReadyTimeout bounds one ReadyCheck.
	ReadyTimeout = 2 * time.Second
	// ReadyKeep is how long /readyz answers from the last checks: probes
	// (and anyone else, /readyz is not authenticated) cost the store and
	// the engines at most one round of checks per ReadyKeep.
	ReadyKeep = 2 * time.Second
)

// readiness runs the ReadyChecks, at most once per ReadyKeep.
type readiness struct {
	checks []ReadyCheck

	mu   sync.Mutex // held while checking: concurrent probes wait for one round
	at   time.Time  // when the last round ended
	last error      // its outcome
}

func newReadiness(checks []ReadyCheck) *readiness {
	return &readiness{checks: checks}
}

// check returns nil when every check holds, else the failures joined,
// each named.
func (r *readiness) check(ctx context.Context) error {
	if len(r.checks) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < ReadyKeep {
		return r.last
	}
	// The probe's own context may end sooner (its timeoutSeconds); the
	// round's result is kept for the next one all the same.
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, c := range r.checks {
		cctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
		err := c.Check(cctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	r.last, r.at = errors.Join(errs...), time.Now()
	return r.last
}

// MetricsHandler serves g's metrics in Prometheus text format at GET
// /metrics and nothing else (404 on every other path): the separate,
// unauthenticated metrics listener of `berth serve --metrics-addr`, which
// a scraper reaches without a bearer token. It serves metrics only, so no
// route of the API is reachable through it.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("httpapi: this is berth's metrics listener, which serves only GET /metrics; the API (%s) is on berth's --addr", r.URL.Path))
			return
		}
		mux.ServeHTTP(w, r)
	})
}
