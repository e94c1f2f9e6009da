package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"berth.dev/berth/controller"
)

// Scope is what a credential may do.
type Scope string

const (
	// ScopeHarness opens runs, lists, reads and closes its tenant's runs,
	// calls their tools, reads their events, cards, resources and
	// workers, answers question cards (ask_user: the harness relays them
	// to its user) and reports on workers.
	ScopeHarness Scope = "harness"
	// ScopeOperator answers permission cards and question cards and reads
	// what the console shows (runs, events, cards, resources, workers).
	// It never opens a run or calls a tool. An operator credential's
	// tenant may be AllTenants.
	ScopeOperator Scope = "operator"
	// ScopeMetrics reads /metrics.
	ScopeMetrics Scope = "metrics"
)

// Scopes lists the known scopes.
var Scopes = []Scope{ScopeHarness, ScopeOperator, ScopeMetrics}

// DefaultTenant is the tenant of the one-token shorthand (Options.Token,
// BERTH_TOKEN) and of requests to a server without credentials.
const DefaultTenant = "default"

// AllTenants, as an operator credential's tenant, sees every tenant's runs.
const AllTenants = controller.AllTenants

// MaxTenantLen bounds a tenant name in a tokens file.
const MaxTenantLen = 128

// Credential is one bearer token, kept as its SHA-256, with the tenant
// whose runs it reaches and what it may do there.
type Credential struct {
	Hash   [sha256.Size]byte
	Tenant string
	Scopes []Scope
}

// TokenCredential returns the credential of a plain token.
func TokenCredential(token, tenant string, scopes ...Scope) Credential {
	return Credential{Hash: sha256.Sum256([]byte(token)), Tenant: tenant, Scopes: scopes}
}

// Has reports whether the credential has scope s.
func (c Credential) Has(s Scope) bool { return slices.Contains(c.Scopes, s) }

func (c Credential) String() string {
	ss := make([]string, len(c.Scopes))
	for i, s := range c.Scopes {
		ss[i] = string(s)
	}
	return fmt.Sprintf("tenant %s: %s", c.Tenant, strings.Join(ss, ","))
}

// Who names the credential in an audit record: the first 12 hex digits of
// its line's hash in the tokens file, its tenant and scopes; the zero
// credential (berth serves without tokens) is "no token".
func (c Credential) Who() string {
	if c.Hash == ([sha256.Size]byte{}) {
		return "no token (berth serves without a tokens file); " + c.String()
	}
	return fmt.Sprintf("token sha256:%x… (%s)", c.Hash[:6], c.String())
}

// CredentialSet is the credentials a server accepts, replaceable while it
// serves: a request is checked against the set it found when it arrived.
type CredentialSet struct{ p atomic.Pointer[[]Credential] }

// NewCredentialSet returns a set holding creds.
func NewCredentialSet(creds []Credential) *CredentialSet {
	s := &CredentialSet{}
	s.Set(creds)
	return s
}

// Set replaces the credentials: a token no longer among them is refused
// from the next request on.
func (s *CredentialSet) Set(creds []Credential) {
	c := slices.Clone(creds)
	s.p.Store(&c)
}

// List returns the credentials; the caller must not change them.
func (s *CredentialSet) List() []Credential { return *s.p.Load() }

// ParseTokens reads a tokens file: one credential a line,
//
//	<sha256-hex-of-token> <tenant> <scope>[,<scope>…]
//
// with blank lines and lines starting with # ignored. Make a line's hash
// with `printf %s "$tok" | sha256sum`. Only an operator or metrics line
// may name the tenant AllTenants ("*"): a harness opens runs, and a run
// belongs to one tenant.
func ParseTokens(r io.Reader) ([]Credential, error) {
	var out []Credential
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, err := parseTokenLine(line)
		if err != nil {
			return nil, fmt.Errorf("httpapi: tokens file line %d: %w", n, err)
		}
		if prev, dup := seen[c.Hash]; dup {
			return nil, fmt.Errorf("httpapi: tokens file line %d: the same token hash is on line %d: give every credential its own token", n, prev)
		}
		seen[c.Hash] = n
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("httpapi: read the tokens file: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("httpapi: the tokens file has no credentials: add lines `<sha256-hex-of-token> <tenant> <scopes>` (printf %s \"$tok\" | sha256sum)")
	}
	return out, nil
}

