/* The life of a launch, in the order it happens (SPEC 5.4):
 *   1. client (any thread, no lock): check the arguments against the
 *      lock-free handle table, build one command, submit it;
 *   2. scheduler: number it, resolve handles to buffers, pin them, mint the write
 *      scope id and the failpoints, then record it (a capture) or register
 *      it with SchedulerMultiStream, which orders and batches it;
 *   3. a stream's worker: the read check (a tainted input skips the launch
 *      and passes its taint on), then the kernel;
 *   4. scheduler, at retirement: the outcome goes to the error graph inside
 *      its write scope, and the buffers are unpinned.
 * Replays (capture.c) re-enter at step 2 with copies of recorded launches. */
#include "scheduler/launch.h"

#include <inttypes.h>
#include <stddef.h>

#include "scheduler/buffers.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/labels.h"
#include "scheduler/multistream.h"
#include "scheduler/scope.h"
#include "scheduler/submit.h"
#include "scheduler/window.h"

static void run_launch(weft_task *t, weft_stream *on);

/* ---- 1. client: check, build, submit ------------------------------------------------------- */

static weft_status check_dims(const uint32_t d[3], const char *what) {
  if (!d) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  if (!d[0] || !d[1] || !d[2])
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s has a zero dimension (%u, %u, %u)", what,
                           d[0], d[1], d[2]);
  return NULL;
}

/* Checks a launch's arguments (the caller is inside the device); |resolved|
 * (num_bindings entries) receives the bindings with WEFT_WHOLE sizes resolved. */
weft_status weft__launch_check(weft_device *dev, weft_kernel kernel, const uint32_t grid[3],
                               const uint32_t block[3], const weft_binding *bindings,
                               size_t num_bindings, const void *scalars, size_t scalar_bytes,
                               weft_binding *resolved) {
  weft_status st;
  uint32_t kidx = (uint32_t)kernel.id - 1u;
  if ((uint32_t)(kernel.id >> 32) != dev->tag || (uint32_t)kernel.id == 0 ||
      kidx >= WEFT_MAX_KERNELS ||
      !atomic_load_explicit(&dev->kernels[kidx].ready, memory_order_acquire))
    return weft_error_make(WEFT_ERR_NOT_FOUND, "kernel %#" PRIx64 " is not a kernel of this device",
                           kernel.id);
  if ((st = check_dims(grid, "grid")) || (st = check_dims(block, "block"))) return st;
  const weft_kernel_entry *k = &dev->kernels[kidx];
  if (k->k.builtin == WEFT_BUILTIN_COPY || k->k.builtin == WEFT_BUILTIN_FILL)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel '%s' is the device's built-in: launch it with weft_buffer_%s",
                           k->k.name, k->k.name);
  if (k->k.builtin == WEFT_BUILTIN_NATIVE &&
      (grid[0] | grid[1] | grid[2] | block[0] | block[1] | block[2]) != 1)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "native kernel '%s' runs once: grid and block must be {1,1,1} (got grid "
                           "%u x %u x %u, block %u x %u x %u)",
                           k->k.name, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
  if (num_bindings > WEFT_MAX_BINDINGS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%zu bindings; at most %u per launch",
                           num_bindings, WEFT_MAX_BINDINGS);
  if (num_bindings && !bindings)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "bindings is NULL");
  if (scalar_bytes > WEFT_MAX_SCALAR_BYTES)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%zu scalar bytes; at most %u per launch",
                           scalar_bytes, WEFT_MAX_SCALAR_BYTES);
  if (scalar_bytes && !scalars)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "scalars is NULL");
  if (k->k.impl && (st = dev->backend->vt->check_launch(dev->backend, k->k.impl, k->k.name,
                                                        num_bindings, scalar_bytes)))
    return st;
  for (size_t i = 0; i < num_bindings; i++) {
    weft_binding b = bindings[i];
    uint64_t size;
    if (b.access != WEFT_READ && b.access != WEFT_WRITE && b.access != WEFT_READ_WRITE)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "binding %zu has an invalid access %d", i,
                             (int)b.access);
    if ((st = weft__buf_lookup(dev, b.buffer, &size))) return st;
    if (b.offset > size)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "binding %zu: offset %" PRIu64
                             " is past the end of the buffer (%" PRIu64 " bytes)",
                             i, b.offset, size);
    if (b.size == WEFT_WHOLE) b.size = size - b.offset;
    if ((st = weft__check_range(size, b.offset, b.size, "binding"))) return st;
    resolved[i] = b;
  }
  return NULL;
}

