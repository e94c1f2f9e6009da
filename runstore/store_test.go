package runstore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test binary re-executes itself as a second berth holding a state
// directory: RUNSTORE_TEST_CHILD names what the child does, in
// RUNSTORE_TEST_DIR.
const (
	childEnv    = "RUNSTORE_TEST_CHILD"
	childDirEnv = "RUNSTORE_TEST_DIR"
	childIDEnv  = "RUNSTORE_TEST_ID"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode, os.Getenv(childDirEnv)))
	}
	os.Exit(m.Run())
}

// child runs as a second process: "hold" opens the store, says "ready",
// and closes it when its stdin closes; "put" puts a large record, says
// "put", and waits to be killed.
func child(mode, dir string) int {
	d, _, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch mode {
	case "hold":
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		if err := d.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "put":
		if err := d.Put(context.Background(), bigRecord(os.Getenv(childIDEnv), 5<<20)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("put")
		select {} // until killed
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 2
}

// proc is a child process of the test binary.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

// startChild starts the test binary as a child in mode on dir and waits
// until it prints want.
func startChild(t *testing.T, mode, dir, id, want string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childDirEnv+"="+dir, childIDEnv+"="+id)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	select {
	case got := <-line:
		if got != want {
			t.Fatalf("child %s printed %q, want %q; stderr: %s", mode, got, want, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("child %s did not print %q within 30s; stderr: %s", mode, want, stderr.String())
	}
	return p
}

// wait waits for the child to exit.
func (p *proc) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("child did not exit within 30s")
	}
	p.done <- nil // for the cleanup
}

var epoch = time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)

// rec is a record as the controller writes one.
func rec(id string, opened time.Time) Record {
	return Record{
		ID:           id,
		Tenant:       "acme",
		Conversation: "conv-" + id,
		Sandbox:      "docker://0123456789ab-" + id,
		Workspace:    "/workspace",
		Mode:         "write",
		Placement:    "host-a",
		Opened:       opened,
		Updated:      opened.Add(time.Minute),
		Owner:        "berth-0",
		Resident:     &Resident{Dir: "/tmp/berth-run-" + id, Secret: []byte("0123456789abcdef0123456789abcdef-" + id)},
		State: map[string]json.RawMessage{
			"eval":  json.RawMessage(`{"kernel":"python3","key":"kernel-hmac-key-` + id + `"}`),
			"debug": json.RawMessage(`{"session":"s-1"}`),
		},
	}
}

// bigRecord has a staged edit of size bytes in its state.
func bigRecord(id string, size int) Record {
	r := rec(id, epoch)
	content, _ := json.Marshal(strings.Repeat("x", size))
	r.State["structural"] = json.RawMessage(`{"staged":[{"path":"/workspace/big.txt","content":` + string(content) + `}]}`)
	return r
}

func open(t *testing.T, dir string) (*Dir, Report) {
	t.Helper()
	d, report, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { d.Close() })
	return d, report
}

// same fails unless got and want are equal, printing both as their
// stored JSON (Record's own printing hides the secrets and state).
func same(t *testing.T, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("got  %.2000s\nwant %.2000s", g, w)
	}
}

