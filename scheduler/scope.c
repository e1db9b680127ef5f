/* Write scopes and their failure-store glue, shared by launches and copies:
 * the targets a task writes, its provisional scope id, what a failure or a
 * stream that never started leaves in the execution and graph views. */
#include "scheduler/scope.h"

#include "scheduler/loop.h"

/* The id of the write scope the task will run in: minted now (the worker
 * writes it into execution views), inserted into the graph only if needed.
 * An empty write set mints nothing. */
weft_failure_id weft__scope_id(weft_device *dev, const cmd *c) {
  bool writes = c->kind == CMD_WRITE;
  for (uint32_t i = 0; i < c->nb && !writes; i++)
    writes = weft__is_write(c->bindings[i].access) && c->bindings[i].size;
  return writes ? weft__scope_mint(dev) : 0;
}

weft_failure_id weft__scope_mint_exhausted(weft_device *dev) {
  weft_status err = NULL;
  weft_failure_id p = weft_graph_mint(&dev->failures.graph, &err);
  weft_error_free(err); /* exhausted ids: the scope runs without a provisional */
  return p;
}

/* The execution view of every output takes |f| over its bytes. */
void weft__exec_taint_outputs(cmd *c, weft_failure_id f) {
  for (uint32_t i = 0; f && i < c->nb; i++)
    if (c->bufs[i] && weft__is_write(c->bindings[i].access))
      weft_taint_set(&c->bufs[i]->exec, &c->dev->alloc, NULL,
                     weft__range_of(c->bindings[i].offset, c->bindings[i].size), f);
}

/* ---- scheduler: submissions
 * ------------------------------------------------------------------------- */

/* A stream that cannot start leaves the bytes its work should have written
 * with the reason. Nothing may run meanwhile (workers touch execution
 * views), so in-flight work finishes first: this path is rare. */
void weft__fail_unstarted(weft_device *dev, weft_status err, weft_buf *const *bufs,
                          const weft_binding *bindings, uint32_t n) {
  weft__dev_drain(dev);
  weft_error_graph *g = &dev->failures.graph;
  weft_failure_id f = weft_graph_insert(g, err, NULL);
  for (uint32_t i = 0; f && i < n; i++) {
    if (!bufs[i] || !bufs[i]->allocated || !weft__is_write(bindings[i].access)) continue;
    weft_range r = weft__range_of(bindings[i].offset, bindings[i].size);
    weft_taint_set(&bufs[i]->taint, &dev->alloc, g, r, f);
    weft_taint_set(&bufs[i]->exec, &dev->alloc, NULL, r, f);
  }
  weft_graph_prune(g, f); /* claimed nothing: gone */
}

/* ---- scheduler: completions
 * ------------------------------------------------------------------------------ */

/* A successful write scope: enter_write then exit_write. When no written
 * byte carries a claim the pair is a no-op (the provisional would be
 * inserted, tagged, untagged and removed with nothing able to observe it),
 * so the common case skips straight to the same end state. */
void weft__run_scope(weft_failures *fs, weft_failure_id p, const weft_target *w, uint32_t n) {
  bool clean = true;
  for (uint32_t i = 0; i < n && clean; i++) clean = !w[i].taint || weft_taint_is_clean(w[i].taint);
  if (clean) return;
  weft_failures_exit_write(fs, weft_failures_enter_write(fs, p, w, n), w, n, NULL);
}
