/* CUDA context, streams, pooled events, completion cursor, launches,
 * modules and capture; see stream_cuda.h. */
#include "streams/cuda/stream_cuda.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"

struct weft_cuda_context {
  const weft_allocator *alloc;
  const weft_cuda_driver *d;
  int ordinal;
  CUdevice dev;
  CUcontext ctx;
  uint64_t id; /* unique per context ever created: the per-thread current cache's key */
  weft_cuda_poison poison;
};

struct weft_cuda_event {
  CUevent ev;
  weft_cuda_stream *owner;
  weft_cuda_event *next;     /* free list */
  weft_cuda_event *all_next; /* every event of the stream */
};

typedef struct mark_node {
  weft_cuda_stream *s;
  uint64_t seq;
  struct mark_node *next;     /* free list */
  struct mark_node *all_next; /* every node of the stream */
} mark_node;

struct weft_cuda_stream {
  weft_cuda_context *ctx;
  CUstream stream;
  bool capturing;
  pthread_mutex_t lock; /* the two pools: the driver's callback thread returns mark nodes */
  weft_cuda_event *free_events, *all_events;
  uint64_t events_created;
  mark_node *free_marks, *all_marks;
  uint64_t marks_issued;
  _Atomic uint64_t marks_fired;
  _Atomic uint64_t completed;
  _Atomic uint64_t *cursor; /* also stored by marks, when set (weft_cuda_stream_set_cursor) */
  /* The origin of a capture: the events of its edges and the streams it
   * forked into (weft_cuda_capture_edge), released at its end. */
  CUevent *cap_events;
  uint32_t ncap_events, cap_events_cap;
  weft_cuda_stream **forked;
  uint32_t nforked, forked_cap;
  void (*on_mark)(void *);
  void *on_mark_arg;
};

struct weft_cuda_module {
  weft_cuda_context *ctx;
  CUmodule mod;
};

struct weft_cuda_graph {
  weft_cuda_context *ctx;
  CUgraphExec exec;
  size_t nodes;
};

/* ---- helpers ------------------------------------------------------------------------------ */

static _Atomic uint64_t next_context_id = 1;
static _Thread_local uint64_t current_context_id; /* the context weft made current here */

/* The error for |r| on |c| (NULL on success), recording a sticky one. */
#define CU_ERR(c, op, r, ...) weft_cuda_error_ex((c)->d, &(c)->poison, op, r, 0, __VA_ARGS__)

static weft_status ensure_current(weft_cuda_context *c) {
  if (current_context_id == c->id) return NULL;
  CUresult r = c->d->cuCtxSetCurrent(c->ctx);
  if (r != CUDA_SUCCESS)
    return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuCtxSetCurrent (CUDA device %d)", c->ordinal);
  current_context_id = c->id;
  return NULL;
}

/* ---- context ------------------------------------------------------------------------------ */

weft_status weft_cuda_context_create(const weft_allocator *alloc, const weft_cuda_driver *d,
                                     int ordinal, weft_cuda_context **out) {
  if (!alloc || !d || !d->lib || !out)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_cuda_context_create: NULL allocator, driver or out, or an "
                           "unloaded driver");
  *out = NULL;
  CUresult r = d->cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *hint = r == CUDA_ERROR_STUB_LIBRARY
                           ? " - this is the toolkit stub, not a real driver"
                       : r == CUDA_ERROR_NO_DEVICE ? " - no CUDA-capable device"
                                                   : "";
    char why[512];
    weft_cuda_describe(d, r, why, sizeof(why));
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "CUDA driver %s present but cuInit failed: %s%s", d->path, why, hint);
  }
  int count = 0;
  r = d->cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) return weft_cuda_error(d, r, "cuDeviceGetCount");
  if (count == 0)
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "no CUDA device: driver %s reports 0 devices", d->path);
  if (ordinal < 0 || ordinal >= count)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "CUDA device %d does not exist (driver %s reports %d device%s)", ordinal,
                           d->path, count, count == 1 ? "" : "s");
  CUdevice dev;
  r = d->cuDeviceGet(&dev, ordinal);
  if (r != CUDA_SUCCESS) return weft_cuda_error(d, r, "cuDeviceGet(%d)", ordinal);
  weft_cuda_context *c = weft__calloc(alloc, sizeof(*c), WEFT_CACHELINE);
  if (!c) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*c), "CUDA context");
  c->alloc = alloc;
  c->d = d;
  c->ordinal = ordinal;
  c->dev = dev;
  c->id = atomic_fetch_add(&next_context_id, 1);
  r = d->cuDevicePrimaryCtxRetain(&c->ctx, dev);
  if (r != CUDA_SUCCESS) {
    weft_status st = weft_cuda_error(d, r, "cuDevicePrimaryCtxRetain(device %d)", ordinal);
    weft__free(alloc, c, sizeof(*c), WEFT_CACHELINE);
    return st;
  }
  weft_status st = ensure_current(c);
  if (st) {
    weft_cuda_context_destroy(c);
    return st;
  }
  *out = c;
  return NULL;
}

