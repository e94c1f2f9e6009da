package docker

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/sandbox/sandboxtest"
)

// TestCheckHonoursContext: while dockerd hangs (its socket accepts and
// never answers), Check returns when its context ends, and once the
// engine answers again so does Check.
func TestCheckHonoursContext(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{})
	proxy := sandboxtest.NewSocketProxy(t, "/var/run/docker.sock")
	p := newProvider(t, WithHost("unix://"+proxy.Path))
	sb := open(t, p, id)
	if err := proxy.Hang(); err != nil {
		t.Fatal(err)
	}
	const within = 500 * time.Millisecond
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		start := time.Now()
		err := sb.Check(ctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatal("Check succeeded against a hung engine")
		}
		if took > within+5*time.Second {
			t.Fatalf("Check took %v with a %v context: %v", took, within, err)
		}
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Check(ctx); err != nil {
		t.Fatalf("Check after the engine answers again: %v", err)
	}
}
