/* A backend: what runs a device's work. The device (scheduler/) calls its
 * backend only through weft_backend_vtable; the host backend
 * (streams/host/backend_host.c) and the CUDA backend
 * (streams/cuda/backend_cuda.c) implement it, and the backend table
 * (streams/backends.c) maps a weft_backend kind to its open function.
 * Adding a backend is one folder and one line in that table.
 *
 *   weft_backend_base *b;
 *   weft_backend_open(WEFT_BACKEND_CUDA, &cfg, &b);       // storage, context
 *   b->vt->stream_create(b, slot, &s);                    // a weft_stream
 *   // task bodies, on the stream that runs them:
 *   b->vt->launch(b, on, &(weft_backend_launch){...});
 *   b->vt->write(b, on, &(weft_copy_desc){...});
 *   b->vt->destroy(b);                                    // storage too
 *
 * Backends see no scheduler type: a launch or a copy reaches them as a
 * descriptor (weft_backend_launch, weft_copy_desc) the device builds on its
 * stack, and what a backend needs of the device comes through the sink
 * given at open. A kernel's backend payload (impl) and a capture's graph are
 * opaque to the device.
 *
 * Threads: open, destroy and the module calls on any one thread at a time;
 * module_load, kernel_resolve and check_launch from client threads; the
 * task bodies (launch, write, read) on the thread running the stream they
 * are given; everything else on the scheduler's thread (the device's owner,
 * one at a time). */
#ifndef WEFT_STREAMS_BACKEND_H
#define WEFT_STREAMS_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "memory/storage.h"
#include "streams/stream.h"
#include <weft/weft.h>

typedef struct weft_backend_base weft_backend_base;

/* What a kernel's body is: a host kernel or a module kernel (NONE), one of
 * the device's built-in kernels, or the embedder's function. The built-ins
 * are launches like any other (their bindings ordered, pinned, skipped and
 * tainted by the device); only the body differs:
 *   COPY: bindings {src READ, dst WRITE} of equal size; dst = src;
 *   FILL: binding {dst WRITE}; every byte = the scalar block's one byte;
 *   NATIVE: |native|(ctx, user) once (host: on the pool thread; a deferred
 *           backend: where it enqueues, with its stream in ctx->stream). */
typedef enum weft_builtin {
  WEFT_BUILTIN_NONE = 0,
  WEFT_BUILTIN_COPY,
  WEFT_BUILTIN_FILL,
  WEFT_BUILTIN_NATIVE,
} weft_builtin;

/* A kernel as its backend runs it; the device's kernel table holds one per
 * kernel, for the device's life. */
typedef struct weft_backend_kernel {
  const char *name;       /* for messages */
  weft_host_kernel_fn fn; /* a host kernel, or NULL */
  void *user;             /* its user pointer (a host or native kernel's) */
  void *impl;             /* the backend's payload (kernel_resolve), or NULL */
  weft_builtin builtin;
  weft_native_fn native; /* WEFT_BUILTIN_NATIVE: the embedder's function */
} weft_backend_kernel;

/* One launch, as a task body hands it to its backend. The pointers are the
 * device's (its kernel table, its command): valid for the call only. */
typedef struct weft_backend_launch {
  const weft_backend_kernel *kernel;
  void *graph;                  /* a capture's graph (capture) replayed instead, or NULL */
  const uint32_t *grid, *block; /* [3] each */
  uint32_t nb;                  /* bindings */
  void **addrs;                 /* [nb] each binding's first byte: buffer address + offset */
  const weft_binding *bindings; /* [nb] offsets, sizes (resolved) and access */
  const void *scalars;          /* the scalar block, or NULL */
  size_t scalar_bytes;
  uint32_t shared_bytes; /* dynamic shared memory per block (weft_launch_ex; 0 otherwise) */
  const char *label;     /* the launch's label (weft_launch_ex), or NULL: NVTX ranges */
} weft_backend_launch;

/* One copy between the caller's memory and a buffer. |state| is a word the
 * device keeps for the copy from write/read until copy_done (NULL at first):
 * the CUDA backend's pinned staging block. */
typedef struct weft_copy_desc {
  void *device; /* the buffer's bytes at the copy's offset */
  void *host;   /* a write's source, a read's destination */
  uint64_t len;
  void **state;
} weft_copy_desc;

/* A recorded launch handed to capture: its descriptor (addresses resolved,
 * every buffer allocated), the stream slot it was recorded on, and its
 * number (for messages). */
typedef struct weft_capture_launch {
  weft_backend_launch launch;
  uint32_t slot;
  uint64_t launch_no;
} weft_capture_launch;

/* What the device offers its backend (the scheduler thread calls through it). */
typedef struct weft_backend_sink {
  void *ctx;
  /* Poisons the device once (takes |why|): every later operation fails with it. */
  void (*poison)(void *ctx, weft_status why);
  bool (*poisoned)(void *ctx);
} weft_backend_sink;

typedef struct weft_backend_config {
  const weft_allocator *alloc;        /* the device's (outlives the backend) */
  const weft_device_options *options; /* validated: ordinal, memory_capacity */
  weft_signal *progress;              /* raised as streams complete work */
  void *worker_ctx;                   /* weft_stream_worker_ctx on the backend's threads */
  uint32_t tag;                       /* the device's: module ids carry it */
  weft_backend_sink sink;
} weft_backend_config;

/* The entries marked "may be NULL" are left NULL by a backend that has
 * nothing to do there; the device then skips the call. */
