package host_test

import (
	"context"
	"errors"
	"os/user"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Sandbox, sandboxtest.Config) {
		return host.New(host.Options{}), sandboxtest.Config{Scratch: t.TempDir()}
	})
}

func TestUser(t *testing.T) {
	sb := host.New(host.Options{})
	defer sb.Close()
	cur, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	for _, u := range []string{"", cur.Username, cur.Uid} {
		p, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}, User: u})
		if err != nil {
			t.Fatalf("User %q: %v", u, err)
		}
		if st, err := p.Wait(); err != nil || !st.Success() {
			t.Fatalf("User %q: %v %v", u, st, err)
		}
	}
	if _, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}, User: "berth-nobody-such"}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("another user: %v, want sandbox.ErrUnsupported", err)
	}
}

func TestProvider(t *testing.T) {
	var p host.Provider
	ctx := context.Background()
	if p.Scheme() != "host" {
		t.Fatalf("Scheme = %q", p.Scheme())
	}
	sb, err := p.Open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if sb.Ref() != "host" || sb.Check(ctx) != nil {
		t.Fatalf("Ref %q Check %v", sb.Ref(), sb.Check(ctx))
	}
	if _, err := p.Open(ctx, "other"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Open(other) = %v, want ErrNotFound", err)
	}
	if _, err := p.Locate(ctx, sandbox.Owner{Conversation: "c-1"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Locate = %v, want ErrNotFound", err)
	}
}
