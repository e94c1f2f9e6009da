package syntax

// This file talks to the tree-sitter C runtime directly, bypassing the
// go-tree-sitter wrappers on the hot path (see docs/design.md,
// "Dependencies and pitfalls"):
//   - the runtime allocator is replaced (go-tree-sitter routes every
//     allocation through a Go callback): a parse runs with a fresh parser
//     whose memory, and its tree's, is bump-allocated from a region that is
//     reclaimed in one step once the tree is flattened, so neither the
//     millions of small mallocs and frees of a search nor the walk of
//     ts_tree_delete are paid; outside a parse, and when a region is full,
//     allocations go to libc;
//   - a parse reads the source through a C read callback over the caller's
//     bytes (go-tree-sitter copies the remaining text on every read);
//   - the tree is flattened into a Go slice with one cgo call that walks the
//     runtime's subtrees directly, then released with its region.
//
// The C is in cparse.c, and what this file calls of it is declared in
// cparse.h (cgo compiles the package's .c files with the flags it uses for
// this preamble). cparse.c's declarations mirror tree_sitter/api.h of the
// runtime vendored in github.com/tree-sitter/go-tree-sitter v0.25.0 (the
// symbols are linked from that package), and its flattener mirrors some of
// the runtime's internal layouts. TestFlattenMatchesBinding compares this
// path with the binding's own Node API, TestFlattenFastMatchesCursor the
// direct walk with the cursor API on thousands of sources; both fail loudly
// if the layouts drift.
//
// Nothing happens when the package is imported: the allocator is installed
// and the regions reserved by [setup], on the first parse.

// #include <stdlib.h>
// #include "cparse.h"
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Parse limits. A file over MaxSourceBytes is refused before parsing; a parse
// that runs longer than ParseTimeout is stopped.
const (
	MaxSourceBytes = 8 << 20
	ParseTimeout   = 5 * time.Second
	maxPooled      = 64
	errorKind      = 0xFFFF
)

// Node flags, as set by berth_fill.
const (
	flagNamed   = 1
	flagExtra   = 2
	flagMissing = 4
	flagError   = 8
)

// ErrTooLarge and ErrParseBudget classify parse refusals; test with errors.Is.
var (
	ErrTooLarge    = errors.New("syntax: source too large")
	ErrParseBudget = errors.New("syntax: parse budget exceeded")
)

// node is one syntax node of a flattened tree (layout shared with
// berth_node): 24 bytes. Line and column are derived from the byte offsets
// on demand (tree.point).
type node struct {
	start, end   uint32
	parent, next int32
	nchild       uint32
	kind         uint16
	flags        uint8
	_            uint8
}

func (n *node) named() bool   { return n.flags&flagNamed != 0 }
func (n *node) extra() bool   { return n.flags&flagExtra != 0 }
func (n *node) missing() bool { return n.flags&flagMissing != 0 }
func (n *node) isError() bool { return n.flags&flagError != 0 }

// tree is a parsed source: nodes in pre-order (index 0 is the root) plus the
// bytes they index. It holds no C memory.
type tree struct {
	lang  *Language
	src   []byte
	nodes []node

	linesOnce sync.Once
	lines     []uint32 // byte offset of the start of each line after the first; may start as a reused empty buffer
}

// node and berth_node must have the same layout: if their sizes differ, one
// of these differences overflows and the package does not compile.
var (
	_ [unsafe.Sizeof(node{}) - C.sizeof_berth_node]struct{}
	_ [C.sizeof_berth_node - unsafe.Sizeof(node{})]struct{}
)

// setupOnce guards setup.
var setupOnce sync.Once

// setup installs berth's allocator in the tree-sitter runtime (replacing
// go-tree-sitter's Go-callback one, which every package init has installed
// by now) and reserves the parse regions' address space (64 × 512 MiB, no
// memory until touched). It runs once, from getParser, so before the first
// parse: a program that imports the package but never parses pays nothing.
//
// Memory the runtime allocated before setup came from libc, and the new
// allocator hands any pointer outside the regions to libc, so a tree or
// parser made before the switch (through the binding) is freed correctly.
func setup() {
	setupOnce.Do(func() { C.berth_init() })
}