void weft_cuda_context_destroy(weft_cuda_context *c) {
  if (!c) return;
  if (current_context_id == c->id) {
    c->d->cuCtxSetCurrent(NULL);
    current_context_id = 0;
  }
  c->d->cuDevicePrimaryCtxRelease(c->dev);
  weft_cuda_poison_clear(&c->poison);
  weft__free(c->alloc, c, sizeof(*c), WEFT_CACHELINE);
}

weft_status weft_cuda_context_make_current(weft_cuda_context *c) {
  return ensure_current(c);
}

weft_status weft_cuda_context_sync(weft_cuda_context *c) {
  weft_status st = ensure_current(c);
  if (st) return st;
  return CU_ERR(c, WEFT_CUDA_OP_ANY, c->d->cuCtxSynchronize(), "cuCtxSynchronize");
}

bool weft_cuda_context_is_poisoned(const weft_cuda_context *c) {
  return atomic_load_explicit(&c->poison.first, memory_order_acquire) != NULL;
}

weft_status weft_cuda_context_poisoned(weft_cuda_context *c) {
  return weft_cuda_poison_get(&c->poison);
}

weft_cuda_poison *weft_cuda_context_poison(weft_cuda_context *c) {
  return &c->poison;
}

const weft_cuda_driver *weft_cuda_context_driver(const weft_cuda_context *c) {
  return c->d;
}

CUdevice weft_cuda_context_device(const weft_cuda_context *c) {
  return c->dev;
}

/* ---- streams ------------------------------------------------------------------------------ */

weft_status weft_cuda_stream_create(weft_cuda_context *c, weft_cuda_stream **out) {
  weft_status st = ensure_current(c);
  if (st) return st;
  weft_cuda_stream *s = weft__calloc(c->alloc, sizeof(*s), WEFT_CACHELINE);
  if (!s) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*s), "CUDA stream");
  s->ctx = c;
  pthread_mutex_init(&s->lock, NULL);
  CUresult r = c->d->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_destroy(&s->lock);
    weft__free(c->alloc, s, sizeof(*s), WEFT_CACHELINE);
    return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuStreamCreate(NON_BLOCKING)");
  }
  *out = s;
  return NULL;
}

CUstream weft_cuda_stream_handle(const weft_cuda_stream *s) {
  return s->stream;
}

static void capture_release(weft_cuda_stream *s);

