// Command berth-shim is the supervisor berth places in every sandbox. See
// package berth.dev/berth/sandbox/shim/agent for its modes.
package main

import (
	"os"

	"berth.dev/berth/sandbox/shim/agent"
)

func main() {
	os.Exit(agent.Main(os.Args[1:]))
}
