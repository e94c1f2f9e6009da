package kubestore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth.dev/berth/runstore"
)

// holder is the lease's holder identity, "" when none.
func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// live reports whether l has a holder whose last renewal, plus the
// duration the holder wrote, is after now. It compares the holder's
// clock (renewTime) with this machine's: the replicas' clocks must agree
// to well within the lease duration, as on any cluster's NTP-synced
// nodes.
func (s *Store) live(l *coordinationv1.Lease, now time.Time) bool {
	if holder(l) == "" || l.Spec.RenewTime == nil {
		return false
	}
	d := s.duration
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return l.Spec.RenewTime.Add(d).After(now)
}

// annotate writes this replica's address on l, which it is taking or
// renewing.
func (s *Store) annotate(l *coordinationv1.Lease) {
	if s.address == "" {
		return
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationAddress] = s.address
}

func (s *Store) durationSeconds() *int32 {
	d := int32(s.duration / time.Second)
	return &d
}

// hold records that this replica holds l, written at sent.
func (s *Store) hold(id string, l *coordinationv1.Lease, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.held[id] = &held{lease: l, renewed: sent}
}

// Acquire takes run id's Lease for this replica when it is free (no
// lease yet, no holder, or released), expired (its holder stopped
// renewing for the lease duration), or already this replica's (renewed
// then). It writes with the Lease's resourceVersion, so of two replicas
// racing for it exactly one wins; taking it from another holder bumps
// leaseTransitions. It returns false, and no error, when another replica
// holds a live lease. From then on the store renews the lease until
// Release, ReleaseAll or Close, or until another replica is found
// holding it (Options.OnLost).
func (s *Store) Acquire(ctx context.Context, id string) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	if err := checkID(id); err != nil {
		return false, err
	}
	leases := s.client.CoordinationV1().Leases(s.namespace)
	name := Name(id)
	var last error
	for range maxAttempts {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		now := time.Now()
		stamp := metav1.NewMicroTime(now)
		switch {
		case apierrors.IsNotFound(err):
			identity := s.identity
			l = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace, Labels: objectLabels(id)},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       &identity,
					LeaseDurationSeconds: s.durationSeconds(),
					AcquireTime:          &stamp,
					RenewTime:            &stamp,
					LeaseTransitions:     new(int32),
				},
			}
			s.annotate(l)
			got, err := leases.Create(ctx, l, metav1.CreateOptions{})
			switch {
			case err == nil:
				s.hold(id, got, now)
				return true, nil
			case apierrors.IsAlreadyExists(err):
				last = err // another replica created it first: look again
				continue
			}
			return false, fmt.Errorf("kubestore: creating run %s's Lease %s/%s: %w", id, s.namespace, name, err)
		case err != nil:
			return false, fmt.Errorf("kubestore: reading run %s's Lease %s/%s: %w", id, s.namespace, name, err)
		}
		h := holder(l)
		if h != s.identity && h != "" && s.live(l, now) {
			return false, nil
		}
		l = l.DeepCopy()
		if h != s.identity {
			identity := s.identity
			l.Spec.HolderIdentity = &identity
			l.Spec.AcquireTime = &stamp
			n := int32(1)
			if l.Spec.LeaseTransitions != nil {
				n = *l.Spec.LeaseTransitions + 1
			}
			l.Spec.LeaseTransitions = &n
		}
		if l.Spec.AcquireTime == nil {
			l.Spec.AcquireTime = &stamp
		}
		l.Spec.RenewTime = &stamp
		l.Spec.LeaseDurationSeconds = s.durationSeconds()
		l.Labels = objectLabels(id)
		s.annotate(l)
		got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		switch {
		case err == nil:
			s.hold(id, got, now)
			return true, nil
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			last = err // another replica wrote it first: look again
			continue
		}
		return false, fmt.Errorf("kubestore: taking run %s's Lease %s/%s: %w", id, s.namespace, name, err)
	}
	return false, fmt.Errorf("kubestore: run %s's Lease %s/%s kept changing under %d attempts: %w", id, s.namespace, name, maxAttempts, last)
}

// Holder reads run id's Lease: the replica that holds it ("" when none,
// or no Lease) and whether that lease is live (renewed within its
// duration).
func (s *Store) Holder(ctx context.Context, id string) (identity string, live bool, err error) {
	o, err := s.Owner(ctx, id)
	return o.Identity, o.Live, err
}

// Owner reads run id's Lease: who holds it, where that replica serves,
// and whether the lease is live. A run without a Lease has the zero
// Owner.
func (s *Store) Owner(ctx context.Context, id string) (runstore.Owner, error) {
	if err := s.begin(ctx); err != nil {
		return runstore.Owner{}, err
	}
	if checkID(id) != nil {
		return runstore.Owner{}, nil
	}
	l, err := s.client.CoordinationV1().Leases(s.namespace).Get(ctx, Name(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return runstore.Owner{}, nil
	case err != nil:
		return runstore.Owner{}, fmt.Errorf("kubestore: reading run %s's Lease %s/%s: %w", id, s.namespace, Name(id), err)
	}
	return runstore.Owner{Identity: holder(l), Address: l.Annotations[AnnotationAddress], Live: s.live(l, time.Now())}, nil
}

// Holds reports, without asking the API server, whether this replica
// holds run id's lease and its last renewal was sent less than the lease
// duration ago: until then no other replica can take the run. Check it
// before serving a request of the run; false means stop serving it (and
// Acquire it again to serve it on).
func (s *Store) Holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[id]
	return ok && !s.closed && time.Since(h.renewed) < s.duration
}

