package controller

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Call outcomes, the values of the "outcome" label of berth_tool_calls_total.
const (
	OutcomeOK          = "ok"           // a result without isError
	OutcomeToolError   = "tool_error"   // a result with isError
	OutcomeDenied      = "denied"       // tools.ErrDenied
	OutcomeBadInput    = "bad_input"    // *tools.InputError
	OutcomeUnknown     = "unknown"      // tools.ErrUnknownTool or an unknown run
	OutcomeSandboxGone = "sandbox_gone" // sandbox.ErrGone
	// OutcomeSandboxUnavailable: paused, or its engine does not answer
	// (sandbox.ErrUnavailable); the run is kept.
	OutcomeSandboxUnavailable = "sandbox_unavailable"
	OutcomeTooMany            = "too_many" // ErrTooMany: the tenant's cap on calls in flight
	OutcomeError              = "error"    // anything else (cancelled, internal)
)

type metrics struct {
	runsOpen    prometheus.Gauge
	runsOpened  *prometheus.CounterVec
	runsExpired prometheus.Counter
	// recordsDamaged counts the stored records found damaged at adoption.
	recordsDamaged prometheus.Counter
	calls          *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	decisions      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berth_runs_open",
			Help: "Runs currently open.",
		}),
		runsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_runs_opened_total",
			Help: "Runs opened, by sandbox scheme (host, docker, …).",
		}, []string{"scheme"}),
		runsExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_runs_expired_total",
			Help: "Runs closed by the controller after being idle for the idle expiry.",
		}),
		recordsDamaged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_run_records_damaged_total",
			Help: "Stored run records a restarted berth found damaged (failing their integrity check, or not decoding): not adopted, logged at error level and kept aside.",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_tool_calls_total",
			Help: "Tool calls by tool and outcome (ok, tool_error, denied, bad_input, unknown, sandbox_gone, too_many, error). Unknown tool names are counted as _unknown.",
		}, []string{"tool", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "berth_tool_call_duration_seconds",
			Help:    "Tool call latency by tool, including refused calls.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"tool"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_permission_decisions_total",
			Help: "Permission decisions by the level of the call and outcome (allowed and denied by policy; approved, approved_for_run and rejected on a card; allowed_for_run by an earlier card; refused when nobody decided).",
		}, []string{"level", "outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.runsOpen, m.runsOpened, m.runsExpired, m.recordsDamaged, m.calls, m.latency, m.decisions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("controller: register metrics: %w", err)
		}
	}
	return m, nil
}

func outcome(res *tools.Result, err error) string {
	var in *tools.InputError
	switch {
	case err == nil && res != nil && res.IsError:
		return OutcomeToolError
	case err == nil:
		return OutcomeOK
	case errors.Is(err, tools.ErrDenied):
		return OutcomeDenied
	case errors.As(err, &in):
		return OutcomeBadInput
	case errors.Is(err, ErrTooMany):
		return OutcomeTooMany
	case errors.Is(err, tools.ErrUnknownTool), errors.Is(err, ErrUnknownRun), errors.Is(err, ErrRunExpired):
		return OutcomeUnknown
	case errors.Is(err, sandbox.ErrUnavailable):
		return OutcomeSandboxUnavailable
	case errors.Is(err, sandbox.ErrGone):
		return OutcomeSandboxGone
	}
	return OutcomeError
}
