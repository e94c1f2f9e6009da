package kubestore

// These tests run against the real API server of $KUBECONFIG's cluster
// (tests/kube/up): client-go's fake reproduces neither resourceVersion
// conflicts nor RBAC. Each test makes its own namespace and drives the
// store as a service account holding exactly Rules() there.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	authv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"berth.dev/berth/runstore"
	"berth.dev/berth/tests/kubetest"
)

// testTimeout bounds each test's calls, only so that a broken cluster
// fails a test instead of hanging it.
const testTimeout = 2 * time.Minute

// Short leases for the takeover tests.
const (
	shortLease = 2 * time.Second
	shortRenew = 400 * time.Millisecond
)

// cluster is the real cluster of $KUBECONFIG, with an admin client that
// makes and removes the test namespaces and looks at what the store wrote.
type cluster struct {
	cfg   *rest.Config
	admin *kubernetes.Clientset
}

// need returns the cluster, or fails (CI=true) or skips the test when
// $KUBECONFIG names none that answers.
func need(t *testing.T) *cluster {
	t.Helper()
	cfg, cs := kubetest.Need(t)
	return &cluster{cfg: cfg, admin: cs}
}

func randomID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// namespace makes a namespace for the test, deleted at cleanup.
func (c *cluster) namespace(t *testing.T) string {
	t.Helper()
	ctx := ctxT(t)
	ns := "kstore-" + randomID()[:10]
	if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	return ns
}

// account makes service account name in ns with a Role of exactly
// Rules(), and returns a client that acts as it.
func (c *cluster) account(t *testing.T, ns, name string) kubernetes.Interface {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: Rules()}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if _, err := c.admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expire := int64(3600)
	tok, err := c.admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expire}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.cfg)
	cfg.BearerToken = tok.Status.Token
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// RBAC caches catch up with the new binding within moments.
	for {
		_, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) || ctx.Err() != nil {
			t.Fatalf("service account %s/%s cannot list secrets with Rules(): %v", ns, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cs
}

// env is one test's namespace and a client holding exactly Rules() in it.
type env struct {
	c      *cluster
	ns     string
	client kubernetes.Interface
}

func setup(t *testing.T) *env {
	t.Helper()
	c := need(t)
	ns := c.namespace(t)
	return &env{c: c, ns: ns, client: c.account(t, ns, "berth")}
}

// store opens a Store for identity, closed at cleanup.
func (e *env) store(t *testing.T, identity string, opts Options) *Store {
	t.Helper()
	s, err := New(e.client, e.ns, identity, opts)
	if err != nil {
		t.Fatalf("New(%s): %v", identity, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func record(id string, opened time.Time) runstore.Record {
	return runstore.Record{
		ID:        id,
		Tenant:    "acme",
		Sandbox:   "kube://sandboxes/pod-" + id[:6],
		Workspace: "/workspace",
		Mode:      "edit",
		Opened:    opened.UTC().Truncate(time.Microsecond),
		Updated:   opened.UTC().Truncate(time.Microsecond),
		Owner:     "berth-0",
		Resident:  &runstore.Resident{Dir: "/tmp/.berth-resident-" + id[:6], Secret: []byte("0123456789abcdef0123456789abcdef")},
		State: map[string]json.RawMessage{
			"eval":  json.RawMessage(`{"kernel":"python3","key":"k3y"}`),
			"debug": json.RawMessage(`{"session":7}`),
		},
	}
}

// same compares records by their stored form.
func same(t *testing.T, got, want runstore.Record) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("record:\n got %s\nwant %s", g, w)
	}
}

func TestRoundTrip(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	s := e.store(t, "berth-0", Options{})
	id := randomID()
	want := record(id, time.Now())
	if err := s.Put(ctx, want); err != nil {
		t.Fatalf("Put: %v", err)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	same(t, got, want)

	// A fresh store (another replica) reads the same record.
	other := e.store(t, "berth-1", Options{})
	got, err = other.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get from another store: %v", err)
	}
	same(t, got, want)

	// What is in the cluster: one Secret, named and labelled as documented.
	sec, err := e.c.admin.CoreV1().Secrets(e.ns).Get(ctx, "berth-run-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the record's Secret: %v", err)
	}
	wantLabels := map[string]string{"app.kubernetes.io/managed-by": "berth", "berth.dev/run": id, "berth.dev/store": "v1"}
	for k, v := range wantLabels {
		if sec.Labels[k] != v {
			t.Errorf("Secret label %s = %q, want %q", k, sec.Labels[k], v)
		}
	}
	if sec.Type != corev1.SecretTypeOpaque || len(sec.Data) != 1 {
		t.Errorf("Secret type %s with keys %d, want Opaque with only %q", sec.Type, len(sec.Data), RecordKey)
	}
	var stored runstore.Record
	if err := json.Unmarshal(sec.Data["record"], &stored); err != nil {
		t.Fatalf("data.record is not runstore's JSON: %v", err)
	}
	same(t, stored, want)
	cms, err := e.c.admin.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "berth.dev/run"})
	if err != nil || len(cms.Items) != 0 {
		t.Errorf("ConfigMaps labelled berth.dev/run: %d, %v; a record holds secrets and belongs only in a Secret", len(cms.Items), err)
	}

	// The service account has Rules() and nothing else, which shows
	// that the cluster enforces RBAC, so that the store's success above
	// shows the rules suffice.
	if _, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		fail := t.Skipf
		if os.Getenv("CI") == "true" {
			fail = t.Fatalf
		}
		fail("listing pods with only Rules() = %v, want Forbidden: the cluster does not enforce RBAC, so these tests do not show that Rules() suffices", err)
	}

	if _, err := s.Get(ctx, randomID()); !errors.Is(err, runstore.ErrNotFound) {
		t.Errorf("Get of a missing run = %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "Not_A_Name"); !errors.Is(err, runstore.ErrNotFound) {
		t.Errorf("Get of an id that cannot name a Secret = %v, want ErrNotFound", err)
	}
}