void weft_cuda_stream_destroy(weft_cuda_stream *s) {
  if (!s) return;
  weft_cuda_context *c = s->ctx;
  const weft_cuda_driver *d = c->d;
  weft_error_free(ensure_current(c));
  if (s->capturing) {
    CUgraph g = NULL;
    if (d->cuStreamEndCapture(s->stream, &g) == CUDA_SUCCESS && g) d->cuGraphDestroy(g);
    s->capturing = false;
  }
  capture_release(s);
  /* Every host function must have run before the mark nodes are freed. */
  weft_error_free(CU_ERR(c, WEFT_CUDA_OP_ANY, d->cuStreamSynchronize(s->stream),
                         "cuStreamSynchronize (stream destruction)"));
  weft_error_free(CU_ERR(c, WEFT_CUDA_OP_ANY, d->cuStreamDestroy(s->stream), "cuStreamDestroy"));
  for (weft_cuda_event *e = s->all_events, *n; e; e = n) {
    n = e->all_next;
    d->cuEventDestroy(e->ev);
    weft__free(c->alloc, e, sizeof(*e), _Alignof(weft_cuda_event));
  }
  /* Mark nodes are freed once no host function can run any more: all have
   * fired, or the context is faulted (cuLaunchHostFunc functions are not
   * called after an error in the context). Otherwise (a sync that failed
   * without a sticky error) they are left: a bounded leak beats a callback
   * writing freed memory. */
  if (atomic_load_explicit(&s->marks_fired, memory_order_acquire) == s->marks_issued ||
      atomic_load_explicit(&c->poison.first, memory_order_acquire)) {
    for (mark_node *m = s->all_marks, *n; m; m = n) {
      n = m->all_next;
      weft__free(c->alloc, m, sizeof(*m), _Alignof(mark_node));
    }
  }
  pthread_mutex_destroy(&s->lock);
  weft__free(c->alloc, s, sizeof(*s), WEFT_CACHELINE);
}

weft_status weft_cuda_stream_sync(weft_cuda_stream *s) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, s->ctx->d->cuStreamSynchronize(s->stream),
                "cuStreamSynchronize");
}

weft_status weft_cuda_stream_query(weft_cuda_stream *s, bool *idle) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  CUresult r = s->ctx->d->cuStreamQuery(s->stream);
  *idle = r == CUDA_SUCCESS;
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return NULL;
  return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, r, "cuStreamQuery");
}

/* ---- events ------------------------------------------------------------------------------- */

weft_status weft_cuda_stream_record(weft_cuda_stream *s, weft_cuda_event **out) {
  weft_cuda_context *c = s->ctx;
  if (s->capturing)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_cuda_stream_record during a capture: pooled events are not "
                           "recorded into graphs");
  weft_status st = ensure_current(c);
  if (st) return st;
  pthread_mutex_lock(&s->lock);
  weft_cuda_event *e = s->free_events;
  if (e) s->free_events = e->next;
  pthread_mutex_unlock(&s->lock);
  if (!e) {
    e = weft__calloc(c->alloc, sizeof(*e), _Alignof(weft_cuda_event));
    if (!e) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*e), "CUDA event");
    CUresult r = c->d->cuEventCreate(&e->ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      weft__free(c->alloc, e, sizeof(*e), _Alignof(weft_cuda_event));
      return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuEventCreate(DISABLE_TIMING)");
    }
    e->owner = s;
    pthread_mutex_lock(&s->lock);
    e->all_next = s->all_events;
    s->all_events = e;
    s->events_created++;
    pthread_mutex_unlock(&s->lock);
  }
  CUresult r = c->d->cuEventRecord(e->ev, s->stream);
  if (r != CUDA_SUCCESS) {
    weft_cuda_event_release(e);
    return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuEventRecord");
  }
  *out = e;
  return NULL;
}

weft_status weft_cuda_stream_wait(weft_cuda_stream *consumer, const weft_cuda_event *ev) {
  weft_cuda_context *c = consumer->ctx;
  weft_status st = ensure_current(c);
  if (st) return st;
  return CU_ERR(c, WEFT_CUDA_OP_ANY, c->d->cuStreamWaitEvent(consumer->stream, ev->ev, 0),
                "cuStreamWaitEvent");
}

weft_status weft_cuda_event_done(const weft_cuda_event *ev, bool *done) {
  weft_cuda_context *c = ev->owner->ctx;
  weft_status st = ensure_current(c);
  if (st) return st;
  CUresult r = c->d->cuEventQuery(ev->ev);
  *done = r == CUDA_SUCCESS;
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return NULL;
  return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuEventQuery");
}

