/* A fake CUDA driver (libcuda.so.1) for CI machines without a GPU.
 *
 * Implements a subset of the CUDA 13 Driver API on the CPU, with the real
 * prototypes and exported (versioned) names from <cuda.h>. One device, one
 * primary context. Device memory is host memory. Every CUstream is an
 * in-order queue run by its own worker thread, so work is asynchronous:
 * queries say CUDA_ERROR_NOT_READY while work is pending, cross-stream event
 * waits really wait, and kernel faults surface at the next synchronisation.
 * The legacy NULL stream has the legacy implicit synchronisation with the
 * blocking streams. Kernels are C emulations chosen by entry name
 * (fake_cuda_kernels.c). Stream capture records the work into a CUgraph
 * (one node per operation, in order) that cuGraphLaunch replays.
 *
 * Locking: one mutex (G.mu) guards all state; it is not held while a worker
 * runs a kernel, a copy or a host function. Workers park on their stream's
 * condition variable; everything that waits for completed work waits on
 * G.cv_done, broadcast whenever an operation completes.
 *
 * See README.md for the control API and the environment variables. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "fake_cuda_control.h"
#include "fake_cuda_internal.h"

#define FC_DRIVER_VERSION   13000
#define FC_DEFAULT_CAPACITY ((size_t)1 << 30)
#define FC_ALIGN            256
#define FC_MAX_SHARED       (48 * 1024)

/* ---- objects --------------------------------------------------------------------------- */

enum op_kind {
  OP_KERNEL,
  OP_MEMCPY,
  OP_MEMSET,
  OP_HOSTFN,
  OP_EVENT_RECORD,
  OP_EVENT_WAIT,
  OP_MEM_ALLOC,
  OP_MEM_FREE,
  OP_NOP, /* a marker: cuStreamSynchronize of the legacy stream */
};

typedef struct op {
  struct op *next;
  enum op_kind kind;
  union {
    struct {
      const fc_kernel *k;
      fc_dim grid, block;
      union {
        max_align_t align;
        unsigned char bytes[FC_MAX_PARAM];
      } args[FC_MAX_PARAMS];
    } kernel;
    struct {
      void *dst;
      const void *src;
      size_t n;
    } copy;
    struct {
      void *dst;
      unsigned char value;
      size_t n;
    } set;
    struct {
      CUhostFn fn;
      void *data;
    } host;
    struct {
      struct CUevent_st *ev;
      uint64_t gen;
    } event;
    struct {
      CUdeviceptr ptr;
      size_t bytes;
    } mem;
  } u;
} op;

struct CUevent_st {
  struct CUevent_st *prev, *next;
  bool listed; /* a user handle (false: an internal barrier event) */
  unsigned flags;
  unsigned refs;
  uint64_t recorded_gen, done_gen;
  struct timespec time;
  /* Recorded on a capturing stream: the capture (its id) and the stream and
   * its captured node count then; a wait on it forks or joins. */
  uint64_t cap_id;
  struct CUstream_st *cap_stream;
  size_t cap_ops;
};

enum capture_state { CAP_NONE, CAP_ACTIVE, CAP_INVALIDATED };

struct CUstream_st {
  struct CUstream_st *prev, *next;
  bool legacy;
  unsigned flags;
  int priority;
  op *head, *tail;
  uint64_t submitted, completed;
  bool stop;
  pthread_t thread;
  pthread_cond_t cv_work;
  enum capture_state cap;
  CUstreamCaptureMode cap_mode;
  pthread_t cap_thread;
  uint64_t cap_id;
  struct CUgraph_st *cap_graph;
  /* Fork/join: a stream that joined another's capture by waiting on an
   * event recorded there; the nodes it added, and how many of them a wait
   * on an event of it has covered (joined back). */
  struct CUstream_st *cap_origin; /* the stream that began the capture (itself there) */
  size_t cap_ops, cap_joined_ops;
};

struct CUfunc_st {
  struct CUmod_st *mod;
  const fc_kernel *k;
  const char *name;
};

struct CUmod_st {
  struct CUmod_st *prev, *next;
  fc_entry *entries;
  struct CUfunc_st *funcs;
  size_t n;
};

struct CUgraphNode_st {
  CUgraphNodeType type;
  op op;
};

struct CUgraph_st {
  struct CUgraph_st *prev, *next;
  struct CUgraphNode_st **nodes;
  size_t n, cap;
};

struct CUgraphExec_st {
  struct CUgraphExec_st *prev, *next;
  op *ops;
  size_t n;
};

struct CUctx_st {
  int unused;
};

typedef struct alloc {
  uintptr_t base;
  size_t size; /* requested */
  size_t acct; /* counted against the capacity: size rounded up to FC_ALIGN */
  bool free_pending;
  struct CUgraph_st *graph; /* allocated by a captured cuMemAllocAsync: the graph owns it */
} alloc;

typedef struct injection {
  struct injection *next;
  char name[64];
  CUresult r;
  unsigned skip;
} injection;

#define LIST_PUSH(head, x)                                                                         \
  do {                                                                                             \
    (x)->prev = NULL;                                                                              \
    (x)->next = (head);                                                                            \
    if (head) (head)->prev = (x);                                                                  \
    (head) = (x);                                                                                  \
  } while (0)
#define LIST_UNLINK(head, x)                                                                       \
  do {                                                                                             \
    if ((x)->prev)                                                                                 \
      (x)->prev->next = (x)->next;                                                                 \
    else                                                                                           \
      (head) = (x)->next;                                                                          \
    if ((x)->next) (x)->next->prev = (x)->prev;                                                    \
  } while (0)

struct stats {
  uint64_t launches, kernels_run, mem_alloc_calls, mem_free_calls, live_allocations, live_bytes,
      peak_bytes, memcpys, memsets, host_funcs, event_waits, event_records, graph_launches,
      captures, streams_live, events_live, modules_live, graphs_live, graph_execs_live,
      host_allocs_live, injected_failures, leaked_at_ctx_release;
  uint64_t last_shared_bytes; /* sharedMemBytes of the last accepted cuLaunchKernel */
};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv_done;
  bool initialized;
  int devices;
  size_t capacity, used;
  unsigned ctx_refs;
  CUresult sticky;
  bool draining; /* teardown: workers drop their queued work */
  struct CUstream_st *streams;
  struct CUstream_st *legacy;
  struct CUevent_st *events;
  struct CUmod_st *modules;
  struct CUgraph_st *graphs;
  struct CUgraphExec_st *execs;
  alloc *allocs; /* sorted by base */
  size_t nallocs, allocs_cap;
  void **host; /* cuMemHostAlloc blocks */
  size_t nhost, host_cap;
  injection *injections;
  uint64_t next_capture_id;
  struct stats st;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv_done = PTHREAD_COND_INITIALIZER};

static struct CUctx_st primary_ctx;
static _Thread_local CUcontext tls_ctx;

static void lock(void) {
  pthread_mutex_lock(&G.mu);
}

static void unlock(void) {
  pthread_mutex_unlock(&G.mu);
}

/* ---- entry checks and error injection ------------------------------------------------- */

static void base_name(const char *name, char out[64]) {
  size_t len = strnlen(name, 63);
  memcpy(out, name, len);
  out[len] = '\0';
  char *v = strrchr(out, '_'); /* "cuMemAlloc_v2" -> "cuMemAlloc" */
  if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9' &&
      strspn(v + 2, "0123456789") == strlen(v + 2))
    *v = '\0';
}

static CUresult injected(const char *name) {
  for (injection **p = &G.injections; *p; p = &(*p)->next) {
    if (strcmp((*p)->name, name) != 0) continue;
    if ((*p)->skip) {
      (*p)->skip--;
      return CUDA_SUCCESS;
    }
    injection *hit = *p;
    CUresult r = hit->r;
    *p = hit->next;
    free(hit);
    G.st.injected_failures++;
    return r;
  }
  return CUDA_SUCCESS;
}

enum need {
  NEED_NOTHING,    /* only error injection */
  NEED_INIT,       /* cuInit succeeded */
  NEED_CTX,        /* + the primary context retained and current; no sticky error */
  NEED_CTX_STICKY, /* + context, but a sticky error is returned by the caller afterwards */
};

/* Locks G.mu and checks what the call needs; on failure unlocks and returns
 * the error. On success the caller holds G.mu. */