/* A launch command's arrays after its header, each a multiple of 8 bytes
 * (no padding between them), then the scalars. */
_Static_assert(sizeof(weft_binding) % 8 == 0 && sizeof(weft_buf *) % 8 == 0 &&
                   sizeof(void *) % 8 == 0 && sizeof(weft_stream_wait) % 8 == 0,
               "a launch's arrays are laid out back to back");
static inline size_t launch_extra(const weft_device *dev, size_t nb, size_t scalar_bytes) {
  return (sizeof(weft_binding) + sizeof(weft_buf *) + sizeof(void *)) * nb +
         sizeof(weft_stream_wait) * dev->max_streams + scalar_bytes;
}

/* The launch's state that every reader expects zero lies in two ranges of
 * the command, cleared with a few wide stores: the task up to its waits,
 * and preset to the end. */
#define LAUNCH_ZERO_HEAD offsetof(cmd, task.waits)
#define LAUNCH_ZERO_TAIL offsetof(cmd, preset)
#define IN_TAIL(f)       (offsetof(cmd, f) >= LAUNCH_ZERO_TAIL)
_Static_assert(offsetof(cmd, task) == 0 && offsetof(weft_task, waits) > offsetof(weft_task, link) &&
                   offsetof(weft_task, waits) > offsetof(weft_task, run) &&
                   offsetof(weft_task, waits) > offsetof(weft_task, seq) &&
                   offsetof(weft_task, waits) > offsetof(weft_task, nwaits) &&
                   offsetof(weft_task, waits) > offsetof(weft_task, notify) &&
                   offsetof(weft_task, waits) > offsetof(weft_task, fnext) &&
                   offsetof(weft_task, waits) > offsetof(weft_task, placed) &&
                   offsetof(weft_task, waits) + sizeof(void *) == sizeof(weft_task),
               "launch_init: the task's fields before |waits| are its zeroed state");
_Static_assert(!IN_TAIL(kind) && !IN_TAIL(budget) && !IN_TAIL(dev) && IN_TAIL(bytes),
               "launch_init: the allocation's fields outside the cleared tail but |bytes|, "
               "which it keeps across the clear");
_Static_assert(IN_TAIL(p) && IN_TAIL(inject) && IN_TAIL(poison) && IN_TAIL(instance) &&
                   IN_TAIL(detached) && IN_TAIL(cancelled) && IN_TAIL(result) && IN_TAIL(error) &&
                   IN_TAIL(skip),
               "launch_init: a launch's zeroed state must follow |preset|");

/* Every field of a launch command but the allocation's (kind, budget, bytes,
 * dev: kept, bytes across the clear) and its bindings, which are in place at
 * the header's end. The other
 * kinds' fields (buffer, offset, len, data, staged, stats_out, mem) are
 * never read for a launch, and the scheduler sets on_slot (placement) and
 * launch_no (weft__launch_schedule) before anything reads them: those keep
 * whatever the command's last use left. Everything else the scheduler, the
 * pool or retirement reads is set here (no memset of the whole command). */
