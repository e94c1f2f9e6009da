package syntax

// This file talks to the tree-sitter C runtime directly, bypassing the
// go-tree-sitter wrappers on the hot path (see deps.md §3):
//   - the runtime allocator is reset to libc (go-tree-sitter routes every
//     allocation through a Go callback);
//   - a parse reads the source through a C read callback over the caller's
//     bytes (go-tree-sitter copies the remaining text on every read);
//   - the tree is flattened into a Go slice with one cgo call, then deleted.
//
// The declarations below mirror tree_sitter/api.h of the runtime vendored in
// github.com/tree-sitter/go-tree-sitter v0.25.0 (the symbols are linked from
// that package). TestFlattenMatchesBinding compares this path with the
// binding's own Node API and fails loudly if the layouts drift.

/*
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

typedef struct TSParser TSParser;
typedef struct TSTree TSTree;
typedef struct TSLanguage TSLanguage;
typedef uint16_t TSSymbol;
typedef struct { uint32_t row; uint32_t column; } TSPoint;
typedef struct { uint32_t context[4]; const void *id; const TSTree *tree; } TSNode;
typedef struct { const void *tree; const void *id; uint32_t context[3]; } TSTreeCursor;
typedef struct {
	void *payload;
	const char *(*read)(void *payload, uint32_t byte_index, TSPoint position, uint32_t *bytes_read);
	int encoding;
	void *decode;
} TSInput;
typedef struct { void *payload; uint32_t current_byte_offset; bool has_error; } TSParseState;
typedef struct { void *payload; bool (*progress_callback)(TSParseState *state); } TSParseOptions;

extern void ts_set_allocator(void *(*)(size_t), void *(*)(size_t, size_t), void *(*)(void *, size_t), void (*)(void *));
extern TSParser *ts_parser_new(void);
extern void ts_parser_delete(TSParser *);
extern bool ts_parser_set_language(TSParser *, const TSLanguage *);
extern void ts_parser_reset(TSParser *);
extern TSTree *ts_parser_parse_with_options(TSParser *, const TSTree *, TSInput, TSParseOptions);
extern void ts_tree_delete(TSTree *);
extern TSNode ts_tree_root_node(const TSTree *);
extern uint32_t ts_node_descendant_count(TSNode);
extern TSSymbol ts_node_symbol(TSNode);
extern bool ts_node_is_named(TSNode);
extern bool ts_node_is_missing(TSNode);
extern bool ts_node_is_extra(TSNode);
extern uint32_t ts_node_start_byte(TSNode);
extern uint32_t ts_node_end_byte(TSNode);
extern TSPoint ts_node_start_point(TSNode);
extern TSPoint ts_node_end_point(TSNode);
extern TSTreeCursor ts_tree_cursor_new(TSNode);
extern void ts_tree_cursor_delete(TSTreeCursor *);
extern TSNode ts_tree_cursor_current_node(const TSTreeCursor *);
extern bool ts_tree_cursor_goto_first_child(TSTreeCursor *);
extern bool ts_tree_cursor_goto_next_sibling(TSTreeCursor *);
extern bool ts_tree_cursor_goto_parent(TSTreeCursor *);

static void berth_use_libc_allocator(void) {
	ts_set_allocator(malloc, calloc, realloc, free);
}

// berth_node must match the Go type node (checked at init).
typedef struct {
	uint32_t start, end;
	uint32_t srow, scol, erow, ecol;
	int32_t parent, next;
	uint32_t nchild;
	uint16_t kind;
	uint8_t flags;
	uint8_t pad;
} berth_node;

typedef struct {
	const char *buf;
	uint32_t len;
	int64_t deadline_ns; // CLOCK_MONOTONIC, 0 = none
	volatile int32_t *cancel;
	int32_t stopped; // 1 = cancelled, 2 = timed out
} berth_job;

static const char *berth_read(void *payload, uint32_t off, TSPoint pt, uint32_t *n) {
	berth_job *j = payload;
	if (off >= j->len) { *n = 0; return ""; }
	*n = j->len - off;
	return j->buf + off;
}

static bool berth_progress(TSParseState *s) {
	berth_job *j = s->payload;
	if (*j->cancel) { j->stopped = 1; return true; }
	if (j->deadline_ns) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec > j->deadline_ns) { j->stopped = 2; return true; }
	}
	return false;
}

static int64_t berth_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static TSTree *berth_parse(TSParser *p, berth_job *j) {
	TSInput in = { j, berth_read, 0, NULL };
	TSParseOptions opt = { j, berth_progress };
	return ts_parser_parse_with_options(p, NULL, in, opt);
}

static uint32_t berth_count(TSTree *t) {
	return ts_node_descendant_count(ts_tree_root_node(t));
}

enum { F_NAMED = 1, F_EXTRA = 2, F_MISSING = 4, F_ERROR = 8 };

static void berth_fill(berth_node *o, TSNode n) {
	TSPoint sp = ts_node_start_point(n), ep = ts_node_end_point(n);
	o->start = ts_node_start_byte(n);
	o->end = ts_node_end_byte(n);
	o->srow = sp.row; o->scol = sp.column; o->erow = ep.row; o->ecol = ep.column;
	o->kind = ts_node_symbol(n);
	uint8_t f = 0;
	if (ts_node_is_named(n)) f |= F_NAMED;
	if (ts_node_is_extra(n)) f |= F_EXTRA;
	if (ts_node_is_missing(n)) f |= F_MISSING;
	if (o->kind == (TSSymbol)-1) f |= F_ERROR;
	o->flags = f;
	o->nchild = 0;
	o->next = -1;
	o->pad = 0;
}

// berth_flatten writes the tree in pre-order; returns the node count, or
// cap+1 if the buffer was too small.
static uint32_t berth_flatten(TSTree *t, berth_node *out, uint32_t cap) {
	TSTreeCursor c = ts_tree_cursor_new(ts_tree_root_node(t));
	uint32_t n = 0;
	int32_t parent = -1, prev = -1;
	for (;;) {
		if (n >= cap) { ts_tree_cursor_delete(&c); return cap + 1; }
		int32_t i = (int32_t)n++;
		berth_fill(&out[i], ts_tree_cursor_current_node(&c));
		out[i].parent = parent;
		if (prev >= 0) out[prev].next = i;
		if (parent >= 0) out[parent].nchild++;
		if (ts_tree_cursor_goto_first_child(&c)) { parent = i; prev = -1; continue; }
		prev = i;
		while (!ts_tree_cursor_goto_next_sibling(&c)) {
			if (parent < 0 || !ts_tree_cursor_goto_parent(&c)) { ts_tree_cursor_delete(&c); return n; }
			prev = parent;
			parent = out[parent].parent;
		}
	}
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	sitter "github.com/tree-sitter/go-tree-sitter"
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

// node is one syntax node of a flattened tree (layout shared with berth_node).
type node struct {
	start, end             uint32
	srow, scol, erow, ecol uint32
	parent, next           int32
	nchild                 uint32
	kind                   uint16
	flags                  uint8
	_                      uint8
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
}

func init() {
	// Imported packages are initialised first, so this runs after
	// go-tree-sitter installed its Go-callback allocator, and replaces it.
	_ = sitter.LANGUAGE_VERSION
	C.berth_use_libc_allocator()
	if unsafe.Sizeof(node{}) != C.sizeof_berth_node {
		panic("syntax: node and berth_node layouts differ")
	}
}

// cparser is a pooled C parser with its own cancellation flag.
type cparser struct {
	p      *C.TSParser
	cancel *C.int32_t // C memory: written by a context watcher, read by the parser
	lang   unsafe.Pointer
}

var pool struct {
	sync.Mutex
	free []*cparser
}

func getParser() *cparser {
	pool.Lock()
	if n := len(pool.free); n > 0 {
		p := pool.free[n-1]
		pool.free = pool.free[:n-1]
		pool.Unlock()
		return p
	}
	pool.Unlock()
	cp := &cparser{p: C.ts_parser_new()}
	cp.cancel = (*C.int32_t)(C.calloc(1, 4))
	return cp
}

func putParser(cp *cparser) {
	pool.Lock()
	if len(pool.free) < maxPooled && len(pool.free) < 4*runtime.GOMAXPROCS(0) {
		pool.free = append(pool.free, cp)
		pool.Unlock()
		return
	}
	pool.Unlock()
	C.ts_parser_delete(cp.p)
	C.free(unsafe.Pointer(cp.cancel))
}

// parse parses src with lang's grammar and returns the flattened tree. It
// refuses sources over MaxSourceBytes and stops when ctx ends or the parse
// runs longer than ParseTimeout.
func parse(ctx context.Context, lang *Language, src []byte) (*tree, error) {
	return parseWithin(ctx, lang, src, ParseTimeout)
}

func parseWithin(ctx context.Context, lang *Language, src []byte, budget time.Duration) (*tree, error) {
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("%w: %d bytes is over the %d-byte limit; narrow the search or skip this file", ErrTooLarge, len(src), MaxSourceBytes)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("syntax: parse: %w", err)
	}
	cp := getParser()
	defer putParser(cp)
	if cp.lang != lang.ptr {
		if !C.ts_parser_set_language(cp.p, (*C.TSLanguage)(lang.ptr)) {
			cp.lang = nil
			return nil, fmt.Errorf("syntax: the %s grammar is incompatible with the tree-sitter runtime (ABI %d); rebuild the grammar", lang.ID, lang.Grammar.AbiVersion())
		}
		cp.lang = lang.ptr
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
	job.cancel = cp.cancel
	job.deadline_ns = C.berth_now_ns() + C.int64_t(budget.Nanoseconds())
	t := C.berth_parse(cp.p, job)
	if t == nil {
		C.ts_parser_reset(cp.p)
		if job.stopped == 1 {
			return nil, fmt.Errorf("syntax: parse: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("%w: the %s parse of %d bytes ran over %v; skip this file", ErrParseBudget, lang.ID, len(src), budget)
	}
	defer C.ts_tree_delete(t)
	n := uint32(C.berth_count(t))
	nodes := make([]node, n)
	got := uint32(C.berth_flatten(t, (*C.berth_node)(unsafe.Pointer(&nodes[0])), C.uint32_t(n)))
	if got != n {
		return nil, fmt.Errorf("syntax: internal error: flattened %d of %d nodes", got, n)
	}
	return &tree{lang: lang, src: src, nodes: nodes}, nil
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