static CUresult enter(const char *name, enum need need) {
  lock();
  CUresult r = injected(name);
  if (r == CUDA_SUCCESS && need >= NEED_INIT && !G.initialized) r = CUDA_ERROR_NOT_INITIALIZED;
  if (r == CUDA_SUCCESS && need >= NEED_CTX) {
    if (tls_ctx != &primary_ctx)
      r = CUDA_ERROR_INVALID_CONTEXT;
    else if (G.ctx_refs == 0)
      r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    else if (need == NEED_CTX && G.sticky)
      r = G.sticky;
  }
  if (r != CUDA_SUCCESS) unlock();
  return r;
}

static CUresult leave(CUresult r) {
  unlock();
  return r;
}

static void set_sticky(CUresult r) {
  if (!G.sticky) G.sticky = r;
  pthread_cond_broadcast(&G.cv_done);
}

/* ---- device memory -------------------------------------------------------------------- */

/* Index of the allocation containing p, or -1. */
static long alloc_find(uintptr_t p) {
  size_t lo = 0, hi = G.nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (G.allocs[mid].base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return -1;
  alloc *a = &G.allocs[lo - 1];
  return p - a->base < a->size ? (long)(lo - 1) : -1;
}

static bool range_ok(uintptr_t p, size_t n) {
  if (n == 0) return true;
  long i = alloc_find(p);
  if (i < 0) return false;
  alloc *a = &G.allocs[i];
  return n <= a->size - (p - a->base);
}

int fc_device_range_ok(const void *p, size_t bytes) {
  lock();
  bool ok = range_ok((uintptr_t)p, bytes);
  unlock();
  return ok;
}

static CUresult alloc_new(CUdeviceptr *out, size_t bytes, struct CUgraph_st *graph) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > SIZE_MAX - FC_ALIGN) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t acct = (bytes + FC_ALIGN - 1) / FC_ALIGN * FC_ALIGN;
  if (acct > G.capacity - G.used) return CUDA_ERROR_OUT_OF_MEMORY;
  if (G.nallocs == G.allocs_cap) {
    size_t cap = G.allocs_cap ? 2 * G.allocs_cap : 64;
    alloc *grown = realloc(G.allocs, cap * sizeof *grown);
    if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
    G.allocs = grown;
    G.allocs_cap = cap;
  }
  void *mem = aligned_alloc(FC_ALIGN, acct);
  if (!mem) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t base = (uintptr_t)mem;
  size_t i = 0;
  while (i < G.nallocs && G.allocs[i].base < base) i++; /* keep sorted */
  memmove(&G.allocs[i + 1], &G.allocs[i], (G.nallocs - i) * sizeof *G.allocs);
  G.allocs[i] = (alloc){.base = base, .size = bytes, .acct = acct, .graph = graph};
  G.nallocs++;
  G.used += acct;
  G.st.live_allocations++;
  G.st.live_bytes += acct;
  if (G.st.live_bytes > G.st.peak_bytes) G.st.peak_bytes = G.st.live_bytes;
  G.st.mem_alloc_calls++;
  *out = (CUdeviceptr)base;
  return CUDA_SUCCESS;
}

static void alloc_release(size_t i) {
  alloc *a = &G.allocs[i];
  free((void *)a->base);
  G.used -= a->acct;
  G.st.live_allocations--;
  G.st.live_bytes -= a->acct;
  memmove(&G.allocs[i], &G.allocs[i + 1], (G.nallocs - i - 1) * sizeof *G.allocs);
  G.nallocs--;
}

/* The allocation that starts at p (not an interior pointer), or -1. */
static long alloc_exact(CUdeviceptr p) {
  long i = alloc_find((uintptr_t)p);
  return i >= 0 && G.allocs[i].base == (uintptr_t)p ? i : -1;
}

/* ---- events ---------------------------------------------------------------------------- */

static struct CUevent_st *event_new(bool listed, unsigned flags) {
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (!ev) return NULL;
  ev->listed = listed;
  ev->flags = flags;
  ev->refs = 1;
  if (listed) {
    LIST_PUSH(G.events, ev);
    G.st.events_live++;
  }
  return ev;
}

static void event_unref(struct CUevent_st *ev) {
  if (--ev->refs) return;
  if (ev->listed) {
    LIST_UNLINK(G.events, ev);
    G.st.events_live--;
  }
  free(ev);
}

static bool event_valid(CUevent h) {
  for (struct CUevent_st *e = G.events; e; e = e->next)
    if (e == h) return true;
  return false;
}

/* ---- operations, streams and workers ---------------------------------------------------- */

static op *op_new(enum op_kind kind) {
  op *o = calloc(1, sizeof *o);
  if (o) o->kind = kind;
  return o;
}

/* Releases what an operation (or a graph node's template) references. */
static void op_release(op *o) {
  if (o->kind == OP_EVENT_RECORD || o->kind == OP_EVENT_WAIT) event_unref(o->u.event.ev);
}

static void op_free(op *o) {
  op_release(o);
  free(o);
}

static void push_op(struct CUstream_st *s, op *o) {
  o->next = NULL;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->submitted++;
  pthread_cond_signal(&s->cv_work);
}

static bool pending(const struct CUstream_st *s) {
  return s->completed < s->submitted;
}

/* Runs one operation without G.mu held. */
static CUresult run_op(op *o) {
  switch (o->kind) {
  case OP_KERNEL: {
    void *params[FC_MAX_PARAMS];
    for (unsigned i = 0; i < o->u.kernel.k->nparams; i++) params[i] = o->u.kernel.args[i].bytes;
    return o->u.kernel.k->run(params, o->u.kernel.grid, o->u.kernel.block);
  }
  case OP_MEMCPY:
    memcpy(o->u.copy.dst, o->u.copy.src, o->u.copy.n);
    return CUDA_SUCCESS;
  case OP_MEMSET:
    memset(o->u.set.dst, o->u.set.value, o->u.set.n);
    return CUDA_SUCCESS;
  case OP_HOSTFN:
    o->u.host.fn(o->u.host.data);
    return CUDA_SUCCESS;
  default:
    return CUDA_SUCCESS;
  }
}

static void *worker(void *arg) {
  struct CUstream_st *s = arg;
  lock();
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv_work, &G.mu);
    op *o = s->head;
    if (!o) break;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    if (!G.sticky && !G.draining) { /* a faulted context runs nothing more */
      switch (o->kind) {
      case OP_EVENT_WAIT:
        while (!G.sticky && !G.draining && o->u.event.ev->done_gen < o->u.event.gen)
          pthread_cond_wait(&G.cv_done, &G.mu);
        break;
      case OP_EVENT_RECORD: {
        struct CUevent_st *ev = o->u.event.ev;
        if (o->u.event.gen > ev->done_gen) {
          ev->done_gen = o->u.event.gen;
          clock_gettime(CLOCK_MONOTONIC, &ev->time);
        }
        break;
      }
      case OP_MEM_FREE: {
        long i = alloc_exact(o->u.mem.ptr);
        if (i >= 0) alloc_release((size_t)i);
        break;
      }
      case OP_MEM_ALLOC:
      case OP_NOP:
        break;
      default: {
        if (o->kind == OP_KERNEL) G.st.kernels_run++;
        unlock();
        CUresult r = run_op(o);
        lock();
        if (r != CUDA_SUCCESS) set_sticky(r);
      }
      }
    } else if (o->kind == OP_MEM_FREE) { /* dropped: the memory was never freed */
      long i = alloc_exact(o->u.mem.ptr);
      if (i >= 0) G.allocs[i].free_pending = false;
    }
    s->completed++;
    op_free(o);
    pthread_cond_broadcast(&G.cv_done);
  }
  unlock();
  return NULL;
}

