/* Buffers: the client calls that create and release them, and the
 * scheduler's side of their life: resolve a handle, reserve, map, pin while
 * tasks bind it, free once released and unpinned. Scheduler thread only,
 * except the client calls and the handle checks they make. */
#include "scheduler/buffers.h"
#include "scheduler/trace.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "scheduler/window.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/memory_calls.h"
#include "scheduler/scope.h"
#include "scheduler/submit.h"

/* ---- client side --------------------------------------------------------------------------- */

/* A buffer as reports print it: the slot index names a live buffer. */
void weft__buf_name(uint64_t id, char *buf, size_t cap) {
  snprintf(buf, cap, "buffer #%" PRIu32, (uint32_t)id);
}

weft_status weft__buf_not_live(uint64_t id) {
  char name[48];
  weft__buf_name(id, name, sizeof(name));
  return weft_error_make(WEFT_ERR_NOT_FOUND,
                         "%s is not a live buffer of this device (released, stale or forged)",
                         name);
}

weft_status weft__range_outside(uint64_t size, uint64_t offset, uint64_t len, const char *what) {
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "%s [%" PRIu64 ", +%" PRIu64 ") is outside the buffer of %" PRIu64
                         " bytes",
                         what, offset, len, size);
}

weft_status weft_buffer_create(weft_device *dev, weft_stream_id stream, uint64_t size,
                               weft_buffer *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (size == 0) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "buffer size is 0");
  if (size > WEFT_MAX_BUFFER_SIZE)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "buffer size %" PRIu64 " exceeds the largest supported (%" PRIu64 ")",
                           size, (uint64_t)WEFT_MAX_BUFFER_SIZE);
  /* The buffer's bookkeeping is allocated here, so running out of memory for
   * it is the caller's error now rather than a mystery later. */
  size_t bytes = sizeof(weft_buf) + sizeof(uint64_t) * dev->max_streams;
  weft_buf *b = weft__calloc(&dev->alloc, bytes, WEFT_CACHELINE);
  if (!b) return weft__oom(bytes, "a buffer");
  cmd *c = weft__cmd_new_on(dev, CMD_CREATE, 0, stream);
  if (!c) {
    weft__free(&dev->alloc, b, bytes, WEFT_CACHELINE);
    return weft__oom(sizeof(cmd), "a create command");
  }
  uint64_t id;
  st = weft_handles_acquire(&dev->buffers, size, &id);
  if (st) {
    weft__free(&dev->alloc, b, bytes, WEFT_CACHELINE);
    weft__cmd_free(c);
    return st;
  }
  c->data = b;
  c->stream = stream;
  c->buffer = id;
  c->len = size;
  weft__cmd_submit(dev, c);
  out->id = id;
  return NULL;
}

/* weft_buffer_import but for the release callback, which the caller runs
 * when this fails: once submitted, the buffer owns it. */
static weft_status import(weft_device *dev, weft_stream_id stream, uint64_t address, uint64_t size,
                          weft_release_fn release, void *user, weft_buffer *out) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (address == 0 || address > UINTPTR_MAX)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "address is %s", address ? "too large" : "0");
  if (size == 0) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "buffer size is 0");
  if (size > WEFT_MAX_BUFFER_SIZE)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "buffer size %" PRIu64 " exceeds the largest supported (%" PRIu64 ")",
                           size, (uint64_t)WEFT_MAX_BUFFER_SIZE);
  if (address + size < address)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "address + size wraps around (%" PRIu64 " bytes at %#" PRIx64 ")", size,
                           address);
  size_t bytes = sizeof(weft_buf) + sizeof(uint64_t) * dev->max_streams;
  weft_buf *b = weft__calloc(&dev->alloc, bytes, WEFT_CACHELINE);
  if (!b) return weft__oom(bytes, "a buffer");
  cmd *c = weft__cmd_new_on(dev, CMD_CREATE, 0, stream);
  if (!c) {
    weft__free(&dev->alloc, b, bytes, WEFT_CACHELINE);
    return weft__oom(sizeof(cmd), "a create command");
  }
  uint64_t id;
  if ((st = weft_handles_acquire(&dev->buffers, size, &id))) {
    weft__free(&dev->alloc, b, bytes, WEFT_CACHELINE);
    weft__cmd_free(c);
    return st;
  }
  b->imported = true;
  b->ptr = (void *)(uintptr_t)address;
  b->release = release;
  b->release_user = user;
  c->data = b;
  c->stream = stream;
  c->buffer = id;
  c->len = size;
  weft__cmd_submit(dev, c);
  out->id = id;
  return NULL;
}

