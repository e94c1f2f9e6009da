package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"berth.dev/berth/runstore"
)

// Names and labels of the objects the store keeps, one Secret and one
// Lease per run, both named Prefix+id.
const (
	// Prefix starts the name of each run's Secret and Lease.
	Prefix = "berth-run-"
	// LabelManagedBy and ManagedBy mark berth's objects.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "berth"
	// LabelRun holds the run's id.
	LabelRun = "berth.dev/run"
	// LabelStore and StoreVersion name the layout of the Secret (the
	// record's JSON under RecordKey). List reads only this version.
	LabelStore   = "berth.dev/store"
	StoreVersion = "v1"
	// RecordKey is the Secret's data key holding the record's JSON.
	RecordKey = "record"
	// MACKey is the Secret's data key holding the record's MAC
	// (runstore.Seal under Options.Key).
	MACKey = "mac"
	// AnnotationAddress, on a run's Lease, is where the holder replica
	// serves (Options.Address), so that the other replicas can forward
	// the run's requests to it.
	AnnotationAddress = "berth.dev/address"
)

const (
	// MaxRecord bounds one record's JSON encoding, in bytes: a Secret
	// holds at most 1 MiB of data, and the rest is headroom for the
	// object's metadata and the API server's request limits. Staged
	// edits with their files' contents are the bulk of a large record.
	MaxRecord = 900 << 10
	// DefaultLeaseDuration is how long a run's lease lasts without a
	// renewal before another replica may take the run over.
	DefaultLeaseDuration = 20 * time.Second
	// maxAttempts bounds the re-reads of one Put, Acquire, renewal or
	// Release that keeps meeting conflicting writers.
	maxAttempts = 8
	// listPage is how many Secrets one List request asks for.
	listPage = 200
)

// Options configure New.
type Options struct {
	// LeaseDuration is how long a lease lasts without a renewal; zero
	// means DefaultLeaseDuration. Kubernetes counts it in whole seconds,
	// so it is at least one second.
	LeaseDuration time.Duration
	// RenewInterval is how often the store renews the leases it holds;
	// zero means a third of LeaseDuration. It must be shorter than
	// LeaseDuration.
	RenewInterval time.Duration
	// OnLost, when set, is called (from the store's renewal goroutine,
	// never with a lock held) with the id of a run whose lease this
	// replica held and no longer does: another replica holds it, or it
	// was deleted. The replica must stop serving that run. It must not
	// block: renewals of the other leases wait for it.
	OnLost func(id string)
	// Logger receives failed renewals (Warn); nil discards them.
	Logger *slog.Logger
	// Address is where this replica serves (a URL such as
	// http://10.0.0.7:8080), written on every lease it acquires
	// (AnnotationAddress) and returned by Owner; empty writes none.
	Address string
	// Key seals the records: each Secret carries the MAC of its record
	// (runstore.Seal) under MACKey, and a Secret whose MAC is missing or
	// does not match is returned as runstore.Unreadable wrapping
	// runstore.ErrForged. Every replica needs the same key (berth derives
	// it from the replicas' peer key, runstore.DeriveKey). Nil neither
	// seals nor checks.
	Key []byte
}

// Store is a [runstore.Store] kept in one Kubernetes namespace: a Secret
// per run holds its record, and a coordination.k8s.io Lease per run names
// the replica that serves it. Several replicas (identities) share one
// namespace; each serves the runs whose leases it holds. Create it with
// [New]; it is safe for concurrent use.
type Store struct {
	client    kubernetes.Interface
	namespace string
	identity  string
	address   string
	duration  time.Duration
	interval  time.Duration
	onLost    func(id string)
	key       []byte // Options.Key
	log       *slog.Logger
	maxRecord int // MaxRecord; tests lower it

	mu       sync.Mutex
	closed   bool
	versions map[string]string // run id → the last resourceVersion seen of its Secret
	held     map[string]*held  // run id → its lease, while this replica holds it

	stop context.CancelFunc
	done chan struct{}
}