static CUresult stream_new(bool legacy, unsigned flags, int priority, struct CUstream_st **out) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->legacy = legacy;
  s->flags = flags;
  s->priority = priority;
  pthread_cond_init(&s->cv_work, NULL);
  if (pthread_create(&s->thread, NULL, worker, s) != 0) {
    pthread_cond_destroy(&s->cv_work);
    free(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  LIST_PUSH(G.streams, s);
  if (!legacy) G.st.streams_live++;
  *out = s;
  return CUDA_SUCCESS;
}

static void graph_free(struct CUgraph_st *g);

/* Unlinks s, lets its worker finish its queue, joins it and frees s.
 * Called with G.mu held; drops it while joining. */
static void stream_destroy(struct CUstream_st *s) {
  LIST_UNLINK(G.streams, s);
  if (s->legacy)
    G.legacy = NULL;
  else
    G.st.streams_live--;
  if (s->cap_graph && s->cap_origin == s) { /* forked streams leave the capture */
    for (struct CUstream_st *t = G.streams; t; t = t->next)
      if (t->cap_graph == s->cap_graph) {
        t->cap = CAP_NONE;
        t->cap_graph = NULL;
        t->cap_origin = NULL;
      }
    graph_free(s->cap_graph);
  }
  s->stop = true;
  pthread_cond_signal(&s->cv_work);
  unlock();
  pthread_join(s->thread, NULL);
  lock();
  pthread_cond_destroy(&s->cv_work);
  free(s);
}

static bool stream_listed(CUstream h) {
  for (struct CUstream_st *s = G.streams; s; s = s->next)
    if (s == h && !s->legacy) return true;
  return false;
}

/* The NULL stream, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD all mean the
 * legacy default stream (created on first use). */
static CUresult resolve_stream(CUstream h, struct CUstream_st **out) {
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    if (!G.legacy) {
      CUresult r = stream_new(true, 0, 0, &G.legacy);
      if (r != CUDA_SUCCESS) return r;
    }
    *out = G.legacy;
    return CUDA_SUCCESS;
  }
  if (!stream_listed(h)) return CUDA_ERROR_INVALID_HANDLE;
  *out = h;
  return CUDA_SUCCESS;
}

/* Makes `waiter` wait for everything queued so far on `target`, through an
 * internal event (refcounted, so either stream may go away first). */
static CUresult barrier(struct CUstream_st *target, struct CUstream_st *waiter) {
  struct CUevent_st *ev = event_new(false, 0);
  op *rec = op_new(OP_EVENT_RECORD), *wait = op_new(OP_EVENT_WAIT);
  if (!ev || !rec || !wait) {
    free(ev), free(rec), free(wait);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ev->refs = 2; /* one per operation */
  rec->u.event.ev = wait->u.event.ev = ev;
  rec->u.event.gen = wait->u.event.gen = ++ev->recorded_gen;
  push_op(target, rec);
  push_op(waiter, wait);
  return CUDA_SUCCESS;
}

/* Invalidates |s|'s capture: every stream in it (forked ones included). */
static void invalidate_capture(struct CUstream_st *s) {
  if (s->cap != CAP_ACTIVE) return;
  struct CUgraph_st *g = s->cap_graph;
  for (struct CUstream_st *t = G.streams; t; t = t->next)
    if (t->cap == CAP_ACTIVE && t->cap_graph == g) t->cap = CAP_INVALIDATED;
  s->cap = CAP_INVALIDATED;
}

static CUgraphNodeType node_type(enum op_kind k) {
  switch (k) {
  case OP_KERNEL:
    return CU_GRAPH_NODE_TYPE_KERNEL;
  case OP_MEMCPY:
    return CU_GRAPH_NODE_TYPE_MEMCPY;
  case OP_MEMSET:
    return CU_GRAPH_NODE_TYPE_MEMSET;
  case OP_HOSTFN:
    return CU_GRAPH_NODE_TYPE_HOST;
  case OP_EVENT_RECORD:
    return CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  case OP_EVENT_WAIT:
    return CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  case OP_MEM_ALLOC:
    return CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  case OP_MEM_FREE:
    return CU_GRAPH_NODE_TYPE_MEM_FREE;
  case OP_NOP:
    return CU_GRAPH_NODE_TYPE_EMPTY;
  }
  return CU_GRAPH_NODE_TYPE_EMPTY;
}

static CUresult graph_append(struct CUgraph_st *g, op *o) {
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 16;
    struct CUgraphNode_st **grown = realloc(g->nodes, cap * sizeof *grown);
    if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes = grown;
    g->cap = cap;
  }
  struct CUgraphNode_st *node = malloc(sizeof *node);
  if (!node) return CUDA_ERROR_OUT_OF_MEMORY;
  node->type = node_type(o->kind);
  node->op = *o;
  node->op.next = NULL;
  g->nodes[g->n++] = node;
  free(o); /* the node took over its references */
  return CUDA_SUCCESS;
}

/* Queues o on s (or records it, if s captures), with the legacy stream's
 * implicit synchronisation. Takes o in every case. For events, gen is
 * assigned here. */
