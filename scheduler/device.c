/* The device: options, open and close, info, stats, poison and failpoint
 * calls, and the command table that tells the loop and retirement what each
 * kind of command does. The launch path is launch.c; copies are copy.c; the
 * scheduler loop is loop.c (docs/architecture.md has the whole map). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/config.h"
#include "core/log.h"
#include "scheduler/buffers.h"
#include "scheduler/capture.h"
#include "scheduler/command.h"
#include "scheduler/copy.h"
#include "scheduler/events.h"
#include "scheduler/export.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/labels.h"
#include "scheduler/launch.h"
#include "scheduler/loop.h"
#include "scheduler/memory_calls.h"
#include "scheduler/submit.h"
#include "scheduler/trace.h"

const char *weft_version(void) {
  return "0.1.0";
}

/* ---- options ------------------------------------------------------------------------------- */

void weft_device_options_init(weft_device_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof(*opts));
  opts->struct_size = sizeof(*opts);
  opts->backend = WEFT_BACKEND_HOST;
  opts->max_streams = 4;
  opts->max_tasks = 32;
  opts->strategy = WEFT_STRATEGY_INTERLEAVE;
}

static _Atomic uint32_t device_tags = 0;

/* The sizes weft_device_options has had, one per release that grew it (each
 * field added at the end starts where the struct used to end; a field's end
 * counts too, for the padding after it). A size inside a field would copy
 * part of it: half of a caller's pointer is a wild one. */
static bool options_size_known(uint32_t size) {
  static const size_t sizes[] = {
      offsetof(weft_device_options, allocator),
      offsetof(weft_device_options, memory_layout),
      offsetof(weft_device_options, persistent_memory),
      offsetof(weft_device_options, max_pending_commands),
      offsetof(weft_device_options, scheduler),
      offsetof(weft_device_options, scheduler) + sizeof(weft_scheduler_mode),
      offsetof(weft_device_options, host_threads),
      offsetof(weft_device_options, host_threads) + sizeof(uint32_t),
      sizeof(weft_device_options),
  };
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    if (size == sizes[i]) return true;
  return false;
}

static weft_status validate_options(const weft_device_options *o, weft_device_options *out) {
  weft_device_options_init(out);
  if (!o) o = out;
  if (!options_size_known(o->struct_size))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "options.struct_size is %u: call weft_device_options_init first",
                           o->struct_size);
  if (o != out) memcpy(out, o, o->struct_size);
  out->struct_size = sizeof(*out);
  if (!weft_backend_known(out->backend))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)out->backend);
  if (out->max_streams == 0 || out->max_streams > WEFT_MAX_STREAMS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "max_streams is %u; it must be 1..%u",
                           out->max_streams, WEFT_MAX_STREAMS);
  if (out->max_tasks == 0)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "max_tasks must be at least 1");
  if (out->strategy != WEFT_STRATEGY_INTERLEAVE && out->strategy != WEFT_STRATEGY_SEQUENTIAL)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown strategy %d", (int)out->strategy);
  /* WEFT_SCHEDULER picks the mode of devices left at the default (to run a
   * whole program or test suite under either; core/config.c). */
  if (out->scheduler == WEFT_SCHEDULER_DEFAULT)
    WEFT_RETURN_IF_ERROR(weft_config_scheduler(&out->scheduler));
  if (out->scheduler != WEFT_SCHEDULER_THREAD && out->scheduler != WEFT_SCHEDULER_COMBINING)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown scheduler mode %d",
                           (int)out->scheduler);
  if (out->host_threads == 0) out->host_threads = weft_config_host_threads();
  if (out->host_threads > WEFT_MAX_STREAMS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "host_threads is %u; it must be 0..%u",
                           out->host_threads, WEFT_MAX_STREAMS);
  if (out->allocator && (!out->allocator->alloc || !out->allocator->free))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "allocator has a NULL function");
  return NULL;
}

/* The memory configuration every stream's manager starts from; a custom
 * layout is copied and validated now, so a bad one fails the open. */