// held is a lease this replica holds.
type held struct {
	lease *coordinationv1.Lease // as last written or read
	// renewed is this machine's clock when the last successful write
	// of the lease was sent: its renewTime is no earlier than that.
	renewed time.Time
}

var (
	_ runstore.Store  = (*Store)(nil)
	_ runstore.Leases = (*Store)(nil)
)

// New returns the store in namespace, for the replica identity (its pod
// name, say: unique among the replicas sharing namespace), and starts
// the goroutine that renews the leases it acquires, stopped by Close.
func New(client kubernetes.Interface, namespace, identity string, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("kubestore: no Kubernetes client given")
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("kubestore: namespace %q is not a valid namespace name: %v; pass the namespace berth runs in", namespace, errs)
	}
	if identity == "" {
		return nil, errors.New("kubestore: no replica identity given; pass one unique among berth's replicas, e.g. its pod name")
	}
	if len(identity) > validation.DNS1123SubdomainMaxLength {
		return nil, fmt.Errorf("kubestore: replica identity %.40q… is over %d bytes", identity, validation.DNS1123SubdomainMaxLength)
	}
	d := opts.LeaseDuration
	if d == 0 {
		d = DefaultLeaseDuration
	}
	if d < time.Second || d%time.Second != 0 {
		return nil, fmt.Errorf("kubestore: lease duration %v: Kubernetes counts it in whole seconds, at least one", d)
	}
	iv := opts.RenewInterval
	if iv == 0 {
		iv = d / 3
	}
	if iv <= 0 || iv >= d {
		return nil, fmt.Errorf("kubestore: renew interval %v must be positive and shorter than the lease duration %v", iv, d)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Store{
		client:    client,
		namespace: namespace,
		identity:  identity,
		address:   opts.Address,
		duration:  d,
		interval:  iv,
		onLost:    opts.OnLost,
		key:       opts.Key,
		log:       logger,
		maxRecord: MaxRecord,
		versions:  map[string]string{},
		held:      map[string]*held{},
		stop:      stop,
		done:      make(chan struct{}),
	}
	go s.renewLoop(ctx)
	return s, nil
}

// Namespace is the namespace the store keeps its objects in.
func (s *Store) Namespace() string { return s.namespace }

// Identity is this replica's identity, the holder it writes in leases.
func (s *Store) Identity() string { return s.identity }

// Name is the name of run id's Secret and Lease.
func Name(id string) string { return Prefix + id }

// objectLabels are the labels of run id's Secret and Lease.
func objectLabels(id string) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelRun: id, LabelStore: StoreVersion}
}

// selector selects every record of this store's layout.
var selector = labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelStore: StoreVersion}).String()

// checkID checks that id can name a Secret and be a label value: run ids
// are lowercase hex, well within both.
func checkID(id string) error {
	if id == "" {
		return errors.New("kubestore: a record needs an id")
	}
	if errs := validation.IsValidLabelValue(id); len(errs) > 0 {
		return fmt.Errorf("kubestore: run id %.70q cannot be stored on Kubernetes (it must be a label value: %v)", id, errs)
	}
	if errs := validation.IsDNS1123Subdomain(Name(id)); len(errs) > 0 {
		return fmt.Errorf("kubestore: run id %.70q cannot name a Secret (%v); run ids must be lowercase letters, digits and '-'", id, errs)
	}
	return nil
}

// begin checks ctx and that the store is open.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubestore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%w (Kubernetes namespace %s)", runstore.ErrClosed, s.namespace)
	}
	return nil
}

func (s *Store) version(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.versions[id]
	return v, ok
}

func (s *Store) setVersion(id, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == "" {
		delete(s.versions, id)
		return
	}
	s.versions[id] = v
}

