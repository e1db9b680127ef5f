/* The device's memory: one manager per stream slot, the reclaim ladder a
 * failed reservation climbs, and the public memory calls. Scheduler thread
 * only, except the public entry points, which submit a command and wait. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "scheduler/memory_calls.h"
#include "scheduler/window.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/loop.h"
#include "scheduler/submit.h"
#include "scheduler/struct_size.h"

typedef enum mem_op {
  MEM_USAGE,
  MEM_REPORT,
  MEM_CLEANUP,
  MEM_INSTALL,
  MEM_MODE,
  MEM_DRY_RUN,
  MEM_SET_RECLAIM,
} mem_op;

typedef struct weft_memory_call {
  mem_op op;
  weft_stream_id stream;
  weft_memory_usage *usage;
  weft_pool_report *reports;
  size_t *n;
  uint32_t stride; /* REPORT: bytes per element of |reports| (its struct_size) */
  const weft_layout *layout;
  weft_alloc_mode mode;
  bool begin;
  weft_reclaim_fn fn;
  void *user;
} weft_memory_call;

/* The manager of |slot|, created on first use (it costs no page). */
static weft_mm *dev_mm(weft_device *dev, uint32_t slot, weft_status *err) {
  if (dev->mem.mms[slot]) return dev->mem.mms[slot];
  weft_status st =
      weft_mm_create(&dev->mem.mm_config, dev->mem.storage, &dev->alloc, &dev->mem.mms[slot]);
  if (st) {
    *err = st;
    return NULL;
  }
  weft_mm_set_dry_run(dev->mem.mms[slot], dev->mem.dry_depth > 0);
  return dev->mem.mms[slot];
}

void weft__dev_mm_destroy_all(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_mm_destroy(dev->mem.mms[i]);
    dev->mem.mms[i] = NULL;
  }
}

/* After bytes moved, every buffer learns its new address. */
static void refresh_addresses(weft_device *dev) {
  uint32_t n = atomic_load(&dev->buffers.fresh);
  for (uint32_t i = 0; i < n; i++) {
    weft_handle_slot *s = weft_handles_slot(&dev->buffers, ((uint64_t)1 << 32) | (i + 1u));
    weft_buf *b = s ? s->obj : NULL;
    if (!b || !b->allocated || !b->ptr || b->imported) continue; /* imported: never moved */
    void *p = NULL;
    weft_status st = weft_mm_resolve(b->mm, &b->mem, &p);
    weft_error_free(st); /* a live mapped allocation always resolves */
    if (p) b->ptr = p;
  }
}

static uint64_t relocate_all(weft_device *dev) {
  weft__dev_drain(dev);
  uint64_t moved = 0;
  for (uint32_t i = 0; i < dev->max_streams; i++)
    if (dev->mem.mms[i]) moved += weft_mm_relocate(dev->mem.mms[i], true);
  if (moved) refresh_addresses(dev);
  dev->stats.relocations += moved;
  return moved;
}

/* The error a failed reservation ends with, carrying a snapshot of the
 * device's memory so the reader can tell what held it. */