func parseTokenLine(line string) (Credential, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return Credential{}, fmt.Errorf("%d fields, want 3: `<sha256-hex-of-token> <tenant> <scope>[,<scope>…]`", len(f))
	}
	var c Credential
	if b, err := hex.DecodeString(f[0]); err != nil || len(b) != sha256.Size {
		return Credential{}, fmt.Errorf("%.12q… is not a SHA-256 in hex (64 digits): write the token's hash, not the token (printf %%s \"$tok\" | sha256sum)", f[0])
	} else {
		copy(c.Hash[:], b)
	}
	c.Tenant = f[1]
	if len(c.Tenant) > MaxTenantLen {
		return Credential{}, fmt.Errorf("tenant name has %d bytes, more than %d", len(c.Tenant), MaxTenantLen)
	}
	for _, name := range strings.Split(f[2], ",") {
		s := Scope(name)
		if !slices.Contains(Scopes, s) {
			return Credential{}, fmt.Errorf("unknown scope %q: use harness, operator or metrics", name)
		}
		if !c.Has(s) {
			c.Scopes = append(c.Scopes, s)
		}
	}
	if c.Tenant == AllTenants && c.Has(ScopeHarness) {
		return Credential{}, fmt.Errorf("tenant %q with the harness scope: a harness opens runs, which belong to one tenant; give it a tenant name, or drop harness (an operator may see every tenant)", AllTenants)
	}
	return c, nil
}

// principal is who a request comes from.
type principal struct {
	Credential
}

type principalKey struct{}

func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// authenticate finds the request's credential. The presented token is
// hashed and compared with every credential's hash in constant time, so
// neither the comparison nor which credential matched shows in the timing.
func (s *server) authenticate(r *http.Request) (principal, string, bool) {
	creds := s.creds.List()
	if len(creds) == 0 {
		return principal{Credential{Tenant: DefaultTenant, Scopes: Scopes}}, "", true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return principal{}, "httpapi: missing bearer token: send Authorization: Bearer <token> (berth serve reads the credentials from --tokens-file, or BERTH_TOKEN / --token-file)", false
	}
	sum := sha256.Sum256([]byte(got))
	match := -1
	for i := range creds {
		if subtle.ConstantTimeCompare(sum[:], creds[i].Hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return principal{}, "httpapi: wrong bearer token: send a token berth serve was configured with", false
	}
	return principal{creds[match]}, "", true
}

// authn authenticates every request before anything else reads it — its
// route, its body — and puts the principal in the request's context.
func (s *server) authn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, msg, ok := s.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
			refuse(w, http.StatusUnauthorized, "unauthorized", msg)
			return
		}
		if c := connOf(r); c != nil {
			c.authenticated()
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// need serves h to an authenticated principal with one of scopes.
func need(h http.HandlerFunc, scopes ...Scope) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r)
		if !slices.ContainsFunc(scopes, p.Has) {
			refuse(w, http.StatusForbidden, "missing_scope", fmt.Sprintf("httpapi: %s %s needs a credential with the %s scope; this one (%s) has not: use a %s token",
				r.Method, r.URL.Path, scopeList(scopes), p, scopeList(scopes)))
			return
		}
		h(w, r)
	}
}

func scopeList(scopes []Scope) string {
	ss := make([]string, len(scopes))
	for i, s := range scopes {
		ss[i] = string(s)
	}
	return strings.Join(ss, " or ")
}

// refuse answers a request berth will not serve without reading its body:
// the connection closes after the response, and the read deadline is cut
// so that net/http does not wait for the rest of a trickling body (it
// drains an unread body before closing, even with Connection: close).
func refuse(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Connection", "close")
	http.NewResponseController(w).SetReadDeadline(time.Now())
	writeError(w, status, code, msg)
}

// lookup returns the request's run as the caller's tenant sees it: another
// tenant's run answers unknown_run exactly like a missing one.
func (s *server) lookup(r *http.Request) (*controller.Run, error) {
	return s.c.Lookup(principalOf(r).Tenant, r.PathValue("id"))
}
