/* Commands: the one allocation every operation travels in (client ->
 * inbox -> scheduler -> a stream's worker -> retirement). Size classes,
 * their lock-free pools (and a thread's cache of them), the per-budget
 * back-pressure counts, and the scheduler's batched returns. Credits and
 * waiting for room are the submit path's (submit.c): it may help run the
 * scheduler. */
#include "scheduler/command.h"

#include <string.h>

#include "core/alloc.h"
#include "core/hunt.h"
#include "scheduler/inside.h"

/* Commands come from per-size-class free lists, so a device in steady state
 * allocates nothing per launch: the scheduler returns every command to its
 * class when it is done with it. Larger commands use the allocator. */
static uint32_t cmd_class(size_t bytes) {
  for (uint32_t k = 0; k < WEFT_CMD_CLASSES; k++)
    if (bytes <= (WEFT_CMD_CLASS_MIN << k)) return k;
  return WEFT_CMD_CLASSES;
}

void weft__budget_release(weft_device *dev, uint32_t budget, uint64_t n) {
  atomic_fetch_sub_explicit(&dev->cmds.pending[budget].n, n, memory_order_seq_cst);
  weft__ec_notify(&dev->cmds.room);
}

/* The smallest class's commands made at open: every budget full, plus a
 * batch cached by each seated thread and one more, never needs another.
 * Commands in use are either counted in a budget (until the flush after
 * they retire) or cached by a thread, so a device whose budgets are that
 * small never grows the class, however far retirement lags; a larger one
 * grows past WEFT_CMD_PRESIZE_MAX on demand, within the same bound. */
#define WEFT_CMD_PRESIZE_MAX 1024u

static bool in_slab(const weft_device *dev, const void *p) {
  const char *s = dev->cmds.slab;
  return s && (const char *)p >= s && (const char *)p < s + dev->cmds.slab_bytes;
}

bool weft__cmd_pool_init(weft_device *dev) {
  uint64_t n = (uint64_t)(dev->max_streams + 1) * dev->cmds.max_pending +
               (uint64_t)(WEFT_TC_SEATS + 1) * WEFT_TC_BATCH;
  if (n > WEFT_CMD_PRESIZE_MAX) n = WEFT_CMD_PRESIZE_MAX;
  size_t bytes = (size_t)n * WEFT_CMD_CLASS_MIN;
  char *slab = weft__alloc(&dev->alloc, bytes, 64);
  if (!slab) return false;
  dev->cmds.slab = slab;
  dev->cmds.slab_bytes = bytes;
  ck_stack_entry_t *first = NULL, *last = NULL;
  for (uint64_t i = n; i-- > 0;) { /* the slab's start is popped first */
    cmd *c = (cmd *)(slab + i * WEFT_CMD_CLASS_MIN);
    c->task.link.next = first;
    first = &c->task.link;
    if (!last) last = first;
  }
  weft_freelist_push_chain(&dev->cmds.cmd_pool[0], first, last);
  return true;
}

/* An empty cache takes up to WEFT_TC_BATCH commands of class |k| from the
 * pool (1: device_internal.h says why a burst did not pay). */
bool weft__cmd_cache_fill(weft_device *dev, weft_tcache *tc, uint32_t k) {
  weft_freelist *pool = &dev->cmds.cmd_pool[k];
  ck_stack_entry_t *head = tc->cmds[k], *x;
  uint32_t n = tc->ncmds[k];
  while (n < WEFT_TC_BATCH && (x = weft_freelist_pop(pool))) {
    x->next = head;
    head = x;
    n++;
  }
  tc->cmds[k] = head;
  tc->ncmds[k] = n;
  return head != NULL;
}

/* One free command of class |k|: the thread's cache first. */
static inline ck_stack_entry_t *cache_pop(weft_device *dev, weft_tcache *tc, uint32_t k) {
  ck_stack_entry_t *e = tc->cmds[k];
  if (!e) {
    if (!weft__cmd_cache_fill(dev, tc, k)) return NULL;
    e = tc->cmds[k];
  }
  tc->cmds[k] = e->next;
  tc->ncmds[k]--;
  return e;
}

void weft__cmd_cache_return(weft_device *dev, weft_tcache *tc) {
  for (uint32_t k = 0; k < WEFT_TC_CLASSES; k++) {
    ck_stack_entry_t *first = tc->cmds[k], *last = first;
    if (!first) continue;
    while (last->next) last = last->next;
    weft_freelist_push_chain(&dev->cmds.cmd_pool[k], first, last);
    tc->cmds[k] = NULL;
    tc->ncmds[k] = 0;
  }
}

