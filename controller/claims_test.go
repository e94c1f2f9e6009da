package controller

import (
	"errors"
	"strings"
	"testing"
)

func TestClaims(t *testing.T) {
	var c claims
	k := claimKey{tenant: "t1", conversation: "conv", kind: "debug"}
	release, err := c.take(k, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.take(k, "run-1"); err != nil {
		t.Errorf("the holder claiming again: %v", err)
	}
	_, err = c.take(k, "run-2")
	if !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "run-1") {
		t.Errorf("second run: %v, want ErrClaimed naming run-1", err)
	}
	for _, other := range []claimKey{
		{tenant: "t2", conversation: "conv", kind: "debug"},
		{tenant: "t1", conversation: "other", kind: "debug"},
		{tenant: "t1", conversation: "conv", kind: "kernel"},
	} {
		r, err := c.take(other, "run-2")
		if err != nil {
			t.Errorf("%+v: %v", other, err)
			continue
		}
		r()
	}
	release()
	release() // idempotent
	r2, err := c.take(k, "run-2")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	release() // run-1's stale release must not drop run-2's hold
	if _, err := c.take(k, "run-3"); !errors.Is(err, ErrClaimed) {
		t.Errorf("a stale release dropped run-2's hold: %v", err)
	}
	c.releaseRun("run-2")
	if _, err := c.take(k, "run-3"); err != nil {
		t.Errorf("after the holder's run closed: %v", err)
	}
	r2()
}