static inline void launch_init(cmd *c, weft_device *dev, weft_stream_id stream, uint32_t kidx,
                               const uint32_t grid[3], const uint32_t block[3], size_t nb,
                               const void *scalars, size_t scalar_bytes) {
  char *p = (char *)c + WEFT_CMD_HEADER;
  size_t bytes = c->bytes; /* the allocation's size lies in the tail (line 3, retirement's) */
  memset(c, 0, LAUNCH_ZERO_HEAD);
  memset((char *)c + LAUNCH_ZERO_TAIL, 0, sizeof(cmd) - LAUNCH_ZERO_TAIL);
  c->bytes = bytes;
  c->bindings = (weft_binding *)p;
  c->bufs = (weft_buf **)(p += sizeof(weft_binding) * nb);
  c->ptrs = (void **)(p += sizeof(weft_buf *) * nb);
  c->task.waits = (weft_stream_wait *)(p += sizeof(void *) * nb);
  p += sizeof(weft_stream_wait) * dev->max_streams;
  if (scalar_bytes) memcpy(p, scalars, scalar_bytes);
  c->scalars = p;
  c->scalar_bytes = scalar_bytes;
  c->stream = stream;
  c->token = NULL;
  c->kernel = kidx;
  memcpy(c->grid, grid, sizeof(c->grid));
  memcpy(c->block, block, sizeof(c->block));
  c->nb = (uint32_t)nb;
  c->graph = NULL;
}

/* A launch command from checked arguments (not submitted). */
cmd *weft__launch_build(weft_device *dev, weft_stream_id stream, weft_kernel kernel,
                        const uint32_t grid[3], const uint32_t block[3],
                        const weft_binding *resolved, size_t nb, const void *scalars,
                        size_t scalar_bytes, bool wait) {
  cmd *c = weft__cmd_take(dev, CMD_LAUNCH, launch_extra(dev, nb, scalar_bytes),
                          weft__slot_of(dev, stream), wait);
  if (!c) return NULL;
  if (nb) memcpy((char *)c + WEFT_CMD_HEADER, resolved, sizeof(weft_binding) * nb);
  launch_init(c, dev, stream, (uint32_t)kernel.id - 1u, grid, block, nb, scalars, scalar_bytes);
  return c;
}

/* The smallest of three dimensions: 0 when any is (branch-free). */
static inline uint32_t dims_min(const uint32_t d[3]) {
  uint32_t m = d[0] < d[1] ? d[0] : d[1];
  return m < d[2] ? m : d[2];
}

/* The full path: every check in order, naming the first that fails; a
 * thread cache without a credit or a command (a refill, waiting for room). */
static __attribute__((noinline, cold)) weft_status
launch_full(weft_device *dev, weft_stream_id stream, weft_kernel kernel, const uint32_t grid[3],
            const uint32_t block[3], const weft_binding *bindings, size_t num_bindings,
            const void *scalars, size_t scalar_bytes) {
  weft_binding resolved[WEFT_MAX_BINDINGS];
  weft_status st = weft__launch_check(dev, kernel, grid, block, bindings, num_bindings, scalars,
                                      scalar_bytes, resolved);
  if (st) return st;
  cmd *c = weft__launch_build(dev, stream, kernel, grid, block, resolved, num_bindings, scalars,
                              scalar_bytes, true);
  if (!c) return weft__oom(sizeof(cmd), "a launch command");
  weft__cmd_submit(dev, c);
  return NULL;
}

/* The common launch, straight-line: the same checks as weft__launch_check
 * as plain tests (each binding checked as it is written into a command from
 * the thread's cache, with the cached credit), then the push. Whatever is
 * out of the ordinary (an argument that fails a check, a cache that needs a
 * refill, a large command, the scheduler's own thread) goes to launch_full,
 * which checks everything again in order and says what is wrong: a launch
 * that fails here touched nothing another thread sees. */
