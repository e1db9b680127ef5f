/* The device: one scheduler thread owning all mutable device state (buffers,
 * streams, storage, taint views), fed by a lock-free inbox of commands from
 * any client thread.
 *
 * A command is one allocation that travels: client -> scheduler inbox ->
 * (as a task) a stream's worker. The scheduler keeps every task it handed to
 * a stream in order and retires it once the stream's cursor passes it:
 * completion costs the worker one release store, no message. */
#ifndef WEFT_SCHEDULER_DEVICE_H
#define WEFT_SCHEDULER_DEVICE_H

#include "core/failpoints.h"
#include "core/freelist.h"
#include "core/handles.h"
#include "memory/drop_queue.h"
#include "memory/memory.h"
#include "streams/failures.h"
#include "streams/stream.h"

typedef struct weft_buf weft_buf;

typedef enum cmd_kind {
  CMD_CREATE,
  CMD_WRITE,
  CMD_LAUNCH,
  CMD_READ,
  CMD_RELEASE,
  CMD_SYNC,
  CMD_CHECK,
  CMD_STATS,
  CMD_SHUTDOWN,
  CMD_MEMORY,     /* a memory call: usage, report, cleanup, install, mode, dry run */
  CMD_FAILPOINTS, /* data: the spec */
  CMD_CAPTURE,    /* data: the capture; offset: the transition */
  CMD_REPLAY,     /* data: the capture */
} cmd_kind;

typedef enum outcome { OUT_NONE, OUT_RUN, OUT_FAILED, OUT_SKIPPED, OUT_POISONED } outcome;

typedef struct cmd {
  weft_task task; /* first: the inbox link is the task's */
  cmd_kind kind;
  uint16_t budget;  /* back-pressure: the stream slot it counts against, or WEFT_MAX_STREAMS */
  uint16_t on_slot; /* placed: the stream slot that runs it */
  size_t bytes;     /* size of this allocation */
  weft_device *dev;
  weft_stream_id stream;
  weft_token *token;
  uint64_t buffer;            /* CREATE, WRITE, READ, RELEASE */
  uint64_t offset, len;       /* WRITE, READ; CREATE: len = size */
  void *data;                 /* WRITE: bytes; READ: destination */
  bool staged;                /* WRITE: |data| is a separate block for the drop queue */
  uint32_t kernel;            /* LAUNCH: index into the kernel table */
  uint64_t launch_no;         /* LAUNCH: 1-based number on the device */
  uint32_t grid[3], block[3]; /* LAUNCH */
  uint32_t nb;                /* LAUNCH: bindings; CHECK: handles */
  weft_binding *bindings;     /* LAUNCH (sizes resolved) */
  /* Kind-specific pointers share a word (commands stay in their size class). */
  union {
    void **ptrs;   /* LAUNCH on the host: binding addresses, resolved at dispatch */
    void *staging; /* WRITE, READ on a GPU: the copy's pinned bytes, or NULL */
  };
  union {
    uint64_t *handles; /* CHECK */
    void *graph;       /* LAUNCH on a CUDA device: replays this CUDA graph (a capture's) */
  };
  weft_buf **bufs; /* LAUNCH, READ, WRITE: resolved buffers */
  union {
    const void *scalars;      /* LAUNCH */
    const struct cmd *caller; /* a blocking call from a host kernel: that kernel's launch */
  };
  size_t scalar_bytes;
  weft_device_stats *stats_out;       /* STATS */
  struct weft_memory_call *mem;       /* MEMORY: the call, on the caller's stack */
  weft_status preset;                 /* LAUNCH: resolution error, owned */
  weft_failure_id p;                  /* LAUNCH, WRITE: the provisional id of its write scope */
  weft_error_kind inject;             /* LAUNCH: a failpoint makes it fail with this kind */
  bool poison;                        /* LAUNCH: a failpoint poisons the device when it runs */
  struct weft_replay_count *instance; /* LAUNCH: the replay instance that owns it, or NULL */
  bool detached;          /* kept by a recording: no longer counted against back-pressure */
  bool cancelled;         /* a kernel's call refused while queued: processed as a no-op */
  outcome result;         /* set by the worker */
  weft_status error;      /* OUT_FAILED: the error (owned) */
  weft_read_failure skip; /* OUT_SKIPPED: the root and the input that carried it */
} cmd;