static weft_status memory_config(weft_device *dev, const weft_device_options *o) {
  weft_mm_config *cfg = &dev->mem.mm_config;
  /* A capped device can hold a buffer as large as its capacity; a GPU is
   * capped by its memory (and the option, when lower). */
  uint64_t cap = dev->backend->vt->capacity(dev->backend);
  cfg->max_page = cap ? cap : (UINT64_C(4) << 30);
  cfg->device_bytes = cap;
  if (o->persistent_memory < WEFT_PERSISTENT_ENABLED ||
      o->persistent_memory > WEFT_PERSISTENT_ENFORCED)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown persistent_memory policy %d",
                           o->persistent_memory);
  cfg->persistent = (weft_persistent_policy)o->persistent_memory;
  cfg->layout = (weft_layout){.kind = WEFT_LAYOUT_SUBSLICES};
  if (!o->memory_layout && cap && cap < (UINT64_C(128) << 20)) {
    /* A device below the default ladder's first rungs would give every
     * buffer an exclusive page: small buffers share quarter-device pages. */
    uint64_t page = cap / 4 ? cap / 4 : 1;
    dev->mem.layout_pools = weft__alloc(&dev->alloc, sizeof(weft_pool_config) * 3, 16);
    if (!dev->mem.layout_pools) return weft__oom(sizeof(weft_pool_config) * 3, "the memory layout");
    dev->mem.layout_pools[0] =
        (weft_pool_config){.kind = WEFT_POOL_EXCLUSIVE, .dealloc_period = WEFT_NO_PERIOD};
    dev->mem.layout_pools[1] = (weft_pool_config){
        .kind = WEFT_POOL_SLICED, .page_size = page, .max_slice_size = page / 2 ? page / 2 : 1};
    dev->mem.layout_pools[2] = (weft_pool_config){
        .kind = WEFT_POOL_EXCLUSIVE, .max_alloc_size = cap, .dealloc_period = 5000};
    cfg->layout =
        (weft_layout){.kind = WEFT_LAYOUT_CUSTOM, .pools = dev->mem.layout_pools, .num_pools = 3};
  } else if (o->memory_layout) {
    cfg->layout = *o->memory_layout;
    if (cfg->layout.kind == WEFT_LAYOUT_CUSTOM && cfg->layout.pools && cfg->layout.num_pools &&
        cfg->layout.num_pools < 255) {
      size_t bytes = sizeof(weft_pool_config) * cfg->layout.num_pools;
      dev->mem.layout_pools = weft__alloc(&dev->alloc, bytes, 16);
      if (!dev->mem.layout_pools) return weft__oom(bytes, "the memory layout");
      memcpy(dev->mem.layout_pools, cfg->layout.pools, bytes);
      cfg->layout.pools = dev->mem.layout_pools;
    } else if (cfg->layout.kind != WEFT_LAYOUT_CUSTOM) {
      cfg->layout.pools = NULL;
      cfg->layout.num_pools = 0;
    } /* else a custom list the probe refuses (none, or too many), as given */
  }
  weft_mm *probe; /* builds no page: validates the layout against this device */
  weft_status st = weft_mm_create(cfg, dev->mem.storage, &dev->alloc, &probe);
  if (st) {
    if (!dev->mem.layout_pools) cfg->layout = (weft_layout){.kind = cfg->layout.kind};
    return st;
  }
  weft_mm_destroy(probe);
  return NULL;
}

/* ---- failpoints ---------------------------------------------------------------------------- */

/* Parses |spec| into the device's failpoints; storage ones go to the storage. */
static weft_status install_failpoints(weft_device *dev, const char *spec) {
  weft_failpoints fp = dev->failpoints;
  uint32_t before = fp.nallocs;
  weft_status st = weft_failpoints_parse(spec, &fp);
  if (st) return st;
  for (uint32_t i = before; i < fp.nallocs; i++)
    if (!dev->backend->vt->fail_call(dev->backend, fp.allocs[i].n, fp.allocs[i].kind))
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many alloc failpoints");
  dev->failpoints = fp;
  return NULL;
}

/* Every failpoint goes, wherever it came from (options, environment, API). */
static weft_status clear_failpoints(weft_device *dev) {
  memset(&dev->failpoints, 0, sizeof(dev->failpoints));
  dev->backend->vt->fail_call(dev->backend, 0, WEFT_OK);
  return NULL;
}

/* A spec refused at open says where it came from. */
static weft_status failpoints_from(weft_status st, const char *where) {
  if (!st) return NULL;
  weft_status named =
      weft_error_make(weft_error_kind_of(st), "%s: %s", where, weft_error_message(st));
  weft_error_free(st);
  return named;
}

