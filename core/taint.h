/* Byte-range taint of one allocation: a list of claims,
 * each a failure over sorted, disjoint, non-empty [start, end) ranges. The
 * inline capacity is one claim with one range, so the common launch costs no
 * heap allocation.
 *
 * With a graph, the view keeps exactly one tag per (allocation, failure)
 * while that failure claims at least one byte. Without one (NULL: the
 * execution view a worker keeps), it records ids only.
 *
 *   taint(r, f)  a set: subtracts r from every other failure (untagging the
 *                emptied), then merges r into f's ranges, fusing touching ones
 *   written(r)   subtracts r from every claim: a partial write releases only
 *                its bytes
 *   failure(r)   the first claim intersecting r; empty ranges never match
 *   clear()      untags every claim (the allocation stops carrying them) */
#ifndef WEFT_CORE_TAINT_H
#define WEFT_CORE_TAINT_H

#include "core/error_graph.h"

typedef struct weft_range {
  uint64_t start, end;
} weft_range;

typedef struct weft_claim_ranges {
  weft_failure_id failure; /* 0: unused */
  uint32_t n, cap;         /* ranges; cap 0: the inline one */
  weft_range one;
  weft_range *many;
} weft_claim_ranges;

typedef struct weft_taint {
  weft_claim_ranges first; /* inline */
  weft_claim_ranges *more; /* further claims */
  uint32_t nmore, more_cap;
} weft_taint;

/* Every operation may allocate only past the inline capacity; on an
 * allocation failure a taint widens the claim instead of losing bytes
 * (conservative: tainted unless proven written). */
void weft_taint_set(weft_taint *t, const weft_allocator *a, weft_error_graph *g, weft_range r,
                    weft_failure_id f);
void weft_taint_clear(weft_taint *t, const weft_allocator *a, weft_error_graph *g);
/* No claim: the common case, which every launch's path asks about (inline,
 * with written and failure answering it without a call). */
static inline bool weft_taint_is_clean(const weft_taint *t) {
  return !t->first.failure && t->nmore == 0;
}
void weft__taint_written_claims(weft_taint *t, const weft_allocator *a, weft_error_graph *g,
                                weft_range r);
weft_failure_id weft__taint_failure_claims(const weft_taint *t, weft_range r);
static inline void weft_taint_written(weft_taint *t, const weft_allocator *a, weft_error_graph *g,
                                      weft_range r) {
  if (!weft_taint_is_clean(t)) weft__taint_written_claims(t, a, g, r);
}
static inline weft_failure_id weft_taint_failure(const weft_taint *t, weft_range r) {
  return weft_taint_is_clean(t) ? 0 : weft__taint_failure_claims(t, r);
}
/* Number of claims; the ranges of claim |i| (for tests). */
uint32_t weft_taint_claims(const weft_taint *t);
const weft_claim_ranges *weft_taint_claim(const weft_taint *t, uint32_t i);

#endif