static CUresult submit(struct CUstream_st *s, op *o) {
  if (s->cap == CAP_INVALIDATED) {
    op_free(o);
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (s->cap == CAP_ACTIVE) {
    CUresult r = graph_append(s->cap_graph, o);
    if (r != CUDA_SUCCESS)
      op_free(o);
    else
      s->cap_ops++;
    return r;
  }
  if (s->legacy) { /* the legacy stream waits for every blocking stream */
    for (struct CUstream_st *t = G.streams; t; t = t->next) {
      if (t->legacy || (t->flags & CU_STREAM_NON_BLOCKING) || t->cap != CAP_ACTIVE) continue;
      invalidate_capture(t);
      op_free(o);
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    for (struct CUstream_st *t = G.streams; t; t = t->next) {
      if (t->legacy || (t->flags & CU_STREAM_NON_BLOCKING) || !pending(t)) continue;
      CUresult r = barrier(t, s);
      if (r != CUDA_SUCCESS) {
        op_free(o);
        return r;
      }
    }
  } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && G.legacy && pending(G.legacy)) {
    CUresult r = barrier(G.legacy, s); /* ... and every blocking stream for the legacy one */
    if (r != CUDA_SUCCESS) {
      op_free(o);
      return r;
    }
  }
  if (o->kind == OP_EVENT_RECORD) o->u.event.gen = ++o->u.event.ev->recorded_gen;
  if (o->kind == OP_EVENT_WAIT) o->u.event.gen = o->u.event.ev->recorded_gen;
  push_op(s, o);
  return CUDA_SUCCESS;
}

/* Waits until s completed everything queued before this call. */
static void wait_stream(struct CUstream_st *s) {
  uint64_t target = s->submitted;
  while (s->completed < target) pthread_cond_wait(&G.cv_done, &G.mu);
}

/* Waits until every stream completed what was queued before this call. */
static CUresult wait_all(void) {
  size_t n = 0;
  for (struct CUstream_st *s = G.streams; s; s = s->next) n += pending(s);
  if (n == 0) return CUDA_SUCCESS;
  struct CUevent_st **evs = calloc(n, sizeof *evs);
  if (!evs) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t k = 0;
  for (struct CUstream_st *s = G.streams; s && k < n; s = s->next) {
    if (!pending(s)) continue;
    op *rec = op_new(OP_EVENT_RECORD);
    struct CUevent_st *ev = event_new(false, 0);
    if (!rec || !ev) {
      free(rec), free(ev);
      break;
    }
    ev->refs = 2; /* the operation's and ours */
    rec->u.event.ev = ev;
    rec->u.event.gen = ++ev->recorded_gen;
    push_op(s, rec);
    evs[k++] = ev;
  }
  for (size_t i = 0; i < k; i++) {
    while (evs[i]->done_gen < evs[i]->recorded_gen && !G.sticky)
      pthread_cond_wait(&G.cv_done, &G.mu);
    event_unref(evs[i]);
  }
  free(evs);
  return k == n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Captures that a potentially unsafe call (synchronous allocation or copy)
 * from this thread violates: this thread's non-relaxed captures and every
 * other thread's global-mode capture. They are invalidated. */
static CUresult check_unsafe(void) {
  bool hit = false;
  for (struct CUstream_st *s = G.streams; s; s = s->next) {
    if (s->cap != CAP_ACTIVE) continue;
    bool mine = pthread_equal(s->cap_thread, pthread_self());
    if ((mine && s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        s->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
      invalidate_capture(s);
      hit = true;
    }
  }
  return hit ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* ---- graphs ----------------------------------------------------------------------------- */

static void graph_free(struct CUgraph_st *g) {
  for (size_t i = 0; i < g->n; i++) {
    op_release(&g->nodes[i]->op);
    free(g->nodes[i]);
  }
  free(g->nodes);
  for (size_t i = G.nallocs; i-- > 0;) /* memory allocated by captured cuMemAllocAsync */
    if (G.allocs[i].graph == g) alloc_release(i);
  free(g);
}

static void graph_unlist(struct CUgraph_st *g) {
  LIST_UNLINK(G.graphs, g);
  G.st.graphs_live--;
}

static bool graph_valid(CUgraph h) {
  for (struct CUgraph_st *g = G.graphs; g; g = g->next)
    if (g == h) return true;
  return false;
}

static bool exec_valid(CUgraphExec h) {
  for (struct CUgraphExec_st *e = G.execs; e; e = e->next)
    if (e == h) return true;
  return false;
}

static void exec_free(struct CUgraphExec_st *e) {
  for (size_t i = 0; i < e->n; i++) op_release(&e->ops[i]);
  free(e->ops);
  free(e);
}

/* ---- teardown --------------------------------------------------------------------------- */

/* Destroys every object of the context. Returns how many there were. */
static uint64_t teardown(void) {
  uint64_t n = 0;
  G.draining = true;
  pthread_cond_broadcast(&G.cv_done);
  while (G.streams) {
    n += !G.streams->legacy;
    stream_destroy(G.streams);
  }
  G.draining = false;
  while (G.graphs) {
    struct CUgraph_st *g = G.graphs;
    graph_unlist(g);
    graph_free(g);
    n++;
  }
  while (G.execs) {
    struct CUgraphExec_st *e = G.execs;
    LIST_UNLINK(G.execs, e);
    G.st.graph_execs_live--;
    exec_free(e);
    n++;
  }
  while (G.events) { /* only user handles are left: no operation holds a reference now */
    struct CUevent_st *e = G.events;
    LIST_UNLINK(G.events, e);
    G.st.events_live--;
    free(e);
    n++;
  }
  while (G.modules) {
    struct CUmod_st *m = G.modules;
    LIST_UNLINK(G.modules, m);
    G.st.modules_live--;
    fc_entries_free(m->entries, m->n);
    free(m->funcs);
    free(m);
    n++;
  }
  n += G.nallocs + G.nhost;
  while (G.nallocs) alloc_release(G.nallocs - 1);
  for (size_t i = 0; i < G.nhost; i++) free(G.host[i]);
  G.nhost = 0;
  G.st.host_allocs_live = 0;
  return n;
}

/* ---- initialisation, device, context ---------------------------------------------------- */

static unsigned long long env_u64(const char *name, unsigned long long dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  unsigned long long x = strtoull(v, &end, 0);
  return *end ? dflt : x;
}

FC_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
  CUresult r = enter("cuInit", NEED_NOTHING);
  if (r != CUDA_SUCCESS) return r;
  if (Flags != 0) return leave(CUDA_ERROR_INVALID_VALUE);
  if (G.initialized) return leave(CUDA_SUCCESS);
  if (env_u64("FAKE_CUDA_FAIL_INIT", 0)) return leave(CUDA_ERROR_NO_DEVICE);
  G.devices = env_u64("FAKE_CUDA_DEVICES", 1) ? 1 : 0;
  G.capacity = (size_t)env_u64("FAKE_CUDA_MEMORY_BYTES", FC_DEFAULT_CAPACITY);
  G.initialized = true;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
  CUresult r = enter("cuDriverGetVersion", NEED_NOTHING);
  if (r != CUDA_SUCCESS) return r;
  if (!driverVersion) return leave(CUDA_ERROR_INVALID_VALUE);
  *driverVersion = FC_DRIVER_VERSION;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
  CUresult r = enter("cuDeviceGetCount", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!count) return leave(CUDA_ERROR_INVALID_VALUE);
  *count = G.devices;
  return leave(CUDA_SUCCESS);
}

static bool device_ok(CUdevice d) {
  return d >= 0 && d < G.devices;
}

FC_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  CUresult r = enter("cuDeviceGet", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!device) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!device_ok(ordinal)) return leave(CUDA_ERROR_INVALID_DEVICE);
  *device = ordinal;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
  CUresult r = enter("cuDeviceGetName", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!name || len <= 0) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!device_ok(dev)) return leave(CUDA_ERROR_INVALID_DEVICE);
  snprintf(name, (size_t)len, "%s", "Fake CUDA Device");
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  CUresult r = enter("cuDeviceTotalMem", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!bytes) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!device_ok(dev)) return leave(CUDA_ERROR_INVALID_DEVICE);
  *bytes = G.capacity;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  CUresult r = enter("cuDeviceGetAttribute", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
    return leave(CUDA_ERROR_INVALID_VALUE);
  if (!device_ok(dev)) return leave(CUDA_ERROR_INVALID_DEVICE);
  int v = 0;
  switch (attrib) {
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    v = 4;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    v = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    v = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
    v = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
    v = 64;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
    v = 2147483647;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    v = 65535;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
    v = 65535;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    v = 9;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    v = 0;
    break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    v = 1;
    break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
    v = 32;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    v = FC_MAX_SHARED;
    break;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    v = 1;
    break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    v = 1;
    break;
  case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
    v = 2;
    break;
  default:
    v = 0;
  }
  *pi = v;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  CUresult r = enter("cuDevicePrimaryCtxRetain", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!pctx) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!device_ok(dev)) return leave(CUDA_ERROR_INVALID_DEVICE);
  G.ctx_refs++;
  *pctx = &primary_ctx;
  return leave(CUDA_SUCCESS);
}

/* The last release destroys every object of the context, as a real driver
 * does; how many there were is counted in leaked_at_ctx_release. */
FC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUresult r = enter("cuDevicePrimaryCtxRelease", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!device_ok(dev)) return leave(CUDA_ERROR_INVALID_DEVICE);
  if (G.ctx_refs == 0) return leave(CUDA_ERROR_INVALID_CONTEXT);
  if (--G.ctx_refs == 0) G.st.leaked_at_ctx_release += teardown();
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  CUresult r = enter("cuCtxSetCurrent", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (ctx && ctx != &primary_ctx) return leave(CUDA_ERROR_INVALID_CONTEXT);
  tls_ctx = ctx;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  CUresult r = enter("cuCtxGetCurrent", NEED_INIT);
  if (r != CUDA_SUCCESS) return r;
  if (!pctx) return leave(CUDA_ERROR_INVALID_VALUE);
  *pctx = tls_ctx;
  return leave(CUDA_SUCCESS);
}

static CUresult ctx_synchronize(void) {
  bool capturing = false;
  for (struct CUstream_st *s = G.streams; s; s = s->next)
    if (s->cap == CAP_ACTIVE) {
      invalidate_capture(s);
      capturing = true;
    }
  if (capturing) return leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUresult r = wait_all();
  return leave(G.sticky ? G.sticky : r);
}

FC_EXPORT CUresult CUDAAPI cuCtxSynchronize(void) {
  CUresult r = enter("cuCtxSynchronize", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  return ctx_synchronize();
}

FC_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  CUresult r = enter("cuCtxSynchronize", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (ctx && ctx != &primary_ctx) return leave(CUDA_ERROR_INVALID_CONTEXT);
  return ctx_synchronize();
}

/* ---- errors ----------------------------------------------------------------------------- */

static const struct {
  CUresult r;
  const char *name, *text;
} errors[] = {
#define X(name, text) {name, #name, text},
#include "fake_cuda_errors.inc"
#undef X
};

FC_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  CUresult r = enter("cuGetErrorName", NEED_NOTHING);
  if (r != CUDA_SUCCESS) return r;
  if (!pStr) return leave(CUDA_ERROR_INVALID_VALUE);
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].r == error) {
      *pStr = errors[i].name;
      return leave(CUDA_SUCCESS);
    }
  *pStr = NULL;
  return leave(CUDA_ERROR_INVALID_VALUE);
}

FC_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  CUresult r = enter("cuGetErrorString", NEED_NOTHING);
  if (r != CUDA_SUCCESS) return r;
  if (!pStr) return leave(CUDA_ERROR_INVALID_VALUE);
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].r == error) {
      *pStr = errors[i].text;
      return leave(CUDA_SUCCESS);
    }
  *pStr = NULL;
  return leave(CUDA_ERROR_INVALID_VALUE);
}