/* ---- open and close ------------------------------------------------------------------------ */

static const char *kernel_name(void *ctx, uint32_t k) {
  weft_device *dev = ctx;
  return k < WEFT_MAX_KERNELS ? dev->kernels[k].k.name : NULL;
}

static void memory_name(void *ctx, uint64_t memory, char *buf, size_t cap) {
  weft__buf_label_name(ctx, memory, buf, cap); /* reports are made on the scheduler's thread */
}

/* The backend's sink: a fault it finds poisons the device. */
static void sink_poison(void *ctx, weft_status why) {
  weft__dev_poison(ctx, why);
}

static bool sink_poisoned(void *ctx) {
  return weft__poisoned(ctx);
}

static weft_status backend_open(weft_device *dev, const weft_device_options *o) {
  weft_backend_config cfg = {
      .alloc = &dev->alloc,
      .options = o,
      .progress = &dev->loop.wake,
      .worker_ctx = dev,
      .tag = dev->tag,
      .sink = {.ctx = dev, .poison = sink_poison, .poisoned = sink_poisoned},
  };
  weft_status st = weft_backend_open(o->backend, &cfg, &dev->backend);
  if (st) return st;
  dev->mem.storage = dev->backend->vt->storage(dev->backend);
  /* A deferred backend's streams take work from the scheduler's own thread
   * only (the CUDA lanes enqueue with the context current): no combining. */
  dev->loop.combining = o->scheduler == WEFT_SCHEDULER_COMBINING && !dev->backend->deferred;
  weft__spin_init(&dev->loop.spin, 128); /* pauses before the scheduler parks, at most */
  return NULL;
}

