package e2e

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/controller"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/eval"
	"berth.dev/berth/tools/eval/evaltest"
)

// budgetBinders wire a run with the file tools, eval under a 2-second
// budget, and a tool that takes 3 seconds, for the budget checks.
func budgetBinders() []controller.Binder {
	slow := func(ctx context.Context, r *tools.Registry, env *controller.Env) error {
		type in struct{}
		tools.Register(r, tools.Tool{Name: "slow", Level: tools.LevelRead, Description: "sleeps 3 seconds (test tool)"}, func(ctx context.Context, _ in) (*tools.Result, error) {
			select {
			case <-time.After(3 * time.Second):
				return tools.Text("slept"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		return nil
	}
	return []controller.Binder{controller.FileTools, controller.EvalToolsWith(eval.Options{Budget: 2 * time.Second}), slow}
}

// checkBudgets runs the budget checks in ctr through a second API whose
// eval has a short budget.
func checkBudgets(t *testing.T, ctr *container, langs ...string) {
	t.Helper()
	a := newAPIWith(t, budgetBinders())
	run, _ := a.open(ctr.conv)
	e := evalEnv(a, run, ctr)
	for _, lang := range langs {
		evaltest.CheckBudget(t, e, lang, "slow")
	}
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
}

// evalEnv drives the eval checks through the HTTP API against a run in ctr.
func evalEnv(a *api, run string, ctr *container) evaltest.Env {
	return evaltest.Env{
		Call: func(t *testing.T, tool string, args map[string]any) evaltest.Result {
			t.Helper()
			r := a.callTool(t, run, tool, args)
			out := evaltest.Result{Text: r.texts(), IsError: r.IsError, Structured: r.StructuredContent}
			for _, c := range r.Content {
				if c.Type == "image" {
					b, err := base64.StdEncoding.DecodeString(c.Data)
					if err != nil {
						t.Fatalf("image content is not base64: %v", err)
					}
					out.Images = append(out.Images, b)
				}
			}
			return out
		},
		Put: func(t *testing.T, name, content string) { ctr.put(t, name, content) },
	}
}

// TestEvalIPykernelInContainer: berth-test-python has ipykernel, pandas,
// matplotlib and pip.
func TestEvalIPykernelInContainer(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := evalEnv(a, run, ctr)
	e.Cell(t, "python", "", "ipykernel")
	evaltest.CheckPython(t, e, true, true)
	checkBudgets(t, ctr, "python")
	noKernelPort(t, ctr)
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
	noLeftovers(t, ctr, "ipykernel", "berth_kernel")
}

// TestEvalBundledInContainer: berth-test-minimal has python3 and node but
// no ipykernel: berth's own kernels run both languages.
func TestEvalBundledInContainer(t *testing.T) {
	const image = "berth-test-minimal"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := evalEnv(a, run, ctr)
	e.Cell(t, "python", "", "berth's Python kernel")
	evaltest.CheckPython(t, e, false, true)
	e.Cell(t, "javascript", "", "berth's JavaScript kernel")
	evaltest.CheckJavaScript(t, e)
	checkBudgets(t, ctr, "python", "javascript")
	noKernelPort(t, ctr)
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
	noLeftovers(t, ctr, "berth_kernel")
}

// noKernelPort: the kernel's own sockets are unix sockets in a private
// directory, and whatever listens on TCP in the container while kernels
// run (ipykernel's debugger listens on one) is bound to loopback, which
// no other container can reach: another container sees only the
// container's interface addresses.
func noKernelPort(t *testing.T, ctr *container) {
	t.Helper()
	tcp := ctr.sh(t, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
	for _, l := range strings.Split(tcp, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[3] != "0A" { // 0A: LISTEN
			continue
		}
		addr := strings.Split(f[1], ":")[0]
		loopback := strings.HasSuffix(addr, "7F") && len(addr) == 8 || // 127.x.x.x, little-endian
			addr == "00000000000000000000000001000000" // ::1
		if !loopback {
			t.Errorf("a TCP listener on a non-loopback address exists in the container while kernels run: %s", l)
		}
	}
	perms := ctr.sh(t, "stat -c %A /tmp/berth-kernel.* 2>/dev/null || true")
	for _, p := range strings.Fields(perms) {
		if len(p) != 10 || p[0] != 'd' || strings.Trim(p[4:9], "-") != "" || (p[9] != '-' && p[9] != 'T') {
			t.Errorf("a kernel's directory is open to other users: %s", p)
		}
	}
	if strings.TrimSpace(perms) == "" {
		t.Error("no kernel directory under /tmp while kernels run")
	}
}