static weft_status with_snapshot(weft_device *dev, weft_status st, uint64_t size) {
  weft_error_kind k = weft_error_kind_of(st);
  if (k == WEFT_ERR_BUFFER_TOO_BIG || k == WEFT_ERR_PAGE_UPDATE_FORBIDDEN) {
    if (weft_error_size(st) == size) return st;
    /* The size a caller acts on is its request, not the page asked of storage. */
    return weft_error_annotate_sized(st, size, NULL);
  }
  if (k != WEFT_ERR_OUT_OF_MEMORY && k != WEFT_ERR_PAGE_SIZES_EXHAUSTED) return st;
  char snap[1536];
  int len = snprintf(snap, sizeof(snap), "memory snapshot: request %" PRIu64 " bytes", size);
  uint64_t largest = 0;
  for (uint32_t i = 0; i < dev->max_streams && len > 0 && (size_t)len < sizeof(snap); i++) {
    if (!dev->mem.mms[i]) continue;
    weft_memory_usage u = weft_mm_usage(dev->mem.mms[i]);
    uint64_t lf = weft_mm_largest_free(dev->mem.mms[i]);
    if (lf > largest) largest = lf;
    /* free: what the held pages can still serve (not their padding, nor an
     * exclusive page's room beyond its one allocation). */
    len += snprintf(snap + len, sizeof(snap) - (size_t)len,
                    "; stream %u: reserved %" PRIu64 ", in use %" PRIu64 ", free %" PRIu64, i,
                    u.bytes_reserved, u.bytes_in_use, weft_mm_free_bytes(dev->mem.mms[i]));
  }
  if (len > 0 && (size_t)len < sizeof(snap))
    len +=
        snprintf(snap + len, sizeof(snap) - (size_t)len, "; largest free extent %" PRIu64, largest);
  if (len > 0 && (size_t)len < sizeof(snap)) {
    uint64_t held = weft_storage_bytes_allocated(dev->mem.storage);
    if (dev->mem.mm_config.device_bytes)
      snprintf(snap + len, sizeof(snap) - (size_t)len,
               "; storage holds %" PRIu64 " of %" PRIu64 " bytes", held,
               dev->mem.mm_config.device_bytes);
    else
      snprintf(snap + len, sizeof(snap) - (size_t)len, "; storage holds %" PRIu64 " bytes", held);
  }
  /* The size a caller acts on is its request (the message says what the
   * storage was asked for). */
  return weft_error_annotate_sized(st, size, "%s", snap); /* keeps frames and cause */
}

/* Frees the free pages of every stream but those in a capture window (a
 * capture's pools keep what warm-up grew). */
static void cleanup_all(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++)
    if (dev->mem.mms[i] && !weft__capture_cleanup_skipped(dev, i)) weft_mm_cleanup(dev->mem.mms[i]);
}

weft_status weft__dev_reserve(weft_device *dev, weft_buf *b, uint32_t slot) {
  weft_status st = NULL;
  weft_mm *mm = dev_mm(dev, slot, &st);
  if (!mm) return st;
  b->mm = mm;
  b->slot = slot;
  /* A capturing slot serves only from room it already holds. */
  weft_reserve_mode mode =
      dev->window.forbid_mask & (UINT64_C(1) << slot) ? WEFT_RESERVE_FORBIDDEN : WEFT_RESERVE_ALLOW;
  st = weft_mm_reserve(mm, &b->mem, mode);
  if (!st) return NULL;
  if (!weft_error_may_succeed_after_reclaim(st)) return with_snapshot(dev, st, b->size);
  /* The reclaim ladder: out of memory now is not out of memory for good. */
  dev->stats.reclaims++;
  /* Drain first: it refuses a running kernel's queued blocking calls, so the
   * flushes below never wait for a kernel that waits for the scheduler. */
  weft__dev_drain(dev);
  for (uint32_t i = 0; i < dev->max_streams; i++) /* staged bytes: two flushes free them */
    if (dev->streams[i]) {
      weft_drop_queue_flush(&dev->drops[i]);
      weft_drop_queue_flush(&dev->drops[i]);
    }
  weft_storage_flush(dev->mem.storage); /* deferred frees reach the storage */
  cleanup_all(dev);                     /* free pages of every stream: none stranded */
  relocate_all(dev);
  cleanup_all(dev);
  if (dev->mem.reclaim) {
    dev->mem.in_reclaim = true;
    dev->mem.reclaim(dev->mem.reclaim_user, slot, b->size);
    dev->mem.in_reclaim = false;
    cleanup_all(dev);
    if (b->released) return st; /* the callback released this very buffer: no retry */
  }
  weft_error_free(st);
  st = weft_mm_reserve(mm, &b->mem, mode);
  if (!st) {
    dev->stats.reclaims_rescued++;
    return NULL;
  }
  return with_snapshot(dev, st, b->size);
}

/* ---- the memory calls (scheduler side) --------------------------------------------------------
 */

