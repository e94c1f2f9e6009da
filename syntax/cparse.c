// cparse.c is the C half of cparse.go (declared in cparse.h): it talks to
// the tree-sitter C runtime directly, bypassing the go-tree-sitter wrappers
// on the hot path. cparse.go's doc comment says what it does and why.

#include "cparse.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct TSParser TSParser;
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
typedef struct { TSPoint start_point; TSPoint end_point; uint32_t start_byte; uint32_t end_byte; } TSRange;
extern bool ts_parser_set_included_ranges(TSParser *, const TSRange *, uint32_t);
_Static_assert(sizeof(TSRange) == sizeof(berth_range), "berth_range must match TSRange");
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
extern TSTreeCursor ts_tree_cursor_new(TSNode);
extern void ts_tree_cursor_delete(TSTreeCursor *);
extern TSNode ts_tree_cursor_current_node(const TSTreeCursor *);
extern bool ts_tree_cursor_goto_first_child(TSTreeCursor *);
extern bool ts_tree_cursor_goto_next_sibling(TSTreeCursor *);
extern bool ts_tree_cursor_goto_parent(TSTreeCursor *);

// Parse regions. berth_space reserves address space (no memory until
// touched, in transparent huge pages where the kernel has them) for
// BERTH_REGIONS regions of BERTH_REGION_SIZE bytes (cparse.h); each pooled
// parser owns one. While berth_parse runs, berth_cur points at the parser's
// region and the runtime's allocations are carved from it: an 8-byte header
// holding the block's capacity, then the block, 8-aligned. Capacities come
// in size classes (16-byte steps to 1 KiB, then powers of two to 1 MiB), and
// a freed block goes on its class's free list, to be handed out again by the
// next allocation of that class: the runtime frees and reallocates small
// blocks all the time, and reusing them keeps a parse's memory small and in
// cache (a pure bump allocator touched fresh memory for every subtree,
// paying page faults and cache misses for it). The newest block is given
// back to the bump pointer instead, and realloc grows it in place.
// berth_region_reset reclaims everything at once, keeping BERTH_REGION_KEEP
// bytes resident for the next parse. A pointer is region memory when it lies
// in berth_space, whatever the thread; only the thread parsing in a region
// frees into it.

// Size classes: 1..64 are n rounded up to 16 bytes (to 1 KiB), 65..74 the
// powers of two from 2 KiB to 1 MiB; 0 is "no class" (larger blocks).
enum { BERTH_CLASSES = 75 };

static inline int berth_class(size_t n, size_t *cap) {
	if (n <= 1024) {
		size_t c = n ? (n + 15) >> 4 : 1;
		*cap = c << 4;
		return (int)c;
	}
	if (n <= ((size_t)1 << 20)) {
		int lg = 64 - __builtin_clzll((unsigned long long)(n - 1)); // ceil(log2 n), 11..20
		*cap = (size_t)1 << lg;
		return 64 + (lg - 10);
	}
	*cap = (n + 7) & ~(size_t)7;
	return 0;
}

struct berth_region {
	char *base, *top, *end, *last, *high;
	int overflow; // an allocation did not fit: part of the tree is in libc's heap
	void *free[BERTH_CLASSES]; // free lists by class, linked through each block's first word
};

static char *berth_space;
static berth_region berth_regions[BERTH_REGIONS];
static __thread berth_region *berth_cur;

static inline bool berth_in_space(const void *p) {
	return berth_space && (uintptr_t)p - (uintptr_t)berth_space < (uintptr_t)BERTH_REGIONS * BERTH_REGION_SIZE;
}

static inline bool berth_in_region(const berth_region *r, const void *p) {
	return (uintptr_t)p - (uintptr_t)r->base < BERTH_REGION_SIZE;
}

