// Package kubeauth authenticates in-cluster callers of berth serve by
// their projected service-account tokens: a token is verified by the API
// server (a TokenReview with berth's audience), and its service account
// is mapped to a tenant and scopes by a mappings file. Verdicts are cached
// for a short while, in a bounded cache, so that a harness's calls cost
// the API server one review a minute, not one a call.
//
// A mappings file has one service account a line:
//
//	<namespace>/<serviceaccount> <tenant> <scope>[,<scope>…]
//
// with blank lines and lines starting with # ignored; the scopes are
// httpapi's (harness, operator, metrics). A service account of no line is
// refused even when its token is valid.
//
// berth needs `create` on tokenreviews.authentication.k8s.io, which is
// cluster-scoped: bind the ClusterRole system:auth-delegator (or a
// ClusterRole with just that rule) to berth's ServiceAccount.
package kubeauth

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"berth.dev/berth/controller/httpapi"
)

const (
	// DefaultAudience is the audience berth asks for when none is given:
	// a harness projects its token with `audience: berth`.
	DefaultAudience = "berth"
	// DefaultKeep is how long a verified token is trusted without asking
	// again; a refused one is remembered for a tenth of it.
	DefaultKeep = time.Minute
	// DefaultMaxCached bounds the cache.
	DefaultMaxCached = 4096
	// reviewTimeout bounds one TokenReview.
	reviewTimeout = 10 * time.Second
)

// Mapping gives a service account's tokens a tenant and scopes.
type Mapping struct {
	Namespace, ServiceAccount string
	Tenant                    string
	Scopes                    []httpapi.Scope
}

// Username is the name the API server gives the service account's
// tokens.
func (m Mapping) Username() string {
	return "system:serviceaccount:" + m.Namespace + ":" + m.ServiceAccount
}

// ParseMappings reads a mappings file (see the package documentation).
func ParseMappings(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("kubeauth: service accounts file line %d: %w", n, err)
		}
		if prev, dup := seen[m.Username()]; dup {
			return nil, fmt.Errorf("kubeauth: service accounts file line %d: %s/%s is on line %d already: give it one line", n, m.Namespace, m.ServiceAccount, prev)
		}
		seen[m.Username()] = n
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kubeauth: read the service accounts file: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("kubeauth: the service accounts file maps no service account: add lines `<namespace>/<serviceaccount> <tenant> <scope>[,<scope>…]`")
	}
	return out, nil
}

func parseLine(line string) (Mapping, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return Mapping{}, fmt.Errorf("%d fields, want 3: `<namespace>/<serviceaccount> <tenant> <scope>[,<scope>…]`", len(f))
	}
	ns, sa, ok := strings.Cut(f[0], "/")
	if !ok {
		return Mapping{}, fmt.Errorf("%q is not NAMESPACE/SERVICEACCOUNT", f[0])
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return Mapping{}, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(sa); len(errs) > 0 {
		return Mapping{}, fmt.Errorf("%q is not a service account name: %s", sa, strings.Join(errs, "; "))
	}
	// The tenant and scopes follow the tokens file's rules; reuse its
	// parser on a line with a placeholder hash.
	c, err := httpapi.ParseTokens(strings.NewReader(strings.Repeat("0", 2*sha256.Size) + " " + f[1] + " " + f[2]))
	if err != nil {
		return Mapping{}, errors.Unwrap(err)
	}
	return Mapping{Namespace: ns, ServiceAccount: sa, Tenant: c[0].Tenant, Scopes: c[0].Scopes}, nil
}

// Options tune a Reviewer; zero values take the defaults.
type Options struct {
	Audience  string        // DefaultAudience
	Keep      time.Duration // DefaultKeep
	MaxCached int           // DefaultMaxCached
}

// Reviewer is an httpapi.Authenticator that verifies service-account
// tokens with TokenReviews.
type Reviewer struct {
	client   kubernetes.Interface
	audience string
	keep     time.Duration
	max      int
	byUser   map[string]Mapping

	mu    sync.Mutex
	cache map[[sha256.Size]byte]verdict
}

var _ httpapi.Authenticator = (*Reviewer)(nil)

// verdict is a cached outcome: a credential, or a refusal.
type verdict struct {
	cred    httpapi.Credential
	refusal error
	until   time.Time
}