static weft_status install(weft_device *dev, uint32_t slot, const weft_layout *layout) {
  weft_status st = NULL;
  weft_mm *mm = dev_mm(dev, slot, &st);
  if (!mm) return st;
  weft__dev_drain(dev);
  if ((st = weft_mm_install(mm, layout))) return st;
  /* The layout of streams created later: an owned copy. */
  weft_pool_config *pools = NULL;
  size_t bytes = 0;
  if (layout->kind == WEFT_LAYOUT_CUSTOM) {
    bytes = sizeof(weft_pool_config) * layout->num_pools;
    pools = weft__alloc(&dev->alloc, bytes, 16);
    if (!pools) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, bytes, "layout copy");
    memcpy(pools, layout->pools, bytes);
  }
  weft__free(&dev->alloc, dev->mem.layout_pools,
             sizeof(weft_pool_config) * dev->mem.mm_config.layout.num_pools, 16);
  dev->mem.layout_pools = pools;
  dev->mem.mm_config.layout = *layout;
  dev->mem.mm_config.layout.pools = pools;
  if (!pools) dev->mem.mm_config.layout.num_pools = 0;
  return NULL;
}

/* Fills the caller's reports: each is written whole into a local and copied
 * out at the caller's stride, so an older caller's smaller elements are
 * never overrun. Scheduler thread (its stack holds the local array, as
 * weft_mm_storage_allocs does). */
static void report_out(const weft_mm *mm, weft_memory_call *m) {
  weft_pool_report all[WEFT_MAX_POOL_REPORTS];
  size_t cap = *m->n, k = WEFT_MAX_POOL_REPORTS;
  weft_mm_report(mm, all, &k);
  unsigned char *out = (unsigned char *)m->reports;
  for (size_t i = 0; i < k && i < cap; i++) {
    all[i].struct_size = m->stride;
    all[i].usage.struct_size = sizeof(all[i].usage);
    memcpy(out + i * m->stride, &all[i], m->stride);
  }
  *m->n = k;
}

static weft_status memory_call(weft_device *dev, weft_memory_call *m) {
  uint32_t slot = weft__slot_of(dev, m->stream);
  weft_status st = NULL;
  switch (m->op) {
  case MEM_USAGE: /* into the caller's local (weft_memory_usage_get copies it out) */
    memset(m->usage, 0, sizeof(*m->usage));
    for (uint32_t i = 0; i < dev->max_streams; i++) {
      if (!dev->mem.mms[i]) continue;
      weft_memory_usage u = weft_mm_usage(dev->mem.mms[i]);
      m->usage->number_allocs += u.number_allocs;
      m->usage->bytes_in_use += u.bytes_in_use;
      m->usage->bytes_padding += u.bytes_padding;
      m->usage->bytes_reserved += u.bytes_reserved;
    }
    return NULL;
  case MEM_REPORT:
    if (!dev->mem.mms[slot]) {
      *m->n = 0;
      return NULL;
    }
    report_out(dev->mem.mms[slot], m);
    return NULL;
  case MEM_CLEANUP:
    if (!dev->mem.mms[slot] || weft__capture_cleanup_skipped(dev, slot)) return NULL;
    weft__dev_drain(dev); /* first: the flushes must not wait for a kernel that waits */
    if (dev->streams[slot]) {
      weft_drop_queue_flush(&dev->drops[slot]);
      weft_drop_queue_flush(&dev->drops[slot]);
    }
    weft_storage_flush(dev->mem.storage);
    weft__dev_drain(dev);
    uint64_t moved = weft_mm_relocate(dev->mem.mms[slot], true);
    if (moved) refresh_addresses(dev);
    dev->stats.relocations += moved; /* explicit cleanups count, as the ladder's do */
    weft_mm_cleanup(dev->mem.mms[slot]);
    return NULL;
  case MEM_INSTALL:
    return install(dev, slot, m->layout);
  case MEM_MODE: {
    weft_mm *mm = dev_mm(dev, slot, &st);
    if (mm) weft_mm_mode(mm, m->mode);
    return st;
  }
  case MEM_DRY_RUN:
    if (!m->begin && dev->mem.dry_depth == 0)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "no dry run is open");
    dev->mem.dry_depth += m->begin ? 1 : -1;
    for (uint32_t i = 0; i < dev->max_streams; i++)
      if (dev->mem.mms[i]) weft_mm_set_dry_run(dev->mem.mms[i], dev->mem.dry_depth > 0);
    return NULL;
  case MEM_SET_RECLAIM:
    dev->mem.reclaim = m->fn;
    dev->mem.reclaim_user = m->user;
    return NULL;
  }
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown memory call");
}

