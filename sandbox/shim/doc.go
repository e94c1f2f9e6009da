// Package shim runs processes, serves files and relays Dial streams inside a
// sandbox through a small static supervisor, the agent (berth-shim, package
// [berth.dev/berth/sandbox/shim/agent]), which berth places there.
//
// A backend provides a [Transport] (docker exec, containerd task exec, pod
// exec, or os/exec on the host) and wraps [New]; the agent does the rest:
// every process runs in its own process group under the agent, which is a
// child subreaper, forwards signals, reports the exact exit status, keeps
// stdout and stderr apart, and kills the group and every descendant when
// the program ends or when berth goes away (its stdin closes).
//
// A transport's Stream must let berth read stderr before it reads stdout:
// the agent's first frame comes on stderr.
//
// # Finding the agent
//
// [Sandbox] chooses the agent by the sandbox's architecture: from the
// transport when it is an [Archer] (Docker: the container image's
// architecture; the host: berth's own), else from `uname -m` run through
// the transport (containerd, Kubernetes), else, when the sandbox has no
// uname, berth's own. berth supports linux/amd64 and linux/arm64 ([Arches]).
// [Locate] finds the agent for an architecture, in this order:
//
//  1. $BERTH_SHIM, an absolute path to a prebuilt berth-shim, when its ELF
//     header names that architecture;
//  2. berth-shim-linux-ARCH, then berth-shim, next to the running berth
//     executable, by their ELF headers;
//  3. the agent embedded in berth ([Embedded]): release/build puts
//     berth-shim-linux-amd64 and -arm64 in prebuilt/ before it builds
//     berth; it is written once to $XDG_CACHE_HOME/berth/shim/<hash>/ (or
//     below the temporary directory);
//  4. a copy built from the agent source embedded in berth, with
//     `CGO_ENABLED=0 GOARCH=ARCH go build -trimpath` and the Go toolchain
//     on PATH, cached in $XDG_CACHE_HOME/berth/shim/<hash>/berth-shim
//     (~/.cache when unset). Parallel processes share one build through a
//     lock file. `berth serve` and `berth mcp` start this with [Prepare]
//     when they start, and say so in the log; progress messages carry
//     [Building] while it runs.
//
// A release build of berth never needs a Go toolchain. A developer's build
// without one can ship the agent beside berth:
//
//	CGO_ENABLED=0 go build -trimpath -o "$(dirname "$(command -v berth)")/berth-shim-linux-amd64" ./sandbox/shim/cmd/berth-shim
//
// or point $BERTH_SHIM at it.
//
// # Protocol
//
// The agent speaks frames on its stdio: one type byte, a four-byte
// big-endian length, and at most [agent.MaxPayload] bytes of payload. Its
// modes are "run" (a supervised process), "fs" (a file server confined to a
// root with os.Root), "dial" (a raw relay to a loopback or unix socket),
// "resident" (a run's resident supervisor, see [Sandbox.Resident]) and
// "version".
//
// # Residents
//
// [Sandbox.Resident] starts "berth-shim resident --grace=G DIR" once per
// run: a keeper (a subreaper that sweeps what is left if the resident is
// killed) above the resident, which takes the run's secret in one frame on
// its stdin, locks DIR (0700, its own), listens on DIR/sock (0600), makes
// itself non-dumpable and lets go of the exec's stdio, so the exec's
// stream ends while it runs on. Each of its programs runs under a "run"
// supervisor of its own, whose stdio the resident holds: berth going away
// closes no program's stdin, and output is kept (bounded) until a berth
// attaches. berth reaches the resident through Dial to DIR/sock; every
// connection authenticates with the secret, then asks one thing (start,
// attach, list, signal, close, hold). With no authenticated connection for
// its grace, the resident ends everything and removes DIR. Close detaches
// residents: their processes run on for the next berth to adopt.
//
// # Deadlines
//
// Every wait on a file server is bounded by [Options].FSReplyTimeout
// ([DefaultFSReplyTimeout], 30 s), timed per frame: a server that takes no
// request frame, or sends no reply frame, for that long is given up. The
// call fails with an error wrapping [ErrNoReply] that names the server and
// the silence and says to retry; the server is killed in the background
// (through a [Killer] stream, else with "berth-shim kill-fs PID ROOT"), and
// the next call starts a new one. An idle server that ended meanwhile is
// not reused, and a reused one that ends before answering anything is
// replaced once, transparently. Closing an FS waits for each server's end,
// every step bounded, so nothing outlives it. [Sandbox.Close] waits for
// killed processes at most their wait delay and one second.
//
// # Latency
//
// On a small machine each thread wake-up costs more than the work of
// relaying a message, so an interactive stream (sandbox.Pipe under a
// language server) avoids them. A program's stdout does not pass through
// the agent at all: the agent runs it with --direct-stdout, so it writes
// the stream's stdout itself, and the agent's frames go to the stream's
// stderr. Stdin does pass through the agent, which writes each frame to
// the program from the goroutine that read it, runs with one P, uses raw
// non-blocking calls ([agent.RawFile]) and acknowledges stdin only in
// batches of [agent.StdinAckBatch]. berth writes stdin frames from the
// caller's Write ([sandbox.DirectStdin]) and reads stdout in the caller's
// Read ([sandbox.DirectStdout]); the docker transport demultiplexes the
// exec connection in that same Read. Measure with
//
//	BERTH_BENCH=1 go test -run TestEchoLatency -v ./sandbox/docker
package shim