weft_status weft_device_open(const weft_device_options *opts, weft_device **out) {
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  weft_device_options o;
  weft__log_apply_env(); /* WEFT_LOG: the level for devices opened from now on */
  weft_status st = validate_options(opts, &o);
  if (st) return st;
  weft_allocator alloc = o.allocator ? *o.allocator : weft_allocator_default();
  weft_device *dev = weft__calloc(&alloc, sizeof(*dev), WEFT_CACHELINE);
  if (!dev) return weft__oom(sizeof(*dev), "the device");
  dev->alloc = alloc;
  dev->max_streams = o.max_streams;
  dev->max_tasks = o.max_tasks;
  dev->strategy = o.strategy;
  dev->loop.wake.ec = &dev->loop.inbox.ec;
  dev->cmds.max_pending = o.max_pending_commands ? o.max_pending_commands : 16384;
  dev->tag = atomic_fetch_add(&device_tags, 1) + 1;
  weft_inbox_init(&dev->loop.inbox);
  weft_handles_init(&dev->buffers, &dev->alloc);
  dev->buffers.gen_base = dev->tag * 2654435761u;
  weft__events_init(dev);
  atomic_init(&dev->exports.refs, 1); /* the device's own: close drops it */
  size_t kbytes = sizeof(weft_kernel_entry) * WEFT_MAX_KERNELS;
  dev->kernels = weft__calloc(&dev->alloc, kbytes, WEFT_CACHELINE);
  dev->streams = weft__calloc(&dev->alloc, sizeof(weft_stream *) * o.max_streams, 16);
  dev->ms.batches = weft__calloc(&dev->alloc, sizeof(weft_batch) * o.max_streams, 16);
  if (!dev->kernels || !dev->streams || !dev->ms.batches)
    st = weft__oom(kbytes, "the device tables");
  if (!st && !weft__cmd_pool_init(dev)) st = weft__oom(WEFT_CMD_CLASS_MIN, "the command pool");
  if (!st) st = weft__kernels_builtin(dev); /* 'copy' and 'fill', first in the table */
  if (!st) st = backend_open(dev, &o);
  if (!st) {
    dev->mem.mms = weft__calloc(&dev->alloc, sizeof(weft_mm *) * o.max_streams, 16);
    dev->ms.synced =
        weft__calloc(&dev->alloc, sizeof(uint64_t) * o.max_streams * o.max_streams, 16);
    dev->drops = weft__calloc(&dev->alloc, sizeof(weft_drop_queue) * o.max_streams, 16);
    dev->slot_refs = weft__calloc(&dev->alloc, sizeof(struct weft_slot_ref) * o.max_streams, 16);
    if (!dev->mem.mms || !dev->drops || !dev->slot_refs || !dev->ms.synced)
      st = weft__oom(sizeof(weft_drop_queue) * o.max_streams, "the memory managers");
  }
  if (!st) st = memory_config(dev, &o);
  weft_failures_init(&dev->failures, &dev->alloc);
  dev->failures.graph.namer =
      (weft_graph_namer){.kernel = kernel_name, .memory = memory_name, .ctx = dev};
  if (!st) st = failpoints_from(install_failpoints(dev, o.failpoints), "options.failpoints");
  if (!st)
    st = failpoints_from(install_failpoints(dev, weft_config_failpoints()),
                         "the WEFT_FAILPOINTS environment variable");
  if (!st) st = weft__trace_open_env(dev); /* WEFT_TRACE: the whole life, from here */
  if (!st) {
    int rc = pthread_create(&dev->loop.thread, NULL, weft__scheduler_main, dev);
    if (rc != 0)
      st = weft_error_make(WEFT_ERR_GENERIC, "cannot start the scheduler thread (error %d)", rc);
    else /* named by its creator, so the name is there once open returns (weft-bench and
          * profilers group threads by name) */
      pthread_setname_np(dev->loop.thread, "weft-sched");
  }
  if (st) {
    weft__trace_drop(dev);
    weft_failures_destroy(&dev->failures);
    weft__free(&dev->alloc, dev->mem.mms, sizeof(weft_mm *) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->ms.synced, sizeof(uint64_t) * o.max_streams * o.max_streams, 16);
    weft__free(&dev->alloc, dev->drops, sizeof(weft_drop_queue) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->slot_refs, sizeof(struct weft_slot_ref) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->mem.layout_pools,
               sizeof(weft_pool_config) * dev->mem.mm_config.layout.num_pools, 16);
    if (dev->backend) dev->backend->vt->destroy(dev->backend); /* and the storage */
    weft__free(&dev->alloc, dev->ms.batches, sizeof(weft_batch) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->streams, sizeof(weft_stream *) * o.max_streams, 16);
    for (uint32_t i = 0; dev->kernels && i < atomic_load(&dev->nkernels); i++) /* the built-ins */
      weft__free(&dev->alloc, (char *)dev->kernels[i].k.name, dev->kernels[i].name_cap, 1);
    weft__free(&dev->alloc, dev->kernels, kbytes, WEFT_CACHELINE);
    weft_handles_destroy(&dev->buffers);
    weft__events_destroy(dev);
    weft__cmd_pool_destroy(dev);
    weft__free(&dev->alloc, dev, sizeof(*dev), WEFT_CACHELINE);
    return st;
  }
  WEFT_LOGF(WEFT_LOG_INFO, "device opened: %s backend, %u streams, %u tasks a batch",
            o.backend == WEFT_BACKEND_CUDA ? "CUDA" : "host", o.max_streams, o.max_tasks);
  *out = dev;
  return NULL;
}

void weft_device_close(weft_device *dev) {
  if (!dev) return;
  /* From here every call is refused; the calls already inside finish first,
   * their commands ahead of the shutdown (see weft__enter). */
  atomic_store_explicit(&dev->live.closing, 1, memory_order_seq_cst);
  weft__callers_drain(dev);
  weft__tcache_close(dev); /* threads' cached credits and commands come back */
  /* Close cannot fail: the shutdown command lives on this stack (bytes 0,
   * never freed), which is safe because close waits for the scheduler. */
  cmd c_stack;
  memset(&c_stack, 0, sizeof(c_stack));
  c_stack.kind = CMD_SHUTDOWN;
  c_stack.dev = dev;
  cmd *c = &c_stack;
  weft__cmd_submit(dev, c);
  pthread_join(dev->loop.thread, NULL);
  weft__trace_close(dev); /* WEFT_TRACE's file; a recording never ended is dropped */
  for (uint32_t i = 0; i < dev->max_streams; i++)
    if (dev->streams[i]) weft_drop_queue_destroy(&dev->drops[i]);
  /* The storage and the streams are torn down on this thread. */
  dev->backend->vt->enter(dev->backend);
  weft__capture_close_all(dev); /* recordings unpin their buffers */
  weft__events_destroy(dev);    /* every event: no caller is inside to wait on one */
  weft__export_close(dev);      /* the exports already dropped let their buffers go */
  /* Every buffer the caller never released, but those live exports pin. */
  uint32_t n = atomic_load(&dev->buffers.fresh);
  for (uint32_t i = 0; i < n; i++) {
    weft_handle_slot *s = weft_handles_slot(&dev->buffers, ((uint64_t)1 << 32) | (i + 1u));
    weft_buf *b = s ? s->obj : NULL;
    if (b && !b->exported) {
      b->pending = 0;
      weft__buf_free(dev, b);
    }
  }
  /* With live exports, the last weft__buffer_unexport finishes the teardown:
   * their memory lives in the managers and the backend's storage. */
  if (atomic_fetch_sub_explicit(&dev->exports.refs, 1, memory_order_acq_rel) == 1)
    weft__dev_teardown(dev);
}