weft_status weft_cuda_event_sync(const weft_cuda_event *ev) {
  weft_cuda_context *c = ev->owner->ctx;
  weft_status st = ensure_current(c);
  if (st) return st;
  return CU_ERR(c, WEFT_CUDA_OP_ANY, c->d->cuEventSynchronize(ev->ev), "cuEventSynchronize");
}

void weft_cuda_event_release(weft_cuda_event *ev) {
  if (!ev) return;
  weft_cuda_stream *s = ev->owner;
  pthread_mutex_lock(&s->lock);
  ev->next = s->free_events;
  s->free_events = ev;
  pthread_mutex_unlock(&s->lock);
}

uint64_t weft_cuda_stream_events_created(const weft_cuda_stream *s) {
  return s->events_created;
}

/* ---- copies ------------------------------------------------------------------------------- */

weft_status weft_cuda_copy_htod(weft_cuda_stream *s, CUdeviceptr dst, const void *src, size_t len) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, s->ctx->d->cuMemcpyHtoDAsync(dst, src, len, s->stream),
                "cuMemcpyHtoDAsync(%zu bytes)", len);
}

weft_status weft_cuda_copy_dtoh(weft_cuda_stream *s, void *dst, CUdeviceptr src, size_t len) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, s->ctx->d->cuMemcpyDtoHAsync(dst, src, len, s->stream),
                "cuMemcpyDtoHAsync(%zu bytes)", len);
}

weft_status weft_cuda_copy_dtod(weft_cuda_stream *s, CUdeviceptr dst, CUdeviceptr src, size_t len) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, s->ctx->d->cuMemcpyDtoDAsync(dst, src, len, s->stream),
                "cuMemcpyDtoDAsync(%zu bytes)", len);
}

weft_status weft_cuda_memset8(weft_cuda_stream *s, CUdeviceptr dst, unsigned char value,
                              size_t len) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, s->ctx->d->cuMemsetD8Async(dst, value, len, s->stream),
                "cuMemsetD8Async(%zu bytes of %#x)", len, value);
}

/* ---- launches and host functions ---------------------------------------------------------- */

weft_status weft_cuda_launch(weft_cuda_stream *s, CUfunction f, weft_cuda_dim3 grid,
                             weft_cuda_dim3 block, unsigned shared_bytes, void **params) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  CUresult r = s->ctx->d->cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                         shared_bytes, s->stream, params, NULL);
  return CU_ERR(s->ctx, WEFT_CUDA_OP_LAUNCH, r,
                "cuLaunchKernel(grid %ux%ux%u, block %ux%ux%u, %u shared bytes)", grid.x, grid.y,
                grid.z, block.x, block.y, block.z, shared_bytes);
}

weft_status weft_cuda_host_callback(weft_cuda_stream *s, CUhostFn fn, void *arg) {
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, s->ctx->d->cuLaunchHostFunc(s->stream, fn, arg),
                "cuLaunchHostFunc");
}

/* Runs on the driver's callback thread: no CUDA calls here. */
static void CUDA_CB mark_fired(void *arg) {
  mark_node *m = arg;
  weft_cuda_stream *s = m->s;
  uint64_t seq = m->seq;
  pthread_mutex_lock(&s->lock);
  m->next = s->free_marks;
  s->free_marks = m;
  pthread_mutex_unlock(&s->lock);
  atomic_store_explicit(&s->completed, seq, memory_order_release);
  if (s->cursor) { /* a max: the owner may move it forward itself (after a sync) */
    uint64_t cur = atomic_load_explicit(s->cursor, memory_order_relaxed);
    while (cur < seq && !atomic_compare_exchange_weak_explicit(
                            s->cursor, &cur, seq, memory_order_release, memory_order_relaxed)) {
    }
  }
  void (*fn)(void *) = s->on_mark;
  void *fn_arg = s->on_mark_arg;
  atomic_fetch_add_explicit(&s->marks_fired, 1, memory_order_release);
  if (fn) fn(fn_arg);
}