/* A replay instance's bookkeeping (capture.c): its launches placed and not
 * yet retired; when the last retires, the capture's count of replays in
 * flight drops (a client waits on it for a free instance). */
typedef struct weft_replay_count {
  uint32_t inflight;
  _Atomic uint32_t *outstanding;
} weft_replay_count;

#define WEFT_GPU_MAX_PARAMS 64u

typedef struct weft_kernel_entry {
  _Atomic uint32_t ready; /* release: the fields below are set */
  char *name;
  size_t name_cap;
  weft_host_kernel_fn fn;
  void *user;
  /* A CUDA kernel (weft_kernel_cuda): its CUfunction and parameter layout. */
  void *gpu_fn;
  char params[WEFT_GPU_MAX_PARAMS + 1];    /* the signature: 'b', '1', '2', '4', '8' */
  uint16_t param_off[WEFT_GPU_MAX_PARAMS]; /* a scalar's offset in the scalar block */
  uint32_t nparams, nbindings;
  uint32_t scalar_min, scalar_max; /* accepted scalar block sizes (struct padding) */
} weft_kernel_entry;

/* A buffer, owned by the scheduler; its execution taint view is touched only
 * by tasks that bind it, which the wait rules order. */
typedef struct weft_buf {
  uint64_t id, size;
  weft_mem mem; /* its allocation, in the manager of the stream that created it */
  weft_mm *mm;  /* that manager */
  void *ptr;    /* its address while allocated (fixed: relocation needs a quiescent device) */
  bool allocated, released;
  uint32_t pending;        /* dispatched tasks binding it, not yet completed */
  weft_taint taint;        /* graph-tagged claims of completed work (scheduler) */
  weft_taint exec;         /* failure ids as work executes (workers, in wait order) */
  weft_failure_id unalloc; /* the failure its reservation left, if it failed */
  uint32_t lw_slot;        /* last writer: stream slot and sequence number */
  uint64_t lw_seq;         /* 0: never written */
  uint64_t *last_read;     /* [max_streams]: last reader per slot since the last write */
  uint64_t pend_mask;      /* slots whose unexecuted batch holds a task binding it */
  uint32_t slot;           /* the slot whose manager holds its memory */
} weft_buf;

/* Tasks registered on a slot and not yet placed on a stream (linked through
 * task.link, in registration order). */
typedef struct weft_batch {
  weft_task *head, *tail;
  uint32_t n;
} weft_batch;

#define WEFT_CMD_HEADER    ((sizeof(cmd) + 7u) & ~(size_t)7u) /* arrays start here */
#define WEFT_MAX_KERNELS   4096u
#define WEFT_CMD_CLASSES   7u
#define WEFT_CMD_CLASS_MIN ((size_t)512) /* command size classes: 512 B .. 32 KiB */
#define WEFT_WRITE_INLINE  (64u * 1024u) /* larger writes are staged through the drop queue */
/* A staged write is at most this large, and the device's staged bytes not yet
 * freed stay within the window; a larger write, or one that finds the window
 * full, is copied by the stream's worker straight from the caller's bytes
 * while the caller waits (a thread that cannot wait always stages). */
#define WEFT_WRITE_STAGE_MAX (UINT64_C(4) << 20)
#define WEFT_STAGING_WINDOW  (UINT64_C(64) << 20)
#define WEFT_CALLER_SHARDS 16u           /* lines the count of callers inside is spread over */

/* A launch with 3 bindings on a 4-stream device (the common shape) fits the
 * smallest command class: a few more bytes in |cmd| double its footprint
 * and cost a third of a cross-stream launch (W3) in cache misses. */