// Put creates or replaces run r.ID's Secret. It updates with the last
// resourceVersion this store saw of it; when another writer changed it
// since, it re-reads the Secret and writes again (the last Put wins, as
// in runstore.Dir). A record whose JSON is over MaxRecord bytes fails
// with an error wrapping runstore.ErrTooLarge. When Put returns nil the
// API server has stored the record (etcd, durably).
func (s *Store) Put(ctx context.Context, r runstore.Record) error {
	if err := checkID(r.ID); err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("kubestore: encoding run %s: %w", r.ID, err)
	}
	if len(data) > s.maxRecord {
		return fmt.Errorf("%w: run %s's record is %d bytes, over the %d-byte limit of a record kept in a Kubernetes Secret (kubestore.MaxRecord; a Secret holds at most 1 MiB); its state (staged edits with file contents, most likely) must shrink before it can be saved: apply or discard staged edits",
			runstore.ErrTooLarge, r.ID, len(data), s.maxRecord)
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	secrets := s.client.CoreV1().Secrets(s.namespace)
	name := Name(r.ID)
	var last error
	for range maxAttempts {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace, Labels: objectLabels(r.ID)},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{RecordKey: data},
		}
		if s.key != nil {
			sec.Data[MACKey] = runstore.Seal(s.key, r.ID, data)
		}
		rv, known := s.version(r.ID)
		var got *corev1.Secret
		if known {
			sec.ResourceVersion = rv
			got, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		} else {
			got, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
		}
		switch {
		case err == nil:
			s.setVersion(r.ID, got.ResourceVersion)
			return nil
		case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
			// Someone else wrote it since we last looked: learn its
			// version and write over it.
			last = err
			cur, gerr := secrets.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(gerr):
				s.setVersion(r.ID, "")
			case gerr != nil:
				return fmt.Errorf("kubestore: saving run %s: re-reading Secret %s/%s after a conflicting write: %w", r.ID, s.namespace, name, gerr)
			default:
				s.setVersion(r.ID, cur.ResourceVersion)
			}
		case apierrors.IsNotFound(err) && known:
			// Deleted since we last looked: create it again.
			last = err
			s.setVersion(r.ID, "")
		default:
			return fmt.Errorf("kubestore: saving run %s in Secret %s/%s: %w", r.ID, s.namespace, name, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("kubestore: saving run %s: %w", r.ID, err)
		}
	}
	return fmt.Errorf("kubestore: saving run %s: Secret %s/%s kept changing under %d attempts (another writer?): %w", r.ID, s.namespace, name, maxAttempts, last)
}

// Get returns run id's record, or an error wrapping runstore.ErrNotFound.
// A Secret that does not decode is an error naming the run.
func (s *Store) Get(ctx context.Context, id string) (runstore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return runstore.Record{}, err
	}
	if err := checkID(id); err != nil {
		return runstore.Record{}, fmt.Errorf("%w: %s (%v)", runstore.ErrNotFound, id, err)
	}
	sec, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, Name(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.setVersion(id, "")
		return runstore.Record{}, fmt.Errorf("%w: %s (no Secret %s/%s)", runstore.ErrNotFound, id, s.namespace, Name(id))
	case err != nil:
		return runstore.Record{}, fmt.Errorf("kubestore: reading run %s from Secret %s/%s: %w", id, s.namespace, Name(id), err)
	}
	s.setVersion(id, sec.ResourceVersion)
	return s.decode(id, sec)
}

// Delete removes run id's Secret, and its Lease unless another live
// replica holds it; a missing run is not an error.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if checkID(id) != nil {
		return nil // no such Secret can exist
	}
	err := s.client.CoreV1().Secrets(s.namespace).Delete(ctx, Name(id), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubestore: deleting run %s's Secret %s/%s: %w", id, s.namespace, Name(id), err)
	}
	s.setVersion(id, "")
	s.mu.Lock()
	delete(s.held, id)
	s.mu.Unlock()
	leases := s.client.CoordinationV1().Leases(s.namespace)
	l, err := leases.Get(ctx, Name(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("kubestore: run %s's record is deleted, but reading its Lease %s/%s failed: %w", id, s.namespace, Name(id), err)
	}
	if h := holder(l); h != "" && h != s.identity && s.live(l, time.Now()) {
		return nil // another replica serves a run of that id; its Delete removes the Lease
	}
	rv := l.ResourceVersion
	err = leases.Delete(ctx, Name(id), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kubestore: run %s's record is deleted, but deleting its Lease %s/%s failed: %w", id, s.namespace, Name(id), err)
	}
	return nil
}