static void *berth_region_alloc(berth_region *r, size_t n) {
	size_t cap;
	int c = berth_class(n, &cap);
	if (c && r->free[c]) {
		void *p = r->free[c];
		r->free[c] = *(void **)p;
		return p;
	}
	size_t need = cap + 8;
	if (n > BERTH_REGION_SIZE || (size_t)(r->end - r->top) < need) {
		r->overflow = 1;
		return NULL;
	}
	char *h = r->top;
	*(size_t *)h = cap;
	r->top = h + need;
	if (r->top > r->high) r->high = r->top;
	r->last = h + 8;
	return h + 8;
}

static void *berth_malloc(size_t n) {
	berth_region *r = berth_cur;
	if (r) {
		void *p = berth_region_alloc(r, n);
		if (p) return p;
	}
	return malloc(n);
}

static void *berth_calloc(size_t k, size_t n) {
	berth_region *r = berth_cur;
	size_t t;
	if (r && !__builtin_mul_overflow(k, n, &t)) {
		void *p = berth_region_alloc(r, t);
		if (p) return memset(p, 0, t);
	}
	return calloc(k, n);
}

static void berth_free(void *p);

static void *berth_realloc(void *p, size_t n) {
	if (!p) return berth_malloc(n);
	if (!berth_in_space(p)) return realloc(p, n);
	size_t old = ((size_t *)p)[-1];
	if (n <= old) return p;
	berth_region *r = berth_cur;
	if (r && p == r->last && n <= BERTH_REGION_SIZE) {
		size_t cap;
		berth_class(n, &cap);
		if ((size_t)(r->end - (char *)p) >= cap) {
			((size_t *)p)[-1] = cap;
			r->top = (char *)p + cap;
			if (r->top > r->high) r->high = r->top;
			return p;
		}
	}
	void *q = berth_malloc(n);
	if (q) {
		memcpy(q, p, old);
		berth_free(p);
	}
	return q;
}

static void berth_free(void *p) {
	if (!p) return;
	if (!berth_in_space(p)) { free(p); return; }
	berth_region *r = berth_cur;
	if (!r || !berth_in_region(r, p)) return;
	if (p == r->last) {
		r->top = (char *)p - 8;
		r->last = NULL;
		return;
	}
	size_t cap = ((size_t *)p)[-1], want;
	int c = berth_class(cap, &want);
	if (c && want == cap) {
		*(void **)p = r->free[c];
		r->free[c] = p;
	}
}

