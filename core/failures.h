/* The failure store: the device's error graph plus the
 * surface every launch goes through. A binding is resolved by the caller to
 * a weft_target: the taint of the allocation it names (in whatever stream's
 * memory that allocation lives), its memory id and the byte range.
 *
 *   found = read_failure(reads)          -> skip: propagate(found, kernel, writes)
 *   p = enter_write(writes)              -> run -> exit_write(p, writes, error)
 *
 * Tainted unless proven written: enter_write claims the write set with a
 * provisional, payload-free TornDown failure; a successful exit releases
 * every claim on those bytes (older failures included); a failed exit
 * replaces the provisional's error with the real one. An empty write set
 * mints nothing; a skip never enters a scope. Scheduler thread only. */
#ifndef WEFT_CORE_FAILURES_H
#define WEFT_CORE_FAILURES_H

#include "core/taint.h"

typedef struct weft_target {
  weft_taint *taint; /* NULL: the allocation is not held here (its stream never started) */
  uint64_t memory;   /* memory id */
  weft_range range;
  bool allocated;
} weft_target;

typedef struct weft_read_failure {
  weft_failure_id failure;
  uint64_t needed; /* the memory that carried it */
} weft_read_failure;

typedef struct weft_failures {
  weft_error_graph graph;
  const weft_allocator *alloc;
  weft_target *scratch; /* the pooled write set */
  uint32_t scratch_cap;
  uint64_t logged; /* failures logged once each (the backstop for unread failures) */
} weft_failures;

void weft_failures_init(weft_failures *fs, const weft_allocator *alloc);
void weft_failures_destroy(weft_failures *fs);

/* Several{...} naming every failure the targets carry (each once, first
 * seen first) and every target never allocated; NULL when none. */
WEFT_MUST_USE_RESULT weft_status weft_failures_ensure_written(weft_failures *fs,
                                                              const weft_target *t, size_t n);
/* The first target carrying a failure (a missing node is skipped). */
bool weft_failures_read_failure(weft_failures *fs, const weft_target *t, size_t n,
                                weft_read_failure *out);
/* Taints |written| with a new failure holding |error|; pruned if it claimed nothing. */
void weft_failures_taint(weft_failures *fs, weft_status error, const weft_target *w, size_t n);
/* Releases every claim on the written ranges. */
void weft_failures_written(weft_failures *fs, const weft_target *w, size_t n);
void weft_failures_fail_unallocated(weft_failures *fs, uint64_t memory, weft_status error);
/* Records the skip on the root failure and taints |written| with the root id. */
void weft_failures_propagate(weft_failures *fs, const weft_read_failure *found, uint32_t kernel,
                             uint64_t launch, const weft_target *w, size_t n);
/* A pooled vector for a write set of up to |n| targets (capacity kept). */
weft_target *weft_failures_write_set(weft_failures *fs, size_t n);
/* 0 for an empty write set (nothing minted), else the provisional id. With
 * |id| non-zero, the provisional takes that pre-minted id. */
weft_failure_id weft_failures_enter_write(weft_failures *fs, weft_failure_id id,
                                          const weft_target *w, size_t n);
/* Takes ownership of |error| (NULL: success). */
void weft_failures_exit_write(weft_failures *fs, weft_failure_id p, const weft_target *w, size_t n,
                              weft_status error);

#endif