void weft_cuda_stream_set_cursor(weft_cuda_stream *s, _Atomic uint64_t *cursor,
                                 void (*on_mark)(void *), void *arg) {
  s->cursor = cursor;
  s->on_mark = on_mark;
  s->on_mark_arg = arg;
}

weft_status weft_cuda_stream_mark(weft_cuda_stream *s, uint64_t seq) {
  weft_cuda_context *c = s->ctx;
  if (s->capturing)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_cuda_stream_mark during a capture: a replayed mark would "
                           "reuse a pooled node");
  weft_status st = ensure_current(c);
  if (st) return st;
  pthread_mutex_lock(&s->lock);
  mark_node *m = s->free_marks;
  if (m) s->free_marks = m->next;
  pthread_mutex_unlock(&s->lock);
  if (!m) {
    m = weft__calloc(c->alloc, sizeof(*m), _Alignof(mark_node));
    if (!m) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*m), "CUDA mark");
    m->s = s;
    pthread_mutex_lock(&s->lock);
    m->all_next = s->all_marks;
    s->all_marks = m;
    pthread_mutex_unlock(&s->lock);
  }
  m->seq = seq;
  s->marks_issued++;
  CUresult r = c->d->cuLaunchHostFunc(s->stream, mark_fired, m);
  if (r != CUDA_SUCCESS) {
    s->marks_issued--;
    pthread_mutex_lock(&s->lock);
    m->next = s->free_marks;
    s->free_marks = m;
    pthread_mutex_unlock(&s->lock);
    return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuLaunchHostFunc (completion mark %" PRIu64 ")", seq);
  }
  return NULL;
}

bool weft_cuda_stream_mark_pending(const weft_cuda_stream *s) {
  return atomic_load_explicit(&s->marks_fired, memory_order_acquire) != s->marks_issued;
}

uint64_t weft_cuda_stream_completed(const weft_cuda_stream *s) {
  return atomic_load_explicit(&((weft_cuda_stream *)s)->completed, memory_order_acquire);
}

/* ---- modules ------------------------------------------------------------------------------ */

static bool is_binary_image(const unsigned char *p, size_t len) {
  static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
  if (len >= 4 && memcmp(p, elf, 4) == 0) return true;
  if (len >= 4) {
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == 0x466243b1u || magic == 0xba55ed50u) return true; /* fatbin wrapper / fatbin */
  }
  return false;
}

weft_status weft_cuda_module_load(weft_cuda_context *c, const void *image, size_t len,
                                  weft_cuda_module **out) {
  if (!image || !len || !out)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_cuda_module_load: NULL or empty image, or NULL out");
  weft_status st = ensure_current(c);
  if (st) return st;
  const unsigned char *p = image;
  char *copy = NULL;
  size_t copy_len = 0;
  if (!is_binary_image(p, len) && !memchr(p, '\0', len)) {
    copy_len = len + 1; /* PTX text must reach the driver NUL-terminated */
    copy = weft__alloc(c->alloc, copy_len, 1);
    if (!copy) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, copy_len, "PTX copy");
    memcpy(copy, p, len);
    copy[len] = '\0';
  }
  weft_cuda_module *m = weft__calloc(c->alloc, sizeof(*m), _Alignof(weft_cuda_module));
  if (!m) {
    weft__free(c->alloc, copy, copy_len, 1);
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*m), "CUDA module");
  }
  m->ctx = c;
  CUresult r = c->d->cuModuleLoadData(&m->mod, copy ? (const void *)copy : image);
  weft__free(c->alloc, copy, copy_len, 1);
  if (r != CUDA_SUCCESS) {
    weft__free(c->alloc, m, sizeof(*m), _Alignof(weft_cuda_module));
    return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuModuleLoadData(%zu-byte %s image)", len,
                  is_binary_image(p, len) ? "binary" : "PTX");
  }
  *out = m;
  return NULL;
}

weft_status weft_cuda_module_function(weft_cuda_module *m, const char *name, CUfunction *out) {
  if (!m || !name || !out)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "weft_cuda_module_function: NULL argument");
  weft_status st = ensure_current(m->ctx);
  if (st) return st;
  return CU_ERR(m->ctx, WEFT_CUDA_OP_ANY, m->ctx->d->cuModuleGetFunction(out, m->mod, name),
                "cuModuleGetFunction(\"%s\")", name);
}