// berth_init installs the allocator and reserves the regions' address
// space; if mmap refuses, every parse uses libc. cparse.go calls it once,
// before the first parse, never at program start.
void berth_init(void) {
	const size_t huge = (size_t)2 << 20;
	void *m = mmap(NULL, (size_t)BERTH_REGIONS * BERTH_REGION_SIZE + huge, PROT_READ | PROT_WRITE,
		MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m != MAP_FAILED) {
		// Regions start on 2 MiB boundaries and ask for transparent huge
		// pages: a parse touches its region block by block, and a page
		// fault per 4 KiB costs more than the allocations themselves.
		berth_space = (char *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
		madvise(berth_space, (size_t)BERTH_REGIONS * BERTH_REGION_SIZE, MADV_HUGEPAGE);
		for (int i = 0; i < BERTH_REGIONS; i++) {
			berth_region *r = &berth_regions[i];
			r->base = r->top = r->high = berth_space + (size_t)i * BERTH_REGION_SIZE;
			r->end = r->base + BERTH_REGION_SIZE;
		}
	}
	ts_set_allocator(berth_malloc, berth_calloc, berth_realloc, berth_free);
}

// berth_prefault makes the first n bytes of region i resident (the kernel
// zeroes them; contents are untouched, so a parse may already run in it). A
// kernel without MADV_POPULATE_WRITE leaves them to fault in as they are
// touched.
void berth_prefault(int i, size_t n) {
	if (!berth_space || i < 0 || i >= BERTH_REGIONS) return;
	if (n > BERTH_REGION_KEEP) n = BERTH_REGION_KEEP;
	madvise(berth_regions[i].base, n, MADV_POPULATE_WRITE);
}

berth_region *berth_region_at(int i) {
	return berth_space && i >= 0 && i < BERTH_REGIONS ? &berth_regions[i] : NULL;
}

// berth_region_limit makes r hold at most n bytes (the tests fill regions
// up with it to exercise the fall back to libc).
void berth_region_limit(berth_region *r, size_t n) {
	if (n > BERTH_REGION_SIZE) n = BERTH_REGION_SIZE;
	r->end = r->base + n;
}

static void berth_region_reset(berth_region *r) {
	if ((size_t)(r->high - r->base) > BERTH_REGION_KEEP) {
		char *from = r->base + BERTH_REGION_KEEP;
		madvise(from, r->high - from, MADV_DONTNEED);
		r->high = from;
	}
	r->top = r->base;
	r->last = NULL;
	r->overflow = 0;
	memset(r->free, 0, sizeof r->free);
}

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

int64_t berth_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// berth_parse parses with a parser made for this parse, in region r when
// it is not NULL; j->stopped is 3 when the grammar is incompatible, 4 when
// tree-sitter refused j's included ranges.
TSTree *berth_parse(berth_region *r, const TSLanguage *lang, berth_job *j) {
	berth_cur = r;
	TSParser *p = ts_parser_new();
	TSTree *t = NULL;
	if (ts_parser_set_language(p, lang)) {
		if (j->nranges > 0 && !ts_parser_set_included_ranges(p, (const TSRange *)j->ranges, j->nranges)) {
			j->stopped = 4;
			ts_parser_delete(p);
			berth_cur = NULL;
			return NULL;
		}
		TSInput in = { j, berth_read, 0, NULL };
		TSParseOptions opt = { j, berth_progress };
		t = ts_parser_parse_with_options(p, NULL, in, opt);
	} else {
		j->stopped = 3;
	}
	ts_parser_delete(p);
	berth_cur = NULL;
	return t;
}

// berth_done releases a parse: a tree wholly in its region goes with the
// region's reset, one partly or wholly in libc's heap is deleted.
void berth_done(berth_region *r, TSTree *t) {
	if (t && (!r || r->overflow)) ts_tree_delete(t);
	if (r) berth_region_reset(r);
}

uint32_t berth_count(TSTree *t) {
	return ts_node_descendant_count(ts_tree_root_node(t));
}

enum { F_NAMED = 1, F_EXTRA = 2, F_MISSING = 4, F_ERROR = 8 };

static void berth_fill(berth_node *o, TSNode n) {
	o->start = ts_node_start_byte(n);
	o->end = ts_node_end_byte(n);
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

// berth_flatten_cursor is berth_flatten through the public tree cursor API:
// the reference the tests hold berth_flatten to. It returns the node count,
// or cap+1 if the buffer was too small.
uint32_t berth_flatten_cursor(TSTree *t, berth_node *out, uint32_t cap) {
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

// The runtime's internal layouts (src/subtree.h, src/length.h and the prefix
// of struct TSLanguage in src/parser.h of tree-sitter 0.25, little-endian,
// 64-bit), mirrored so berth_flatten can walk the subtrees directly instead
// of through a cursor, which recomputes visibility, aliases and positions
// entry by entry and is most of the cost of a flatten.
typedef struct { uint32_t bytes; TSPoint extent; } bt_length;
typedef struct {
	bool is_inline : 1;
	bool visible : 1;
	bool named : 1;
	bool extra : 1;
	bool has_changes : 1;
	bool is_missing : 1;
	bool is_keyword : 1;
	uint8_t symbol;
	uint16_t parse_state;
	uint8_t padding_columns;
	uint8_t padding_rows : 4;
	uint8_t lookahead_bytes : 4;
	uint8_t padding_bytes;
	uint8_t size_bytes;
} bt_inline;
typedef struct {
	union { char *long_data; char short_data[24]; };
	uint32_t length;
} bt_scanner_state;
typedef struct {
	volatile uint32_t ref_count;
	bt_length padding;
	bt_length size;
	uint32_t lookahead_bytes;
	uint32_t error_cost;
	uint32_t child_count;
	TSSymbol symbol;
	uint16_t parse_state;
	bool visible : 1;
	bool named : 1;
	bool extra : 1;
	bool fragile_left : 1;
	bool fragile_right : 1;
	bool has_changes : 1;
	bool has_external_tokens : 1;
	bool has_external_scanner_state_change : 1;
	bool depends_on_column : 1;
	bool is_missing : 1;
	bool is_keyword : 1;
	union {
		struct {
			uint32_t visible_child_count;
			uint32_t named_child_count;
			uint32_t visible_descendant_count;
			int32_t dynamic_precedence;
			uint16_t repeat_depth;
			uint16_t production_id;
			struct { TSSymbol symbol; uint16_t parse_state; } first_leaf;
		};
		bt_scanner_state external_scanner_state;
		int32_t lookahead_char;
	};
} bt_heap;
typedef union { bt_inline data; const bt_heap *ptr; } bt_subtree;
typedef struct { bool visible; bool named; bool supertype; } bt_metadata;
typedef struct {
	uint32_t abi_version, symbol_count, alias_count, token_count, external_token_count,
		state_count, large_state_count, production_id_count, field_count;
	uint16_t max_alias_sequence_length;
	const uint16_t *parse_table;
	const uint16_t *small_parse_table;
	const uint32_t *small_parse_table_map;
	const void *parse_actions;
	const char *const *symbol_names;
	const char *const *field_names;
	const void *field_map_slices;
	const void *field_map_entries;
	const bt_metadata *symbol_metadata;
	const TSSymbol *public_symbol_map;
	const uint16_t *alias_map;
	const TSSymbol *alias_sequences;
} bt_language;

enum { BT_SYM_ERROR = 0xFFFF, BT_SYM_ERROR_REPEAT = 0xFFFE };

extern const TSLanguage *ts_tree_language(const TSTree *);

#define BT_GET(s, f) ((s).data.is_inline ? (s).data.f : (s).ptr->f)

static inline uint32_t bt_size(bt_subtree s) { return s.data.is_inline ? s.data.size_bytes : s.ptr->size.bytes; }
static inline uint32_t bt_padding(bt_subtree s) { return s.data.is_inline ? s.data.padding_bytes : s.ptr->padding.bytes; }
static inline uint32_t bt_child_count(bt_subtree s) { return s.data.is_inline ? 0 : s.ptr->child_count; }
static inline const bt_subtree *bt_children(bt_subtree s) { return (const bt_subtree *)s.ptr - s.ptr->child_count; }

static inline TSSymbol bt_public(const bt_language *l, TSSymbol sym) {
	return sym == BT_SYM_ERROR ? sym : l->public_symbol_map[sym];
}

static inline bool bt_named_symbol(const bt_language *l, TSSymbol sym) {
	if (sym == BT_SYM_ERROR) return true;
	if (sym == BT_SYM_ERROR_REPEAT) return false;
	return l->symbol_metadata[sym].named;
}

static inline const TSSymbol *bt_aliases(const bt_language *l, bt_subtree s) {
	uint16_t id = s.ptr->production_id;
	return id ? &l->alias_sequences[(uint32_t)id * l->max_alias_sequence_length] : NULL;
}

// bt_frame iterates the children of one subtree; pos is where the previous
// child ended (the parent's start before the first); parent is the visible
// node they belong to (hidden subtrees pass their children up) and depth the
// parent's level among visible nodes.
typedef struct {
	const bt_subtree *kids;
	const TSSymbol *aliases;
	uint32_t count, i, structural, pos;
	int32_t parent;
	uint32_t depth;
} bt_frame;

static void bt_emit(berth_node *o, const bt_language *l, bt_subtree s, TSSymbol alias, uint32_t start, int32_t parent) {
	TSSymbol sym = alias ? alias : BT_GET(s, symbol);
	o->start = start;
	o->end = start + bt_size(s);
	o->kind = bt_public(l, sym);
	uint8_t f = 0;
	if (alias ? bt_named_symbol(l, alias) : BT_GET(s, named)) f |= F_NAMED;
	if (BT_GET(s, extra)) f |= F_EXTRA;
	if (BT_GET(s, is_missing)) f |= F_MISSING;
	if (o->kind == BT_SYM_ERROR) f |= F_ERROR;
	o->flags = f;
	o->pad = 0;
	o->nchild = 0;
	o->next = -1;
	o->parent = parent;
}

// berth_flatten writes the tree's visible nodes in pre-order, as the cursor
// API presents them (berth_flatten_cursor); returns the node count, cap+1
// if the buffer was too small, or 0 when out of memory.
uint32_t berth_flatten(TSTree *t, berth_node *out, uint32_t cap) {
	const bt_language *l = (const bt_language *)ts_tree_language(t);
	TSNode root = ts_tree_root_node(t);
	bt_subtree rs = *(const bt_subtree *)root.id;
	if (cap < 1) return cap + 1;
	bt_emit(&out[0], l, rs, 0, root.context[0], -1);
	uint32_t n = 1;
	if (bt_child_count(rs) == 0) return n;

	uint32_t cap_stack = 64, sp = 0;
	bt_frame *stack = malloc(cap_stack * sizeof *stack);
	int32_t *last = malloc(cap_stack * sizeof *last); // last child emitted, by depth
	if (!stack || !last) { free(stack); free(last); return 0; }
	stack[sp++] = (bt_frame){bt_children(rs), bt_aliases(l, rs), bt_child_count(rs), 0, 0, root.context[0], 0, 0};
	last[0] = -1;
	while (sp > 0) {
		bt_frame *f = &stack[sp - 1];
		if (f->i == f->count) { sp--; continue; }
		bt_subtree c = f->kids[f->i];
		// f->pos is where the previous child ended; the first child's
		// padding is already part of the parent's start.
		uint32_t start = f->i == 0 ? f->pos : f->pos + bt_padding(c);
		TSSymbol alias = 0;
		if (!BT_GET(c, extra)) {
			if (f->aliases) alias = f->aliases[f->structural];
			f->structural++;
		}
		f->i++;
		f->pos = start + bt_size(c);
		uint32_t kids = bt_child_count(c);
		bt_frame next;
		bool deeper = false;
		if (BT_GET(c, visible) || alias) {
			if (n >= cap) { free(stack); free(last); return cap + 1; }
			int32_t i = (int32_t)n++;
			bt_emit(&out[i], l, c, alias, start, f->parent);
			out[f->parent].nchild++;
			if (last[f->depth] >= 0) out[last[f->depth]].next = i;
			last[f->depth] = i;
			if (kids == 0) continue;
			next = (bt_frame){bt_children(c), bt_aliases(l, c), kids, 0, 0, start, i, f->depth + 1};
			deeper = true;
		} else if (kids > 0 && c.ptr->visible_child_count > 0) {
			next = (bt_frame){bt_children(c), bt_aliases(l, c), kids, 0, 0, start, f->parent, f->depth};
		} else {
			continue;
		}
		// A frame's depth is at most the number of frames below it, so
		// one more slot than frames is enough for last.
		if (sp + 1 >= cap_stack) {
			uint32_t nc = cap_stack * 2;
			bt_frame *ns = realloc(stack, nc * sizeof *stack);
			if (ns) stack = ns;
			int32_t *nl = realloc(last, nc * sizeof *last);
			if (nl) last = nl;
			if (!ns || !nl) { free(stack); free(last); return 0; }
			cap_stack = nc;
		}
		if (deeper) last[next.depth] = -1;
		stack[sp++] = next;
	}
	free(stack);
	free(last);
	return n;
}
