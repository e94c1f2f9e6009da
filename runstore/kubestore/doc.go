// Package kubestore is berth's run store on Kubernetes: the records of
// [runstore.Store] kept by the API server, in berth's own namespace, so
// that the replicas of a berth Deployment (no shared disk) share them,
// and a Lease per run saying which replica serves it.
//
// # Objects
//
// For run <id>, in the store's namespace:
//
//   - Secret berth-run-<id> (type Opaque), labelled
//     app.kubernetes.io/managed-by=berth, berth.dev/run=<id> and
//     berth.dev/store=v1, whose data.record is the record's JSON, the
//     same encoding as runstore.Dir's. A Secret, not a ConfigMap: a
//     record holds the run's resident secret and other credentials (a
//     kernel's key), and Secrets can be encrypted at rest and granted
//     apart from everything else.
//   - Lease berth-run-<id> (coordination.k8s.io/v1), with the same
//     labels, whose holderIdentity is the replica serving the run.
//
// List lists the Secrets by label (paged); one that does not decode, has
// no record key or holds another run's record is returned as
// [runstore.Unreadable], never dropped and never fatal. Put creates the
// Secret, or updates it with the last resourceVersion this store saw of
// it; on a conflict (another writer since) it re-reads and writes again:
// the last Put wins, as with runstore.Dir. Delete removes the Secret and
// the Lease.
//
// # Size
//
// Kubernetes holds at most 1 MiB in a Secret. A record's JSON is bounded
// by [MaxRecord] (900 KiB; the rest is headroom), and Put fails past it
// with an error wrapping [runstore.ErrTooLarge] that says what to shrink:
// staged edits with their files' contents, most likely. runstore.Dir
// allows 64 MiB, so a run with large staged edits that a single berth
// could keep cannot be kept here: the run goes on, and each call whose
// change could not be stored says so in its result, telling the model to
// apply or discard staged edits (controller: unsavedNote).
//
// # Leases: which replica serves a run
//
// Each replica has an identity (its pod name). [Store.Acquire] takes a
// run's lease when it is free, released, expired (its holder did not
// renew it within leaseDurationSeconds, [DefaultLeaseDuration] = 20 s) or
// already this replica's; it writes with the Lease's resourceVersion, so
// of replicas racing for one run exactly one wins, and taking it from
// another holder bumps leaseTransitions. It returns false while another
// replica holds a live lease. The store renews every lease it holds from
// one goroutine, every RenewInterval (a third of the duration), until
// [Store.Release], [Store.ReleaseAll] or [Store.Close]; a renewal that
// finds another holder, or no Lease, drops the run and calls
// Options.OnLost. [Store.Holds] says, without a call, whether this
// replica's last renewal was sent within the duration, so that no other
// replica can have taken the run; [Store.Owner] reads the Lease: its
// holder, whether it is live, and where the holder serves (the
// berth.dev/address annotation each replica writes on the leases it
// takes, Options.Address), so that the others forward the run's
// requests there.
//
// The controller is meant to use it so:
//
//   - at start, List the records and adopt only the runs whose leases it
//     Acquires; the others are served by live replicas;
//   - before serving a request of a run, check Holds (and re-Acquire, or
//     refuse, when it is false);
//   - on OnLost, stop serving the run (without closing it: another
//     replica serves it now);
//   - on SIGTERM, ReleaseAll and then Close, so that the other replicas
//     may take its runs at once; a replica that dies without releasing
//     loses its runs after the lease duration, when another replica's
//     Acquire (say, on a periodic sweep of List) takes them over.
//
// Expiry compares the holder's renewTime with the acquiring replica's
// clock: the replicas' clocks must agree to well within the lease
// duration, as NTP-synced cluster nodes do.
//
// A lease says who serves a run; it does not fence writes: Put does not
// check the lease, so a replica that lost a run must stop writing its
// record (Holds false, OnLost).
//
// # Permissions
//
// [Rules] are what the store uses in its namespace: secrets get, list,
// create, update, delete; leases get, create, update, delete. No watch,
// no patch, nothing cluster-wide. k8s/rbac/store grants exactly these.
package kubestore
