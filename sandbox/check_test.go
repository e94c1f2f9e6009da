package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"berth.dev/berth/sandbox"
)

// checker is a Sandbox whose Check is scripted; the rest is unused.
type checker struct {
	sandbox.Sandbox
	check func(ctx context.Context) error
}

func (c checker) Check(ctx context.Context) error { return c.check(ctx) }

// stuck holds a check that ignores its context until the case ends.
var stuck chan struct{}

func TestCheckWithin(t *testing.T) {
	gone := errors.New("container removed")
	cases := []struct {
		name            string
		check           func(ctx context.Context) error
		cancelCaller    bool
		wantUnavailable bool
		wantGone        bool
		wantErr         error
	}{
		{name: "answers", check: func(context.Context) error { return nil }},
		{name: "gone stays gone", check: func(context.Context) error { return errors.Join(gone, sandbox.ErrGone) }, wantGone: true, wantErr: gone},
		{name: "hangs honouring ctx", check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, wantUnavailable: true, wantGone: true},
		{name: "hangs ignoring ctx", check: func(ctx context.Context) error { <-stuck; return nil }, wantUnavailable: true, wantGone: true},
		{name: "caller leaves", check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, cancelCaller: true, wantErr: context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				stuck = make(chan struct{})
				defer close(stuck)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.cancelCaller {
					cancel()
				}
				err := sandbox.CheckWithin(ctx, checker{check: tc.check})
				if got := errors.Is(err, sandbox.ErrUnavailable); got != tc.wantUnavailable {
					t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, got, tc.wantUnavailable)
				}
				if got := errors.Is(err, sandbox.ErrGone); got != tc.wantGone {
					t.Errorf("errors.Is(%v, ErrGone) = %v, want %v", err, got, tc.wantGone)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("err = %v, want %v", err, tc.wantErr)
				}
			})
		})
	}
}
