/* Write scopes and the failure-store glue of launches and copies (scope.c). */
#ifndef WEFT_SCHEDULER_SCOPE_H
#define WEFT_SCHEDULER_SCOPE_H

#include "scheduler/device_internal.h"

/* A target for the failure store: the buffer's graph-tagged taint. */
static inline weft_target weft__target(weft_buf *b, uint64_t offset, uint64_t size) {
  return (weft_target){.taint = &b->taint,
                       .memory = b->id,
                       .range = weft__range_of(offset, size),
                       .allocated = b->allocated};
}
/* The id of the write scope the task will run in: minted now (the worker
 * writes it into execution views), inserted into the graph only if needed.
 * An empty write set mints nothing. */
weft_failure_id weft__scope_id(weft_device *dev, const cmd *c);
/* The provisional id of a scope known to write: minted inline; exhausted
 * ids (out of line) leave the scope without one. */
weft_failure_id weft__scope_mint_exhausted(weft_device *dev);
static inline weft_failure_id weft__scope_mint(weft_device *dev) {
  weft_error_graph *g = &dev->failures.graph;
  return __builtin_expect(g->minted < WEFT_GRAPH_MAX_ID, 1) ? ++g->minted
                                                            : weft__scope_mint_exhausted(dev);
}
/* The execution view of every output of a launch takes |f| over its bytes. */
void weft__exec_taint_outputs(cmd *c, weft_failure_id f);
/* A stream that cannot start leaves the bytes its work should have written
 * with the reason (takes |err|); drains first. */
void weft__fail_unstarted(weft_device *dev, weft_status err, weft_buf *const *bufs,
                          const weft_binding *bindings, uint32_t n);
/* A successful write scope: enter_write then exit_write (a no-op when no
 * written byte carries a claim). */
void weft__run_scope(weft_failures *fs, weft_failure_id p, const weft_target *w, uint32_t n);

#endif