_Static_assert(WEFT_CMD_HEADER + 3 * (sizeof(weft_binding) + sizeof(weft_buf *) + sizeof(void *)) +
                       4 * sizeof(weft_stream_wait) <=
                   WEFT_CMD_CLASS_MIN,
               "a 3-binding launch on 4 streams must fit the smallest command class");

struct weft_device {
  weft_allocator alloc;
  uint32_t max_streams, max_tasks;
  weft_strategy strategy;
  uint32_t tag; /* distinguishes this device's kernel ids */
  /* Read-mostly state every client call reads. */
  _Atomic uint32_t closing;
  /* poisoning: the error is written once before the flag (release) */
  _Atomic uint32_t poisoned;
  weft_status poison_error;
  _Atomic(weft_poison_fn) on_poison;
  _Atomic(void *) on_poison_user;
  uint64_t max_pending;
  bool combining;   /* WEFT_SCHEDULER_COMBINING */
  weft_signal wake; /* the pool and clients wake the scheduler thread (inbox.ec) */
  weft_kernel_entry *kernels;
  _Atomic uint32_t nkernels;
  pthread_t thread;
  weft_handles buffers;
  /* Cache lines apart, each written by different threads: the inbox (every
   * producer and the scheduler), the command pools (clients pop, the
   * scheduler pushes), the back-pressure counters (clients and the
   * scheduler) and the launch counter (clients). */
  _Alignas(64) weft_inbox inbox;
  _Atomic uint32_t role; /* COMBINING: 1 while a thread holds the scheduler role */
  _Alignas(64) weft_freelist cmd_pool[WEFT_CMD_CLASSES]; /* recycled commands by size class */
  /* back-pressure: commands submitted and not yet retired, per budget (a
   * stream slot's, then the device's own for commands on no stream), each on
   * its own line: clients of different streams do not share one */
  struct weft_budget {
    _Alignas(64) _Atomic uint64_t n;
  } pending[WEFT_MAX_STREAMS + 1];
  _Alignas(64) _Atomic uint64_t pending_peak, backpressure_waits;
  weft_eventcount room;          /* clients waiting for pending < max_pending park here */
  _Atomic uint64_t staged_bytes; /* staged write bytes not yet freed (the staging window) */
  _Alignas(64) _Atomic uint64_t launches_submitted;
  /* Callers inside a public call (weft__enter), spread over lines picked per
   * thread so that entering touches no line another thread writes; close
   * waits until their sum is 0 before it stops the scheduler. */
  struct weft_callers {
    _Alignas(64) _Atomic uint64_t n;
  } callers[WEFT_CALLER_SHARDS];
  /* ---- scheduler thread only ---- */
  _Alignas(64) weft_storage *storage;
  weft_failures failures; /* the error graph and the failure-store surface */
  weft_failpoints failpoints;
  weft_mm **mms; /* [max_streams]: memory managers, created by the first buffer */
  weft_mm_config mm_config;
  weft_pool_config *layout_pools; /* owned copy of a custom layout */
  uint32_t dry_depth;
  bool in_reclaim; /* the reclaim callback runs: releases take effect at once */
  weft_reclaim_fn reclaim;
  void *reclaim_user;
  ck_stack_entry_t *held_head, *held_tail; /* taken from the inbox, not yet processed */
  struct weft_fifo {
    weft_task *head, *tail; /* tasks handed to the stream, oldest first, not yet retired */
  } fifo[WEFT_MAX_STREAMS];
  /* Commands retired and not yet returned to their classes: returned in one
   * push per class, and the pending count lowered once, per retirement pass. */
  uint64_t fc_pending[WEFT_MAX_STREAMS + 1]; /* of them, counted as pending, per budget */
  ck_stack_entry_t *fc_head[WEFT_CMD_CLASSES], *fc_tail[WEFT_CMD_CLASSES];
  uint64_t fc_n, fc_budgets; /* commands in the chains; stream budgets (bits) in fc_pending */
  weft_host_pool *pool;      /* runs the streams (host backend) */
  struct weft_gpu *gpu;      /* the CUDA backend, or NULL (scheduler/cuda/device_cuda.c) */
  weft_stream **streams;     /* [max_streams], created lazily */
  weft_drop_queue *drops;    /* [max_streams]: staged write bytes, fenced by the stream */
  struct weft_slot_ref {
    weft_device *dev;
    uint32_t slot;
  } * slot_refs;
  uint64_t *synced;     /* [slot * max_streams + origin]: origin seq the slot has waited for */
  weft_batch *batches;  /* [max_streams] */
  uint64_t isolated;    /* slots that require isolation (a capture window): no interleaving */
  uint64_t forbid_mask; /* slots whose reservations are Forbidden (recording) */
  struct weft_capture *capture_of[WEFT_MAX_STREAMS]; /* the window each slot is in */
  struct weft_capture *captures;                     /* live captures (close ends them) */
  uint64_t inflight;                                 /* tasks dispatched and not yet completed */
  uint64_t placed;                                   /* tasks placed on streams so far */
  uint32_t combines; /* COMBINING: passes made by clients (retirement every 16th) */
  bool shutdown;
  weft_device_stats stats;
};

