package eval_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/eval"
)

// kernelState is what Resources says of lang's kernel ("" when none).
func kernelState(sup *eval.Supervisor, lang string) string {
	for _, r := range sup.Resources() {
		if r.Kind == "kernel" && r.Name == lang {
			return r.State
		}
	}
	return ""
}

// TestPrewarm: a prewarmed kernel starts in the background once approved
// (the resources show it starting, then running), and the first cell
// finds it up: the same kernel, no second start. A prewarm the gate
// refuses starts nothing, and the first cell starts the kernel itself,
// saying why it was not prewarmed.
func TestPrewarm(t *testing.T) {
	debianPython(t, "ipykernel")
	t.Run("approved", func(t *testing.T) {
		h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
		approved := make(chan string, 2)
		h.sup.Prewarm([]string{"python3", "py"}, func(ctx context.Context, lang string) error {
			approved <- lang
			return nil
		})
		if got := kernelState(h.sup, "python"); got != "starting" && got != "running" {
			t.Fatalf("right after Prewarm the kernel is %q, want starting", got)
		}
		deadline := time.Now().Add(time.Minute)
		for kernelState(h.sup, "python") != "running" {
			if time.Now().After(deadline) {
				t.Fatalf("the prewarmed kernel is %q after a minute", kernelState(h.sup, "python"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := len(approved); n != 1 || <-approved != "python" {
			t.Fatalf("approval asked %d times; want once, for python", n)
		}
		pid := h.env().Cell(t, "python", "import os; os.getpid()").Text
		first := h.sup.Resources()[0].Detail
		res := h.env().Cell(t, "python", "x = 41; x + 1", "42").Text
		if strings.Contains(res, "kernel") && strings.Contains(res, "prewarm") {
			t.Errorf("a note about the prewarm on a kernel that was prewarmed: %s", res)
		}
		if !strings.Contains(first, strings.TrimSpace(pid)) {
			t.Errorf("the first cell ran in pid %s; the prewarmed kernel is %s", pid, first)
		}
	})
	t.Run("refused", func(t *testing.T) {
		h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
		h.sup.Prewarm([]string{"python"}, func(ctx context.Context, lang string) error {
			return errors.New("permission: eval was not run: no approver is connected to this run")
		})
		res := h.env().Cell(t, "python", "6 * 7", "42").Text
		if !strings.Contains(res, "prewarm") || !strings.Contains(res, "no approver") {
			t.Errorf("the first cell after a refused prewarm does not say so: %s", res)
		}
	})
	t.Run("closed while starting", func(t *testing.T) {
		h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
		block := make(chan struct{})
		h.sup.Prewarm([]string{"python"}, func(ctx context.Context, lang string) error {
			close(block)
			<-ctx.Done() // an operator who never answers
			return ctx.Err()
		})
		<-block
		done := make(chan error, 1)
		go func() { done <- h.sup.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close waited on a prewarm's pending approval")
		}
		res, err := h.reg.Call(context.Background(), tools.SurfaceDefault, "eval", []byte(`{"code":"1","description":"a cell after the run closed"}`))
		if err == nil && !res.IsError {
			t.Errorf("a cell ran after Close: %v", res)
		}
	})
}