/* ---- streams ---------------------------------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                      int priority) {
  CUresult r = enter("cuStreamCreateWithPriority", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
    return leave(CUDA_ERROR_INVALID_VALUE);
  struct CUstream_st *s;
  r = stream_new(false, flags, priority, &s);
  if (r == CUDA_SUCCESS) *phStream = s;
  return leave(r);
}

FC_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  CUresult r = enter("cuStreamCreate", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
    return leave(CUDA_ERROR_INVALID_VALUE);
  struct CUstream_st *s;
  r = stream_new(false, Flags, 0, &s);
  if (r == CUDA_SUCCESS) *phStream = s;
  return leave(r);
}

/* Drains the stream's queued work, then destroys it. */
FC_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  CUresult r = enter("cuStreamDestroy", NEED_CTX_STICKY);
  if (r != CUDA_SUCCESS) return r;
  if (!stream_listed(hStream)) return leave(CUDA_ERROR_INVALID_HANDLE);
  stream_destroy(hStream);
  return leave(G.sticky);
}

FC_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  CUresult r = enter("cuStreamSynchronize", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (s->cap != CAP_NONE) {
    invalidate_capture(s);
    return leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  }
  if (s->legacy) { /* a legacy-stream operation: waits for the blocking streams too */
    op *o = op_new(OP_NOP);
    if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
    if ((r = submit(s, o)) != CUDA_SUCCESS) return leave(r);
  }
  wait_stream(s);
  return leave(G.sticky);
}

FC_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  CUresult r = enter("cuStreamQuery", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (s->cap != CAP_NONE) {
    invalidate_capture(s);
    return leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  }
  return leave(pending(s) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  CUresult r = enter("cuStreamWaitEvent", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!event_valid(hEvent)) return leave(CUDA_ERROR_INVALID_HANDLE);
  if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return leave(CUDA_ERROR_INVALID_VALUE);
  struct CUstream_st *from = hEvent->cap_id ? hEvent->cap_stream : NULL;
  if (from && from->cap == CAP_ACTIVE && from->cap_id == hEvent->cap_id) {
    /* An event recorded inside a live capture: the waiter joins it (a fork)
     * or already is in it (a dependency; nodes replay in capture order, so
     * it needs no node). Either way |from|'s nodes so far are covered. */
    if (s->cap == CAP_NONE) {
      s->cap = CAP_ACTIVE;
      s->cap_mode = from->cap_mode;
      s->cap_thread = from->cap_thread;
      s->cap_id = from->cap_id;
      s->cap_graph = from->cap_graph;
      s->cap_origin = from->cap_origin;
      s->cap_ops = s->cap_joined_ops = 0;
    } else if (s->cap_graph != from->cap_graph) {
      invalidate_capture(s);
      invalidate_capture(from);
      return leave(CUDA_ERROR_STREAM_CAPTURE_MERGE);
    } else if (s->cap != CAP_ACTIVE) {
      return leave(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    if (hEvent->cap_ops > from->cap_joined_ops) from->cap_joined_ops = hEvent->cap_ops;
    return leave(CUDA_SUCCESS);
  }
  op *o = op_new(OP_EVENT_WAIT);
  if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  o->u.event.ev = hEvent;
  hEvent->refs++;
  bool captured = s->cap != CAP_NONE;
  r = submit(s, o);
  if (r == CUDA_SUCCESS && !captured) G.st.event_waits++;
  return leave(r);
}

/* ---- events (API) ----------------------------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  CUresult r = enter("cuEventCreate", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!phEvent || (Flags & ~known)) return leave(CUDA_ERROR_INVALID_VALUE);
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
    return leave(CUDA_ERROR_INVALID_VALUE);
  struct CUevent_st *ev = event_new(true, Flags);
  if (!ev) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  *phEvent = ev;
  return leave(CUDA_SUCCESS);
}

/* Queued records and waits keep the event alive until they have run. */
FC_EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  CUresult r = enter("cuEventDestroy", NEED_CTX_STICKY);
  if (r != CUDA_SUCCESS) return r;
  if (!event_valid(hEvent)) return leave(CUDA_ERROR_INVALID_HANDLE);
  LIST_UNLINK(G.events, hEvent);
  hEvent->listed = false;
  G.st.events_live--;
  event_unref(hEvent);
  return leave(G.sticky);
}

FC_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  CUresult r = enter("cuEventRecord", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!event_valid(hEvent)) return leave(CUDA_ERROR_INVALID_HANDLE);
  if (s->cap == CAP_ACTIVE) { /* a capture dependency, not a node: fork/join */
    hEvent->cap_id = s->cap_id;
    hEvent->cap_stream = s;
    hEvent->cap_ops = s->cap_ops;
    return leave(CUDA_SUCCESS);
  }
  hEvent->cap_id = 0;
  hEvent->cap_stream = NULL;
  op *o = op_new(OP_EVENT_RECORD);
  if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  o->u.event.ev = hEvent;
  hEvent->refs++;
  bool captured = s->cap != CAP_NONE;
  r = submit(s, o);
  if (r == CUDA_SUCCESS && !captured) G.st.event_records++;
  return leave(r);
}

FC_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  CUresult r = enter("cuEventQuery", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!event_valid(hEvent)) return leave(CUDA_ERROR_INVALID_HANDLE);
  return leave(hEvent->done_gen < hEvent->recorded_gen ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  CUresult r = enter("cuEventSynchronize", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!event_valid(hEvent)) return leave(CUDA_ERROR_INVALID_HANDLE);
  uint64_t target = hEvent->recorded_gen;
  hEvent->refs++;
  while (hEvent->done_gen < target && !G.sticky) pthread_cond_wait(&G.cv_done, &G.mu);
  event_unref(hEvent);
  return leave(G.sticky);
}

FC_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart,
                                                 CUevent hEnd) {
  CUresult r = enter("cuEventElapsedTime", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!pMilliseconds) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!event_valid(hStart) || !event_valid(hEnd)) return leave(CUDA_ERROR_INVALID_HANDLE);
  if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING)
    return leave(CUDA_ERROR_INVALID_HANDLE);
  if (!hStart->recorded_gen || !hEnd->recorded_gen) return leave(CUDA_ERROR_INVALID_HANDLE);
  if (hStart->done_gen < hStart->recorded_gen || hEnd->done_gen < hEnd->recorded_gen)
    return leave(CUDA_ERROR_NOT_READY);
  double ms = (double)(hEnd->time.tv_sec - hStart->time.tv_sec) * 1e3 +
              (double)(hEnd->time.tv_nsec - hStart->time.tv_nsec) / 1e6;
  *pMilliseconds = (float)ms;
  return leave(CUDA_SUCCESS);
}

/* ---- memory ----------------------------------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total) {
  CUresult r = enter("cuMemGetInfo", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!free || !total) return leave(CUDA_ERROR_INVALID_VALUE);
  *free = G.capacity - G.used;
  *total = G.capacity;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  CUresult r = enter("cuMemAlloc", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if ((r = check_unsafe()) != CUDA_SUCCESS) return leave(r);
  if (!dptr) return leave(CUDA_ERROR_INVALID_VALUE);
  return leave(alloc_new(dptr, bytesize, NULL));
}

/* Like a real cuMemFree, waits for the device's queued work first. */
FC_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  CUresult r = enter("cuMemFree", NEED_CTX_STICKY);
  if (r != CUDA_SUCCESS) return r;
  if ((r = check_unsafe()) != CUDA_SUCCESS) return leave(r);
  long i = alloc_exact(dptr);
  if (i < 0 || G.allocs[i].free_pending) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!G.sticky) wait_all();
  i = alloc_exact(dptr); /* G.mu was dropped while waiting */
  if (i < 0 || G.allocs[i].free_pending) return leave(CUDA_ERROR_INVALID_VALUE);
  alloc_release((size_t)i);
  G.st.mem_free_calls++;
  return leave(G.sticky);
}