weft_status weft_launch(weft_device *dev, weft_stream_id stream, weft_kernel kernel,
                        const uint32_t grid[3], const uint32_t block[3],
                        const weft_binding *bindings, size_t num_bindings, const void *scalars,
                        size_t scalar_bytes) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  uint32_t kidx = (uint32_t)kernel.id - 1u; /* id 0: UINT32_MAX, out of the table */
  if ((uint32_t)(kernel.id >> 32) != dev->tag || kidx >= WEFT_MAX_KERNELS || !grid || !block ||
      !dims_min(grid) || !dims_min(block) || num_bindings > WEFT_MAX_BINDINGS ||
      (num_bindings && !bindings) || scalar_bytes > WEFT_MAX_SCALAR_BYTES ||
      (scalar_bytes && !scalars))
    goto full;
  const weft_kernel_entry *k = &dev->kernels[kidx];
  if (!atomic_load_explicit(&k->ready, memory_order_acquire)) goto full;
  if (k->gate) {                 /* a host kernel has none: the same one test as before */
    if (k->k.builtin) goto full; /* built-in or native: weft__launch_check says more */
    if ((st = dev->backend->vt->check_launch(dev->backend, k->k.impl, k->k.name, num_bindings,
                                             scalar_bytes)))
      return st; /* what weft__launch_check says too: every earlier check passed */
  }
  size_t bytes = WEFT_CMD_HEADER + launch_extra(dev, num_bindings, scalar_bytes);
  if (bytes > WEFT_CMD_CLASS_MIN << (WEFT_TC_CLASSES - 1)) goto full;
  uint32_t klass = bytes > WEFT_CMD_CLASS_MIN, budget = weft__slot_of(dev, stream);
  weft_tcache *tc;
  cmd *c = weft__cmd_take_cached(dev, CMD_LAUNCH, budget, klass, &tc);
  if (!c) goto full;
  weft_binding *to = (weft_binding *)((char *)c + WEFT_CMD_HEADER);
  for (size_t i = 0; i < num_bindings; i++) {
    weft_binding b = bindings[i];
    uint64_t size;
    if ((uint32_t)b.access - 1u > 2u || /* READ, WRITE, READ_WRITE: 1..3 */
        !weft_handles_find(&dev->buffers, b.buffer.id, &size) || b.offset > size) {
      weft__cmd_untake_cached(dev, tc, c, klass);
      goto full;
    }
    if (b.size == WEFT_WHOLE) b.size = size - b.offset;
    if (b.size > size - b.offset) {
      weft__cmd_untake_cached(dev, tc, c, klass);
      goto full;
    }
    to[i] = b;
  }
  launch_init(c, dev, stream, kidx, grid, block, num_bindings, scalars, scalar_bytes);
  weft__cmd_submit(dev, c);
  return NULL;
full:
  return launch_full(dev, stream, kernel, grid, block, bindings, num_bindings, scalars,
                     scalar_bytes);
}

/* ---- weft_launch_ex, copies and fills: the full path with a label or a built-in ------------ */

/* The layouts of weft_launch_desc a caller may hand in: this release's (a
 * later one that grows the struct adds its size here). */
static bool launch_desc_known(uint32_t size) {
  return size == sizeof(weft_launch_desc);
}

/* Checked arguments to a submitted launch with |label| (interned) and
 * |shared| bytes. */
static weft_status launch_submit(weft_device *dev, weft_stream_id stream, weft_kernel kernel,
                                 const uint32_t grid[3], const uint32_t block[3],
                                 const weft_binding *resolved, size_t nb, const void *scalars,
                                 size_t scalar_bytes, const char *label, uint32_t shared) {
  cmd *c = weft__launch_build(dev, stream, kernel, grid, block, resolved, nb, scalars, scalar_bytes,
                              true);
  if (!c) return weft__oom(sizeof(cmd), "a launch command");
  c->label = label;
  c->shared_bytes = shared;
  weft__cmd_submit(dev, c);
  return NULL;
}

weft_status weft_launch_ex(weft_device *dev, const weft_launch_desc *desc) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!desc) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "desc is NULL");
  if (!launch_desc_known(desc->struct_size))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "desc->struct_size is %" PRIu32
                           "; this release knows sizeof(weft_launch_desc) = %zu",
                           desc->struct_size, sizeof(weft_launch_desc));
  weft_binding resolved[WEFT_MAX_BINDINGS];
  if ((st = weft__launch_check(dev, desc->kernel, desc->grid, desc->block, desc->bindings,
                               desc->num_bindings, desc->scalars, desc->scalar_bytes, resolved)))
    return st;
  const weft_kernel_entry *k = &dev->kernels[(uint32_t)desc->kernel.id - 1u];
  if (desc->shared_bytes && !k->k.impl)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "desc->shared_bytes is %" PRIu32
                           ": kernel '%s' is not a module kernel and has no shared memory",
                           desc->shared_bytes, k->k.name);
  const char *label;
  if ((st = weft__label_intern(dev, desc->label, &label))) return st;
  return launch_submit(dev, desc->stream, desc->kernel, desc->grid, desc->block, resolved,
                       desc->num_bindings, desc->scalars, desc->scalar_bytes, label,
                       desc->shared_bytes);
}

