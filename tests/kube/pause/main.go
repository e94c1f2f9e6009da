// Command pause is the cluster's pod sandbox ("pause") container for tests/kube: it
// holds the pod's namespaces open, reaps the children that get reparented to it, and
// exits 0 on SIGTERM or SIGINT. Built static (CGO_ENABLED=0) and packed into an image by
// tests/kube/mkimage, so the test cluster needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Several children may exit behind one SIGCHLD: reap until none is left.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
