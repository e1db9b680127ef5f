/* The device's memory: one manager per stream slot, the reclaim ladder a
 * failed reservation climbs, and the public memory calls. Scheduler thread
 * only, except the public entry points, which submit a command and wait. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/alloc.h"
#include "core/json_writer.h"
#include "core/log.h"
#include "memory/snapshot.h"
#include "scheduler/memory_calls.h"
#include "scheduler/window.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/loop.h"
#include "scheduler/submit.h"
#include "scheduler/trace.h"
#include "scheduler/struct_size.h"

typedef enum mem_op {
  MEM_USAGE,
  MEM_REPORT,
  MEM_CLEANUP,
  MEM_INSTALL,
  MEM_MODE,
  MEM_DRY_RUN,
  MEM_SET_RECLAIM,
  MEM_SNAPSHOT,
  MEM_SET_OOM,
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
  weft_oom_fn oom;
  void *user;
  char **json; /* MEM_SNAPSHOT */
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
  if (dev->trace && moved) weft__trace_mark(dev, WEFT_TRACE_RELOCATE, 0, moved, 0);
  if (moved)
    WEFT_LOGF(WEFT_LOG_INFO, "relocated %" PRIu64 " allocations off outdated pages", moved);
  return moved;
}

/* ---- the event ring and the snapshot ------------------------------------------------------- */

/* Records an event on |b| in the ring: a slot of the preallocated array is
 * overwritten, nothing is allocated. */
static void record(weft_device *dev, weft_mem_event_kind kind, const weft_buf *b,
                   weft_error_kind error) {
  weft_mem_event *e = &dev->mem.events[dev->mem.nevents % WEFT_MEMORY_EVENTS];
  *e = (weft_mem_event){.seq = ++dev->mem.nevents,
                        .t_ns = weft_clock_monotonic_ns(),
                        .buffer = b->id,
                        .bytes = b->size,
                        .slot = b->slot,
                        .kind = (uint8_t)kind,
                        .error = (uint16_t)error};
  weft_mm_place at;
  if (kind != WEFT_MEV_RESERVE_FAILED && b->mm && weft_mm_locate(b->mm, &b->mem, &at)) {
    e->page = at.page;
    e->offset = at.offset;
    e->pool_kind = (uint8_t)at.kind;
  }
}

void weft__dev_free(weft_device *dev, weft_buf *b) {
  if (!weft_mem_is_placed(&b->mem)) return;
  record(dev, WEFT_MEV_RELEASE, b, WEFT_OK);
  weft_mm_free(b->mm, &b->mem);
}

/* A slice's owner is the descriptor inside a weft_buf: weft__dev_reserve is
 * the only caller of weft_mm_reserve on the device's managers (relocation's
 * temporary descriptors never outlive weft_mm_relocate). */
static bool describe_owner(void *ctx, weft_json *j, const weft_mem *owner) {
  (void)ctx;
  const weft_buf *b =
      (const weft_buf *)(const void *)((const char *)owner - offsetof(weft_buf, mem));
  weft_json_kv_u64(j, "buffer", b->id);
  weft_json_kv_string(j, "label", b->label);
  weft_json_kv_bool(j, "released", b->released);
  weft_json_kv_u64(j, "pins", b->pending);
  weft_json_key(j, "tainted");
  weft_json_begin_array(j);
  for (uint32_t i = 0; i < weft_taint_claims(&b->taint); i++) {
    const weft_claim_ranges *c = weft_taint_claim(&b->taint, i);
    const weft_range *r = c->cap ? c->many : &c->one;
    for (uint32_t k = 0; k < c->n; k++) {
      weft_json_begin_object(j);
      weft_json_kv_u64(j, "failure", c->failure);
      weft_json_kv_u64(j, "start", r[k].start);
      weft_json_kv_u64(j, "end", r[k].end);
      weft_json_end_object(j);
    }
  }
  weft_json_end_array(j);
  return b->pending > 0; /* bound by work not yet retired: it can neither move nor go */
}

static const char *event_name(uint8_t kind) {
  return kind == WEFT_MEV_RESERVE          ? "reserve"
         : kind == WEFT_MEV_RESERVE_FAILED ? "reserve_failed"
                                           : "release";
}