void weft_cuda_module_unload(weft_cuda_module *m) {
  if (!m) return;
  weft_cuda_context *c = m->ctx;
  weft_error_free(ensure_current(c));
  weft_error_free(CU_ERR(c, WEFT_CUDA_OP_ANY, c->d->cuModuleUnload(m->mod), "cuModuleUnload"));
  weft__free(c->alloc, m, sizeof(*m), _Alignof(weft_cuda_module));
}

/* ---- capture and graphs ------------------------------------------------------------------- */

weft_status weft_cuda_capture_begin(weft_cuda_stream *s) {
  if (s->capturing)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "weft_cuda_capture_begin: already capturing");
  weft_status st = ensure_current(s->ctx);
  if (st) return st;
  CUresult r = s->ctx->d->cuStreamBeginCapture(s->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r != CUDA_SUCCESS)
    return CU_ERR(s->ctx, WEFT_CUDA_OP_ANY, r, "cuStreamBeginCapture(THREAD_LOCAL)");
  s->capturing = true;
  return NULL;
}

/* Counts the graph's MEM_ALLOC and MEM_FREE nodes. */
static weft_status count_memory_nodes(weft_cuda_context *c, CUgraph g, size_t *nodes,
                                      size_t *allocs, size_t *frees) {
  const weft_cuda_driver *d = c->d;
  size_t n = 0;
  *allocs = *frees = 0;
  CUresult r = d->cuGraphGetNodes(g, NULL, &n);
  if (r != CUDA_SUCCESS) return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuGraphGetNodes (count)");
  *nodes = n;
  if (!n) return NULL;
  CUgraphNode *list = weft__alloc(c->alloc, n * sizeof(*list), _Alignof(CUgraphNode));
  if (!list) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, n * sizeof(*list), "graph nodes");
  size_t got = n;
  weft_status st = NULL;
  r = d->cuGraphGetNodes(g, list, &got);
  if (r != CUDA_SUCCESS) st = CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuGraphGetNodes");
  for (size_t i = 0; !st && i < got && i < n; i++) {
    CUgraphNodeType t;
    r = d->cuGraphNodeGetType(list[i], &t);
    if (r != CUDA_SUCCESS) {
      st = CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuGraphNodeGetType");
      break;
    }
    if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) ++*allocs;
    if (t == CU_GRAPH_NODE_TYPE_MEM_FREE) ++*frees;
  }
  weft__free(c->alloc, list, n * sizeof(*list), _Alignof(CUgraphNode));
  return st;
}

/* The origin's edge events and forked streams, once its capture is over. */
static void capture_release(weft_cuda_stream *s) {
  for (uint32_t i = 0; i < s->ncap_events; i++) s->ctx->d->cuEventDestroy(s->cap_events[i]);
  for (uint32_t i = 0; i < s->nforked; i++) s->forked[i]->capturing = false;
  weft__free(s->ctx->alloc, s->cap_events, sizeof(CUevent) * s->cap_events_cap, 16);
  weft__free(s->ctx->alloc, s->forked, sizeof(weft_cuda_stream *) * s->forked_cap, 16);
  s->cap_events = NULL;
  s->forked = NULL;
  s->ncap_events = s->cap_events_cap = s->nforked = s->forked_cap = 0;
}