// List returns every record in the namespace by Opened, then ID, and the
// Secrets that do not decode (by run id).
func (s *Store) List(ctx context.Context) ([]runstore.Record, []runstore.Unreadable, error) {
	if err := s.begin(ctx); err != nil {
		return nil, nil, err
	}
	var (
		records []runstore.Record
		bad     []runstore.Unreadable
		cont    string
	)
	for {
		page, err := s.client.CoreV1().Secrets(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: listPage, Continue: cont})
		if err != nil {
			return nil, nil, fmt.Errorf("kubestore: listing runs (Secrets labelled %s) in namespace %s: %w", selector, s.namespace, err)
		}
		for i := range page.Items {
			sec := &page.Items[i]
			id := sec.Labels[LabelRun]
			if id == "" {
				id = strings.TrimPrefix(sec.Name, Prefix)
			}
			r, err := s.decode(id, sec)
			if err != nil {
				bad = append(bad, runstore.Unreadable{ID: id, Err: err})
				continue
			}
			s.setVersion(id, sec.ResourceVersion)
			records = append(records, r)
		}
		if cont = page.Continue; cont == "" {
			break
		}
	}
	sort.Slice(records, func(i, j int) bool {
		if !records[i].Opened.Equal(records[j].Opened) {
			return records[i].Opened.Before(records[j].Opened)
		}
		return records[i].ID < records[j].ID
	})
	sort.Slice(bad, func(i, j int) bool { return bad[i].ID < bad[j].ID })
	return records, bad, nil
}

// decode checks the MAC of run id's record in its Secret (with a key),
// then decodes it.
func (s *Store) decode(id string, sec *corev1.Secret) (runstore.Record, error) {
	where := fmt.Sprintf("Secret %s/%s", sec.Namespace, sec.Name)
	if sec.Name != Name(id) {
		return runstore.Record{}, fmt.Errorf("kubestore: %s is labelled %s=%s but is not named %s; the run cannot be adopted: delete the Secret", where, LabelRun, id, Name(id))
	}
	data, ok := sec.Data[RecordKey]
	if !ok {
		return runstore.Record{}, fmt.Errorf("kubestore: run %s's %s has no %q key; the run cannot be adopted: close its sandbox's resident by hand if it still runs, then Delete the record", id, where, RecordKey)
	}
	if s.key != nil {
		if err := runstore.Verify(s.key, id, data, sec.Data[MACKey]); err != nil {
			return runstore.Record{}, fmt.Errorf("kubestore: %s: %w", where, err)
		}
	}
	var r runstore.Record
	if err := json.Unmarshal(data, &r); err != nil {
		return runstore.Record{}, fmt.Errorf("kubestore: run %s's stored record (%s, %d bytes) does not decode: %w; the run cannot be adopted: close its sandbox's resident by hand if it still runs, then Delete the record", id, where, len(data), err)
	}
	if r.ID != id {
		return runstore.Record{}, fmt.Errorf("kubestore: run %s's stored record (%s) names run %q; the run cannot be adopted: Delete the record", id, where, r.ID)
	}
	return r, nil
}

// Close stops renewing leases and makes later calls fail with
// runstore.ErrClosed. It does not release the leases it holds (they
// expire after the lease duration, as a crashed replica's do): on a
// graceful shutdown call ReleaseAll first. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stop()
	<-s.done
	return nil
}
