// cparse.h declares what cparse.go calls in cparse.c: the parse regions,
// a parse, and the flattening of its tree into berth_node records. See
// cparse.c for how each works.

#ifndef BERTH_CPARSE_H
#define BERTH_CPARSE_H

#include <stddef.h>
#include <stdint.h>

typedef struct TSTree TSTree;
typedef struct TSLanguage TSLanguage;

// BERTH_REGIONS parse regions of BERTH_REGION_SIZE bytes of reserved
// address space each; a reset keeps BERTH_REGION_KEEP bytes of one resident.
enum { BERTH_REGIONS = 64 };
#define BERTH_REGION_SIZE ((size_t)512 << 20)
#define BERTH_REGION_KEEP ((size_t)8 << 20)

// berth_region is one parse region (defined in cparse.c).
typedef struct berth_region berth_region;

// berth_node must match the Go type node (checked in cparse.go). Points are
// not stored: they are computed from byte offsets when a match is reported.
typedef struct {
	uint32_t start, end;
	int32_t parent, next;
	uint32_t nchild;
	uint16_t kind;
	uint8_t flags;
	uint8_t pad;
} berth_node;

// berth_job is one parse's input and stop conditions.
typedef struct {
	const char *buf;
	uint32_t len;
	int64_t deadline_ns; // CLOCK_MONOTONIC, 0 = none
	volatile int32_t *cancel;
	int32_t stopped; // 1 = cancelled, 2 = timed out, 3 = incompatible grammar
	// ranges, when nranges > 0, are the TSRanges (berth_range) the parse
	// reads; the rest of buf is skipped (tree-sitter's included ranges).
	const void *ranges;
	uint32_t nranges;
} berth_job;

// berth_range must match TSRange and the Go type parseRange.
typedef struct {
	uint32_t start_row, start_col, end_row, end_col;
	uint32_t start_byte, end_byte;
} berth_range;

void berth_init(void);
void berth_prefault(int i, size_t n);
berth_region *berth_region_at(int i);
void berth_region_limit(berth_region *r, size_t n);
int64_t berth_now_ns(void);
TSTree *berth_parse(berth_region *r, const TSLanguage *lang, berth_job *j);
void berth_done(berth_region *r, TSTree *t);
uint32_t berth_count(TSTree *t);
uint32_t berth_flatten_cursor(TSTree *t, berth_node *out, uint32_t cap);
uint32_t berth_flatten(TSTree *t, berth_node *out, uint32_t cap);

#endif