weft_status weft_buffer_import(weft_device *dev, weft_stream_id stream, uint64_t address,
                               uint64_t size, weft_release_fn release, void *user,
                               weft_buffer *out) {
  if (out) out->id = 0;
  weft_status st = import(dev, stream, address, size, release, user, out);
  if (st && release) release(user); /* every path runs it once: a failed call too */
  return st;
}

weft_status weft_buffer_address(weft_device *dev, weft_buffer buf, uint64_t *out) {
  if (out) *out = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if ((st = weft__buf_lookup(dev, buf, NULL))) return st;
  cmd *c = weft__cmd_new(dev, CMD_ADDRESS, 0);
  if (!c) return weft__oom(sizeof(cmd), "an address command");
  uint64_t address = 0; /* the scheduler writes it before it answers */
  c->buffer = buf.id;
  c->data = &address;
  if ((st = weft__cmd_call(dev, c))) return st;
  *out = address;
  return NULL;
}

weft_status weft_buffer_release(weft_device *dev, weft_buffer buf) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if ((st = weft__buf_lookup(dev, buf, NULL))) return st;
  if (weft__dev_scheduling() == dev && dev->mem.in_reclaim &&
      weft_handles_slot(&dev->buffers, buf.id)->obj) {
    /* From the reclaim callback: takes effect at once, so the retry can use it.
     * A buffer whose create is still queued holds no memory yet: its release
     * is queued behind the create, as from any other thread. */
    if (!weft_handles_kill(&dev->buffers, buf.id)) return weft__buf_not_found(buf.id);
    weft__buf_release_now(dev, buf.id);
    return NULL;
  }
  cmd *c = weft__cmd_new(dev, CMD_RELEASE, 0);
  if (!c) return weft__oom(sizeof(cmd), "a release command");
  if (!weft_handles_kill(&dev->buffers, buf.id)) { /* another thread released it first */
    weft__cmd_free(c);
    return weft__buf_not_found(buf.id);
  }
  c->buffer = buf.id;
  weft__cmd_submit(dev, c);
  return NULL;
}

/* ---- scheduler side ------------------------------------------------------------------------ */

weft_status weft__buf_not_found(uint64_t id) {
  char name[48];
  weft__buf_name(id, name, sizeof(name));
  return weft_error_make(WEFT_ERR_NOT_FOUND, "%s was released before this command reached it",
                         name);
}

void weft__buf_free(weft_device *dev, weft_buf *b) {
  if (__builtin_expect(dev->trace != NULL, 0)) weft__trace_buffer(dev, WEFT_TRACE_BUF_FREE, b);
  /* Freeing sheds every claim: a freed tainted buffer leaves no node behind. */
  weft_taint_clear(&b->taint, &dev->alloc, &dev->failures.graph);
  weft_taint_clear(&b->exec, &dev->alloc, NULL);
  if (b->unalloc) weft_graph_forget_unallocated(&dev->failures.graph, b->id);
  if (b->allocated && !b->imported) weft__dev_free(dev, b);
  if (b->label) weft__free(&dev->alloc, b->label, strlen(b->label) + 1, 1); /* labels.c's copy */
  dev->stats.buffers_live--;
  weft_handles_recycle(&dev->buffers, b->id);
  weft_release_fn release = b->imported ? b->release : NULL;
  void *user = b->release_user;
  weft__free(&dev->alloc, b, sizeof(*b) + sizeof(uint64_t) * dev->max_streams, WEFT_CACHELINE);
  if (release) release(user); /* the caller's bytes: weft is done with them */
}

/* The reservation (or the late mapping) of |b| failed: it is unallocated and
 * carries the reason, which reads and launches report. */
