// Package runstore keeps the records berth needs to adopt its runs after
// a restart: for each run its sandbox, workspace and mode, the replica
// that serves it, its resident supervisor's directory and secret, and
// each resource's state (kernels, debug sessions, staged edits, cards).
//
// [Store] is the interface the controller uses; [Dir], opened with
// [Open], keeps the records in a state directory on one machine, the
// default for berth serve.
//
// # The state directory
//
// It holds these files:
//
//   - runs.db ([DBFile]), a bbolt database: one record per run, as JSON,
//     keyed by run id, with its MAC, plus the store's format version.
//     Mode 0600.
//   - records.key ([KeyFile]), the key the records' MACs are made with,
//     created on the first Open. Mode 0600.
//   - berth.lock ([LockFile]), which the berth using the directory holds
//     (flock) and in which it writes its pid, host and start time.
//   - after damage, runs.db.corrupt-<time> (a damaged database file) and
//     damaged/ ([DamagedDir], mode 0700), where [Dir.SetAside] keeps
//     damaged records, one file (0600) each. Nothing removes them.
//
// Open creates the directory (mode 0700) when it is missing. It refuses
// a directory that is writable by its group or others or owned by
// another user, and a runs.db that its group or others may read or
// write, or that another user owns: the records hold the secrets that
// authenticate berth to each run's resident supervisor.
//
// # One berth per directory
//
// A second berth (or a second Open in the same process) on a directory
// that is in use fails after [DefaultLockWait] with an error wrapping
// [ErrLocked] that names the directory and the holder's pid and host,
// and says what to do: stop the other berth, or give this one its own
// --state-dir. The kernel drops the lock when its holder exits, however
// it exits (kill -9 included), so a lock is never stale.
//
// # Durability
//
// Put and Delete return once the change is committed and fsynced; a
// crash of berth or of the machine keeps every change that returned and
// loses none half-written (bbolt writes pages copy-on-write and switches
// between two checksummed meta pages). A record's JSON is at most
// [MaxRecord] bytes (64 MiB; [ErrTooLarge] past it); records of several
// MB, staged edits with their files' contents, are fine.
//
// # Damage
//
// A damaged runs.db does not stop berth from starting. Open checks the
// file (its meta pages, its size against its own index, every record's
// pages, bbolt's consistency check); when it is unusable Open renames it
// to runs.db.corrupt-<UTC time, 20060102T150405Z>, starts an empty
// store, and says so in its [Report]: why the file was unusable, where
// it went, and the records it could still read from it (first through
// the file's own index, then by scanning its bytes), which are not put
// in the new store. The moved file is kept (mode 0600) for whoever wants
// to look at it; nothing removes it. A missing or empty runs.db in a
// directory without a record key is a new store (or a first Open cut
// short). Beside records.key, which every Open that got past runs.db
// made, an empty runs.db was truncated, and is damage, moved aside like
// any (bbolt would write a new store over it); a missing one is
// reported as damage too, with nothing to move. A
// runs.db written by a newer berth (a newer format) is refused, not
// moved.
//
// A single damaged record (its MAC fails, or it does not decode) is not
// damage of the store: List returns it as [Unreadable], with its id and,
// when the run's index entry still verifies, [Unreadable].Known: the
// run's tenant, sandbox and resident supervisor, enough to end what the
// run left running (the index bucket keeps that entry for every run,
// written by every Put and sealed apart from the record, under its own
// MAC context). [Dir.SetAside] then moves the record, as stored, into
// damaged/ and out of the store.
//
// # Integrity
//
// Each record is stored with a MAC ([Seal]: HMAC-SHA256 under the
// directory's key, over the run id and the record's stored bytes). A
// record whose MAC is missing or does not match is returned as
// [Unreadable] with an error wrapping [ErrForged]: a restarted berth acts
// on what a record says (the sandbox it opens, the tenant the run is
// answered to), so one changed outside berth is not adopted. The records
// of a berth before records carried a MAC are sealed as they are by the
// Open that creates the key ([Report].Sealed); once a store has MACs, a
// record without one is refused. The key guards against whoever may
// write runs.db but not read records.key (a restored backup, a copied
// file); whoever may write the whole directory may also replace the key.
//
// # Why bbolt
//
// One berth writes a state directory, its records are few and small
// (but for staged edits), and it reads them all at start: a key-value
// file fits, and SQL would add nothing. bbolt (go.etcd.io/bbolt, the
// store under etcd and containerd's metadata) is pure Go (no cgo, so
// berth stays one static binary), a single file, crash-safe with an
// fsync on every commit, serves concurrent readers beside one writer,
// and locks its file itself. A pure-Go SQLite (modernc.org/sqlite) is
// a far larger dependency for the same guarantees.
//
// # Secrets
//
// A [Record]'s JSON encoding is its stored form, secret included. The
// package never logs, and printing a [Record], [Resident] or [Report]
// with fmt (any verb) or log/slog redacts the secret and shows only the
// names and sizes of a record's State entries. slog's JSON handler
// marshals a slice or struct that holds a Record, stored form and all:
// log the Record itself.
package runstore
