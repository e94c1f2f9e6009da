package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"berth.dev/berth/runstore"
	"berth.dev/berth/sandbox"
)

// dyingResident is a fakeResident whose Processes answers err.
type dyingResident struct {
	fakeResident
	err error
}

func (r *dyingResident) Processes(context.Context) ([]sandbox.ResidentProcess, error) {
	return nil, r.err
}

// dyingSandbox hands out dyingResidents, each answering next.
type dyingSandbox struct {
	*fakeSandbox
	res  *residents
	next *error
}

func (s dyingSandbox) Resident(ctx context.Context, spec sandbox.ResidentSpec) (sandbox.Resident, error) {
	s.res.started.Add(1)
	return &dyingResident{fakeResident: fakeResident{dir: spec.Dir, res: s.res}, err: *s.next}, nil
}

// TestDeadResidentReplaced: a resident that no longer answers in a
// sandbox that still runs (sandbox.ErrNotFound alone) is closed and
// replaced in a new directory, recorded, and the loss said once; a
// sandbox gone or unavailable, a detached resident or a failure to reach
// it replaces nothing.
func TestDeadResidentReplaced(t *testing.T) {
	st, _, err := runstore.Open(t.TempDir(), runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var next error
	counts := &residents{}
	sb := dyingSandbox{fakeSandbox: &fakeSandbox{}, res: counts, next: &next}
	d := &durable{store: st, record: runstore.Record{ID: "r1"}, pers: map[string]Persister{}, gens: map[string]uint64{}}

	first, err := d.resident(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []error{
		fmt.Errorf("engine: %w: %w", sandbox.ErrNotFound, sandbox.ErrGone),
		fmt.Errorf("paused: %w: %w", sandbox.ErrUnavailable, sandbox.ErrGone),
		fmt.Errorf("let go: %w", sandbox.ErrDetached),
		errors.New("the engine's exec failed"),
	} {
		first.(*dyingResident).err = keep
		if _, err := d.resident(ctx, sb); err == nil || !errors.Is(err, keep) {
			t.Errorf("resident answering %v: lookup = %v, want that error", keep, err)
		}
		if n := d.takeLost(); n != "" || counts.started.Load() != 1 {
			t.Fatalf("resident answering %v was replaced (%d started, note %q)", keep, counts.started.Load(), n)
		}
	}

	first.(*dyingResident).err = fmt.Errorf("no resident answers: %w", sandbox.ErrNotFound)
	second, err := d.resident(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || counts.closed.Load() != 1 || counts.started.Load() != 2 {
		t.Fatalf("a dead resident was not closed and replaced: started %d, closed %d", counts.started.Load(), counts.closed.Load())
	}
	if second.Dir() == first.Dir() || !strings.HasPrefix(second.Dir(), first.Dir()+"-") {
		t.Errorf("the replacement's directory %q: want a new one beside %q", second.Dir(), first.Dir())
	}
	rec, err := st.Get(ctx, "r1")
	if err != nil || rec.Resident == nil || rec.Resident.Dir != second.Dir() {
		t.Errorf("the record names resident %v (%v), want %q", rec.Resident, err, second.Dir())
	}
	if n := d.takeLost(); !strings.Contains(n, "resident supervisor died") || !strings.Contains(n, "state is lost") {
		t.Errorf("the note of the replacement: %q", n)
	}
	if n := d.takeLost(); n != "" {
		t.Errorf("the note is said twice: %q", n)
	}
	if got, err := d.resident(ctx, sb); err != nil || got != second {
		t.Errorf("a live replacement is not handed out again: %v %v", got, err)
	}
}
