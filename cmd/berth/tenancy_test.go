package main

import (
	"slices"
	"testing"

	"berth.dev/berth/controller/httpapi"
)

// TestHarnessTenants: the tenants that can open runs decide whether
// containers need a tenant label (two or more); operators and metrics
// credentials open no runs and do not count.
func TestHarnessTenants(t *testing.T) {
	h, op, m := httpapi.ScopeHarness, httpapi.ScopeOperator, httpapi.ScopeMetrics
	tests := []struct {
		creds []httpapi.Credential
		want  []string
	}{
		{nil, nil},
		{[]httpapi.Credential{httpapi.TokenCredential("t", httpapi.DefaultTenant, h, m), httpapi.TokenCredential("o", httpapi.AllTenants, op)}, []string{"default"}},
		{[]httpapi.Credential{httpapi.TokenCredential("a1", "a", h), httpapi.TokenCredential("a2", "a", h), httpapi.TokenCredential("m", "b", m)}, []string{"a"}},
		{[]httpapi.Credential{httpapi.TokenCredential("b", "b", h), httpapi.TokenCredential("a", "a", h), httpapi.TokenCredential("o", httpapi.AllTenants, op)}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		if got := harnessTenants(tt.creds); !slices.Equal(got, tt.want) {
			t.Errorf("harnessTenants(%v) = %v, want %v", tt.creds, got, tt.want)
		}
	}
}
