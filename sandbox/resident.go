package sandbox

import (
	"context"
	"errors"
	"time"
)

// Residence is implemented by a sandbox that can keep a run's processes
// running while no berth is attached to it: a resident supervisor inside
// the sandbox (berth's agent, one per run) owns them and their pipes, and
// a later berth — the same one restarted, or another replica — reattaches
// by the resident's directory and secret. A kernel's variables, a stopped
// debug session, survive berth's restart, crash or rollout that way.
type Residence interface {
	// Resident starts the run's resident supervisor, or with spec.Adopt
	// reconnects to the one already running. The caller holds the
	// returned Resident until it detaches or closes it.
	Resident(ctx context.Context, spec ResidentSpec) (Resident, error)
}

// DefaultResidentGrace is how long a resident supervisor lives with no
// berth attached before it ends everything it owns and itself.
const DefaultResidentGrace = 10 * time.Minute

// MinResidentSecret is the shortest secret a resident accepts, in bytes.
const MinResidentSecret = 32

// ResidentSpec says which resident supervisor to start or adopt.
type ResidentSpec struct {
	// Dir is the resident's private directory inside the sandbox, an
	// absolute path (for example /tmp/berth-run-<run id>); it holds the
	// socket berth reaches the resident on, and goes with the resident.
	Dir string
	// Secret authenticates berth to the resident; at least
	// MinResidentSecret bytes. It reaches the resident on its standard
	// input, never in its arguments or any process's environment, and the
	// resident's memory is not readable by the run's processes.
	Secret []byte
	// Grace is how long the resident lives with no berth attached; zero
	// means DefaultResidentGrace.
	Grace time.Duration
	// Adopt reconnects to a resident that already runs at Dir. It fails
	// with an error wrapping ErrNotFound when none answers there (the
	// container restarted, or the resident outlived its grace), and with
	// an error wrapping fs.ErrPermission when the resident refuses the
	// secret. Without Adopt a
	// new resident is started, and one already running at Dir is an
	// error.
	Adopt bool
}

// Resident is a run's resident supervisor as one berth holds it. It is
// safe for concurrent use.
type Resident interface {
	// Dir is the resident's directory inside the sandbox.
	Dir() string

	// Start starts cmd under the resident with the given name, unique
	// among the resident's processes. As with Sandbox.Start, each process
	// runs in its own process group, and ctx bounds its lifetime while
	// this berth is attached (SIGTERM, then SIGKILL after the wait
	// delay). Unlike Sandbox.Start, the process does not end when berth
	// goes away: it runs on under the resident, which keeps what it writes
	// (bounded) for the next berth to attach.
	Start(ctx context.Context, name string, cmd *Cmd) (Process, error)

	// Attach reconnects to the resident's process name with cmd's Stdin,
	// Stdout and Stderr (Args and the rest are ignored), as a berth that
	// restarted does. Output the process wrote while no berth was attached
	// is delivered first, at most ResidentBuffer bytes per stream; when
	// more was written, one line on Stderr says how much was dropped. A
	// process that ended meanwhile is returned with its exit status. A
	// name the resident does not know fails with an error wrapping
	// ErrNotFound. ctx bounds the process's lifetime as for Start.
	Attach(ctx context.Context, name string, cmd *Cmd) (Process, error)

	// Processes lists the resident's processes, running or ended and not
	// yet collected by an Attach.
	Processes(ctx context.Context) ([]ResidentProcess, error)

	// Detach lets go of the resident without ending anything: berth's
	// streams to it close, its processes run on, and it ends them and
	// itself after its grace unless a berth attaches again. Wait on a
	// process of a detached resident returns an error wrapping
	// ErrDetached. Detach is idempotent.
	Detach() error

	// Close ends every process of the resident (SIGTERM, then SIGKILL
	// after each one's wait delay), then the resident itself, and removes
	// its directory: nothing of it is left in the sandbox. It is
	// idempotent.
	Close() error
}

// ResidentBuffer is how much of each of a resident process's output
// streams is kept while no berth is attached.
const ResidentBuffer = 1 << 20

// ResidentProcess describes one process of a resident supervisor.
type ResidentProcess struct {
	Name   string
	Pid    int
	Args   []string
	Exited bool
}

// ErrDetached is what Wait on a resident process returns once berth
// detached from its resident: the process runs on in the sandbox, and a
// later Attach reaches it.
var ErrDetached = errors.New("berth detached from the process; it runs on in the sandbox under its resident supervisor")
