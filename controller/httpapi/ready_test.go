package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"berth.dev/berth/controller/httpapi"
)

// TestReadyChecks: /readyz is 503 naming each failing check, while /livez
// and /healthz stay 200; a storm of probes runs the checks once per
// ReadyKeep, not once per probe.
func TestReadyChecks(t *testing.T) {
	var calls atomic.Int32
	rg := newRig(t, httpapi.Options{Ready: []httpapi.ReadyCheck{
		{Name: "run store", Check: func(context.Context) error { calls.Add(1); return nil }},
		{Name: "engine docker", Check: func(context.Context) error { return errors.New("connection refused") }},
	}}, false)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rg.do("GET", "/readyz", "", "")
			if r.status != http.StatusServiceUnavailable || string(r.body) != "not ready: engine docker: connection refused" {
				t.Errorf("/readyz: %d %q; want 503 naming the engine", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n < 1 || n > 2 {
		t.Errorf("20 probes at once ran the store check %d times; want one round (two if ReadyKeep passed between)", n)
	}
	for _, p := range []string{"/livez", "/healthz"} {
		if r := rg.do("GET", p, "", ""); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "ok" {
			t.Errorf("%s while not ready: %d %q; want 200 ok", p, r.status, r.body)
		}
	}
}