static const uint32_t one3[3] = {1, 1, 1};

static weft_kernel builtin_kernel(const weft_device *dev, uint32_t idx) {
  return (weft_kernel){((uint64_t)dev->tag << 32) | (idx + 1u)};
}

weft_status weft_buffer_copy(weft_device *dev, weft_stream_id stream, weft_buffer src,
                             uint64_t src_offset, weft_buffer dst, uint64_t dst_offset,
                             uint64_t len) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  uint64_t ssize, dsize;
  if ((st = weft__buf_lookup(dev, src, &ssize)) || (st = weft__buf_lookup(dev, dst, &dsize)))
    return st;
  if ((st = weft__check_range(ssize, src_offset, len, "copy source")) ||
      (st = weft__check_range(dsize, dst_offset, len, "copy destination")))
    return st;
  if (len == 0) return NULL; /* documented: nothing to order */
  if (src.id == dst.id && src_offset < dst_offset + len && dst_offset < src_offset + len)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "copy within one buffer: source [%" PRIu64 ", +%" PRIu64
                           ") and destination [%" PRIu64 ", +%" PRIu64 ") overlap",
                           src_offset, len, dst_offset, len);
  const weft_binding b[2] = {{src, src_offset, len, WEFT_READ}, {dst, dst_offset, len, WEFT_WRITE}};
  return launch_submit(dev, stream, builtin_kernel(dev, WEFT_KERNEL_COPY), one3, one3, b, 2, NULL,
                       0, NULL, 0);
}

weft_status weft_buffer_fill(weft_device *dev, weft_stream_id stream, weft_buffer buf,
                             uint64_t offset, uint64_t len, uint8_t value) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  uint64_t size;
  if ((st = weft__buf_lookup(dev, buf, &size))) return st;
  if ((st = weft__check_range(size, offset, len, "fill range"))) return st;
  if (len == 0) return NULL;
  const weft_binding b = {buf, offset, len, WEFT_WRITE};
  return launch_submit(dev, stream, builtin_kernel(dev, WEFT_KERNEL_FILL), one3, one3, &b, 1,
                       &value, 1, NULL, 0);
}

/* ---- 2. scheduler: number, resolve, pin, arm, record or register --------------------------- */

/* The launch's failpoints, looked up only while some are armed. */
static __attribute__((noinline)) void launch_failpoints(weft_device *dev, cmd *c) {
  const weft_failpoints *fp = &dev->failpoints;
  if (fp->nlaunches | fp->nkernels)
    c->inject = weft_failpoints_launch(fp, c->launch_no, dev->kernels[c->kernel].k.name);
  if (fp->npoison) c->poison = weft_failpoints_poisons(fp, c->launch_no);
}

/* The launch's write scope id |p| and its failpoints, as it is about to be scheduled. */
static inline void launch_arm(weft_device *dev, cmd *c, weft_failure_id p) {
  c->p = p;
  const weft_failpoints *fp = &dev->failpoints;
  if (__builtin_expect((fp->nlaunches | fp->nkernels | fp->npoison) != 0, 0))
    launch_failpoints(dev, c);
}

/* No worker to run it: the outputs carry why (and a recording, that it lacks it). */
static __attribute__((noinline)) void launch_unstarted(weft_device *dev, cmd *c, weft_status err) {
  weft__capture_on_unstarted(dev, c, err);
  for (uint32_t i = 0; i < c->nb; i++)
    c->bufs[i] = weft__buf_resolve(dev, c->bindings[i].buffer.id);
  weft__fail_unstarted(dev, err, c->bufs, c->bindings, c->nb);
  dev->stats.launches_failed++;
  weft__cmd_free(c);
}