FC_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  CUresult r = enter("cuMemAllocAsync", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!dptr) return leave(CUDA_ERROR_INVALID_VALUE);
  if (s->cap == CAP_INVALIDATED) return leave(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  if (s->cap == CAP_NONE) return leave(alloc_new(dptr, bytesize, NULL));
  /* captured: a MEM_ALLOC node; the memory exists now and the graph owns it */
  op *o = op_new(OP_MEM_ALLOC);
  if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr p;
  if ((r = alloc_new(&p, bytesize, s->cap_graph)) != CUDA_SUCCESS) {
    free(o);
    return leave(r);
  }
  o->u.mem.ptr = p;
  o->u.mem.bytes = bytesize;
  if ((r = submit(s, o)) != CUDA_SUCCESS) {
    alloc_release((size_t)alloc_exact(p));
    return leave(r);
  }
  *dptr = p;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  CUresult r = enter("cuMemFreeAsync", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  long i = alloc_exact(dptr);
  if (i < 0 || G.allocs[i].free_pending) return leave(CUDA_ERROR_INVALID_VALUE);
  op *o = op_new(OP_MEM_FREE);
  if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  o->u.mem.ptr = dptr;
  o->u.mem.bytes = G.allocs[i].size;
  bool captured = s->cap != CAP_NONE;
  if ((r = submit(s, o)) != CUDA_SUCCESS) return leave(r);
  if (!captured) {
    G.allocs[alloc_exact(dptr)].free_pending = true;
    G.st.mem_free_calls++;
  }
  return leave(CUDA_SUCCESS);
}

static CUresult copy_async(struct CUstream_st *s, void *dst, const void *src, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  op *o = op_new(OP_MEMCPY);
  if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
  o->u.copy.dst = dst;
  o->u.copy.src = src;
  o->u.copy.n = n;
  bool captured = s->cap != CAP_NONE;
  CUresult r = submit(s, o);
  if (r == CUDA_SUCCESS && !captured) G.st.memcpys++;
  return r;
}

/* A synchronous copy: on the legacy stream, and waits for it. */
static CUresult copy_sync(void *dst, const void *src, size_t n) {
  CUresult r = check_unsafe();
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(NULL, &s)) != CUDA_SUCCESS) return r;
  if ((r = copy_async(s, dst, src, n)) != CUDA_SUCCESS) return r;
  wait_stream(s);
  return G.sticky;
}

FC_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount) {
  CUresult r = enter("cuMemcpyHtoD", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!range_ok(dstDevice, ByteCount) || (ByteCount && !srcHost))
    return leave(CUDA_ERROR_INVALID_VALUE);
  return leave(copy_sync((void *)(uintptr_t)dstDevice, srcHost, ByteCount));
}

FC_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  CUresult r = enter("cuMemcpyDtoH", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!range_ok(srcDevice, ByteCount) || (ByteCount && !dstHost))
    return leave(CUDA_ERROR_INVALID_VALUE);
  return leave(copy_sync(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount));
}

FC_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                                size_t ByteCount, CUstream hStream) {
  CUresult r = enter("cuMemcpyHtoDAsync", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!range_ok(dstDevice, ByteCount) || (ByteCount && !srcHost))
    return leave(CUDA_ERROR_INVALID_VALUE);
  return leave(copy_async(s, (void *)(uintptr_t)dstDevice, srcHost, ByteCount));
}

FC_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
                                                size_t ByteCount, CUstream hStream) {
  CUresult r = enter("cuMemcpyDtoHAsync", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!range_ok(srcDevice, ByteCount) || (ByteCount && !dstHost))
    return leave(CUDA_ERROR_INVALID_VALUE);
  return leave(copy_async(s, dstHost, (const void *)(uintptr_t)srcDevice, ByteCount));
}

FC_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                size_t ByteCount, CUstream hStream) {
  CUresult r = enter("cuMemcpyDtoDAsync", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!range_ok(dstDevice, ByteCount) || !range_ok(srcDevice, ByteCount))
    return leave(CUDA_ERROR_INVALID_VALUE);
  return leave(
      copy_async(s, (void *)(uintptr_t)dstDevice, (const void *)(uintptr_t)srcDevice, ByteCount));
}

FC_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                           CUstream hStream) {
  CUresult r = enter("cuMemsetD8Async", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!range_ok(dstDevice, N)) return leave(CUDA_ERROR_INVALID_VALUE);
  if (N == 0) return leave(CUDA_SUCCESS);
  op *o = op_new(OP_MEMSET);
  if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  o->u.set.dst = (void *)(uintptr_t)dstDevice;
  o->u.set.value = uc;
  o->u.set.n = N;
  bool captured = s->cap != CAP_NONE;
  r = submit(s, o);
  if (r == CUDA_SUCCESS && !captured) G.st.memsets++;
  return leave(r);
}

FC_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  CUresult r = enter("cuMemHostAlloc", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if ((r = check_unsafe()) != CUDA_SUCCESS) return leave(r);
  unsigned known =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (!pp || bytesize == 0 || (Flags & ~known)) return leave(CUDA_ERROR_INVALID_VALUE);
  if (G.nhost == G.host_cap) {
    size_t cap = G.host_cap ? 2 * G.host_cap : 16;
    void **grown = realloc(G.host, cap * sizeof *grown);
    if (!grown) return leave(CUDA_ERROR_OUT_OF_MEMORY);
    G.host = grown;
    G.host_cap = cap;
  }
  void *p = malloc(bytesize);
  if (!p) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  G.host[G.nhost++] = p;
  G.st.host_allocs_live++;
  *pp = p;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p) {
  CUresult r = enter("cuMemFreeHost", NEED_CTX_STICKY);
  if (r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < G.nhost; i++)
    if (G.host[i] == p) {
      if (!G.sticky) wait_all(); /* a queued copy may still read it */
      for (i = 0; i < G.nhost && G.host[i] != p; i++) {
      }
      if (i == G.nhost) break; /* freed meanwhile */
      free(p);
      G.host[i] = G.host[--G.nhost];
      G.st.host_allocs_live--;
      return leave(G.sticky);
    }
  return leave(CUDA_ERROR_INVALID_VALUE);
}

FC_EXPORT CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
  CUresult r = enter("cuLaunchHostFunc", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!fn) return leave(CUDA_ERROR_INVALID_VALUE);
  op *o = op_new(OP_HOSTFN);
  if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  o->u.host.fn = fn;
  o->u.host.data = userData;
  bool captured = s->cap != CAP_NONE;
  r = submit(s, o);
  if (r == CUDA_SUCCESS && !captured) G.st.host_funcs++;
  return leave(r);
}

/* ---- modules and kernels ---------------------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
  CUresult r = enter("cuModuleLoadData", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!module || !image) return leave(CUDA_ERROR_INVALID_VALUE);
  struct CUmod_st *m = calloc(1, sizeof *m);
  if (!m) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  if ((r = fc_parse_image(image, &m->entries, &m->n)) != CUDA_SUCCESS) {
    free(m);
    return leave(r);
  }
  m->funcs = calloc(m->n ? m->n : 1, sizeof *m->funcs);
  if (!m->funcs) {
    fc_entries_free(m->entries, m->n);
    free(m);
    return leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  for (size_t i = 0; i < m->n; i++)
    m->funcs[i] = (struct CUfunc_st){.mod = m, .k = m->entries[i].k, .name = m->entries[i].name};
  LIST_PUSH(G.modules, m);
  G.st.modules_live++;
  *module = m;
  return leave(CUDA_SUCCESS);
}

static bool module_valid(CUmodule h) {
  for (struct CUmod_st *m = G.modules; m; m = m->next)
    if (m == h) return true;
  return false;
}

/* Operations already queued keep working: they refer to the kernel table,
 * not to the module. */
FC_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  CUresult r = enter("cuModuleUnload", NEED_CTX_STICKY);
  if (r != CUDA_SUCCESS) return r;
  if (!module_valid(hmod)) return leave(CUDA_ERROR_INVALID_HANDLE);
  LIST_UNLINK(G.modules, hmod);
  G.st.modules_live--;
  fc_entries_free(hmod->entries, hmod->n);
  free(hmod->funcs);
  free(hmod);
  return leave(G.sticky);
}

FC_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  CUresult r = enter("cuModuleGetFunction", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!hfunc || !name) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!module_valid(hmod)) return leave(CUDA_ERROR_INVALID_HANDLE);
  for (size_t i = 0; i < hmod->n; i++)
    if (strcmp(hmod->funcs[i].name, name) == 0) {
      *hfunc = &hmod->funcs[i];
      return leave(CUDA_SUCCESS);
    }
  return leave(CUDA_ERROR_NOT_FOUND);
}