/* A command of |kind| with |extra| bytes after it, from the device's pools.
 * A client past the back-pressure limit waits here (the scheduler thread and
 * the device's own workers never wait: they are what frees room). Commands
 * on a stream count against that stream's budget (_on), others against the
 * device's own: a stream stalled behind a blocked kernel holds up only its
 * own clients. */
cmd *weft__cmd_new(weft_device *dev, cmd_kind kind, size_t extra);
cmd *weft__cmd_new_on(weft_device *dev, cmd_kind kind, size_t extra, weft_stream_id stream);
/* The launch whose host kernel the calling thread runs on |dev|, or NULL. */
const cmd *weft__running_kernel(const weft_device *dev);
/* InvalidArgument for |call| made from a kernel of |dev|, which would wait
 * for that kernel (|why|); NULL when the calling thread runs none. */
weft_status weft__refuse_in_kernel(const weft_device *dev, const char *call, const char *why);
void weft__cmd_free(cmd *c);
/* A command a recording keeps (for the capture's lifetime) stops counting
 * against back-pressure, or a long recording would block its own end. */
void weft__cmd_detach(weft_device *dev, cmd *c);
/* The command after |c| in a chain linked through task.link, or NULL. */
static inline cmd *weft__cmd_next(const cmd *c) {
  return (cmd *)weft_task_next(&c->task);
}
/* Queues |c| for the scheduler (and, when combining, schedules it). */
void weft__cmd_submit(weft_device *dev, cmd *c);

/* ---- shared by the scheduler's files (scheduler thread only) ---- */
weft_status weft__dev_reserve(weft_device *dev, weft_buf *b, uint32_t slot);
void weft__dev_memory_call(weft_device *dev, cmd *c);
void weft__dev_process(weft_device *dev, cmd *c);
void weft__dev_flush_all(weft_device *dev);
/* SchedulerMultiStream (multistream.c). register: align, then batch on
 * |slot| (whose stream exists), executing the batch once it is full.
 * execute: hands the batches of |slots| to their streams (strategy). */
void weft__ms_register(weft_device *dev, uint32_t slot, cmd *c);
void weft__ms_execute(weft_device *dev, const uint32_t *slots, uint32_t n);
void weft__ms_flush(weft_device *dev, uint32_t slot);
/* Retires tasks until none is in flight; commands that arrive meanwhile join
 * the scheduler's queue, in order, for the main loop. Needed before bytes
 * move (relocation: workers hold addresses resolved at dispatch) and before
 * the scheduler touches execution views. It never waits for a kernel that
 * waits for the scheduler: a kernel's blocking call still queued is refused
 * (InvalidArgument), so that kernel can finish. */