void weft__launch_schedule(weft_device *dev, cmd *c) {
  /* Numbered here, in the order the scheduler takes launches (a
   * linearization of their submission), with no shared counter on the
   * clients' path. */
  c->launch_no = ++dev->cmds.launches_numbered;
  dev->stats.launches++;
  if (dev->mem.dry_depth) { /* measured, not run: resolves no resource */
    dev->stats.launches_dry++;
    weft__cmd_free(c);
    return;
  }
  uint32_t slot = weft__slot_of(dev, c->stream);
  weft_status err = NULL;
  weft_stream *s = weft__stream_get(dev, slot, &err);
  if (__builtin_expect(!s, 0)) {
    launch_unstarted(dev, c, err);
    return;
  }
  /* One pass over the bindings: resolve, map and pin each, mark it for
   * registration (weft__ms_mark: no mark while a capture window is on the
   * slot, which may record the launch instead), and note whether any writes
   * bytes (the write scope weft__scope_id would find, minted after every
   * mapping as before: a failed lazy mapping mints its own). A lazy mapping
   * may run other work: registration then marks again from scratch. */
  uint64_t bit = dev->window.capture_of[slot] ? 0 : UINT64_C(1) << slot, others = 0;
  bool remark = !bit;
  uint64_t written = 0; /* the sizes of the written bindings, ORed: non-zero if any writes bytes */
  const weft_binding *bds = c->bindings; /* locals: a buffer's counts could alias the command */
  weft_buf **bufs = c->bufs;
  for (uint32_t i = 0, n = c->nb; i < n; i++) {
    const weft_binding *bd = &bds[i];
    written |= bd->size & (UINT64_C(0) - weft__is_write(bd->access));
    weft_buf *b = weft__buf_resolve_seen(dev, bd->buffer.id); /* weft__launch_check found it */
    bufs[i] = b;
    if (__builtin_expect(!b, 0)) {
      if (!c->preset) c->preset = weft__buf_not_found(bd->buffer.id);
      continue;
    }
    if (__builtin_expect(!b->ptr, 0) && b->allocated) {
      weft__buf_map_lazy(dev, b);
      remark = true;
    }
    b->pending++;
    others |= weft__ms_mark(b, bit);
  }
  launch_arm(dev, c, written ? weft__scope_mint(dev) : 0);
  c->task.run = run_launch; /* before recording: a replay's copies run it too */
  if (__builtin_expect(remark, 0)) {
    if (dev->window.capture_of[slot]) { /* none: nothing to ask */
      weft_record r = weft__capture_record(dev, c);
      if (r == WEFT_REFUSED) weft__launch_discard(dev, c);
      if (r != WEFT_NOT_RECORDING) return; /* recorded (or refused), not run */
    }
    weft__ms_register(dev, slot, c);
    return;
  }
  weft__ms_register_marked(dev, slot, c, others);
}

/* ---- 3. a stream's worker: poison, read check, the kernel ---------------------------------- */

static void fail_launch(cmd *c, weft_status err) {
  c->result = OUT_FAILED;
  c->error = err;
  weft__exec_taint_outputs(c, c->p); /* the scope's id: tainted unless proven written */
}

