package httpapi

import (
	"strings"
	"testing"
	"time"
)

// TestPeerSignature: a forwarded request's signature holds only for the
// request, tenant, key and time it was made for.
func TestPeerSignature(t *testing.T) {
	key := []byte(strings.Repeat("k", MinPeerKey))
	p, err := NewPeer("berth-a", key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	sig := p.sign(now, "POST", "/v1/runs/r1/tools/eval", "acme")
	other, _ := NewPeer("berth-b", []byte(strings.Repeat("x", MinPeerKey)))
	for _, tc := range []struct {
		name   string
		p      *Peer
		value  string
		at     time.Time
		method string
		uri    string
		tenant string
		ok     bool
	}{
		{"as signed", p, sig, now, "POST", "/v1/runs/r1/tools/eval", "acme", true},
		{"a minute late", p, sig, now.Add(peerSkew), "POST", "/v1/runs/r1/tools/eval", "acme", true},
		{"replayed later", p, sig, now.Add(peerSkew + time.Second), "POST", "/v1/runs/r1/tools/eval", "acme", false},
		{"from the future", p, sig, now.Add(-peerSkew - time.Second), "POST", "/v1/runs/r1/tools/eval", "acme", false},
		{"another run", p, sig, now, "POST", "/v1/runs/r2/tools/eval", "acme", false},
		{"another method", p, sig, now, "DELETE", "/v1/runs/r1/tools/eval", "acme", false},
		{"another tenant", p, sig, now, "POST", "/v1/runs/r1/tools/eval", "globex", false},
		{"another key", other, sig, now, "POST", "/v1/runs/r1/tools/eval", "acme", false},
		{"another replica's name", p, "berth-b" + strings.TrimPrefix(sig, "berth-a"), now, "POST", "/v1/runs/r1/tools/eval", "acme", false},
		{"malformed", p, "berth-a", now, "POST", "/v1/runs/r1/tools/eval", "acme", false},
		{"bad time", p, "berth-a soon " + strings.Repeat("0", 64), now, "POST", "/v1/runs/r1/tools/eval", "acme", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.verify(tc.value, tc.at, tc.method, tc.uri, tc.tenant)
			if (err == nil) != tc.ok {
				t.Errorf("verify = %v; want ok %v", err, tc.ok)
			}
		})
	}
}

// TestNewPeer refuses a short key and an identity that is not one word.
func TestNewPeer(t *testing.T) {
	for _, tc := range []struct {
		identity string
		key      string
		ok       bool
	}{
		{"berth-a", strings.Repeat("k", MinPeerKey), true},
		{"berth-a", strings.Repeat("k", MinPeerKey-1), false},
		{"", strings.Repeat("k", MinPeerKey), false},
		{"berth a", strings.Repeat("k", MinPeerKey), false},
	} {
		if _, err := NewPeer(tc.identity, []byte(tc.key)); (err == nil) != tc.ok {
			t.Errorf("NewPeer(%q, %d bytes) = %v; want ok %v", tc.identity, len(tc.key), err, tc.ok)
		}
	}
}