// Held returns the ids of the runs whose leases this replica holds (and
// renews), sorted.
func (s *Store) Held() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Release stops renewing run id's lease and, when this replica still
// holds it, clears its holder so that another replica may take the run
// at once. Releasing a lease held by another replica, or no lease,
// changes nothing and is not an error.
func (s *Store) Release(ctx context.Context, id string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.held, id)
	s.mu.Unlock()
	if checkID(id) != nil {
		return nil
	}
	leases := s.client.CoordinationV1().Leases(s.namespace)
	name := Name(id)
	var last error
	for range maxAttempts {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("kubestore: releasing run %s: reading its Lease %s/%s: %w", id, s.namespace, name, err)
		}
		if holder(l) != s.identity {
			return nil
		}
		l = l.DeepCopy()
		l.Spec.HolderIdentity = nil
		l.Spec.AcquireTime = nil
		l.Spec.RenewTime = nil
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			last = err // our own renewal, most likely: look again
			continue
		}
		return fmt.Errorf("kubestore: releasing run %s's Lease %s/%s: %w", id, s.namespace, name, err)
	}
	return fmt.Errorf("kubestore: releasing run %s: its Lease %s/%s kept changing under %d attempts: %w", id, s.namespace, name, maxAttempts, last)
}

// ReleaseAll releases every lease this replica holds (Release), for a
// graceful shutdown (SIGTERM): the other replicas may take its runs at
// once instead of after the lease duration. It goes on past a failure
// and returns every failure.
func (s *Store) ReleaseAll(ctx context.Context) error {
	var errs []error
	for _, id := range s.Held() {
		errs = append(errs, s.Release(ctx, id))
	}
	return errors.Join(errs...)
}

// Renew renews every lease this replica holds, now (the store's own
// goroutine does so every RenewInterval). A lease found held by another
// replica, or deleted, is dropped and reported to Options.OnLost. It
// goes on past a failure and returns every failure; a lease that cannot
// be renewed stays held until Holds turns false.
func (s *Store) Renew(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	todo := make(map[string]*held, len(s.held))
	for id, h := range s.held {
		todo[id] = h
	}
	s.mu.Unlock()
	var errs []error
	for id, h := range todo {
		if err := s.renew(ctx, id, h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// renew renews the lease h of run id, and drops it when it is lost.
func (s *Store) renew(ctx context.Context, id string, h *held) error {
	leases := s.client.CoordinationV1().Leases(s.namespace)
	s.mu.Lock()
	l := h.lease.DeepCopy()
	s.mu.Unlock()
	for range maxAttempts {
		now := time.Now()
		stamp := metav1.NewMicroTime(now)
		l.Spec.RenewTime = &stamp
		l.Spec.LeaseDurationSeconds = s.durationSeconds()
		got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		switch {
		case err == nil:
			s.mu.Lock()
			if s.held[id] == h {
				h.lease, h.renewed = got, now
			}
			s.mu.Unlock()
			return nil
		case apierrors.IsNotFound(err):
			s.lose(id, h)
			return nil
		case !apierrors.IsConflict(err):
			return fmt.Errorf("kubestore: renewing run %s's Lease %s/%s: %w", id, s.namespace, Name(id), err)
		}
		cur, err := leases.Get(ctx, Name(id), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			s.lose(id, h)
			return nil
		case err != nil:
			return fmt.Errorf("kubestore: renewing run %s: re-reading its Lease %s/%s: %w", id, s.namespace, Name(id), err)
		case holder(cur) != s.identity:
			s.lose(id, h)
			return nil
		}
		l = cur.DeepCopy()
	}
	return fmt.Errorf("kubestore: renewing run %s: its Lease %s/%s kept changing under %d attempts", id, s.namespace, Name(id), maxAttempts)
}

// lose drops h, run id's lease, unless it was released or re-acquired
// meanwhile, and tells Options.OnLost.
func (s *Store) lose(id string, h *held) {
	s.mu.Lock()
	lost := s.held[id] == h
	if lost {
		delete(s.held, id)
	}
	s.mu.Unlock()
	if lost && s.onLost != nil {
		s.onLost(id)
	}
}

// renewLoop renews the held leases every interval until ctx ends (Close).
func (s *Store) renewLoop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Each round is bounded by the interval, so that an API server
		// that does not answer cannot hold renewals back for longer.
		rctx, cancel := context.WithTimeout(ctx, s.interval)
		err := s.Renew(rctx)
		cancel()
		if err != nil && !errors.Is(err, runstore.ErrClosed) && ctx.Err() == nil {
			// Holds turns false once the lease duration passes
			// without a renewal; the log says why.
			s.log.Warn("kubestore: renewing leases failed; runs whose leases expire must stop being served here", "namespace", s.namespace, "identity", s.identity, "err", err)
		}
	}
}
