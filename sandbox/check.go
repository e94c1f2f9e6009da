package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// CheckTimeout bounds one state check (see [CheckWithin]). An engine that
// has not answered within it is taken as unavailable for now, not as gone:
// a hung dockerd, a containerd restarting, an API server that stalls.
const CheckTimeout = 5 * time.Second

// CheckWithin asks sb for its state, bounded by CheckTimeout (or ctx's own,
// earlier deadline). A check that the engine does not answer in time is
// [ErrUnavailable] (and so [ErrGone]): the caller keeps the sandbox and
// asks again later. A check that ctx itself ended is ctx's error, so a
// caller that left is not mistaken for an outage.
//
// It is the one definition of "the sandbox answers" for everyone that must
// tell an outage from a death: the controller's watch and recheck, and a
// kernel's heartbeat deciding whether its silence is the kernel's.
func CheckWithin(ctx context.Context, sb Sandbox) error {
	cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sb.Check(cctx) }()
	select {
	case err := <-done:
		if err != nil && ctx.Err() == nil && cctx.Err() != nil && !errors.Is(err, ErrGone) {
			return fmt.Errorf("the sandbox's engine did not answer a state check within %v (%v): %w: %w", CheckTimeout, err, ErrUnavailable, ErrGone)
		}
		return err
	case <-cctx.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The check itself ignores its context (a backend stuck in a
		// syscall): it ends on its own later, into the buffered channel.
		return fmt.Errorf("the sandbox's engine did not answer a state check within %v: %w: %w", CheckTimeout, ErrUnavailable, ErrGone)
	}
}
