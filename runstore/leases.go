package runstore

import "context"

// Leases say which of several berth replicas sharing one Store serves
// each run: the replica holding a run's lease serves it, the others
// forward its requests to the holder's address, and any replica may take
// a run over once its holder stops renewing. runstore/kubestore
// implements it with coordination.k8s.io Leases; a Dir, held by one berth
// at a time, needs none.
type Leases interface {
	// Acquire takes run id's lease for this replica when it is free,
	// expired or already this replica's, and keeps renewing it; false
	// (and no error) means another replica holds a live lease.
	Acquire(ctx context.Context, id string) (bool, error)
	// Owner reads run id's lease.
	Owner(ctx context.Context, id string) (Owner, error)
	// Holds reports, without a call, whether this replica holds run id's
	// lease and renewed it within its duration: whether it may serve the
	// run and write its record.
	Holds(id string) bool
	// Release stops renewing run id's lease and clears it, so that
	// another replica may take the run at once.
	Release(ctx context.Context, id string) error
}

// Owner is what a run's lease says of the replica serving it.
type Owner struct {
	// Identity is the holder replica ("" when none).
	Identity string
	// Address is where it serves, for forwarding (a URL such as
	// http://10.0.0.7:8080; "" when it wrote none).
	Address string
	// Live says the holder renewed the lease within its duration: no
	// other replica may take the run until it lapses.
	Live bool
}