void weft__buf_unallocated(weft_device *dev, weft_buf *b, weft_status why) {
  /* A late mapping failure leaves the slice placed: it goes back now, or it
   * would point at this buffer after it is freed. */
  weft__dev_free(dev, b);
  b->allocated = false;
  b->ptr = NULL;
  weft_failures_fail_unallocated(&dev->failures, b->id, why);
  b->unalloc = weft_graph_unallocated_failure(&dev->failures.graph, b->id);
}

/* A released buffer's memory goes back, unless a capture's warm-up keeps it. */
void weft__buf_drop(weft_device *dev, weft_buf *b) {
  if (!weft__capture_keep(dev, b)) weft__buf_free(dev, b);
}

void weft__buf_map_lazy(weft_device *dev, weft_buf *b) {
  weft_status st = weft_mm_resolve(b->mm, &b->mem, &b->ptr);
  if (st) weft__buf_unallocated(dev, b, st);
}

static void do_create(weft_device *dev, cmd *c) {
  weft_handle_slot *s = weft_handles_slot(&dev->buffers, c->buffer);
  weft_buf *b = c->data; /* allocated by the client, which reported a failure to */
  b->id = c->buffer;
  b->size = c->len;
  b->last_read = (uint64_t *)(b + 1);
  weft_mem_init(&b->mem, c->len);
  b->mem.handle_refs = 1;
  dev->stats.buffers_live++;
  s->obj = b;
  weft__capture_on_create(dev, c->stream, b->id);
  if (b->imported) { /* the caller's bytes: nothing to reserve, in no manager */
    b->allocated = true;
    b->slot = weft__slot_of(dev, c->stream);
    return;
  }
  b->pending++; /* a reclaim callback may release it: the reservation keeps it alive */
  weft_status st = weft__dev_reserve(dev, b, weft__slot_of(dev, c->stream));
  b->pending--;
  if (b->released) { /* by the reclaim callback: the create ends, holding nothing */
    if (!st) b->allocated = true;
    weft_error_free(st);
    if (b->pending == 0) weft__buf_drop(dev, b);
    return;
  }
  if (!st)
    b->allocated = true;
  else
    weft__buf_unallocated(dev, b, st);
  if (dev->trace) weft__trace_buffer(dev, WEFT_TRACE_BUF_CREATE, b);
}

void weft__buf_release_now(weft_device *dev, uint64_t buffer) {
  weft_handle_slot *s = weft_handles_slot(&dev->buffers, buffer);
  weft_buf *b = s ? s->obj : NULL;
  if (!b || b->id != buffer) {
    /* Its creation ran out of memory: only the handle is left. */
    weft_handles_recycle(&dev->buffers, buffer);
    return;
  }
  b->released = true;
  b->mem.handle_refs = 0;
  if (__builtin_expect(dev->trace != NULL, 0)) weft__trace_buffer(dev, WEFT_TRACE_BUF_RELEASE, b);
  if (b->pending == 0) weft__buf_drop(dev, b);
}

void weft__buf_process_create(weft_device *dev, cmd *c) {
  do_create(dev, c);
  weft__cmd_free(c);
}

void weft__buf_process_address(weft_device *dev, cmd *c) {
  weft_buf *b = weft__buf_resolve(dev, c->buffer);
  weft_status st = NULL;
  if (!b) {
    st = weft__buf_not_found(c->buffer);
  } else {
    weft__buf_map(dev, b); /* a dry run's lazy page gets its backing now */
    if (b->allocated && b->ptr) {
      *(uint64_t *)c->data = (uint64_t)(uintptr_t)b->ptr;
    } else { /* the reservation failed: the reason, as a read of it reports it */
      weft_target t = weft__target(b, 0, b->size);
      st = weft_failures_ensure_written(&dev->failures, &t, 1);
      if (!st) {
        char name[48];
        weft__buf_name(b->id, name, sizeof(name));
        st = weft_error_make(WEFT_ERR_NOT_FOUND, "%s was never allocated", name);
      }
    }
  }
  weft__token_complete(c->token, st);
  weft__cmd_free(c);
}

void weft__buf_process_release(weft_device *dev, cmd *c) {
  weft__buf_release_now(dev, c->buffer);
  weft__cmd_free(c);
}
