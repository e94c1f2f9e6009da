package mcpserver

import (
	"strings"
	"testing"
	"time"
)

// TestRequestStateBinding: a sealed requestState is taken once, and only
// for the tenant, principal, run, tool and arguments it was given for,
// before it expires.
func TestRequestStateBinding(t *testing.T) {
	now := time.Now()
	given := roundState{Tenant: "a", Principal: "p1", Run: "r1", Tool: "ask_user", Args: argsDigest([]byte(`{"question":"q","options":[{"label":"x"}]}`)), Card: "c"}
	seal := func(st roundState, nonce string, exp time.Time) string {
		st.Nonce, st.Expiry = nonce, exp.UnixMilli()
		return states.seal(st)
	}
	want := given
	want.Card = "" // take checks what the call is, not which card

	// The same arguments in another order are the same call.
	if argsDigest([]byte(`{"options":[{"label":"x"}], "question":"q"}`)) != given.Args {
		t.Errorf("the digest of the same arguments re-encoded differs")
	}
	for _, c := range []struct {
		name   string
		change func(*roundState)
		why    string
	}{
		{"another principal", func(s *roundState) { s.Principal = "p2" }, "another credential"},
		{"another tenant", func(s *roundState) { s.Tenant = "b" }, "another credential"},
		{"another run", func(s *roundState) { s.Run = "r2" }, "another run"},
		{"another tool", func(s *roundState) { s.Tool = "write" }, "another call"},
		{"other arguments", func(s *roundState) { s.Args = argsDigest([]byte(`{"question":"other"}`)) }, "another call"},
	} {
		w := want
		c.change(&w)
		if _, err := states.take(seal(given, c.name, now.Add(time.Minute)), w, now); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: want refused as %q, got %v", c.name, c.why, err)
		}
	}
	if _, err := states.take(seal(given, "late", now.Add(-time.Second)), want, now); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired state: want refused, got %v", err)
	}
	tok := seal(given, "once", now.Add(time.Minute))
	st, err := states.take(tok, want, now)
	if err != nil || st.Card != "c" {
		t.Fatalf("the state as given: %v %+v", err, st)
	}
	if _, err := states.take(tok, want, now); err == nil || !strings.Contains(err.Error(), "answered already") {
		t.Errorf("the state again: want refused as answered already, got %v", err)
	}
	b := []byte(tok)
	b[len(b)-3] ^= 1
	if _, err := states.take(string(b), want, now); err == nil {
		t.Errorf("an altered state was taken")
	}
	if _, err := newSealer().take(seal(given, "other-key", now.Add(time.Minute)), want, now); err == nil {
		t.Errorf("a state sealed with another key was taken")
	}
}
