package structural

import (
	"context"
	"io/fs"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type sizeInfo struct {
	fs.FileInfo
	size int64
}

func (s sizeInfo) Size() int64 { return s.size }

func TestQueueOrder(t *testing.T) {
	sizes := []int64{5, 90, 1, 40, 40, 7, 300}
	for _, c := range []struct {
		largest bool
		want    []int64
	}{
		{true, []int64{300, 90, 40, 40, 7, 5, 1}},
		{false, sizes},
	} {
		q := newQueue(100, c.largest)
		for _, n := range sizes {
			if !q.push(context.Background(), &fileResult{info: sizeInfo{size: n}}) {
				t.Fatal("push refused")
			}
		}
		q.close()
		var got []int64
		for f := q.pop(); f != nil; f = q.pop() {
			got = append(got, f.info.Size())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("largest=%v: popped %v, want %v", c.largest, got, c.want)
		}
	}
}

// TestQueueBounded checks that a full queue holds the walk back until a
// worker takes a file, and lets it go when its context ends. It runs in a
// synctest bubble: the 50 ms window is fake time, which passes only once
// the pushing goroutine waits for good, and synctest.Wait sees it wait.
func TestQueueBounded(t *testing.T) { synctest.Test(t, testQueueBounded) }

func testQueueBounded(t *testing.T) {
	q := newQueue(2, true)
	ctx := context.Background()
	q.push(ctx, &fileResult{info: sizeInfo{size: 1}})
	q.push(ctx, &fileResult{info: sizeInfo{size: 2}})
	pushed := make(chan bool)
	go func() { pushed <- q.push(ctx, &fileResult{info: sizeInfo{size: 3}}) }()
	select {
	case <-pushed:
		t.Fatal("push into a full queue did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	if f := q.pop(); f.info.Size() != 2 {
		t.Fatalf("popped size %d, want 2", f.info.Size())
	}
	if !<-pushed {
		t.Fatal("push refused after a pop made room")
	}

	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if q.push(cctx, &fileResult{info: sizeInfo{size: 4}}) {
			t.Error("push into a full queue succeeded after its context ended")
		}
	}()
	synctest.Wait()
	cancel()
	wg.Wait()
	q.close()
	n := 0
	for q.pop() != nil {
		n++
	}
	if n != 2 {
		t.Fatalf("drained %d files after close, want 2", n)
	}
}

// walkCompare orders paths the way a walk visits them: component by
// component, names sorted bytewise.
func TestWalkCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"a.go", "a.go", 0},
		{"a/x.go", "a-b.go", -1},
		{"a/x.go", "a.go", -1},
		{"a-b.go", "a.go", -1},
		{"a/b/c.go", "a/b.go", -1},
		{"a/b", "a/b/c", -1},
		{"b/a.go", "a/z.go", 1},
		{"A.go", "a.go", -1},
		{"x/y.go", "x/y.go", 0},
	} {
		if got := walkCompare(c.a, c.b); got != c.want {
			t.Errorf("walkCompare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := walkCompare(c.b, c.a); got != -c.want {
			t.Errorf("walkCompare(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}