// A region is made resident when its slot is first handed out (getParser),
// on another thread, while its parser goes on to parse: the kernel zeroes
// each huge page on first touch, which, in a VM, costs milliseconds per
// page — measured as 3 % of a one-shot search's CPU when the parses paid
// for it. Only regions a parser takes are: a search's first parse is its
// pattern's (Compile), whose region its first worker takes next, so a
// search with two workers makes two resident, not one per P. Each prefault
// is a bounded one-shot (prefaultBytes of madvise, then it returns);
// nothing waits for it, and a parse may already run in the region. As much
// is made resident as a region keeps between parses (BERTH_REGION_KEEP),
// which holds the parse of all but the largest files (a 750 KB Python file
// takes 10 MiB); the first prefaultRegions slots only.
const (
	prefaultRegions = 4
	prefaultBytes   = C.BERTH_REGION_KEEP
)

// cparser is what a parse needs besides the source: a cancellation flag and
// a parse region (nil when every region is taken). Pooled; the tree-sitter
// parser itself is made per parse, in the region.
type cparser struct {
	cancel *C.int32_t // C memory: written by a context watcher, read by the parser
	region *C.berth_region
	slot   int
}

var pool struct {
	sync.Mutex
	free  []*cparser
	slots []int // free region slots
	next  int   // slots below next have been handed out
}

func getParser() *cparser {
	setup()
	pool.Lock()
	defer pool.Unlock()
	if n := len(pool.free); n > 0 {
		p := pool.free[n-1]
		pool.free = pool.free[:n-1]
		return p
	}
	cp := &cparser{cancel: (*C.int32_t)(C.calloc(1, 4)), slot: -1}
	switch {
	case len(pool.slots) > 0:
		cp.slot = pool.slots[len(pool.slots)-1]
		pool.slots = pool.slots[:len(pool.slots)-1]
	case pool.next < C.BERTH_REGIONS:
		cp.slot = pool.next
		pool.next++
		if cp.slot < prefaultRegions {
			go C.berth_prefault(C.int(cp.slot), C.size_t(prefaultBytes))
		}
	}
	cp.region = C.berth_region_at(C.int(cp.slot))
	if cp.region == nil {
		cp.slot = -1
	}
	return cp
}

func putParser(cp *cparser) {
	pool.Lock()
	defer pool.Unlock()
	if len(pool.free) < maxPooled && len(pool.free) < 4*runtime.GOMAXPROCS(0) {
		pool.free = append(pool.free, cp)
		return
	}
	if cp.slot >= 0 {
		pool.slots = append(pool.slots, cp.slot)
	}
	C.free(unsafe.Pointer(cp.cancel))
}

// parse parses src with lang's grammar and returns the flattened tree. It
// refuses sources over MaxSourceBytes and stops when ctx ends or the parse
// runs longer than ParseTimeout.
func parse(ctx context.Context, lang *Language, src []byte) (*tree, error) {
	return parseWithin(ctx, lang, src, ParseTimeout)
}

func parseWithin(ctx context.Context, lang *Language, src []byte, budget time.Duration) (*tree, error) {
	return parseInto(ctx, nil, lang, src, budget, nil, false)
}

// parseReference is parse with the flattener that goes through the public
// cursor API; the tests compare the two.
func parseReference(ctx context.Context, lang *Language, src []byte) (*tree, error) {
	return parseInto(ctx, nil, lang, src, ParseTimeout, nil, true)
}

// parseInto parses src with cp (nil: one from the pool) and flattens the
// tree into buf when it is large enough, else into a new buffer.
func parseInto(ctx context.Context, cp *cparser, lang *Language, src []byte, budget time.Duration, buf []node, cursor bool) (*tree, error) {
	return parseRanges(ctx, cp, lang, src, budget, buf, cursor, nil)
}

// parseRange is one included range of a partial parse (layout shared with
// berth_range and tree-sitter's TSRange).
type parseRange struct {
	startRow, startCol, endRow, endCol uint32
	startByte, endByte                 uint32
}

var (
	_ [unsafe.Sizeof(parseRange{}) - C.sizeof_berth_range]struct{}
	_ [C.sizeof_berth_range - unsafe.Sizeof(parseRange{})]struct{}
)