func ids(records []Record) []string {
	out := []string{}
	for _, r := range records {
		out = append(out, r.ID)
	}
	return out
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	a, b, c := rec("a", epoch.Add(2*time.Hour)), rec("b", epoch), rec("c", epoch)
	a2 := a
	a2.Mode, a2.Updated, a2.Resident = "read", a.Updated.Add(time.Hour), nil
	minimal := Record{ID: "min", Sandbox: "host://", Opened: epoch}
	tests := []struct {
		name   string
		do     func(t *testing.T, d *Dir)
		list   []string // ids List returns, in order
		get    map[string]Record
		absent []string // ids Get reports ErrNotFound for
	}{
		{
			name: "round trip",
			do: func(t *testing.T, d *Dir) {
				for _, r := range []Record{a, minimal} {
					if err := d.Put(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
			},
			list:   []string{"min", "a"},
			get:    map[string]Record{"a": a, "min": minimal},
			absent: []string{"b"},
		},
		{
			name: "replace",
			do: func(t *testing.T, d *Dir) {
				for _, r := range []Record{a, b, a2} {
					if err := d.Put(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
			},
			list: []string{"b", "a"},
			get:  map[string]Record{"a": a2, "b": b},
		},
		{
			name: "delete, and delete a missing id",
			do: func(t *testing.T, d *Dir) {
				for _, r := range []Record{a, b} {
					if err := d.Put(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
				for _, id := range []string{"a", "a", "never"} {
					if err := d.Delete(ctx, id); err != nil {
						t.Fatalf("Delete(%s): %v", id, err)
					}
				}
			},
			list:   []string{"b"},
			get:    map[string]Record{"b": b},
			absent: []string{"a", "never"},
		},
		{
			name: "list by Opened then ID",
			do: func(t *testing.T, d *Dir) {
				for _, r := range []Record{a, c, b} { // b and c opened together
					if err := d.Put(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
			},
			list: []string{"b", "c", "a"},
		},
		{
			name:   "empty",
			do:     func(t *testing.T, d *Dir) {},
			list:   []string{},
			absent: []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d, _ := open(t, dir)
			tt.do(t, d)
			check := func(d *Dir) {
				t.Helper()
				list, bad, err := d.List(ctx)
				if err != nil || len(bad) > 0 {
					t.Fatalf("List: %v, unreadable %v", err, bad)
				}
				same(t, ids(list), tt.list)
				for id, want := range tt.get {
					got, err := d.Get(ctx, id)
					if err != nil {
						t.Fatalf("Get(%s): %v", id, err)
					}
					same(t, got, want)
				}
				for _, id := range tt.absent {
					if _, err := d.Get(ctx, id); !errors.Is(err, ErrNotFound) {
						t.Fatalf("Get(%s) = %v, want ErrNotFound", id, err)
					}
				}
			}
			check(d)
			// And the same after a restart.
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			d, report := open(t, dir)
			if report.Fresh || report.Damage != nil || report.Runs != len(tt.list) {
				t.Fatalf("reopened: %v", report)
			}
			check(d)
		})
	}
}

func TestPutRejects(t *testing.T) {
	ctx := context.Background()
	d, _ := open(t, t.TempDir())
	d.maxRecord = 1 << 20 // MaxRecord itself takes 64 MiB of test memory
	tests := []struct {
		name string
		r    Record
		want error
		msg  string
	}{
		{"too large", bigRecord("big", 1<<20), ErrTooLarge, "MaxRecord"},
		{"no id", Record{Sandbox: "host://"}, nil, "needs an id"},
		{"long id", rec(strings.Repeat("x", MaxID+1), epoch), nil, "MaxID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.Put(ctx, tt.r)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Put = %v, want an error wrapping %v that mentions %q", err, tt.want, tt.msg)
			}
		})
	}
	if list, _, _ := d.List(ctx); len(list) != 0 {
		t.Fatalf("rejected records were stored: %v", ids(list))
	}
}

func TestLargeRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, _ := open(t, dir)
	big := bigRecord("big", 8<<20)
	for i := range 3 { // replacing it reuses and grows the file
		big.Updated = epoch.Add(time.Duration(i) * time.Second)
		if err := d.Put(ctx, big); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	d, _ = open(t, dir)
	got, err := d.Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, big)
}

// TestDurable kills a berth (-9) right after its Put returned: the record
// is there for the next one.
func TestDurable(t *testing.T) {
	dir := t.TempDir()
	p := startChild(t, "put", dir, "survivor", "put")
	p.cmd.Process.Kill()
	p.wait(t)
	d, report := open(t, dir)
	if report.Damage != nil || report.Runs != 1 {
		t.Fatalf("after kill -9: %v", report)
	}
	got, err := d.Get(context.Background(), "survivor")
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, bigRecord("survivor", 5<<20))
	if d.db.NoSync {
		t.Fatal("bbolt's NoSync is set: commits would not be fsynced")
	}
}

func TestContextAndClose(t *testing.T) {
	dir := t.TempDir()
	d, _ := open(t, dir)
	if err := d.Put(context.Background(), rec("a", epoch)); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	ops := map[string]func(ctx context.Context) error{
		"Put":    func(ctx context.Context) error { return d.Put(ctx, rec("b", epoch)) },
		"Get":    func(ctx context.Context) error { _, err := d.Get(ctx, "a"); return err },
		"Delete": func(ctx context.Context) error { return d.Delete(ctx, "a") },
		"List":   func(ctx context.Context) error { _, _, err := d.List(ctx); return err },
	}
	for name, op := range ops {
		if err := op(canceled); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled ctx = %v, want context.Canceled", name, err)
		}
	}
	list, _, err := d.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	same(t, ids(list), []string{"a"}) // neither the Put nor the Delete happened
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, op := range ops {
		if err := op(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	d, _ := open(t, t.TempDir())
	const workers, rounds = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				id := fmt.Sprintf("w%d-%d", w, i)
				r := rec(id, epoch.Add(time.Duration(i)*time.Second))
				if err := d.Put(ctx, r); err != nil {
					errs <- err
					return
				}
				if got, err := d.Get(ctx, id); err != nil || got.ID != id {
					errs <- fmt.Errorf("Get(%s) = %s, %v", id, got.ID, err)
					return
				}
				if _, _, err := d.List(ctx); err != nil {
					errs <- err
					return
				}
				if i%2 == 1 {
					if err := d.Delete(ctx, id); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, _, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != workers*rounds/2 {
		t.Fatalf("%d records, want %d", len(list), workers*rounds/2)
	}
}

// TestCloseUnderLoad closes the store while writers run: each operation
// either happens or fails with ErrClosed.
func TestCloseUnderLoad(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, _ := open(t, dir)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		stored []string // ids whose Put returned nil
	)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(stored) }
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				err := d.Put(ctx, rec(id, epoch))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				stored = append(stored, id)
				mu.Unlock()
			}
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); count() < 20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d Puts in 30s", count())
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	d, report := open(t, dir)
	if report.Runs != len(stored) {
		t.Errorf("%d runs stored, %d Puts returned nil", report.Runs, len(stored))
	}
	for _, id := range stored {
		if _, err := d.Get(ctx, id); err != nil {
			t.Errorf("Put(%s) returned nil, but: %v", id, err)
		}
	}
}

func TestOpenNoDir(t *testing.T) {
	if _, _, err := Open("", Options{}); err == nil || !strings.Contains(err.Error(), "--state-dir") {
		t.Fatalf("Open(\"\") = %v, want a refusal", err)
	}
}

// TestFiles checks what Open leaves in a new state directory.
func TestFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	d, report := open(t, dir)
	if !report.Fresh || report.Damage != nil {
		t.Fatalf("new directory: %v", report)
	}
	for name, want := range map[string]os.FileMode{"": 0o700, DBFile: 0o600, LockFile: 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", filepath.Join(dir, name), got, want)
		}
	}
	holder, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err != nil || !strings.Contains(string(holder), fmt.Sprintf("pid %d ", os.Getpid())) {
		t.Fatalf("lock file says %q (%v), want this pid", holder, err)
	}
	if d.Path() != dir {
		t.Fatalf("Path() = %s, want %s", d.Path(), dir)
	}
}