static void events_member(weft_device *dev, weft_json *j) {
  uint64_t n = dev->mem.nevents, kept = n < WEFT_MEMORY_EVENTS ? n : WEFT_MEMORY_EVENTS;
  weft_json_key(j, "events");
  weft_json_begin_object(j);
  weft_json_kv_u64(j, "capacity", WEFT_MEMORY_EVENTS);
  weft_json_kv_u64(j, "recorded", n);
  weft_json_kv_u64(j, "dropped", n - kept);
  weft_json_key(j, "recent");
  weft_json_begin_array(j);
  for (uint64_t s = n - kept; s < n; s++) { /* oldest first */
    const weft_mem_event *e = &dev->mem.events[s % WEFT_MEMORY_EVENTS];
    weft_json_begin_object(j);
    weft_json_kv_u64(j, "seq", e->seq);
    weft_json_kv_u64(j, "t_ns", e->t_ns);
    weft_json_kv_string(j, "kind", event_name(e->kind));
    weft_json_kv_u64(j, "stream", e->slot);
    weft_json_kv_u64(j, "buffer", e->buffer);
    weft_json_kv_u64(j, "bytes", e->bytes);
    if (e->kind == WEFT_MEV_RESERVE_FAILED) {
      weft_json_kv_string(j, "error", weft_error_kind_name((weft_error_kind)e->error));
    } else {
      weft_json_kv_string(j, "pool", weft_pool_kind_name((weft_pool_kind)e->pool_kind));
      weft_json_kv_u64(j, "page", e->page);
      weft_json_kv_u64(j, "offset", e->offset);
    }
    weft_json_end_object(j);
  }
  weft_json_end_array(j);
  weft_json_end_object(j);
}

/* The final failure the OOM observer hears of, or NULL (a plain snapshot). */
typedef struct oom_info {
  uint32_t slot;
  uint64_t bytes;
  weft_status error;
} oom_info;

/* The device's memory as JSON (weft_memory_snapshot; docs/observability.md),
 * or NULL when host memory ran out for the text. */
static char *snapshot_json(weft_device *dev, const oom_info *oom) {
  weft_json j;
  weft_json_init(&j);
  weft_json_begin_object(&j);
  weft_json_kv_u64(&j, "max_streams", dev->max_streams);
  weft_json_key(&j, "storage");
  weft_json_begin_object(&j);
  weft_json_kv_u64(&j, "held", weft_storage_bytes_allocated(dev->mem.storage));
  weft_json_key(&j, "capacity");
  if (dev->mem.mm_config.device_bytes)
    weft_json_u64(&j, dev->mem.mm_config.device_bytes);
  else
    weft_json_null(&j);
  weft_json_end_object(&j);
  weft_memory_usage t = {0};
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    if (!dev->mem.mms[i]) continue;
    weft_memory_usage u = weft_mm_usage(dev->mem.mms[i]);
    t.number_allocs += u.number_allocs;
    t.bytes_in_use += u.bytes_in_use;
    t.bytes_padding += u.bytes_padding;
    t.bytes_reserved += u.bytes_reserved;
  }
  weft_json_key(&j, "usage");
  weft_json_begin_object(&j);
  weft_json_kv_u64(&j, "number_allocs", t.number_allocs);
  weft_json_kv_u64(&j, "bytes_in_use", t.bytes_in_use);
  weft_json_kv_u64(&j, "bytes_padding", t.bytes_padding);
  weft_json_kv_u64(&j, "bytes_reserved", t.bytes_reserved);
  weft_json_end_object(&j);
  weft_json_key(&j, "oom");
  if (oom) {
    char msg[1024];
    weft_error_format(oom->error, msg, sizeof(msg));
    weft_json_begin_object(&j);
    weft_json_kv_u64(&j, "stream", oom->slot);
    weft_json_kv_u64(&j, "bytes", oom->bytes);
    weft_json_kv_string(&j, "error", weft_error_kind_name(weft_error_kind_of(oom->error)));
    weft_json_kv_string(&j, "message", msg);
    weft_json_end_object(&j);
  } else {
    weft_json_null(&j);
  }
  weft_json_key(&j, "streams");
  weft_json_begin_array(&j);
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    if (!dev->mem.mms[i]) continue; /* a stream that never allocated has no manager */
    weft_json_begin_object(&j);
    weft_json_kv_u64(&j, "stream", i);
    weft_mm_snapshot(dev->mem.mms[i], &j, describe_owner, dev);
    weft_json_end_object(&j);
  }
  weft_json_end_array(&j);
  events_member(dev, &j);
  weft_json_end_object(&j);
  return weft_json_finish(&j);
}

/* What the observer gets when the snapshot's text could not be made: still JSON. */
static const char no_snapshot[] = "{\"error\":\"no host memory for the snapshot\"}";

/* A reservation failed for good: the event, the log line, the observer. */
static void failed_for_good(weft_device *dev, weft_buf *b, weft_status st) {
  record(dev, WEFT_MEV_RESERVE_FAILED, b, weft_error_kind_of(st));
  if (weft_log_on(WEFT_LOG_INFO)) {
    char msg[WEFT_LOG_MAX - 96];
    weft_error_format(st, msg, sizeof(msg));
    weft__log(WEFT_LOG_INFO,
              "the reservation of %" PRIu64 " bytes on stream slot %u failed for good: %s", b->size,
              b->slot, msg);
  }
  if (!dev->mem.on_oom) return;
  oom_info oom = {.slot = b->slot, .bytes = b->size, .error = st};
  char *json = snapshot_json(dev, &oom);
  dev->mem.on_oom(dev->mem.oom_user, b->slot, b->size, json ? json : no_snapshot);
  free(json);
}