typedef struct weft_backend_vtable {
  /* Tears down what open made, its storage first (every stream idle, every
   * buffer freed, the calling thread entered). */
  void (*destroy)(weft_backend_base *b);
  /* The device's memory (made at open, destroyed by destroy). */
  weft_storage *(*storage)(weft_backend_base *b);
  /* The largest allocation the device could ever hold (0: no cap). */
  uint64_t (*capacity)(weft_backend_base *b);
  /* Makes the backend usable from the calling thread (the scheduler's at
   * its start, close's before the teardown). */
  void (*enter)(weft_backend_base *b);
  /* A stream for |slot| (at most WEFT_MAX_STREAMS). */
  weft_status (*stream_create)(weft_backend_base *b, uint32_t slot, weft_stream **out);
  /* Arms the storage's allocation failpoint |n| with |kind| (0 clears them
   * all); false when no slot is left. */
  bool (*fail_call)(weft_backend_base *b, uint64_t n, weft_error_kind kind);
  void (*info)(weft_backend_base *b, weft_device_info *out);   /* backend, name, memory, driver */
  void (*stats)(weft_backend_base *b, weft_device_stats *out); /* the backend's counters only */
  /* The streams' state, for a lost wake-up's report. May be NULL. */
  void (*dump)(weft_backend_base *b, FILE *f);

  /* ---- kernels (client threads) ---- */
  /* UnsupportedIoOperation when the backend runs no host kernels. */
  weft_status (*host_kernels)(weft_backend_base *b);
  /* Loads a module image; UnsupportedIoOperation when the backend has none. */
  weft_status (*module_load)(weft_backend_base *b, const void *image, size_t bytes,
                             weft_module *out);
  /* The payload of kernel |entry| of |module| with the parameter signature
   * |params| (owned by the backend until kernel_free). */
  weft_status (*kernel_resolve)(weft_backend_base *b, weft_module module, const char *entry,
                                const char *params, void **out_impl);
  void (*kernel_free)(weft_backend_base *b, void *impl);
  /* Checks a launch of the kernel with payload |impl| (|name|) against its
   * signature (client side; only kernels with a payload are checked). */
  weft_status (*check_launch)(weft_backend_base *b, const void *impl, const char *name, size_t nb,
                              size_t scalar_bytes);

  /* ---- task bodies (the thread running |on|) ---- */
  /* Runs (host) or enqueues (deferred) a launch. */
  weft_status (*launch)(weft_backend_base *b, weft_stream *on, const weft_backend_launch *l);
  weft_status (*write)(weft_backend_base *b, weft_stream *on, const weft_copy_desc *c);
  weft_status (*read)(weft_backend_base *b, weft_stream *on, const weft_copy_desc *c);
  /* A write or read retired: a read's bytes reach the caller (|deliver|)
   * and what *c->state holds goes back. May be NULL. */
  void (*copy_done)(weft_backend_base *b, const weft_copy_desc *c, bool deliver);

  /* ---- completion and faults (the scheduler thread; may be NULL) ---- */
  /* Moves the streams' cursors to what has completed (polls); true if any moved. */
  bool (*progress)(weft_backend_base *b);
  /* Before the scheduler parks: make the streams with work outstanding wake it. */
  void (*arm)(weft_backend_base *b);
  /* Poisons the device (through the sink, once) on a sticky fault, and then
   * completes every stream's outstanding positions (nothing else will);
   * with |query|, first asks the streams with work outstanding. */
  void (*check_fault)(weft_backend_base *b, bool query);
  /* A host synchronisation point on |s| (a sync or read retiring): reports
   * a fault it hit. */
  void (*sync_point)(weft_backend_base *b, weft_stream *s);

  /* ---- capture graphs (the scheduler thread; NULL: replays re-run the launches) ---- */
  /* Records |n| launches (in order) into one graph whose replay keeps their
   * order across slots; Generic when the backend refuses one. */
  weft_status (*capture)(weft_backend_base *b, const weft_capture_launch *rec, size_t n,
                         void **out_graph);
  uint32_t (*graph_launches)(const void *graph); /* the launches one replay runs */
  void (*graph_free)(weft_backend_base *b, void *graph);

  /* ---- the trace's device time (the scheduler thread; may be NULL) ---- */
  /* Tracing starts (|on|) or stops: while on, the launches enqueued from
   * now on are timed on the device; stopping drops what was not asked for. */
  void (*trace_timing)(weft_backend_base *b, bool on);
  /* The device time of the launch at position |seq| of |s|, retiring (its
   * work completed): false when it was not timed. Forgets it and every
   * older one. */
  bool (*device_ms)(weft_backend_base *b, weft_stream *s, uint64_t seq, double *ms);
} weft_backend_vtable;

/* Every backend embeds this first. */
struct weft_backend_base {
  const weft_backend_vtable *vt;
  /* A task body only enqueues its work, which completes later (progress
   * moves the cursors): answers wait for retirement, and after a fault
   * nothing retired can be trusted to have run. false: the body does the
   * work, and its stream raises the progress signal as it completes. */
  bool deferred;
};

typedef weft_status (*weft_backend_open_fn)(const weft_backend_config *cfg,
                                            weft_backend_base **out);

/* The backends (one line each in streams/backends.c). */
WEFT_MUST_USE_RESULT weft_status weft_backend_host_open(const weft_backend_config *cfg,
                                                        weft_backend_base **out);
/* Without cuda.h, streams/cuda/absent.c: says weft was built without it. */
WEFT_MUST_USE_RESULT weft_status weft_backend_cuda_open(const weft_backend_config *cfg,
                                                        weft_backend_base **out);

/* True for a kind the table holds. */
bool weft_backend_known(weft_backend kind);
/* Opens the backend |kind| (InvalidArgument for one the table lacks). */
WEFT_MUST_USE_RESULT weft_status weft_backend_open(weft_backend kind,
                                                   const weft_backend_config *cfg,
                                                   weft_backend_base **out);

#endif
