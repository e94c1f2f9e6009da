package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/controller"
)

// Forwarding between replicas. With several berth replicas sharing one
// run store (controller.Config.Leases), a request for a run another
// replica serves is forwarded to it as it came, the caller's bearer token
// included: the owner authenticates the caller again, so a replica never
// vouches for a tenant. The forwarding replica adds PeerHeader, signed
// with the key all replicas share (Peer.Key), which says "already
// forwarded once": the owner refuses a forged one (401), and never
// forwards such a request again (no loops; 503 run_moving instead).

// PeerHeader carries a forwarded request's signature:
// "<replica> <unix seconds> <hex HMAC-SHA256>".
const PeerHeader = "Berth-Peer"

const (
	// MinPeerKey is the shortest peer key accepted, in bytes.
	MinPeerKey = 32
	// peerSkew bounds how far a forwarded request's signing time may be
	// from this replica's clock.
	peerSkew = 60 * time.Second
	// peerDialTimeout bounds connecting to the replica that serves a run.
	peerDialTimeout = 3 * time.Second
)

// Peer is this replica's part in forwarding between replicas.
type Peer struct {
	// Identity names this replica (its pod name), as in the leases.
	Identity string
	// Key is shared by every replica, at least MinPeerKey bytes.
	Key []byte
}

// NewPeer returns the forwarding identity of replica identity, signing
// with key.
func NewPeer(identity string, key []byte) (*Peer, error) {
	p := &Peer{Identity: identity, Key: key}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p, nil
}

// check says what is wrong with p.
func (p *Peer) check() error {
	if p.Identity == "" || strings.ContainsAny(p.Identity, " \t\r\n") {
		return fmt.Errorf("httpapi: replica identity %q must be one word (its pod name)", p.Identity)
	}
	if len(p.Key) < MinPeerKey {
		return fmt.Errorf("httpapi: the peer key is %d bytes; replicas need a shared key of at least %d (openssl rand -hex 32)", len(p.Key), MinPeerKey)
	}
	return nil
}

// peerMAC is the signature of a forwarded request.
func peerMAC(key []byte, identity string, at int64, method, uri, tenant string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "berth-peer-v1\n%s\n%d\n%s\n%s\n%s", identity, at, method, uri, tenant)
	return hex.EncodeToString(m.Sum(nil))
}

// sign is PeerHeader's value for a request of tenant forwarded now.
func (p *Peer) sign(now time.Time, method, uri, tenant string) string {
	at := now.Unix()
	return p.Identity + " " + strconv.FormatInt(at, 10) + " " + peerMAC(p.Key, p.Identity, at, method, uri, tenant)
}

// verify checks a PeerHeader value against the request it came with, as
// this replica authenticated its caller (tenant).
func (p *Peer) verify(value string, now time.Time, method, uri, tenant string) error {
	f := strings.Fields(value)
	if len(f) != 3 {
		return errors.New("malformed")
	}
	at, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return errors.New("malformed time")
	}
	if d := now.Sub(time.Unix(at, 0)); d > peerSkew || d < -peerSkew {
		return fmt.Errorf("signed %v away from this replica's clock (at most %v)", d.Round(time.Second), peerSkew)
	}
	want := peerMAC(p.Key, f[0], at, method, uri, tenant)
	if !hmac.Equal([]byte(want), []byte(f[2])) {
		return errors.New("the signature does not match (another key, or another request or tenant)")
	}
	return nil
}

// owned serves a route of one run ({id}) where the run is: here (next),
// on another replica (forwarded), or nowhere (the controller's error).
func (s *server) owned(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant := principalOf(r).Tenant
		sig := r.Header.Get(PeerHeader)
		if sig != "" {
			if s.opts.Peer == nil {
				refuse(w, http.StatusUnauthorized, "unauthorized", "httpapi: a request forwarded by another replica ("+PeerHeader+") reached a berth that has no peers")
				return
			}
			if err := s.opts.Peer.verify(sig, time.Now(), r.Method, r.URL.RequestURI(), tenant); err != nil {
				refuse(w, http.StatusUnauthorized, "unauthorized", "httpapi: the "+PeerHeader+" signature of this forwarded request is refused: "+err.Error())
				return
			}
		}
		id := r.PathValue("id")
		_, remote, err := s.c.Locate(r.Context(), tenant, id)
		switch {
		case err != nil:
			s.fail(w, r, err)
			return
		case remote == nil:
			next(w, r)
			return
		case sig != "":
			// Forwarded once already: the lease moved meanwhile.
			s.fail(w, r, fmt.Errorf("httpapi: run %s moved to replica %s while this request was forwarded: %w; retry", id, remote.Identity, controller.ErrMoving))
			return
		case s.opts.Peer == nil:
			s.fail(w, r, fmt.Errorf("httpapi: run %s is served by replica %s, and this berth has no peer key to forward with: %w", id, remote.Identity, controller.ErrMoving))
			return
		}
		s.forward(w, r, tenant, remote)
	}
}

// forward proxies r to the replica that serves its run, streaming both
// ways (an event stream stays open through it).
func (s *server) forward(w http.ResponseWriter, r *http.Request, tenant string, to *controller.Remote) {
	target, err := url.Parse(to.Address)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		s.fail(w, r, fmt.Errorf("httpapi: replica %s serves run %s but its address %q is not an http(s) URL: %w", to.Identity, r.PathValue("id"), to.Address, controller.ErrMoving))
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The Host the caller sent, so that the owner's origin check
			// sees the request as the caller made it (the console's
			// calls carry an Origin of the name they reached).
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(PeerHeader, s.opts.Peer.sign(time.Now(), pr.In.Method, pr.In.URL.RequestURI(), tenant))
		},
		Transport:     s.peers,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusMisdirectedRequest {
				s.c.Misdirected(r.PathValue("id")) // it may serve the run no more: look again next time
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.c.Misdirected(r.PathValue("id"))
			s.fail(w, r, fmt.Errorf("httpapi: replica %s (%s), which serves run %s, did not answer: %v: %w; if it stopped, another replica takes the run over once its lease lapses: retry in a few seconds (if this lasts while that replica runs, the replicas cannot reach each other on their port: see NetworkPolicy berth-peers)",
				to.Identity, to.Address, r.PathValue("id"), err, controller.ErrMoving))
		},
	}
	// The owner bounds its own answer (a tool call's or the event
	// stream's deadline); this replica only relays it.
	http.NewResponseController(w).SetWriteDeadline(time.Time{})
	proxy.ServeHTTP(w, r)
}

// newPeerTransport is the client side of forwarding.
func newPeerTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // replicas reach each other directly
		DialContext:           (&net.Dialer{Timeout: peerDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   peerDialTimeout,
		ExpectContinueTimeout: time.Second,
	}
}