static void run_launch(weft_task *t, weft_stream *on) {
  cmd *c = (cmd *)t;
  weft_device *dev = c->dev;
  if (weft__poisoned(dev)) {
    c->result = OUT_POISONED;
    return;
  }
  if (c->preset) {
    weft_status err = c->preset;
    c->preset = NULL;
    fail_launch(c, err);
    return;
  }
  if (c->poison) { /* the fault is the launch itself: it strikes whatever the inputs hold */
    weft__dev_poison(dev, weft_error_make(WEFT_ERR_DEVICE_POISONED,
                                          "failpoint: poisoned by launch %" PRIu64 " ('%s')",
                                          c->launch_no, dev->kernels[c->kernel].k.name));
    c->result = OUT_POISONED;
    return;
  }
  /* The read check: an input left unwritten by a failure (or never
   * allocated) stops the launch; its outputs carry the root failure. A
   * garbage input could be a grid size or gather indices: never run on it. */
  for (uint32_t i = 0; i < c->nb; i++) {
    weft_buf *b = c->bufs[i];
    const weft_binding *bd = &c->bindings[i];
    weft_failure_id f = 0;
    if (!b->ptr && !b->unalloc) {
      /* Unallocated, and memory ran out for the record of why too: the
       * kernel must never see a NULL binding; the launch fails instead. */
      char name[48];
      weft__buf_name(b->id, name, sizeof(name));
      fail_launch(c, weft_error_make(WEFT_ERR_NOT_FOUND, "%s was never allocated", name));
      return;
    }
    if (!b->ptr)
      f = b->unalloc;
    else if (bd->access & WEFT_READ)
      f = weft_taint_failure(&b->exec, weft__range_of(bd->offset, bd->size));
    if (!f) continue;
    c->result = OUT_SKIPPED;
    c->skip = (weft_read_failure){f, b->id};
    weft__exec_taint_outputs(c, f);
    return;
  }
  if (c->inject != WEFT_OK) {
    fail_launch(c, weft_error_make(c->inject, "failpoint: launch %" PRIu64 " of kernel '%s'",
                                   c->launch_no, dev->kernels[c->kernel].k.name));
    return;
  }
  /* A deferred backend enqueues the launch (its refusal is known now); the
   * host runs the kernel, during which a blocking call it makes must not
   * wait for it (weft__running_kernel). */
  weft_backend_launch d;
  weft__launch_desc(dev, c, &d);
  weft__kernel_running = c;
  weft_status err = dev->backend->vt->launch(dev->backend, on, &d);
  weft__kernel_running = NULL;
  if (err) {
    fail_launch(c, err);
    return;
  }
  for (uint32_t i = 0; i < c->nb; i++)
    if (weft__is_write(c->bindings[i].access))
      weft_taint_written(&c->bufs[i]->exec, &dev->alloc, NULL,
                         weft__range_of(c->bindings[i].offset, c->bindings[i].size));
  c->result = OUT_RUN;
}

/* ---- 4. scheduler: the outcome, in the order the work ran ---------------------------------- */

/* Applies a launch's outcome to the error graph, in the order the work ran:
 * every launch runs inside enter_write/exit_write; a skip never enters a
 * scope, it propagates the root. The write set goes to the failure store. */
static __attribute__((noinline)) void launch_complete_scoped(weft_device *dev, cmd *c) {
  weft_failures *fs = &dev->failures;
  weft_target *w = weft_failures_write_set(fs, c->nb);
  uint32_t nw = 0;
  for (uint32_t i = 0; w && i < c->nb; i++)
    if (c->bufs[i] && weft__is_write(c->bindings[i].access))
      w[nw++] = weft__target(c->bufs[i], c->bindings[i].offset, c->bindings[i].size);
  switch (c->result) {
  case OUT_RUN:
    dev->stats.launches_run += weft__launch_count(dev, c);
    if (w) weft__run_scope(fs, c->p, w, nw);
    break;
  case OUT_FAILED: {
    dev->stats.launches_failed++;
    weft_failure_id p = w ? weft_failures_enter_write(fs, c->p, w, nw) : 0;
    if (p) {
      weft_graph_set_origin(&fs->graph, p, c->kernel, c->launch_no);
      if (c->label) weft_graph_label_origin(&fs->graph, p, c->label);
    }
    weft_failures_exit_write(fs, p, w, nw, c->error);
    c->error = NULL;
    break;
  }
  case OUT_SKIPPED:
    dev->stats.launches_skipped++;
    if (w) {
      weft_failures_propagate(fs, &c->skip, c->kernel, c->launch_no, w, nw);
      if (c->label) weft_graph_label_skip(&fs->graph, c->skip.failure, c->launch_no, c->label);
    }
    break;
  default: /* poisoned: the device answers every later question itself */
    break;
  }
  if (c->error) weft_error_free(c->error);
  if (c->preset) weft_error_free(c->preset);
  for (uint32_t i = 0; i < c->nb; i++)
    if (c->bufs[i]) weft__buf_unpin(dev, c->bufs[i]);
}