static bool function_valid(CUfunction f) {
  uintptr_t p = (uintptr_t)f;
  for (struct CUmod_st *m = G.modules; m; m = m->next) {
    uintptr_t lo = (uintptr_t)m->funcs, hi = (uintptr_t)(m->funcs + m->n);
    if (p >= lo && p < hi && (p - lo) % sizeof *m->funcs == 0) return true;
  }
  return false;
}

FC_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ,
                                          unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                          CUstream hStream, void **kernelParams, void **extra) {
  CUresult r = enter("cuLaunchKernel", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!function_valid(f)) return leave(CUDA_ERROR_INVALID_HANDLE);
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (extra) return leave(CUDA_ERROR_INVALID_VALUE); /* not supported by the fake */
  if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ)
    return leave(CUDA_ERROR_INVALID_VALUE);
  if (blockDimX > 1024 || blockDimY > 1024 || blockDimZ > 64 ||
      (uint64_t)blockDimX * blockDimY * blockDimZ > 1024)
    return leave(CUDA_ERROR_INVALID_VALUE);
  if (gridDimX > 2147483647u || gridDimY > 65535 || gridDimZ > 65535)
    return leave(CUDA_ERROR_INVALID_VALUE);
  if (sharedMemBytes > FC_MAX_SHARED) return leave(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  const fc_kernel *k = f->k;
  if (!k) {
    fprintf(stderr, "fake_cuda: no emulation for kernel '%s'\n", f->name);
    return leave(CUDA_ERROR_NOT_SUPPORTED);
  }
  if (k->nparams && !kernelParams) return leave(CUDA_ERROR_INVALID_VALUE);
  for (unsigned i = 0; i < k->nparams; i++)
    if (!kernelParams[i]) return leave(CUDA_ERROR_INVALID_VALUE);
  op *o = op_new(OP_KERNEL);
  if (!o) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  o->u.kernel.k = k;
  o->u.kernel.grid = (fc_dim){gridDimX, gridDimY, gridDimZ};
  o->u.kernel.block = (fc_dim){blockDimX, blockDimY, blockDimZ};
  for (unsigned i = 0; i < k->nparams; i++) /* parameters are copied at launch */
    memcpy(o->u.kernel.args[i].bytes, kernelParams[i], k->param_size[i]);
  bool captured = s->cap != CAP_NONE;
  r = submit(s, o);
  if (r == CUDA_SUCCESS && !captured) G.st.launches++;
  if (r == CUDA_SUCCESS) G.st.last_shared_bytes = sharedMemBytes;
  return leave(r);
}

/* ---- stream capture and graphs -------------------------------------------------------- */

FC_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  CUresult r = enter("cuStreamBeginCapture", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (s->legacy) return leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return leave(CUDA_ERROR_INVALID_VALUE);
  if (s->cap != CAP_NONE) return leave(CUDA_ERROR_ILLEGAL_STATE);
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  s->cap = CAP_ACTIVE;
  s->cap_mode = mode;
  s->cap_thread = pthread_self();
  s->cap_id = ++G.next_capture_id;
  s->cap_graph = g; /* listed as a graph only once the capture ends */
  s->cap_origin = s;
  s->cap_ops = s->cap_joined_ops = 0;
  G.st.captures++;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  CUresult r = enter("cuStreamEndCapture", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!phGraph) return leave(CUDA_ERROR_INVALID_VALUE);
  if (s->cap == CAP_NONE) return leave(CUDA_ERROR_ILLEGAL_STATE);
  if (s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      !pthread_equal(s->cap_thread, pthread_self()))
    return leave(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  if (s->cap_origin != s) return leave(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  struct CUgraph_st *g = s->cap_graph;
  bool invalid = s->cap == CAP_INVALIDATED, unjoined = false;
  for (struct CUstream_st *t = G.streams; t; t = t->next) { /* forked streams leave it */
    if (t == s || t->cap_graph != g) continue;
    unjoined |= t->cap_ops > t->cap_joined_ops;
    t->cap = CAP_NONE;
    t->cap_graph = NULL;
    t->cap_origin = NULL;
  }
  s->cap = CAP_NONE;
  s->cap_graph = NULL;
  s->cap_origin = NULL;
  if (invalid || unjoined) {
    graph_free(g);
    *phGraph = NULL;
    return leave(invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                         : CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  }
  LIST_PUSH(G.graphs, g);
  G.st.graphs_live++;
  *phGraph = g;
  return leave(CUDA_SUCCESS);
}

static CUstreamCaptureStatus capture_status(const struct CUstream_st *s) {
  switch (s->cap) {
  case CAP_ACTIVE:
    return CU_STREAM_CAPTURE_STATUS_ACTIVE;
  case CAP_INVALIDATED:
    return CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  default:
    return CU_STREAM_CAPTURE_STATUS_NONE;
  }
}

FC_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus) {
  CUresult r = enter("cuStreamIsCapturing", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!captureStatus) return leave(CUDA_ERROR_INVALID_VALUE);
  *captureStatus = capture_status(s);
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream,
                                                     CUstreamCaptureStatus *captureStatus_out,
                                                     cuuint64_t *id_out, CUgraph *graph_out,
                                                     const CUgraphNode **dependencies_out,
                                                     const CUgraphEdgeData **edgeData_out,
                                                     size_t *numDependencies_out) {
  CUresult r = enter("cuStreamGetCaptureInfo", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (!captureStatus_out) return leave(CUDA_ERROR_INVALID_VALUE);
  *captureStatus_out = capture_status(s);
  bool active = s->cap == CAP_ACTIVE;
  struct CUgraph_st *g = active ? s->cap_graph : NULL;
  if (id_out && s->cap != CAP_NONE) *id_out = s->cap_id;
  if (graph_out) *graph_out = g;
  /* the dependency set of a single-stream capture: the last node */
  if (dependencies_out) *dependencies_out = g && g->n ? &g->nodes[g->n - 1] : NULL;
  if (edgeData_out) *edgeData_out = NULL;
  if (numDependencies_out) *numDependencies_out = g && g->n ? 1 : 0;
  return leave(CUDA_SUCCESS);
}

FC_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  CUresult r = enter("cuGraphGetNodes", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!graph_valid(hGraph)) return leave(CUDA_ERROR_INVALID_HANDLE);
  if (!numNodes) return leave(CUDA_ERROR_INVALID_VALUE);
  if (nodes) {
    for (size_t i = 0; i < *numNodes; i++) nodes[i] = i < hGraph->n ? hGraph->nodes[i] : NULL;
    if (*numNodes > hGraph->n) *numNodes = hGraph->n;
  } else {
    *numNodes = hGraph->n;
  }
  return leave(CUDA_SUCCESS);
}

static bool node_valid(CUgraphNode h) {
  for (struct CUgraph_st *g = G.graphs; g; g = g->next)
    for (size_t i = 0; i < g->n; i++)
      if (g->nodes[i] == h) return true;
  for (struct CUstream_st *s = G.streams; s; s = s->next)
    if (s->cap_graph)
      for (size_t i = 0; i < s->cap_graph->n; i++)
        if (s->cap_graph->nodes[i] == h) return true;
  return false;
}

FC_EXPORT CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  CUresult r = enter("cuGraphNodeGetType", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!type) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!node_valid(hNode)) return leave(CUDA_ERROR_INVALID_HANDLE);
  *type = hNode->type;
  return leave(CUDA_SUCCESS);
}

/* The executable graph is a copy of the node list: the graph may be destroyed
 * afterwards. */