void weft__dev_drain(weft_device *dev);
weft_device *weft__dev_scheduling(void); /* the device whose scheduler is this thread */
/* Adds a kernel: |name| is copied, |e|'s other fields taken as they are. */
weft_status weft__kernel_register(weft_device *dev, const char *name, const weft_kernel_entry *e,
                                  weft_kernel *out);
/* Poisons the device once (takes |why|): every later operation fails with it. */
void weft__dev_poison(weft_device *dev, weft_status why);
bool weft__dev_poisoned(const weft_device *dev);

/* ---- the CUDA backend (scheduler/cuda/device_cuda.c; without cuda.h,
 * scheduler/nocuda/device_nocuda.c answers that it is absent) ----
 * Every call but open runs on a device with dev->gpu set. */
/* Loads the driver, retains the context, creates the storage (dev->storage). */
weft_status weft__gpu_open(weft_device *dev, const weft_device_options *o);
/* Makes the device's context current on the calling thread. */
void weft__gpu_enter(weft_device *dev);
/* Unloads the modules and destroys the lanes and the context (the storage
 * is destroyed first, by the caller). */
void weft__gpu_close(weft_device *dev);
weft_status weft__gpu_stream_create(weft_device *dev, uint32_t slot, weft_stream **out);
/* As weft_storage_cuda_fail_call (|n| == 0 clears). */
bool weft__gpu_fail_call(weft_device *dev, uint64_t n, weft_error_kind kind);
/* The largest allocation the device could ever hold. */
uint64_t weft__gpu_capacity(weft_device *dev);
/* Checks a launch's bindings and scalar bytes against the kernel's signature. */
weft_status weft__gpu_check_launch(const weft_kernel_entry *k, size_t nb, size_t scalar_bytes);
/* Enqueue a task's work on the CUDA stream it was placed on. */
weft_status weft__gpu_launch(weft_device *dev, cmd *c, weft_stream *on);
weft_status weft__gpu_write(weft_device *dev, cmd *c, weft_stream *on);
weft_status weft__gpu_read(weft_device *dev, cmd *c, weft_stream *on);
/* A GPU write or read retired: a read's bytes reach the caller
 * (|deliver|) and the pinned staging goes back. */
void weft__gpu_staging_done(weft_device *dev, cmd *c, bool deliver);
/* Poisons the device with the first sticky driver error, if any; with
 * |poll|, first queries the streams with work outstanding (async faults). */
void weft__gpu_check_poison(weft_device *dev, bool poll);
void weft__gpu_stats(weft_device *dev, weft_device_stats *out);
/* The CUDA fields of weft_device_info (backend, name, memory, driver). */
void weft__gpu_info(weft_device *dev, weft_device_info *out);
/* Moves the streams' cursors to what the GPU has completed (event polls). */
void weft__gpu_progress(weft_device *dev);
/* Before the scheduler parks: completion marks on the streams with work
 * outstanding, so the GPU wakes it. */
void weft__gpu_arm(weft_device *dev);
/* A host synchronisation point (a sync or read retiring): asks the driver
 * for errors (on |s|; a sticky error is the context's), so a sticky one is
 * reported here. */
void weft__gpu_sync_point(weft_device *dev, weft_stream *s);
/* The launches a capture's graph replays (c->graph set), for the stats. */
uint32_t weft__gpu_graph_launches(const void *graph);
/* Stream-captures the recorded launches |rec| (in order) into a CUDA graph
 * and returns one launch command that replays it, bound to every recorded
 * binding (so a replay is ordered against other work like any launch).
 * Generic when the capture was invalidated or the graph holds memory nodes;
 * a launch the driver refuses makes it fail too. */
weft_status weft__gpu_capture(weft_device *dev, const cmd *rec, cmd **out);
void weft__gpu_capture_free(weft_device *dev, cmd *graph_launch);
void weft__dev_release_now(weft_device *dev, uint64_t buffer);
void weft__buf_free(weft_device *dev, weft_buf *b);
/* Every public call on a device runs inside it: weft__enter counts the
 * caller in (or refuses: NULL device, "device is closing", poisoned), and
 * weft__leave, run by the cleanup of a WEFT_INSIDE variable on every return
 * path, counts it out. Close sets |closing| and waits for the count to drain
 * while the scheduler still runs, so a call that entered first completes
 * (its commands are processed, a blocked read gets its answer) and the
 * device's memory outlives every caller; a call that enters later is refused
 * and touches only the count and the flag. */
