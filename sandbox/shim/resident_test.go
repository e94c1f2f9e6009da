package shim

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// TestResidentConstants: the agent (standard library only) mirrors
// package sandbox's resident constants.
func TestResidentConstants(t *testing.T) {
	tests := []struct {
		name        string
		agent, want int64
	}{
		{"DefaultResidentGrace", int64(agent.DefaultResidentGrace), int64(sandbox.DefaultResidentGrace)},
		{"MinResidentSecret", agent.MinResidentSecret, sandbox.MinResidentSecret},
		{"ResidentBuffer", agent.ResidentBuffer, sandbox.ResidentBuffer},
	}
	for _, tc := range tests {
		if tc.agent != tc.want {
			t.Errorf("agent.%s = %d, sandbox.%s = %d", tc.name, tc.agent, tc.name, tc.want)
		}
	}
}

// failingTransport places the agent as localTransport does (without an
// exec) and fails every exec, as an engine that drops its connection would.
type failingTransport struct{ localTransport }

func (failingTransport) Exec(ctx context.Context, spec ExecSpec) (Stream, error) {
	return nil, errors.New("engine: connection reset by peer")
}

// TestAdoptTellsGoneFromUnreachable: adopting a resident says it is gone
// (sandbox.ErrNotFound, which has the controller forget the run) only when
// the agent found nothing listening at its socket, never when the way to
// it failed or the caller's context ended; a live resident is adopted.
func TestAdoptTellsGoneFromUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // may build the agent
	defer cancel()
	secret := []byte(strings.Repeat("s", sandbox.MinResidentSecret))
	newSandbox := func(t *testing.T, tr Transport) *Sandbox {
		s := New(tr, Options{Name: "local"})
		t.Cleanup(func() { s.Close() })
		if _, err := s.AgentPath(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	shortDir := func(t *testing.T) string {
		// a socket path must stay short: t.TempDir's can be too long
		d, err := os.MkdirTemp("/tmp", "bres")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}

	live := shortDir(t)
	owner := newSandbox(t, localTransport{})
	res, err := owner.Resident(ctx, sandbox.ResidentSpec{Dir: live, Secret: secret, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Close() })
	if err := res.Detach(); err != nil {
		t.Fatal(err)
	}

	stale := shortDir(t)
	l, err := net.Listen("unix", filepath.Join(stale, agent.ResidentSocket))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	cancelled, stop := context.WithCancel(ctx)
	stop()

	tests := []struct {
		name     string
		dir      string
		tr       Transport
		ctx      context.Context
		wantGone bool
		wantErr  bool
	}{
		{name: "live resident", dir: live, tr: localTransport{}, ctx: ctx},
		{name: "no socket", dir: shortDir(t), tr: localTransport{}, ctx: ctx, wantErr: true, wantGone: true},
		{name: "socket nobody accepts on", dir: stale, tr: localTransport{}, ctx: ctx, wantErr: true, wantGone: true},
		{name: "engine fails the exec", dir: live, tr: failingTransport{}, ctx: ctx, wantErr: true},
		{name: "context ended", dir: live, tr: localTransport{}, ctx: cancelled, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, tc.tr)
			r, err := s.Resident(tc.ctx, sandbox.ResidentSpec{Dir: tc.dir, Secret: secret, Adopt: true})
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("adopt: %v", err)
				}
				r.Detach()
				return
			}
			if err == nil {
				r.Detach()
				t.Fatal("adopt succeeded, want an error")
			}
			if gone := errors.Is(err, sandbox.ErrNotFound); gone != tc.wantGone {
				t.Fatalf("adopt: errors.Is(err, ErrNotFound) = %v, want %v: %v", gone, tc.wantGone, err)
			}
		})
	}
}