// parseRanges is parseInto reading only ranges of src when ranges is not
// empty (tree-sitter's included ranges: the nodes keep their offsets in
// src, and the bytes between ranges are skipped as if absent).
func parseRanges(ctx context.Context, cp *cparser, lang *Language, src []byte, budget time.Duration, buf []node, cursor bool, ranges []parseRange) (*tree, error) {
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("%w: %d bytes is over the %d-byte limit; narrow the search or skip this file", ErrTooLarge, len(src), MaxSourceBytes)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("syntax: parse: %w", err)
	}
	if cp == nil {
		cp = getParser()
		defer putParser(cp)
	}
	atomic.StoreInt32((*int32)(unsafe.Pointer(cp.cancel)), 0)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		atomic.StoreInt32((*int32)(unsafe.Pointer(cp.cancel)), 1)
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired // the watcher ran (or is running): wait so it cannot touch a reused parser
		}
	}()

	var pinner runtime.Pinner
	defer pinner.Unpin()
	job := (*C.berth_job)(C.calloc(1, C.sizeof_berth_job))
	defer C.free(unsafe.Pointer(job))
	if len(src) > 0 {
		pinner.Pin(&src[0])
		job.buf = (*C.char)(unsafe.Pointer(&src[0]))
	} else {
		job.buf = (*C.char)(unsafe.Pointer(C.CString("")))
		defer C.free(unsafe.Pointer(job.buf))
	}
	job.len = C.uint32_t(len(src))
	if len(ranges) > 0 {
		pinner.Pin(&ranges[0])
		job.ranges = unsafe.Pointer(&ranges[0])
		job.nranges = C.uint32_t(len(ranges))
	}
	job.cancel = cp.cancel
	job.deadline_ns = C.berth_now_ns() + C.int64_t(budget.Nanoseconds())
	t := C.berth_parse(cp.region, (*C.TSLanguage)(lang.ptr), job)
	defer C.berth_done(cp.region, t)
	if t == nil {
		if job.stopped == 3 {
			return nil, fmt.Errorf("syntax: the %s grammar is incompatible with the tree-sitter runtime (ABI %d); rebuild the grammar", lang.ID, lang.Grammar.AbiVersion())
		}
		if job.stopped == 4 {
			return nil, fmt.Errorf("syntax: internal error: tree-sitter refused %d included ranges", len(ranges))
		}
		if job.stopped == 1 {
			return nil, fmt.Errorf("syntax: parse: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("%w: the %s parse of %d bytes ran over %v; skip this file", ErrParseBudget, lang.ID, len(src), budget)
	}
	n := uint32(C.berth_count(t))
	nodes := buf[:0]
	if uint32(cap(nodes)) < n {
		// A reused buffer grows geometrically, so a run of ever larger
		// files does not reallocate each time.
		nodes = make([]node, n, max(int(n), 2*cap(buf)))
	}
	nodes = nodes[:n]
	var got uint32
	if cursor {
		got = uint32(C.berth_flatten_cursor(t, (*C.berth_node)(unsafe.Pointer(&nodes[0])), C.uint32_t(n)))
	} else {
		got = uint32(C.berth_flatten(t, (*C.berth_node)(unsafe.Pointer(&nodes[0])), C.uint32_t(n)))
	}
	if got != n {
		return nil, fmt.Errorf("syntax: internal error: flattened %d of %d nodes", got, n)
	}
	return &tree{lang: lang, src: src, nodes: nodes}, nil
}

// regionCount is how many parse regions there are (tests).
const regionCount = C.BERTH_REGIONS

// limitRegion makes cp's parse region hold at most n bytes (tests); it
// reports false when cp has no region.
func (cp *cparser) limitRegion(n int) bool {
	if cp.region == nil {
		return false
	}
	C.berth_region_limit(cp.region, C.size_t(n))
	return true
}

// point returns the line and byte column of byte offset off.
func (t *tree) point(off uint32) Point {
	t.linesOnce.Do(func() {
		if cap(t.lines) == 0 {
			t.lines = make([]uint32, 0, bytes.Count(t.src, []byte{'\n'}))
		}
		for i, n := 0, 0; ; i += n + 1 {
			n = bytes.IndexByte(t.src[i:], '\n')
			if n < 0 {
				break
			}
			t.lines = append(t.lines, uint32(i+n+1))
		}
	})
	// The number of line starts at or before off is the 0-based line.
	line, _ := slices.BinarySearch(t.lines, off+1)
	start := uint32(0)
	if line > 0 {
		start = t.lines[line-1]
	}
	return Point{Line: line, Column: int(off - start)}
}

// children appends the indices of node i's children to buf.
func (t *tree) children(i int32, buf []int32) []int32 {
	n := &t.nodes[i]
	if n.nchild == 0 {
		return buf
	}
	for c := i + 1; c >= 0; c = t.nodes[c].next {
		buf = append(buf, c)
	}
	return buf
}

func (t *tree) text(i int32) string {
	n := &t.nodes[i]
	return string(t.src[n.start:n.end])
}

func (t *tree) textBytes(i int32) []byte {
	n := &t.nodes[i]
	return t.src[n.start:n.end]
}
