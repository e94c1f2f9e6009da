package eval_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/eval"
)

// cellText runs code in reg's eval and returns the result's text.
func cellText(t *testing.T, reg *tools.Registry, code string) (string, bool) {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"code": code, "description": "a cell of the adoption test here"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := reg.Call(ctx, tools.SurfaceDefault, "eval", raw)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		b.WriteString(c.Text)
	}
	return b.String(), res.IsError
}

// TestKernelAdoptedAfterDetach plays a berth that detaches from its run
// (a restart) and the next berth that adopts it: a kernel started under
// the run's resident supervisor keeps its variables, and the first result
// of the adopting supervisor says so.
func TestKernelAdoptedAfterDetach(t *testing.T) {
	need(t, "Debian's python3 with ipykernel", exec.Command("/usr/bin/python3", "-c", "import ipykernel").Run() == nil)
	dir := t.TempDir()
	secret := make([]byte, sandbox.MinResidentSecret)
	rand.Read(secret)
	spec := sandbox.ResidentSpec{Dir: filepath.Join(t.TempDir(), "resident"), Secret: secret, Grace: time.Minute}

	// berth number one: a resident, a kernel under it, x = 41.
	sb1 := host.New(host.Options{Env: []string{"PATH=/usr/bin:/bin"}})
	res1, err := sb1.Resident(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ws1, err := sb1.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	reg1 := tools.NewRegistry()
	sup1 := eval.Register(reg1, sb1, ws1, ctx1, eval.Options{Resident: func(context.Context) (sandbox.Resident, error) { return res1, nil }})
	if out, bad := cellText(t, reg1, "x = 41"); bad {
		t.Fatalf("x = 41: %s", out)
	}
	snap, err := sup1.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := sup1.Detach(); err != nil {
		t.Fatal(err)
	}
	res1.Detach()
	cancel1() // the run's context ends with the berth: the kernel must not
	sb1.Close()

	// berth number two adopts.
	sb2 := host.New(host.Options{Env: []string{"PATH=/usr/bin:/bin"}})
	defer sb2.Close()
	adopt := spec
	adopt.Adopt = true
	res2, err := sb2.Resident(t.Context(), adopt)
	if err != nil {
		t.Fatal(err)
	}
	ws2, err := sb2.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	reg2 := tools.NewRegistry()
	sup2 := eval.Register(reg2, sb2, ws2, ctx2, eval.Options{Resident: func(context.Context) (sandbox.Resident, error) { return res2, nil }})
	if err := sup2.Adopt(t.Context(), res2, snap); err != nil {
		t.Fatal(err)
	}
	out, bad := cellText(t, reg2, "x + 1")
	if bad || !strings.Contains(out, "42") || !strings.Contains(out, "was kept with its state") {
		t.Fatalf("x + 1 after adoption: %q; want 42 and a note that the kernel was kept", out)
	}
	if err := sup2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := res2.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptLostKernelSaysSo: a snapshot naming a kernel the resident no
// longer has is adopted as lost, and the next cell runs on a new kernel
// with a note saying the state was lost.
func TestAdoptLostKernelSaysSo(t *testing.T) {
	need(t, "Debian's python3 with ipykernel", exec.Command("/usr/bin/python3", "-c", "import ipykernel").Run() == nil)
	secret := make([]byte, sandbox.MinResidentSecret)
	rand.Read(secret)
	sb := host.New(host.Options{Env: []string{"PATH=/usr/bin:/bin"}})
	defer sb.Close()
	res, err := sb.Resident(t.Context(), sandbox.ResidentSpec{Dir: filepath.Join(t.TempDir(), "resident"), Secret: secret, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	dir := t.TempDir()
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := tools.NewRegistry()
	sup := eval.Register(reg, sb, ws, ctx, eval.Options{Resident: func(context.Context) (sandbox.Resident, error) { return res, nil }})
	defer sup.Close()
	snap := []byte(`{"seq":3,"kernels":[{"lang":"python","kind":"ipykernel","resident":"eval-python-3","conn":{"transport":"ipc","ip":"/nonexistent/k","key":"k","signature_scheme":"hmac-sha256"}}]}`)
	if err := sup.Adopt(t.Context(), res, snap); err == nil {
		t.Fatal("adopting a kernel the resident does not have succeeded")
	}
	out, bad := cellText(t, reg, "y = 1; y")
	if bad || !strings.Contains(out, "could not take over the python kernel") || !strings.Contains(out, "state") {
		t.Fatalf("the first cell after a lost adoption: %q; want it run, with a note that the state was lost", out)
	}
}
