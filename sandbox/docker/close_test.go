package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// TestCloseWithinSettle: what berth cut short itself — a start of a
// missing program, a Dial to nothing, the sandbox's Close with nothing
// running — does not wait stopSettle for a container stop that never
// comes, and leaves no agent behind. Before, each took stopSettle (the
// start and the Dial every time, a run's Close whenever the engine had
// not yet recorded an exec's end).
func TestCloseWithinSettle(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{image: testImage(t, cli)})
	p := newProvider(t)
	sb := open(t, p, id)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	start := time.Now()
	if _, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"berth-no-such-program"}}); err == nil {
		t.Fatal("a missing program started")
	}
	if took := time.Since(start); took >= stopSettle {
		t.Errorf("the failed start took %v, at least stopSettle (%v)", took, stopSettle)
	}
	start = time.Now()
	if c, err := sb.Dial(ctx, "unix", "/berth-no-such-socket"); err == nil {
		c.Close()
		t.Fatal("a Dial to nothing succeeded")
	}
	if took := time.Since(start); took >= stopSettle {
		t.Errorf("the failed Dial took %v, at least stopSettle (%v)", took, stopSettle)
	}

	pr, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := pr.Wait(); err != nil || !st.Success() {
		t.Fatalf("true: %v %v", st, err)
	}
	fsys, err := sb.FS(ctx, "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile(ctx, "berth-close-test", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= stopSettle {
		t.Errorf("Close with nothing running took %v, at least stopSettle (%v)", took, stopSettle)
	}

	// No agent is left, not even as a zombie (reaping is asynchronous).
	count := `n=0; for f in /proc/[0-9]*/stat; do case "$(cat $f 2>/dev/null)" in *"(berth-shim)"*) n=$((n+1));; esac; done; echo $n`
	var left string
	for range 50 {
		if left = strings.TrimSpace(sh(t, cli, id, count)); left == "0" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s agent processes left after Close:\n%s", left, sh(t, cli, id, `grep -h "(berth-shim)" /proc/[0-9]*/stat`))
}