void weft__dev_memory_call(weft_device *dev, cmd *c) {
  weft__token_complete(c->token, memory_call(dev, c->mem));
}

/* ---- public entry points ----------------------------------------------------------------------
 */

static weft_status submit_call(weft_device *dev, weft_memory_call *m) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (!st && m->op == MEM_CLEANUP)
    st = weft__refuse_in_kernel(dev, "weft_memory_cleanup",
                                "a cleanup waits for every running kernel");
  else if (!st && m->op == MEM_INSTALL)
    st = weft__refuse_in_kernel(dev, "weft_memory_install_layout",
                                "installing a layout waits for every running kernel");
  if (st) return st;
  cmd *c = weft__cmd_new(dev, CMD_MEMORY, 0);
  if (!c)
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(cmd), "no memory for a command");
  c->mem = m;
  return weft__cmd_call(dev, c);
}

weft_status weft_memory_usage_get(weft_device *dev, weft_memory_usage *out) {
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  uint32_t size;
  weft_status st =
      weft__out_struct_size(out->struct_size, sizeof(*out), "weft_memory_usage", &size);
  if (st) return st;
  weft_memory_usage u;
  weft_memory_call m = {.op = MEM_USAGE, .usage = &u};
  if ((st = submit_call(dev, &m))) return st;
  u.struct_size = size;
  memcpy(out, &u, size);
  return NULL;
}

weft_status weft_memory_report_get(weft_device *dev, weft_stream_id stream, weft_pool_report *out,
                                   size_t *n) {
  if (!n) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "n is NULL");
  if (*n && !out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  /* The first element's struct_size sets every element's layout and the
   * array's stride (an older caller's array is of its older elements). */
  uint32_t stride = sizeof(*out);
  if (*n) {
    weft_status st =
        weft__out_struct_size(out[0].struct_size, sizeof(*out), "weft_pool_report", &stride);
    if (st) return st;
  }
  weft_memory_call m = {
      .op = MEM_REPORT, .stream = stream, .reports = out, .n = n, .stride = stride};
  return submit_call(dev, &m);
}

weft_status weft_memory_cleanup(weft_device *dev, weft_stream_id stream) {
  weft_memory_call m = {.op = MEM_CLEANUP, .stream = stream};
  return submit_call(dev, &m);
}

weft_status weft_memory_install_layout(weft_device *dev, weft_stream_id stream,
                                       const weft_layout *layout) {
  if (!layout) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "layout is NULL");
  weft_memory_call m = {.op = MEM_INSTALL, .stream = stream, .layout = layout};
  return submit_call(dev, &m);
}

weft_status weft_memory_mode(weft_device *dev, weft_stream_id stream, weft_alloc_mode mode) {
  if (mode != WEFT_ALLOC_AUTO && mode != WEFT_ALLOC_PERSISTENT && mode != WEFT_ALLOC_DEDICATED)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown allocation mode %d", (int)mode);
  weft_memory_call m = {.op = MEM_MODE, .stream = stream, .mode = mode};
  return submit_call(dev, &m);
}

weft_status weft_memory_dry_run(weft_device *dev, bool begin) {
  weft_memory_call m = {.op = MEM_DRY_RUN, .begin = begin};
  return submit_call(dev, &m);
}

weft_status weft_memory_set_reclaim(weft_device *dev, weft_reclaim_fn fn, void *user) {
  weft_memory_call m = {.op = MEM_SET_RECLAIM, .fn = fn, .user = user};
  return submit_call(dev, &m);
}