// New returns a Reviewer asking client's API server about the tokens of
// the mapped service accounts.
func New(client kubernetes.Interface, mappings []Mapping, o Options) (*Reviewer, error) {
	if client == nil {
		return nil, errors.New("kubeauth: no Kubernetes client given")
	}
	if len(mappings) == 0 {
		return nil, errors.New("kubeauth: no service account mapped: every token would be refused")
	}
	r := &Reviewer{client: client, audience: o.Audience, keep: o.Keep, max: o.MaxCached,
		byUser: map[string]Mapping{}, cache: map[[sha256.Size]byte]verdict{}}
	if r.audience == "" {
		r.audience = DefaultAudience
	}
	if r.keep <= 0 {
		r.keep = DefaultKeep
	}
	if r.max <= 0 {
		r.max = DefaultMaxCached
	}
	for _, m := range mappings {
		r.byUser[m.Username()] = m
	}
	return r, nil
}

// Audience is the audience the Reviewer requires.
func (r *Reviewer) Audience() string { return r.audience }

// Authenticate verifies token. A token that is not a valid token of a
// mapped service account for the audience is refused (an error wrapping
// httpapi.ErrUnauthenticated); an API server that cannot be asked is any
// other error.
func (r *Reviewer) Authenticate(ctx context.Context, token string) (httpapi.Credential, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	r.mu.Lock()
	v, ok := r.cache[key]
	r.mu.Unlock()
	if ok && now.Before(v.until) {
		return v.cred, v.refusal
	}
	if strings.Count(token, ".") != 2 {
		// Not a JWT: a wrong static token, not worth a review.
		return httpapi.Credential{}, fmt.Errorf("%w: wrong bearer token: send a token berth serve was configured with, or a projected service-account token with audience %q", httpapi.ErrUnauthenticated, r.audience)
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		// Not cached: the next request asks again.
		return httpapi.Credential{}, fmt.Errorf("kubeauth: TokenReview: %w (berth's ServiceAccount needs create on tokenreviews.authentication.k8s.io: bind system:auth-delegator)", err)
	}
	v = r.judge(tr)
	keep := r.keep
	if v.refusal != nil {
		keep /= 10
	}
	v.until = now.Add(keep)
	r.mu.Lock()
	r.storeLocked(key, v, now)
	r.mu.Unlock()
	return v.cred, v.refusal
}

// judge turns the API server's review into a verdict.
func (r *Reviewer) judge(tr *authnv1.TokenReview) verdict {
	st := tr.Status
	refuse := func(format string, a ...any) verdict {
		return verdict{refusal: fmt.Errorf("%w: "+format, append([]any{httpapi.ErrUnauthenticated}, a...)...)}
	}
	if !st.Authenticated {
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return refuse("the API server does not accept this token for audience %q (%s): project a service-account token with `audience: %s`", r.audience, why, r.audience)
	}
	if !slices.Contains(st.Audiences, r.audience) {
		return refuse("the token is not for audience %q (it is for %q): project one with `audience: %s`", r.audience, st.Audiences, r.audience)
	}
	m, ok := r.byUser[st.User.Username]
	if !ok {
		return refuse("%s is not in berth's service accounts file: ask the operator to map it to a tenant", st.User.Username)
	}
	return verdict{cred: httpapi.Credential{Tenant: m.Tenant, Scopes: m.Scopes, Subject: st.User.Username}}
}

// storeLocked caches v, keeping the cache at most r.max entries: expired
// entries go first, then the one closest to expiry.
func (r *Reviewer) storeLocked(key [sha256.Size]byte, v verdict, now time.Time) {
	if _, ok := r.cache[key]; !ok && len(r.cache) >= r.max {
		for k, e := range r.cache {
			if !now.Before(e.until) {
				delete(r.cache, k)
			}
		}
		for len(r.cache) >= r.max {
			var oldest [sha256.Size]byte
			var first time.Time
			for k, e := range r.cache {
				if first.IsZero() || e.until.Before(first) {
					oldest, first = k, e.until
				}
			}
			delete(r.cache, oldest)
		}
	}
	r.cache[key] = v
}

// Cached is how many verdicts the cache holds.
func (r *Reviewer) Cached() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cache)
}
