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
// # Finding the agent
//
// [Locate] finds a linux/amd64 agent binary, in this order:
//
//  1. $BERTH_SHIM, an absolute path to a prebuilt berth-shim;
//  2. berth-shim next to the running berth executable;
//  3. a copy built on demand from the agent source embedded in berth, with
//     `CGO_ENABLED=0 go build -trimpath` and the Go toolchain on PATH, cached
//     in $XDG_CACHE_HOME/berth/shim/<hash>/berth-shim (~/.cache when unset).
//     Parallel processes share one build through a lock file.
//
// Without a Go toolchain, build the agent once and ship it beside berth:
//
//	CGO_ENABLED=0 go build -trimpath -o "$(dirname "$(command -v berth)")/berth-shim" ./sandbox/shim/cmd/berth-shim
//
// or point $BERTH_SHIM at it.
//
// # Protocol
//
// The agent speaks frames on its stdio: one type byte, a four-byte
// big-endian length, and at most [agent.MaxPayload] bytes of payload. Its
// modes are "run" (a supervised process), "fs" (a file server confined to a
// root with os.Root), "dial" (a raw relay to a loopback or unix socket) and
// "version".
package shim