func TestReplace(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	s := e.store(t, "berth-0", Options{})
	id := randomID()
	r := record(id, time.Now())
	if err := s.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Updated = r.Updated.Add(time.Second)
	r.State["structural"] = json.RawMessage(`{"staged":["a.go"]}`)
	delete(r.State, "debug")
	if err := s.Put(ctx, r); err != nil {
		t.Fatalf("Put over an existing record: %v", err)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, r)

	// A store that never saw the Secret replaces it too (its create
	// finds it, it reads it, it updates).
	other := e.store(t, "berth-1", Options{})
	r.Mode = "read"
	if err := other.Put(ctx, r); err != nil {
		t.Fatalf("Put by a store that did not know the record: %v", err)
	}
	got, err = s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, r)
}

func TestDelete(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	s := e.store(t, "berth-0", Options{})
	id := randomID()
	if err := s.Put(ctx, record(id, time.Now())); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Acquire(ctx, id); !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	if err := s.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, runstore.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if _, err := e.c.admin.CoreV1().Secrets(e.ns).Get(ctx, Name(id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret after Delete: %v, want NotFound", err)
	}
	if _, err := e.c.admin.CoordinationV1().Leases(e.ns).Get(ctx, Name(id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease after Delete: %v, want NotFound", err)
	}
	if s.Holds(id) || len(s.Held()) != 0 {
		t.Errorf("after Delete the store still holds %v", s.Held())
	}
	if err := s.Delete(ctx, id); err != nil {
		t.Errorf("Delete of a missing run: %v", err)
	}
	// Put after Delete creates the Secret again (the store's remembered
	// resourceVersion is gone with it).
	if err := s.Put(ctx, record(id, time.Now())); err != nil {
		t.Errorf("Put after Delete: %v", err)
	}
}

func TestListUnreadable(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	s := e.store(t, "berth-0", Options{})
	t0 := time.Now()
	a, b := record(randomID(), t0.Add(time.Minute)), record(randomID(), t0)
	for _, r := range []runstore.Record{a, b} {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	labelled := func(id string) map[string]string {
		return map[string]string{"app.kubernetes.io/managed-by": "berth", "berth.dev/run": id, "berth.dev/store": "v1"}
	}
	garbage, nokey, renamed := randomID(), randomID(), randomID()
	bad := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: Name(garbage), Labels: labelled(garbage)}, Data: map[string][]byte{"record": []byte(`{"id": "` + garbage + `", "opened": 17`)}},
		{ObjectMeta: metav1.ObjectMeta{Name: Name(nokey), Labels: labelled(nokey)}, Data: map[string][]byte{"other": []byte(`{}`)}},
		// A record copied under another run's name.
		{ObjectMeta: metav1.ObjectMeta{Name: Name(renamed), Labels: labelled(renamed)}, Data: map[string][]byte{"record": mustJSON(t, record(a.ID, t0))}},
		// Not the store's: no labels, and another store version.
		{ObjectMeta: metav1.ObjectMeta{Name: Name(randomID())}, Data: map[string][]byte{"record": []byte("x")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "berth-run-v2", Labels: map[string]string{"app.kubernetes.io/managed-by": "berth", "berth.dev/run": "v2", "berth.dev/store": "v2"}}, Data: map[string][]byte{"record": []byte("x")}},
	}
	for _, sec := range bad {
		if _, err := e.c.admin.CoreV1().Secrets(e.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	records, unreadable, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(records) != 2 || records[0].ID != b.ID || records[1].ID != a.ID {
		t.Errorf("List records = %v, want %s then %s (by Opened)", records, b.ID, a.ID)
	} else {
		same(t, records[0], b)
		same(t, records[1], a)
	}
	wantBad := map[string]string{garbage: "does not decode", nokey: `no "record" key`, renamed: "names run"}
	if len(unreadable) != len(wantBad) {
		t.Errorf("List unreadable = %v, want %d", unreadable, len(wantBad))
	}
	for _, u := range unreadable {
		want, ok := wantBad[u.ID]
		if !ok || u.Err == nil || !strings.Contains(u.Err.Error(), want) || !strings.Contains(u.Err.Error(), "Delete") {
			t.Errorf("unreadable %s: %v; want an error saying %q and what to do", u.ID, u.Err, want)
		}
	}
	if _, err := s.Get(ctx, garbage); err == nil || errors.Is(err, runstore.ErrNotFound) {
		t.Errorf("Get of an undecodable record = %v, want a decode error", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// padded returns a record of id whose JSON is exactly n bytes.
func padded(t *testing.T, id string, n int) runstore.Record {
	t.Helper()
	r := record(id, time.Now())
	r.State["structural"] = json.RawMessage(`""`)
	base := len(mustJSON(t, r))
	if n < base {
		t.Fatalf("a record is at least %d bytes", base)
	}
	r.State["structural"] = json.RawMessage(`"` + strings.Repeat("a", n-base) + `"`)
	if got := len(mustJSON(t, r)); got != n {
		t.Fatalf("padded record is %d bytes, want %d", got, n)
	}
	return r
}

// TestTooLarge: a record of exactly MaxRecord bytes is stored (the bound
// fits a Secret on a real API server); one byte more fails with
// ErrTooLarge before anything is written.
func TestTooLarge(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	s := e.store(t, "berth-0", Options{})
	id := randomID()
	big := padded(t, id, MaxRecord)
	if err := s.Put(ctx, big); err != nil {
		t.Fatalf("Put of a %d-byte record (MaxRecord): %v", MaxRecord, err)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, big)

	over := padded(t, randomID(), MaxRecord+1)
	err = s.Put(ctx, over)
	if !errors.Is(err, runstore.ErrTooLarge) || !strings.Contains(err.Error(), "staged edits") {
		t.Fatalf("Put of a %d-byte record = %v, want ErrTooLarge naming what to shrink", MaxRecord+1, err)
	}
	if _, err := e.c.admin.CoreV1().Secrets(e.ns).Get(ctx, Name(over.ID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a too-large record left a Secret: %v", err)
	}
	// Replacing a stored record with a too-large one keeps the old one.
	big2 := padded(t, id, MaxRecord+1)
	if err := s.Put(ctx, big2); !errors.Is(err, runstore.ErrTooLarge) {
		t.Fatalf("Put = %v, want ErrTooLarge", err)
	}
	if got, err := s.Get(ctx, id); err != nil || len(mustJSON(t, got)) != MaxRecord {
		t.Errorf("after a refused Put the record is %d bytes, %v; want the old one", len(mustJSON(t, got)), err)
	}
}

// TestConcurrentPut: a store whose remembered resourceVersion is stale
// (another replica wrote since) meets a conflict, re-reads and writes;
// and two stores writing one record at once all succeed.
func TestConcurrentPut(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	a := e.store(t, "berth-0", Options{})
	b := e.store(t, "berth-1", Options{})
	id := randomID()
	r := record(id, time.Now())
	if err := a.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	stale, _ := a.version(id)
	r.Owner = "berth-1"
	if err := b.Put(ctx, r); err != nil {
		t.Fatalf("Put by b: %v", err)
	}
	// a's version is stale now: an update with it is refused by the API
	// server, so a's next Put goes through the conflict path.
	sec, err := e.c.admin.CoreV1().Secrets(e.ns).Get(ctx, Name(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.ResourceVersion = stale
	if _, err := e.c.admin.CoreV1().Secrets(e.ns).Update(ctx, sec, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("an update with a's stale resourceVersion = %v, want a conflict (else this test proves nothing)", err)
	}
	r.Owner = "berth-0"
	r.Mode = "read"
	if err := a.Put(ctx, r); err != nil {
		t.Fatalf("Put with a stale resourceVersion: %v", err)
	}
	if got, err := b.Get(ctx, id); err != nil {
		t.Fatal(err)
	} else {
		same(t, got, r)
	}

	// Both at once.
	const rounds = 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for i, s := range []*Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rounds {
				r := record(id, time.Now())
				r.Owner = fmt.Sprintf("writer-%d-%d", i, n)
				if err := s.Put(ctx, r); err != nil {
					errs <- fmt.Errorf("store %d Put %d: %w", i, n, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := a.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != fmt.Sprintf("writer-0-%d", rounds-1) && got.Owner != fmt.Sprintf("writer-1-%d", rounds-1) {
		t.Errorf("after concurrent Puts the record's Owner is %q, want one writer's last", got.Owner)
	}
}

func (e *env) lease(t *testing.T, ctx context.Context, id string) *coordinationv1.Lease {
	t.Helper()
	l, err := e.c.admin.CoordinationV1().Leases(e.ns).Get(ctx, Name(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("run %s's Lease: %v", id, err)
	}
	return l
}

// eventually polls cond until it holds or d passes.
func eventually(ctx context.Context, d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestLeaseTakeover: one replica acquires a run; the other is refused
// while the holder renews (also after several lease durations), and takes
// the run over once the holder stops renewing and the lease expires.
func TestLeaseTakeover(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	opts := Options{LeaseDuration: shortLease, RenewInterval: shortRenew}
	aOpts, bOpts := opts, opts
	aOpts.Address, bOpts.Address = "http://10.1.0.1:8080", "http://10.1.0.2:8080"
	a := e.store(t, "berth-a", aOpts)
	b := e.store(t, "berth-b", bOpts)
	id := randomID()

	if ok, err := a.Acquire(ctx, id); !ok || err != nil {
		t.Fatalf("a.Acquire = %v, %v; want true", ok, err)
	}
	if ok, err := a.Acquire(ctx, id); !ok || err != nil {
		t.Fatalf("a.Acquire again (its own lease) = %v, %v; want true", ok, err)
	}
	l := e.lease(t, ctx, id)
	if holder(l) != "berth-a" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 2 || l.Labels[LabelRun] != id {
		t.Errorf("Lease after a.Acquire: holder %q, duration %v, labels %v", holder(l), l.Spec.LeaseDurationSeconds, l.Labels)
	}
	if ok, err := b.Acquire(ctx, id); ok || err != nil {
		t.Fatalf("b.Acquire of a's live lease = %v, %v; want false", ok, err)
	}
	if h, live, err := b.Holder(ctx, id); h != "berth-a" || !live || err != nil {
		t.Errorf("b.Holder = %q, %v, %v; want berth-a, live", h, live, err)
	}
	if o, err := b.Owner(ctx, id); o != (runstore.Owner{Identity: "berth-a", Address: aOpts.Address, Live: true}) || err != nil {
		t.Errorf("b.Owner = %+v, %v; want berth-a at %s, live", o, err, aOpts.Address)
	}
	if !a.Holds(id) || b.Holds(id) {
		t.Errorf("Holds: a %v, b %v; want a only", a.Holds(id), b.Holds(id))
	}

	// a renews: after three lease durations b is still refused.
	renewed := l.Spec.RenewTime.Time
	deadline := time.Now().Add(3 * shortLease)
	for time.Now().Before(deadline) {
		if ok, err := b.Acquire(ctx, id); ok || err != nil {
			t.Fatalf("b.Acquire while a renews = %v, %v; want false", ok, err)
		}
		time.Sleep(shortLease / 4)
	}
	if l := e.lease(t, ctx, id); !l.Spec.RenewTime.Time.After(renewed) || holder(l) != "berth-a" {
		t.Fatalf("a did not renew its lease: renewTime %v (acquired %v), holder %q", l.Spec.RenewTime, renewed, holder(l))
	}
	if !a.Holds(id) {
		t.Error("a.Holds = false while it renews")
	}

	// a stops renewing (as a killed replica does): b takes over once the
	// lease expires.
	a.Close()
	stopped := time.Now()
	var took bool
	if !eventually(ctx, 3*shortLease+5*time.Second, func() bool {
		ok, err := b.Acquire(ctx, id)
		if err != nil {
			t.Fatalf("b.Acquire: %v", err)
		}
		took = ok
		return ok
	}) || !took {
		t.Fatal("b did not take over a's lease after a stopped renewing")
	}
	if since := time.Since(stopped); since < shortLease-shortRenew-time.Second {
		t.Errorf("b took over %v after a stopped, before a's lease could have expired (%v)", since, shortLease)
	}
	l = e.lease(t, ctx, id)
	if holder(l) != "berth-b" || l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 1 {
		t.Errorf("Lease after the takeover: holder %q, transitions %v; want berth-b, 1", holder(l), l.Spec.LeaseTransitions)
	}
	if a.Holds(id) {
		t.Error("a.Holds after Close = true")
	}
	if !b.Holds(id) {
		t.Error("b.Holds after its Acquire = false")
	}
	if h, live, err := b.Holder(ctx, id); h != "berth-b" || !live || err != nil {
		t.Errorf("Holder = %q, %v, %v; want berth-b, live", h, live, err)
	}
	// The takeover wrote the new holder's address: requests go to b now.
	if o, err := a.Owner(ctx, id); err == nil || o.Address != "" {
		// a is closed: Owner refuses.
		t.Errorf("a.Owner after Close = %+v, %v; want ErrClosed", o, err)
	}
	if o, err := b.Owner(ctx, id); o.Address != bOpts.Address || err != nil {
		t.Errorf("Owner after the takeover = %+v, %v; want address %s", o, err, bOpts.Address)
	}
}

// TestAcquireRace: of several replicas acquiring one free run at once,
// exactly one gets it.
func TestAcquireRace(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	const n = 4
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = e.store(t, fmt.Sprintf("berth-%d", i), Options{})
	}
	id := randomID()
	won := make([]bool, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.Acquire(ctx, id)
			if err != nil {
				t.Errorf("store %d Acquire: %v", i, err)
			}
			won[i] = ok
		}()
	}
	wg.Wait()
	var winners []string
	for i, ok := range won {
		if ok {
			winners = append(winners, stores[i].Identity())
		}
	}
	if len(winners) != 1 {
		t.Fatalf("winners %v, want exactly one", winners)
	}
	if h := holder(e.lease(t, ctx, id)); h != winners[0] {
		t.Errorf("Lease holder %q, want the winner %s", h, winners[0])
	}
}

// TestRelease: a released run is taken by another replica at once, long
// before the lease would have expired.
func TestRelease(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	opts := Options{LeaseDuration: time.Hour} // never expires within the test
	a := e.store(t, "berth-a", opts)
	b := e.store(t, "berth-b", opts)
	one, two := randomID(), randomID()
	for _, id := range []string{one, two} {
		if ok, err := a.Acquire(ctx, id); !ok || err != nil {
			t.Fatalf("a.Acquire(%s) = %v, %v", id, ok, err)
		}
		if ok, err := b.Acquire(ctx, id); ok || err != nil {
			t.Fatalf("b.Acquire(%s) of a's lease = %v, %v; want false", id, ok, err)
		}
	}
	// Releasing someone else's lease changes nothing.
	if err := b.Release(ctx, one); err != nil {
		t.Fatalf("b.Release of a's lease: %v", err)
	}
	if h, live, _ := a.Holder(ctx, one); h != "berth-a" || !live {
		t.Fatalf("after b.Release of a's lease the holder is %q (live %v)", h, live)
	}

	if err := a.Release(ctx, one); err != nil {
		t.Fatalf("a.Release: %v", err)
	}
	if a.Holds(one) {
		t.Error("a.Holds after Release = true")
	}
	if h, live, err := b.Holder(ctx, one); h != "" || live || err != nil {
		t.Errorf("Holder after Release = %q, %v, %v; want none", h, live, err)
	}
	if ok, err := b.Acquire(ctx, one); !ok || err != nil {
		t.Fatalf("b.Acquire right after a.Release = %v, %v; want true", ok, err)
	}
	if l := e.lease(t, ctx, one); l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 1 {
		t.Errorf("leaseTransitions %v, want 1", l.Spec.LeaseTransitions)
	}

	// ReleaseAll (SIGTERM) lets go of the rest.
	if got := a.Held(); len(got) != 1 || got[0] != two {
		t.Errorf("a.Held = %v, want [%s]", got, two)
	}
	if err := a.ReleaseAll(ctx); err != nil {
		t.Fatalf("ReleaseAll: %v", err)
	}
	if len(a.Held()) != 0 {
		t.Errorf("a.Held after ReleaseAll = %v", a.Held())
	}
	if ok, err := b.Acquire(ctx, two); !ok || err != nil {
		t.Fatalf("b.Acquire after a.ReleaseAll = %v, %v; want true", ok, err)
	}
}

// TestLost: a replica whose lease another takes (here: written over by
// hand, as a replica with a skewed clock would) finds out at its next
// renewal, drops the run and says so through OnLost.
func TestLost(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	lost := make(chan string, 1)
	a := e.store(t, "berth-a", Options{LeaseDuration: shortLease, RenewInterval: shortRenew, OnLost: func(id string) { lost <- id }})
	id := randomID()
	if ok, err := a.Acquire(ctx, id); !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	l := e.lease(t, ctx, id)
	other := "berth-z"
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.RenewTime = &other, &now
	if _, err := e.c.admin.CoordinationV1().Leases(e.ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-lost:
		if got != id {
			t.Errorf("OnLost(%s), want %s", got, id)
		}
	case <-time.After(5 * shortLease):
		t.Fatal("OnLost was not called after another replica took the lease")
	}
	if a.Holds(id) || len(a.Held()) != 0 {
		t.Errorf("after losing the lease a still holds %v", a.Held())
	}
	if h := holder(e.lease(t, ctx, id)); h != other {
		t.Errorf("the renewal overwrote the new holder: %q", h)
	}
}

// TestCloseStopsRenewals: after Close no goroutine of the store is left,
// the lease is no longer renewed, and every call fails with ErrClosed.
func TestCloseStopsRenewals(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	// Goroutines of client-go's HTTP transports (idle connections) are
	// the client's, not the store's.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
	)
	s, err := New(e.client, e.ns, "berth-a", Options{LeaseDuration: shortLease, RenewInterval: shortRenew})
	if err != nil {
		t.Fatal(err)
	}
	id := randomID()
	if ok, err := s.Acquire(ctx, id); !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	first := e.lease(t, ctx, id).Spec.RenewTime.Time
	if !eventually(ctx, 5*shortRenew, func() bool { return e.lease(t, ctx, id).Spec.RenewTime.Time.After(first) }) {
		t.Fatal("the store did not renew its lease")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	last := e.lease(t, ctx, id).Spec.RenewTime.Time
	time.Sleep(3 * shortRenew)
	if got := e.lease(t, ctx, id).Spec.RenewTime.Time; !got.Equal(last) {
		t.Errorf("the lease was renewed after Close (%v, then %v)", last, got)
	}
	if s.Holds(id) {
		t.Error("Holds after Close = true")
	}
	if err := s.Put(ctx, record(id, time.Now())); !errors.Is(err, runstore.ErrClosed) {
		t.Errorf("Put after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Acquire(ctx, id); !errors.Is(err, runstore.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if _, _, err := s.List(ctx); !errors.Is(err, runstore.ErrClosed) {
		t.Errorf("List after Close = %v, want ErrClosed", err)
	}
}

// syncBuffer is a log sink safe for the renewal goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestHoldsEndsBeforeTakeover: a replica that can no longer renew (here
// its RoleBinding is deleted, so every renewal is refused) stops holding
// the run by its own clock no later than another replica can take it:
// once the other's Acquire succeeds, the first's Holds is false. The
// failed renewals are logged.
func TestHoldsEndsBeforeTakeover(t *testing.T) {
	e := setup(t)
	ctx := ctxT(t)
	var logs syncBuffer
	opts := Options{LeaseDuration: shortLease, RenewInterval: shortRenew}
	aOpts := opts
	aOpts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := e.store(t, "berth-a", aOpts)
	bClient := e.c.account(t, e.ns, "berth-b")
	b, err := New(bClient, e.ns, "berth-b", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	id := randomID()
	if ok, err := a.Acquire(ctx, id); !ok || err != nil {
		t.Fatalf("a.Acquire = %v, %v", ok, err)
	}
	if err := e.c.admin.RbacV1().RoleBindings(e.ns).Delete(ctx, "berth", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var took bool
	eventually(ctx, 3*shortLease+5*time.Second, func() bool {
		ok, err := b.Acquire(ctx, id)
		if err != nil {
			t.Fatalf("b.Acquire: %v", err)
		}
		if ok {
			took = true
			if a.Holds(id) {
				t.Error("b took the run while a's Holds is still true: both would serve it")
			}
		}
		return ok
	})
	if !took {
		t.Fatal("b did not take the run over after a could no longer renew")
	}
	if a.Holds(id) {
		t.Error("a.Holds = true after b took over")
	}
	if !strings.Contains(logs.String(), "renewing leases failed") || !strings.Contains(logs.String(), "forbidden") {
		t.Errorf("a's failed renewals were not logged with their cause: %q", logs.String())
	}
}