cmd *weft__cmd_alloc(weft_device *dev, weft_tcache *tc, cmd_kind kind, size_t extra,
                     uint32_t budget) {
  size_t bytes = weft__align8(sizeof(cmd)) + extra;
  uint32_t k = cmd_class(bytes);
  cmd *c = NULL;
  if (k < WEFT_CMD_CLASSES) {
    ck_stack_entry_t *e = tc && k < WEFT_TC_CLASSES ? cache_pop(dev, tc, k)
                                                    : weft_freelist_pop(&dev->cmds.cmd_pool[k]);
    c = e ? (cmd *)WEFT_TASK_OF(e) : NULL;
    bytes = WEFT_CMD_CLASS_MIN << k;
  }
  if (!c) c = weft__alloc(&dev->alloc, bytes, 16);
  if (!c) return NULL;
  memset(c, 0, sizeof(*c));
  c->kind = kind;
  c->budget = (uint16_t)budget;
  c->bytes = bytes;
  c->dev = dev;
  return c;
}

/* Returns the scheduler's retired commands to their classes (one push per
 * class) and lowers the pending count once. */
void weft__cmd_free_flush(weft_device *dev) {
  if (!dev->cmds.fc_n) return;
  for (uint32_t k = 0; k < WEFT_CMD_CLASSES; k++) {
    if (!dev->cmds.fc_head[k]) continue;
    weft_freelist_push_chain(&dev->cmds.cmd_pool[k], dev->cmds.fc_head[k], dev->cmds.fc_tail[k]);
    dev->cmds.fc_head[k] = dev->cmds.fc_tail[k] = NULL;
  }
  dev->cmds.fc_n = 0;
  for (uint64_t m = dev->cmds.fc_budgets; m; m &= m - 1) {
    uint32_t b = (uint32_t)__builtin_ctzll(m);
    atomic_fetch_sub_explicit(&dev->cmds.pending[b].n, dev->cmds.fc_pending[b],
                              memory_order_seq_cst);
    dev->cmds.fc_pending[b] = 0;
  }
  dev->cmds.fc_budgets = 0;
  if (dev->cmds.fc_pending[WEFT_MAX_STREAMS]) {
    atomic_fetch_sub_explicit(&dev->cmds.pending[WEFT_MAX_STREAMS].n,
                              dev->cmds.fc_pending[WEFT_MAX_STREAMS], memory_order_seq_cst);
    dev->cmds.fc_pending[WEFT_MAX_STREAMS] = 0;
  }
  WEFT_HUNT_POINT(45);
  /* A waiting client may need room for several commands (a replay): wake
   * waiters on every pass; without one, this is a fence and a load. */
  weft__ec_notify(&dev->cmds.room);
}

void weft__cmd_free(cmd *c) {
  if (!c->bytes) return; /* on close's stack */
  weft_device *dev = c->dev;
  uint32_t k = cmd_class(c->bytes);
  bool pooled = k < WEFT_CMD_CLASSES && c->bytes == (WEFT_CMD_CLASS_MIN << k);
  if (pooled && weft__dev_scheduling() == dev) { /* batched: see cmd_free_flush */
    c->task.link.next = NULL;
    if (dev->cmds.fc_tail[k])
      dev->cmds.fc_tail[k]->next = &c->task.link;
    else
      dev->cmds.fc_head[k] = &c->task.link;
    dev->cmds.fc_tail[k] = &c->task.link;
    if (!c->detached) {
      dev->cmds.fc_pending[c->budget]++;
      if (c->budget < WEFT_MAX_STREAMS) dev->cmds.fc_budgets |= UINT64_C(1) << c->budget;
    }
    if (++dev->cmds.fc_n >= 256) weft__cmd_free_flush(dev);
    return;
  }
  bool counted = !c->detached;
  uint32_t budget = c->budget; /* |c| is gone below */
  if (pooled)
    weft_freelist_push(&dev->cmds.cmd_pool[k], &c->task.link);
  else
    weft__free(&dev->alloc, c, c->bytes, 16);
  if (counted) weft__budget_release(dev, budget, 1);
}

void weft__cmd_detach(weft_device *dev, cmd *c) {
  c->detached = true;
  weft__budget_release(dev, c->budget, 1);
}

/* Close: every command is back in its class; free them all. */
void weft__cmd_pool_destroy(weft_device *dev) {
  for (uint32_t k = 0; k < WEFT_CMD_CLASSES; k++) {
    ck_stack_entry_t *e;
    while ((e = weft_freelist_pop(&dev->cmds.cmd_pool[k])))
      if (!in_slab(dev, e)) weft__free(&dev->alloc, WEFT_TASK_OF(e), WEFT_CMD_CLASS_MIN << k, 16);
  }
  weft__free(&dev->alloc, dev->cmds.slab, dev->cmds.slab_bytes, 64);
  dev->cmds.slab = NULL;
}