/* Bytes every stream's pages hold (the ladder's debug lines). */
static uint64_t reserved_all(const weft_device *dev) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < dev->max_streams; i++)
    if (dev->mem.mms[i]) n += weft_mm_usage(dev->mem.mms[i]).bytes_reserved;
  return n;
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
  if (!st) {
    record(dev, WEFT_MEV_RESERVE, b, WEFT_OK);
    return NULL;
  }
  if (!weft_error_may_succeed_after_reclaim(st)) { /* no ladder helps: it never fits, or may not */
    st = with_snapshot(dev, st, b->size);
    record(dev, WEFT_MEV_RESERVE_FAILED, b, weft_error_kind_of(st));
    return st;
  }
  /* The reclaim ladder: out of memory now is not out of memory for good. */
  dev->stats.reclaims++;
  if (dev->trace) weft__trace_mark(dev, WEFT_TRACE_RECLAIM, slot, b->size, 0);
  WEFT_LOGF(WEFT_LOG_INFO,
            "no room for %" PRIu64 " bytes on stream slot %u (%s): climbing the reclaim ladder",
            b->size, slot, weft_error_kind_name(weft_error_kind_of(st)));
  bool debug = weft_log_on(WEFT_LOG_DEBUG);
  uint64_t held = debug ? reserved_all(dev) : 0;
  /* Drain first: it refuses a running kernel's queued blocking calls, so the
   * flushes below never wait for a kernel that waits for the scheduler. */
  weft__dev_drain(dev);
  for (uint32_t i = 0; i < dev->max_streams; i++) /* staged bytes: two flushes free them */
    if (dev->streams[i]) {
      weft_drop_queue_flush(&dev->drops[i]);
      weft_drop_queue_flush(&dev->drops[i]);
    }
  weft_storage_flush(dev->mem.storage); /* deferred frees reach the storage */
  WEFT_LOGF(WEFT_LOG_DEBUG, "reclaim: drained, drop queues and storage flushed");
  cleanup_all(dev); /* free pages of every stream: none stranded */
  if (debug) {
    uint64_t now = reserved_all(dev);
    weft__log(WEFT_LOG_DEBUG,
              "reclaim: free pages of every stream released (%" PRIu64 " bytes held, %" PRIu64
              " before)",
              now, held);
    held = now;
  }
  uint64_t moved = relocate_all(dev);
  cleanup_all(dev);
  if (debug) {
    uint64_t now = reserved_all(dev);
    weft__log(WEFT_LOG_DEBUG,
              "reclaim: %" PRIu64 " allocations relocated, pages released (%" PRIu64
              " bytes held, %" PRIu64 " before)",
              moved, now, held);
  }
  if (dev->mem.reclaim) {
    dev->mem.in_reclaim = true;
    uint64_t freed = dev->mem.reclaim(dev->mem.reclaim_user, slot, b->size);
    dev->mem.in_reclaim = false;
    cleanup_all(dev);
    WEFT_LOGF(WEFT_LOG_DEBUG, "reclaim: the reclaim callback says it released %" PRIu64 " bytes",
              freed);
    if (b->released) return st; /* the callback released this very buffer: no retry */
  }
  weft_error_free(st);
  st = weft_mm_reserve(mm, &b->mem, mode);
  if (dev->trace) weft__trace_mark(dev, WEFT_TRACE_RECLAIM_DONE, slot, b->size, !st);
  if (!st) {
    dev->stats.reclaims_rescued++;
    record(dev, WEFT_MEV_RESERVE, b, WEFT_OK);
    WEFT_LOGF(WEFT_LOG_INFO, "the reclaim ladder made room for %" PRIu64 " bytes on stream slot %u",
              b->size, slot);
    return NULL;
  }
  st = with_snapshot(dev, st, b->size);
  if (weft_error_may_succeed_after_reclaim(st))
    failed_for_good(dev, b, st);
  else /* the retry failed otherwise: not an OOM the observer hears of */
    record(dev, WEFT_MEV_RESERVE_FAILED, b, weft_error_kind_of(st));
  return st;
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
  case MEM_SNAPSHOT:
    if (!(*m->json = snapshot_json(dev, NULL)))
      return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no host memory for the memory snapshot");
    return NULL;
  case MEM_SET_OOM:
    dev->mem.on_oom = m->oom;
    dev->mem.oom_user = m->user;
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

weft_status weft_memory_snapshot(weft_device *dev, char **json_out) {
  if (!json_out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "json_out is NULL");
  *json_out = NULL;
  weft_memory_call m = {.op = MEM_SNAPSHOT, .json = json_out};
  return submit_call(dev, &m);
}

weft_status weft_memory_set_oom_observer(weft_device *dev, weft_oom_fn fn, void *user) {
  weft_memory_call m = {.op = MEM_SET_OOM, .oom = fn, .user = user};
  return submit_call(dev, &m);
}