FC_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                       unsigned long long flags) {
  CUresult r = enter("cuGraphInstantiateWithFlags", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!phGraphExec) return leave(CUDA_ERROR_INVALID_VALUE);
  if (!graph_valid(hGraph)) return leave(CUDA_ERROR_INVALID_HANDLE);
  (void)flags;
  struct CUgraphExec_st *e = calloc(1, sizeof *e);
  if (!e) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  e->ops = calloc(hGraph->n ? hGraph->n : 1, sizeof *e->ops);
  if (!e->ops) {
    free(e);
    return leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  e->n = hGraph->n;
  for (size_t i = 0; i < e->n; i++) {
    e->ops[i] = hGraph->nodes[i]->op;
    if (e->ops[i].kind == OP_EVENT_RECORD || e->ops[i].kind == OP_EVENT_WAIT)
      e->ops[i].u.event.ev->refs++;
  }
  LIST_PUSH(G.execs, e);
  G.st.graph_execs_live++;
  *phGraphExec = e;
  return leave(CUDA_SUCCESS);
}

/* Replays the recorded operations in order on hStream. */
FC_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  CUresult r = enter("cuGraphLaunch", NEED_CTX);
  if (r != CUDA_SUCCESS) return r;
  if (!exec_valid(hGraphExec)) return leave(CUDA_ERROR_INVALID_HANDLE);
  struct CUstream_st *s;
  if ((r = resolve_stream(hStream, &s)) != CUDA_SUCCESS) return leave(r);
  if (s->cap != CAP_NONE) return leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  op **copies = calloc(hGraphExec->n ? hGraphExec->n : 1, sizeof *copies);
  if (!copies) return leave(CUDA_ERROR_OUT_OF_MEMORY);
  for (size_t i = 0; i < hGraphExec->n; i++) {
    if (!(copies[i] = malloc(sizeof *copies[i]))) {
      for (size_t j = 0; j < i; j++) free(copies[j]);
      free(copies);
      return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    *copies[i] = hGraphExec->ops[i];
    if (copies[i]->kind == OP_EVENT_RECORD || copies[i]->kind == OP_EVENT_WAIT)
      copies[i]->u.event.ev->refs++;
  }
  for (size_t i = 0; i < hGraphExec->n; i++) {
    op *o = copies[i];
    if (o->kind == OP_MEM_FREE) {
      long a = alloc_exact(o->u.mem.ptr);
      if (a >= 0) G.allocs[a].free_pending = true;
    }
    if (r == CUDA_SUCCESS)
      r = submit(s, o);
    else
      op_free(o);
  }
  free(copies);
  if (r == CUDA_SUCCESS) G.st.graph_launches++;
  return leave(r);
}

FC_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  CUresult r = enter("cuGraphExecDestroy", NEED_CTX_STICKY);
  if (r != CUDA_SUCCESS) return r;
  if (!exec_valid(hGraphExec)) return leave(CUDA_ERROR_INVALID_HANDLE);
  LIST_UNLINK(G.execs, hGraphExec);
  G.st.graph_execs_live--;
  exec_free(hGraphExec);
  return leave(G.sticky);
}

FC_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  CUresult r = enter("cuGraphDestroy", NEED_CTX_STICKY);
  if (r != CUDA_SUCCESS) return r;
  if (!graph_valid(hGraph)) return leave(CUDA_ERROR_INVALID_HANDLE);
  graph_unlist(hGraph);
  if (!G.sticky) wait_all(); /* queued replays may use its memory */
  graph_free(hGraph);
  return leave(G.sticky);
}

/* ---- entry points ----------------------------------------------------------------------- */

typedef void (*fc_fnptr)(void);

/* base name, the CUDA version that introduced this ABI, the function. The
 * newest ABI not newer than the requested version is returned. */
static const struct {
  const char *name;
  int version;
  fc_fnptr fn;
} procs[] = {
#define P(name, version, fn)                                                                       \
  { name, version, (fc_fnptr)(fn) }
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetName", 2000, cuDeviceGetName),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease_v2), /* same signature */
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    P("cuStreamDestroy", 2000, cuStreamDestroy_v2), /* same signature */
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize),
    P("cuStreamQuery", 2000, cuStreamQuery),
    P("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    P("cuEventCreate", 2000, cuEventCreate),
    P("cuEventDestroy", 2000, cuEventDestroy_v2), /* same signature */
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
    P("cuEventRecord", 2000, cuEventRecord),
    P("cuEventQuery", 2000, cuEventQuery),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventElapsedTime", 2000, cuEventElapsedTime_v2), /* same signature */
    P("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync),
    P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    P("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
    P("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
    P("cuMemsetD8Async", 3020, cuMemsetD8Async),
    P("cuMemHostAlloc", 2020, cuMemHostAlloc),
    P("cuMemFreeHost", 2000, cuMemFreeHost),
    P("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
    P("cuModuleLoadData", 2000, cuModuleLoadData),
    P("cuModuleUnload", 2000, cuModuleUnload),
    P("cuModuleGetFunction", 2000, cuModuleGetFunction),
    P("cuLaunchKernel", 4000, cuLaunchKernel),
    P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    P("cuStreamEndCapture", 10000, cuStreamEndCapture),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    P("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3),
    P("cuGraphGetNodes", 10000, cuGraphGetNodes),
    P("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    P("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    P("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    P("cuGraphLaunch", 10000, cuGraphLaunch),
    P("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    P("cuGraphDestroy", 10000, cuGraphDestroy),
#undef P
};

/* Per-thread-default-stream variants are not distinguished: flags are
 * accepted and ignored (the NULL stream is always the legacy stream). */
FC_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *symbolStatus) {
  CUresult r = enter("cuGetProcAddress", NEED_NOTHING);
  if (r != CUDA_SUCCESS) return r;
  (void)flags;
  if (!symbol || !pfn) return leave(CUDA_ERROR_INVALID_VALUE);
  int best = -1;
  bool known = false;
  for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
    if (strcmp(procs[i].name, symbol) != 0) continue;
    known = true;
    if (procs[i].version <= cudaVersion && (best < 0 || procs[i].version > procs[best].version))
      best = (int)i;
  }
  if (best < 0) {
    *pfn = NULL;
    if (symbolStatus)
      *symbolStatus =
          known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return leave(CUDA_ERROR_NOT_FOUND);
  }
  memcpy(pfn, &procs[best].fn, sizeof *pfn); /* function pointer -> void *, -pedantic clean */
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return leave(CUDA_SUCCESS);
}

/* ---- control API ------------------------------------------------------------------------ */

FC_EXPORT void fake_cuda_fail_next(const char *fn_base_name, CUresult r, unsigned after_n_calls) {
  if (!fn_base_name) return;
  injection *inj = calloc(1, sizeof *inj);
  if (!inj) abort();
  base_name(fn_base_name, inj->name);
  inj->r = r;
  inj->skip = after_n_calls;
  lock();
  injection **tail = &G.injections; /* in order: the earliest injection fires first */
  while (*tail) tail = &(*tail)->next;
  *tail = inj;
  unlock();
}

FC_EXPORT void fake_cuda_fault(CUresult sticky) {
  lock();
  set_sticky(sticky ? sticky : CUDA_ERROR_ILLEGAL_ADDRESS);
  unlock();
}

FC_EXPORT void fake_cuda_reset(void) {
  lock();
  teardown();
  while (G.injections) {
    injection *next = G.injections->next;
    free(G.injections);
    G.injections = next;
  }
  free(G.allocs);
  G.allocs = NULL;
  G.allocs_cap = 0;
  free(G.host);
  G.host = NULL;
  G.host_cap = 0;
  G.sticky = CUDA_SUCCESS;
  G.ctx_refs = 0;
  G.initialized = false;
  G.next_capture_id = 0;
  memset(&G.st, 0, sizeof G.st);
  unlock();
}

FC_EXPORT uint64_t fake_cuda_stat(const char *name) {
  static const struct {
    const char *name;
    size_t offset;
  } counters[] = {
#define S(f) {#f, offsetof(struct stats, f)}
      S(launches),          S(kernels_run),
      S(mem_alloc_calls),   S(mem_free_calls),
      S(live_allocations),  S(live_bytes),
      S(peak_bytes),        S(memcpys),
      S(memsets),           S(host_funcs),
      S(event_waits),       S(event_records),
      S(graph_launches),    S(captures),
      S(streams_live),      S(events_live),
      S(modules_live),      S(graphs_live),
      S(graph_execs_live),  S(host_allocs_live),
      S(injected_failures), S(leaked_at_ctx_release),
      S(last_shared_bytes),
#undef S
  };
  if (!name) return UINT64_MAX;
  uint64_t v = UINT64_MAX;
  lock();
  if (strcmp(name, "sticky") == 0)
    v = (uint64_t)G.sticky;
  else if (strcmp(name, "ctx_refs") == 0)
    v = G.ctx_refs;
  for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
    if (strcmp(counters[i].name, name) == 0)
      memcpy(&v, (const char *)&G.st + counters[i].offset, sizeof v);
  unlock();
  return v;
}

/* Unloading the library (or exiting) with streams alive: their workers must
 * not outlive the code they run. */
__attribute__((destructor)) static void fake_cuda_unload(void) {
  lock();
  teardown();
  unlock();
}