weft_status weft_cuda_capture_edge(weft_cuda_stream *origin, weft_cuda_stream *from,
                                   weft_cuda_stream *to) {
  weft_cuda_context *c = origin->ctx;
  if (!origin->capturing || !from->capturing || from == to)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_cuda_capture_edge: |from| must be in the origin's capture and "
                           "differ from |to|");
  weft_status st = ensure_current(c);
  if (st) return st;
  if (!weft__grow(c->alloc, (void **)&origin->cap_events, &origin->cap_events_cap,
                  origin->ncap_events + 1, sizeof(CUevent)) ||
      (!to->capturing && !weft__grow(c->alloc, (void **)&origin->forked, &origin->forked_cap,
                                     origin->nforked + 1, sizeof(weft_cuda_stream *))))
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(CUevent), "a capture edge");
  CUevent ev = NULL;
  CUresult r = c->d->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuEventCreate (capture edge)");
  origin->cap_events[origin->ncap_events++] = ev;
  r = c->d->cuEventRecord(ev, from->stream);
  if (r == CUDA_SUCCESS) r = c->d->cuStreamWaitEvent(to->stream, ev, 0);
  if (r != CUDA_SUCCESS) return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "a capture edge (record, wait)");
  if (!to->capturing) { /* the fork: |to| joined the capture */
    to->capturing = true;
    origin->forked[origin->nforked++] = to;
  }
  return NULL;
}

weft_status weft_cuda_capture_end(weft_cuda_stream *s, weft_cuda_graph **out) {
  weft_cuda_context *c = s->ctx;
  const weft_cuda_driver *d = c->d;
  *out = NULL;
  if (!s->capturing)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "weft_cuda_capture_end: not capturing");
  s->capturing = false; /* first: the stream leaves capture mode even if sealing fails */
  weft_status st = ensure_current(c);
  if (st) {
    capture_release(s);
    return st;
  }
  CUgraph g = NULL;
  CUresult r = d->cuStreamEndCapture(s->stream, &g);
  capture_release(s); /* forked streams left with the origin */
  if (r != CUDA_SUCCESS) {
    if (g) d->cuGraphDestroy(g);
    return CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuStreamEndCapture");
  }
  size_t nodes = 0, allocs = 0, frees = 0;
  st = count_memory_nodes(c, g, &nodes, &allocs, &frees);
  if (!st && allocs + frees)
    st = weft_error_make(WEFT_ERR_GENERIC,
                         "captured graph rejected: it holds %zu memory node%s (%zu MEM_ALLOC, %zu "
                         "MEM_FREE) of %zu; a graph with memory nodes launches once and fails "
                         "every relaunch: allocate outside the capture",
                         allocs + frees, allocs + frees == 1 ? "" : "s", allocs, frees, nodes);
  CUgraphExec exec = NULL;
  if (!st) {
    r = d->cuGraphInstantiateWithFlags(&exec, g, 0);
    if (r != CUDA_SUCCESS) st = CU_ERR(c, WEFT_CUDA_OP_ANY, r, "cuGraphInstantiateWithFlags");
  }
  d->cuGraphDestroy(g); /* the template: the executable graph does not need it */
  weft_cuda_graph *gr = NULL;
  if (!st) {
    gr = weft__calloc(c->alloc, sizeof(*gr), _Alignof(weft_cuda_graph));
    if (!gr) st = weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*gr), "CUDA graph");
  }
  if (st) {
    if (exec) d->cuGraphExecDestroy(exec);
    return st;
  }
  gr->ctx = c;
  gr->exec = exec;
  gr->nodes = nodes;
  *out = gr;
  return NULL;
}

weft_status weft_cuda_graph_launch(weft_cuda_graph *g, weft_cuda_stream *s) {
  weft_status st = ensure_current(g->ctx);
  if (st) return st;
  return CU_ERR(g->ctx, WEFT_CUDA_OP_ANY, g->ctx->d->cuGraphLaunch(g->exec, s->stream),
                "cuGraphLaunch");
}

size_t weft_cuda_graph_nodes(const weft_cuda_graph *g) {
  return g->nodes;
}

void weft_cuda_graph_destroy(weft_cuda_graph *g) {
  if (!g) return;
  weft_cuda_context *c = g->ctx;
  weft_error_free(ensure_current(c));
  weft_error_free(
      CU_ERR(c, WEFT_CUDA_OP_ANY, c->d->cuGraphExecDestroy(g->exec), "cuGraphExecDestroy"));
  weft__free(c->alloc, g, sizeof(*g), _Alignof(weft_cuda_graph));
}