void weft__dev_teardown(weft_device *dev) {
  dev->backend->vt->enter(dev->backend); /* close's thread, or the last unexport's */
  weft__export_free_all(dev);
  for (uint32_t i = 0; i < atomic_load(&dev->nkernels) && i < WEFT_MAX_KERNELS; i++) {
    weft_kernel_entry *k = &dev->kernels[i];
    weft__free(&dev->alloc, (char *)k->k.name, k->name_cap, 1);
    if (k->k.impl) dev->backend->vt->kernel_free(dev->backend, k->k.impl);
  }
  weft__dev_mm_destroy_all(dev);
  weft_failures_destroy(&dev->failures);
  weft__labels_destroy(dev); /* after the graph: its skip records point at them */
  weft_error_free(dev->live.poison_error);
  weft__free(&dev->alloc, dev->mem.mms, sizeof(weft_mm *) * dev->max_streams, 16);
  weft__free(&dev->alloc, dev->ms.synced, sizeof(uint64_t) * dev->max_streams * dev->max_streams,
             16);
  weft__free(&dev->alloc, dev->drops, sizeof(weft_drop_queue) * dev->max_streams, 16);
  weft__free(&dev->alloc, dev->slot_refs, sizeof(struct weft_slot_ref) * dev->max_streams, 16);
  weft__free(&dev->alloc, dev->mem.layout_pools,
             sizeof(weft_pool_config) * dev->mem.mm_config.layout.num_pools, 16);
  dev->backend->vt->destroy(dev->backend); /* storage, streams, modules, the context */
  weft_allocator alloc = dev->alloc;
  weft__free(&alloc, dev->ms.batches, sizeof(weft_batch) * dev->max_streams, 16);
  weft__free(&alloc, dev->streams, sizeof(weft_stream *) * dev->max_streams, 16);
  weft__free(&alloc, dev->kernels, sizeof(weft_kernel_entry) * WEFT_MAX_KERNELS, WEFT_CACHELINE);
  weft_handles_destroy(&dev->buffers);
  weft__cmd_pool_destroy(dev);
  weft__free(&alloc, dev, sizeof(*dev), WEFT_CACHELINE);
}

/* ---- info, stats, poison ------------------------------------------------------------------- */

static _Atomic uint64_t thread_streams = 0;

static _Thread_local uint64_t this_thread_stream = 0;

weft_stream_id weft_stream_current(void) {
  if (this_thread_stream == 0)
    this_thread_stream = atomic_fetch_add_explicit(&thread_streams, 1, memory_order_relaxed) + 1;
  return this_thread_stream - 1;
}

weft_status weft_device_info_get(weft_device *dev, weft_device_info *out) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  memset(out, 0, sizeof(*out));
  out->max_streams = dev->max_streams;
  out->memory_align = (uint32_t)weft_storage_alignment(dev->mem.storage);
  out->capacity = dev->mem.mm_config.device_bytes;
  dev->backend->vt->info(dev->backend, out);
  return NULL;
}

weft_status weft_device_stats_get(weft_device *dev, weft_device_stats *out) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  cmd *c = weft__cmd_new(dev, CMD_STATS, 0);
  if (!c) return weft__oom(sizeof(cmd), "a stats command");
  c->stats_out = out;
  return weft__cmd_call(dev, c);
}