/* The common case in line: a launch that ran and wrote no byte carrying a
 * claim, whose scope's enter and exit would be a no-op (weft__run_scope),
 * only counts and unpins (freeing no buffer). Anything else takes the
 * scoped path. */
void weft__launch_complete(weft_device *dev, cmd *c) {
  /* A launch that ran holds no error: a preset one fails it (run_launch). */
  if (__builtin_expect(c->result == OUT_RUN, 1)) {
    /* One pass: unpinned, unless a written byte carries a claim or the
     * unpinning frees a released buffer; then the pins are put back and the
     * scoped path unpins after the scope. */
    bool plain = true;
    weft_buf *const *bufs = c->bufs;
    const weft_binding *bd = c->bindings;
    uint32_t n = c->nb;
    for (uint32_t i = 0; i < n; i++) {
      weft_buf *b = bufs[i];
      if (!b) continue;
      if (weft__is_write(bd[i].access)) plain &= weft_taint_is_clean(&b->taint);
      plain &= --b->pending != 0 || !b->released;
    }
    if (__builtin_expect(plain, 1)) {
      dev->stats.launches_run += weft__launch_count(dev, c);
      return;
    }
    for (uint32_t i = 0; i < n; i++)
      if (bufs[i]) bufs[i]->pending++;
  }
  launch_complete_scoped(dev, c);
}

/* ---- replay support (capture.c) ------------------------------------------------------------ */

void weft__launch_register(weft_device *dev, cmd *c) {
  dev->stats.launches += weft__launch_count(dev, c);
  launch_arm(dev, c, weft__scope_id(dev, c));
  c->task.run = run_launch;
  weft__ms_register(dev, weft__slot_of(dev, c->stream), c);
}

void weft__launch_discard(weft_device *dev, cmd *c) {
  weft_error_free(c->preset);
  c->preset = NULL;
  for (uint32_t i = 0; i < c->nb; i++)
    if (c->bufs[i]) weft__buf_unpin(dev, c->bufs[i]);
  weft__cmd_free(c);
}

void weft__launch_fail(weft_device *dev, const cmd *r, weft_status err) {
  dev->stats.launches_failed++;
  weft__fail_unstarted(dev, err, r->bufs, r->bindings, r->nb);
}

void weft__launch_copy(cmd *c, const cmd *r) {
  size_t bytes = c->bytes;
  /* The scalars end the used part of the command (its budget is |r|'s: a
   * clone is made on |r|'s stream). */
  memcpy(c, r, (size_t)((const char *)r->scalars + r->scalar_bytes - (const char *)r));
  c->bytes = bytes;
  /* Every array lives inside the command: rebase it. */
  ptrdiff_t d = (char *)c - (const char *)r;
  c->bindings = (weft_binding *)((char *)r->bindings + d);
  c->bufs = (weft_buf **)((char *)r->bufs + d);
  c->ptrs = (void **)((char *)r->ptrs + d);
  c->task.waits = (weft_stream_wait *)((char *)r->task.waits + d);
  c->scalars = (const char *)r->scalars + d;
}

void weft__launch_replay(weft_device *dev, cmd *c, weft_replay_seg *instance) {
  memset(&c->task.link, 0, sizeof(c->task.link));
  c->task.nwaits = 0;
  c->task.fnext = NULL;
  c->task.notify = false;
  c->result = OUT_NONE;
  c->error = NULL;
  c->preset = NULL;
  c->instance = instance;
  if (instance) instance->count->inflight++;
  c->launch_no = ++dev->cmds.launches_numbered;
  for (uint32_t i = 0; i < c->nb; i++) /* the recording keeps them alive; each run pins them */
    if (c->bufs[i]) c->bufs[i]->pending++;
  dev->stats.launches_replayed += weft__launch_count(dev, c);
  weft__launch_register(dev, c);
}