typedef struct weft_inside {
  weft_device *dev; /* set once inside */
  uint32_t shard;
} weft_inside;
weft_status weft__enter(weft_device *dev, weft_inside *in);
/* As weft__enter, on a poisoned device too (destroy, the poison calls). */
weft_status weft__enter_open(weft_device *dev, weft_inside *in);
/* As weft__enter, then refuses a call from the device's own scheduler thread. */
weft_status weft__enter_blocking(weft_device *dev, weft_inside *in);
void weft__leave(weft_inside *in);
#define WEFT_INSIDE __attribute__((cleanup(weft__leave))) weft_inside
/* Queues a chain of commands (linked through task.link, in order) at once. */
void weft__cmd_submit_chain(weft_device *dev, cmd *first, cmd *last);

/* Launches (device.c): argument checks, building, and the scheduler's steps. */
weft_status weft__launch_check(weft_device *dev, weft_kernel kernel, const uint32_t grid[3],
                               const uint32_t block[3], const weft_binding *bindings,
                               size_t num_bindings, const void *scalars, size_t scalar_bytes,
                               weft_binding *resolved);
/* |wait| false: NULL at once (as for no memory) when the stream's budget is
 * full, instead of waiting for room. */
cmd *weft__launch_build(weft_device *dev, weft_stream_id stream, weft_kernel kernel,
                        const uint32_t grid[3], const uint32_t block[3],
                        const weft_binding *resolved, size_t nb, const void *scalars,
                        size_t scalar_bytes, bool wait);
/* A launch that cannot run: its outputs carry |err|. */
void weft__launch_fail(weft_device *dev, const cmd *r, weft_status err);
/* Copies the recorded launch |r| into |c| (its arrays rebased). */
void weft__launch_copy(cmd *c, const cmd *r);
/* Runs |c| (a copy of a recorded launch) again: numbered anew, its buffers
 * pinned, registered. |instance|: the in-flight count of the replay instance
 * that owns |c| (not freed at retirement), or NULL for a pooled command. */
void weft__launch_replay(weft_device *dev, cmd *c, weft_replay_count *instance);
/* Clients that wait for room (back-pressure, a free replay instance).
 * |ready| may take what it waits for: it is called until it returns true,
 * and never again after. */
void weft__wait_room(weft_device *dev, bool (*ready)(void *), void *arg);
/* Scope id, failpoints, then SchedulerMultiStream registration. */
void weft__launch_register(weft_device *dev, cmd *c);
/* Drops a resolved launch that will not run (unpins, frees). */
void weft__launch_discard(weft_device *dev, cmd *c);

/* Capture (capture.c), called by the scheduler. */
/* The hooks act only on the stream ids a capture was opened on (not on
 * every id that folds onto its slots). */
bool weft__capture_record(weft_device *dev, cmd *c); /* true: taken */
void weft__capture_on_create(weft_device *dev, weft_stream_id stream, uint64_t buffer);
void weft__capture_on_write(weft_device *dev, weft_stream_id stream, uint64_t buffer);
/* A launch on a recording stream that could not start (no stream): dooms it. */
void weft__capture_on_unstarted(weft_device *dev, const cmd *c, weft_status why);
weft_status weft__capture_refuse_sync(weft_device *dev, weft_stream_id stream, const char *what);
bool weft__capture_keep(weft_device *dev, weft_buf *b); /* true: held until begin */
bool weft__capture_cleanup_skipped(weft_device *dev, uint32_t slot);
void weft__capture_process(weft_device *dev, cmd *c);
void weft__capture_close_all(weft_device *dev);
void weft__dev_mm_destroy_all(weft_device *dev);

#endif