weft_status weft_device_set_poison_callback(weft_device *dev, weft_poison_fn fn, void *user) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_open(dev, &in);
  if (st) return st;
  /* release: a worker that loads the function sees its user pointer. */
  atomic_store_explicit(&dev->live.on_poison_user, user, memory_order_release);
  atomic_store_explicit(&dev->live.on_poison, fn, memory_order_release);
  return NULL;
}

weft_status weft_device_set_failpoints(weft_device *dev, const char *spec) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if (!spec) spec = ""; /* clears, as an empty spec does */
  size_t len = strlen(spec);
  cmd *c = weft__cmd_new(dev, CMD_FAILPOINTS, len + 1);
  if (!c) return weft__oom(len + 1, "a failpoints command");
  c->data = (char *)c + weft__align8(sizeof(cmd));
  memcpy(c->data, spec, len + 1);
  return weft__cmd_call(dev, c);
}

weft_status weft_device_poisoned(weft_device *dev) {
  if (!dev) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "device is NULL");
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_open(dev, &in);
  if (st) return st;
  if (!weft__poisoned(dev)) return NULL;
  return weft_error_clone(dev->live.poison_error);
}

/* ---- the commands only the device answers ------------------------------------------------- */

static void process_stats(weft_device *dev, cmd *c) {
  dev->stats.failures_live = weft_graph_len(&dev->failures.graph);
  dev->stats.pending_peak = atomic_load(&dev->cmds.pending_peak);
  dev->stats.backpressure_waits = atomic_load(&dev->cmds.backpressure_waits);
  dev->backend->vt->stats(dev->backend, &dev->stats);
  *c->stats_out = dev->stats;
  weft__token_complete(c->token, NULL);
  weft__cmd_free(c);
}

static void process_shutdown(weft_device *dev, cmd *c) {
  dev->loop.shutdown = true;
  weft__cmd_free(c);
  weft__signal_raise(&dev->loop.wake); /* a combining client may have taken it */
}

static void process_failpoints(weft_device *dev, cmd *c) {
  weft__token_complete(c->token, weft_failpoints_spec_is_empty(c->data)
                                     ? clear_failpoints(dev)
                                     : install_failpoints(dev, c->data));
  weft__cmd_free(c);
}

static void process_memory(weft_device *dev, cmd *c) {
  weft__dev_memory_call(dev, c);
  weft__cmd_free(c);
}

static void process_capture(weft_device *dev, cmd *c) {
  weft__capture_process(dev, c);
  weft__cmd_free(c);
}

/* A reservation sees the memory completed work gave back; questions answer
 * from everything completed so far: those kinds retire first. */
const weft_cmd_ops weft__cmd_ops[] = {
    [CMD_CREATE] = {weft__buf_process_create, NULL, true},
    [CMD_WRITE] = {weft__copy_schedule_write, weft__copy_complete_write, false},
    [CMD_LAUNCH] = {weft__launch_schedule, weft__launch_complete, false},
    [CMD_READ] = {weft__copy_schedule_read, weft__copy_complete_read, false},
    [CMD_RELEASE] = {weft__buf_process_release, NULL, false},
    [CMD_SYNC] = {weft__copy_schedule_sync, weft__copy_complete_sync, false},
    [CMD_CHECK] = {weft__copy_check, NULL, true},
    [CMD_STATS] = {process_stats, NULL, true},
    [CMD_SHUTDOWN] = {process_shutdown, NULL, false},
    [CMD_MEMORY] = {process_memory, NULL, true},
    [CMD_FAILPOINTS] = {process_failpoints, NULL, false},
    [CMD_CAPTURE] = {process_capture, NULL, false},
    [CMD_REPLAY] = {process_capture, NULL, false},
    [CMD_EVENT] = {weft__event_process_record, weft__event_complete_record, false},
    [CMD_EVENT_WAIT] = {weft__event_process_wait, NULL, false},
    [CMD_EVENT_CHECK] = {weft__event_process_check, NULL, false},
    [CMD_ADDRESS] = {weft__buf_process_address, NULL, false},
    [CMD_TRACE] = {weft__trace_process, NULL, false},
    [CMD_LABEL] = {weft__label_process, NULL, false},
};
_Static_assert(sizeof(weft__cmd_ops) / sizeof(weft__cmd_ops[0]) == CMD_LABEL + 1,
               "every command kind has its entry");
