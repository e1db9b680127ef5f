/* The scheduler's types: the command, the buffer, the device (one section
 * per owning file), and the few one-line helpers every file uses. Types
 * only: each file's entry points are in its own header.
 *
 * The device: one scheduler thread owning all mutable device state (buffers,
 * streams, storage, taint views), fed by a lock-free inbox of commands from
 * any client thread.
 *
 * A command is one allocation that travels: client -> scheduler inbox ->
 * (as a task) a stream's worker. The scheduler keeps every task it handed to
 * a stream in order and retires it once the stream's cursor passes it:
 * completion costs the worker one release store, no message. */
#ifndef WEFT_SCHEDULER_DEVICE_INTERNAL_H
#define WEFT_SCHEDULER_DEVICE_INTERNAL_H

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/failpoints.h"
#include "core/freelist.h"
#include "core/handles.h"
#include "memory/drop_queue.h"
#include "memory/memory.h"
#include "streams/backend.h"
#include "core/failures.h"
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
  CMD_MEMORY,      /* a memory call: usage, report, cleanup, install, mode, dry run */
  CMD_FAILPOINTS,  /* data: the spec */
  CMD_CAPTURE,     /* data: the capture; offset: the transition */
  CMD_REPLAY,      /* data: the capture */
  CMD_EVENT,       /* weft_event_record: event; a barrier-like point on its stream */
  CMD_EVENT_WAIT,  /* weft_stream_wait_event: event; placed as a no-op waiting on (nb, offset) */
  CMD_EVENT_CHECK, /* a kernel's weft_event_wait: would the event wait for that kernel? */
  CMD_ADDRESS,     /* weft_buffer_address: buffer; the answer in |offset| */
  CMD_TRACE,       /* data: the trace call (trace.c) */
  CMD_LABEL,       /* buffer; data: its new label (owned), or NULL (labels.c) */
} cmd_kind;

/* What a CMD_READ answers: its blocked caller (token), an event
 * (weft_buffer_read_async), or an export (weft__buffer_export). */
typedef enum read_kind { RD_CALL, RD_ASYNC, RD_EXPORT } read_kind;

typedef enum outcome { OUT_NONE, OUT_RUN, OUT_FAILED, OUT_SKIPPED, OUT_POISONED } outcome;

/* Laid out by who touches what, a cache line each (docs/architecture.md, "A
 * launch, line by line"): the pool's hop reads lines 0-2 and writes only its
 * outcome and, while a trace records, its run's stamp on line 2 (a
 * failure's details on line 3); the scheduler's hop (number, resolve,
 * register, place) touches lines 0-3; retirement lines 0-3, a traced one
 * too. Line 4 is what other kinds use. */
typedef struct cmd {
  /* line 0: the task (the pool's link, run, seq and waits; the scheduler's
   * placement), and what every hop dispatches on */
  weft_task task; /* first: the inbox link is the task's */
  cmd_kind kind;
  uint16_t budget;  /* back-pressure: the stream slot it counts against, or WEFT_MAX_STREAMS */
  uint16_t on_slot; /* placed: the stream slot that runs it */
  /* line 1: what a launch's worker reads, written by the client; resolved
   * buffers written by the scheduler before it is placed */
  weft_device *dev;
  uint32_t nb; /* LAUNCH: bindings; CHECK: handles */
  union {
    uint32_t kernel; /* LAUNCH: index into the kernel table */
    uint32_t rd;     /* READ: its read_kind */
  };
  uint32_t grid[3], block[3]; /* LAUNCH */
  weft_binding *bindings;     /* LAUNCH (sizes resolved) */
  weft_buf **bufs;            /* LAUNCH, READ, WRITE: resolved buffers */
  /* Kind-specific pointers share a word (commands stay in their size class). */
  union {
    void **ptrs;      /* LAUNCH: binding addresses, resolved when it runs */
    void *copy_state; /* WRITE, READ: the backend's word for the copy (weft_copy_desc), or NULL */
  };
  /* line 2: the rest of what the worker reads, and what it writes: its
   * outcome, and its run's stamp (the stamp beside the outcome, so that a
   * traced task dirties no line an untraced one does not) */
  union {
    uint64_t *handles; /* CHECK */
    void *graph;       /* LAUNCH: replays this backend graph (a capture's), or NULL */
  };
  union {
    const void *scalars;      /* LAUNCH */
    const struct cmd *caller; /* a blocking call from a host kernel: that kernel's launch */
  };
  /* From |preset| on, a launch's state starts zeroed (launch_init, launch.c). */
  weft_status preset; /* LAUNCH: resolution error, owned */
  /* A task run while its stream stamps (a trace: weft_stream_stamp_at) has
   * its run interval here, in weft_clock_ticks (t0 0: not stamped). */
  weft_task_stamp tr;
  weft_stream_id stream;
  uint32_t scalar_bytes; /* LAUNCH: at most WEFT_MAX_SCALAR_BYTES */
  uint32_t shared_bytes; /* LAUNCH: dynamic shared memory per block (weft_launch_ex) */
  uint8_t inject;        /* LAUNCH: a weft_error_kind a failpoint makes it fail with */
  uint8_t result;        /* an outcome, set by the worker */
  bool poison;           /* LAUNCH: a failpoint poisons the device when it runs */
  bool cancelled;        /* a kernel's call refused while queued: processed as a no-op */
  bool detached;         /* kept by a recording: no longer counted against back-pressure */
  bool staged;           /* WRITE: |data| is a separate block for the drop queue */
  /* line 3: the scheduler's numbering and scope (set at its hop), a
   * failure's details (the worker's), and retirement's */
  weft_status error;                /* OUT_FAILED: the error (owned) */
  weft_read_failure skip;           /* OUT_SKIPPED: the root and the input that carried it */
  struct weft_replay_seg *instance; /* LAUNCH: the replay segment that owns it, or NULL */
  size_t bytes;                     /* size of this allocation */
  const char *label;                /* LAUNCH: its interned label (weft_launch_ex), or NULL */
  uint64_t launch_no;               /* LAUNCH: 1-based number on the device, in processing order */
  weft_failure_id p;                /* LAUNCH, WRITE: the provisional id of its write scope */
  /* line 4: blocking calls, copies and buffer calls */
  weft_token *token;
  union {
    weft_device_stats *stats_out; /* STATS */
    struct weft_event_obj *event; /* EVENT, EVENT_WAIT, EVENT_CHECK, READ (RD_ASYNC): one ref */
    struct weft_export *export;   /* READ (RD_EXPORT) */
    struct weft_memory_call *mem; /* MEMORY: the call, on the caller's stack */
  };
  uint64_t buffer;      /* CREATE, WRITE, READ, RELEASE */
  uint64_t offset, len; /* WRITE, READ; CREATE: len = size */
  void *data;           /* WRITE: bytes; READ: destination; LABEL: the label */
} cmd;

/* A replay instance's bookkeeping (capture.c): its launches placed and not
 * yet retired; when the last retires, the capture's count of replays in
 * flight drops (a client waits on it for a free instance). */
typedef struct weft_replay_count {
  uint32_t inflight;
  _Atomic uint32_t *outstanding;
} weft_replay_count;

/* A buffer a replay segment binds: its bindings (pins) and whether it writes it. */
typedef struct weft_replay_pin {
  weft_buf *b;
  uint32_t pins;
  bool writes;
} weft_replay_pin;

/* A segment of a replay instance (capture.c): a run of one lane's launches
 * of which only the first waits on anything. A fused replay places it whole
 * (|armed|), so retirement may take it in one step once its last launch
 * completed (retire.c): when every launch ran and no buffer it writes
 * carries a claim, each launch's completion would be a no-op but its
 * unpinning, which is done per buffer. */
typedef struct weft_replay_seg {
  weft_replay_count *count; /* the instance's */
  struct cmd *head, *tail;  /* its launches, linked through task.fnext once placed */
  uint64_t last_seq, last_placed;
  uint64_t launches; /* what the launches count as (weft__launch_count) */
  const weft_replay_pin *pins;
  uint32_t n, npins;
  bool armed; /* placed whole and not yet retired */
} weft_replay_seg;

typedef struct weft_kernel_entry {
  _Atomic uint32_t ready; /* release: the fields below are set */
  size_t name_cap;        /* the bytes of k.name (owned) */
  /* Its name, and a host kernel's function (weft_kernel_host) or a module
   * kernel's backend payload (weft_kernel_cuda: kernel_resolve). */
  weft_backend_kernel k;
  /* Non-NULL when weft_launch's fast path must look closer: a module
   * kernel's payload (checked by the backend), or a built-in or native
   * kernel (whose launches take the full path); NULL for a host kernel. */
  const void *gate;
} weft_kernel_entry;

/* A buffer, owned by the scheduler; its execution taint view is touched only
 * by tasks that bind it, which the wait rules order. */
/* Three cache lines by writer, so that what the scheduler writes on every
 * launch never shares a line with what a stream's worker reads or writes
 * (issue 14 found the pool reading |ptr| on the line the scheduler wrote
 * |pending| on). Allocated WEFT_CACHELINE-aligned. */
typedef struct weft_buf {
  /* Written only while no work uses the buffer (create, reservation,
   * release); read by workers. */
  uint64_t id, size;
  void *ptr;    /* its address while allocated (fixed: relocation needs a quiescent device) */
  weft_mem mem; /* its allocation, in the manager of the stream that created it */
  weft_mm *mm;  /* that manager */
  bool allocated, released;
  bool imported;           /* the caller's memory (weft_buffer_import): no manager, never moved */
  uint32_t exported;       /* live exports pinning it (export.c): close keeps its memory */
  uint32_t slot;           /* the slot whose manager holds its memory */
  weft_release_fn release; /* imported: called once when the buffer is freed (may be NULL) */
  void *release_user;
  weft_failure_id unalloc; /* the failure its reservation left, if it failed */
  char *label;             /* weft_buffer_set_label's copy, or NULL (the scheduler's) */
  /* Workers', in wait order. */
  _Alignas(WEFT_CACHELINE) weft_taint exec; /* failure ids as work executes */
  /* The scheduler's, on every launch that binds it. */
  _Alignas(WEFT_CACHELINE) uint32_t pending; /* dispatched tasks binding it, not yet completed */
  uint32_t lw_slot;                          /* last writer: stream slot and sequence number */
  uint64_t lw_seq;                           /* 0: never written */
  uint64_t read_mask;                        /* slots with a last_read entry */
  uint64_t *last_read; /* [max_streams]: last reader per slot since the last write */
  uint64_t pend_mask;  /* slots whose unexecuted batch holds a task binding it */
  weft_taint taint;    /* graph-tagged claims of completed work */
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
#define WEFT_CALLER_SHARDS   16u /* lines the count of callers inside is spread over */

/* The lines the layout of |cmd| promises (its comment): a field moved across
 * one changes what a hop touches. */
_Static_assert(sizeof(weft_task) + sizeof(cmd_kind) + 2 * sizeof(uint16_t) <= 64 &&
                   offsetof(cmd, dev) == 64 && offsetof(cmd, ptrs) + sizeof(void *) <= 128 &&
                   offsetof(cmd, graph) == 128 && offsetof(cmd, staged) < 192 &&
                   offsetof(cmd, tr) + sizeof(weft_task_stamp) <= 192 &&
                   offsetof(cmd, error) == 192 &&
                   offsetof(cmd, p) + sizeof(weft_failure_id) <= 256 &&
                   offsetof(cmd, token) == 256 && offsetof(cmd, shared_bytes) < 192,
               "cmd's fields on the lines its comment gives them");

/* A launch with 3 bindings on a 4-stream device (the common shape) fits the
 * smallest command class: a few more bytes in |cmd| double its footprint
 * and cost a third of a cross-stream launch (W3) in cache misses. */
_Static_assert(WEFT_CMD_HEADER + 3 * (sizeof(weft_binding) + sizeof(weft_buf *) + sizeof(void *)) +
                       4 * sizeof(weft_stream_wait) <=
                   WEFT_CMD_CLASS_MIN,
               "a 3-binding launch on 4 streams must fit the smallest command class");

/* One reservation or release, as weft_memory_snapshot's "events" lists
 * them (memory_calls.c keeps the last WEFT_MEMORY_EVENTS in a ring). */
typedef enum weft_mem_event_kind {
  WEFT_MEV_RESERVE = 1,
  WEFT_MEV_RESERVE_FAILED = 2, /* for good: after the ladder, when it climbed one */
  WEFT_MEV_RELEASE = 3,
} weft_mem_event_kind;
typedef struct weft_mem_event {
  uint64_t seq, t_ns; /* 1-based over the device's life; CLOCK_MONOTONIC */
  uint64_t buffer, bytes;
  uint64_t page, offset; /* RESERVE, RELEASE: where it sat (page identity) */
  uint32_t slot;
  uint8_t kind;      /* weft_mem_event_kind */
  uint8_t pool_kind; /* RESERVE, RELEASE: weft_pool_kind */
  uint16_t error;    /* RESERVE_FAILED: the weft_error_kind */
} weft_mem_event;

/* A client thread's cache for one device (submit.c, command.c): free
 * commands of the small classes, taken from the device's pools up to
 * WEFT_TC_BATCH at a time, and back-pressure credits per budget, taken from
 * the budget's count up to |block| at a time, so that a launch touches no
 * line another producer writes. It lives in the thread's TLS and is bound to
 * one device at a time; binding, unbinding (the thread exits, the slot is
 * reused for another device, or the device closes) and the device's list
 * of them are under the process-wide cache lock. Only the owner thread
 * touches the rest, and only while it is inside the device; close unbinds
 * after every caller has left. */
#define WEFT_TC_CLASSES 2u /* classes a thread caches: 512 B and 1 KiB commands */
/* Commands taken from a pool at once. 1: a burst of 32 single pops (each a
 * 16-byte CAS and a pointer chase through lines the scheduler freed) cost
 * more than it saved: W4 one producer 172-184 ns per launch against 102-118,
 * W1 350 against 235-278 (idle 2-core VM, 3 alternated rounds, issue 14). */
#define WEFT_TC_BATCH 1u
#define WEFT_TC_SEATS 8u  /* caches per device that take credits in blocks */
#define WEFT_TC_BLOCK 32u /* the most credits taken at once */
typedef struct weft_tcache {
  _Atomic(weft_device *) dev;             /* bound device, or NULL (written under the cache lock) */
  struct weft_tcache *next;               /* in dev->cmds.caches */
  bool seated;                            /* holds one of the device's credit seats: takes blocks */
  uint16_t block;                         /* credits taken at once (1 without a seat) */
  uint16_t credits[WEFT_MAX_STREAMS + 1]; /* counted in pending[b], not yet used */
  uint32_t ncmds[WEFT_TC_CLASSES];        /* cached free commands per class */
  ck_stack_entry_t *cmds[WEFT_TC_CLASSES]; /* linked through ->next */
} weft_tcache;

/* The device, as one sub-struct per owning file (the file that writes it;
 * others read). Cache lines apart where different threads write: the
 * inbox (every producer and the scheduler), the command pools (clients pop,
 * the scheduler pushes), each back-pressure budget, the callers-inside
 * shards, and the scheduler-only state. */
struct weft_device {
  /* device.c: fixed at open */
  weft_allocator alloc;
  weft_backend_base *backend; /* runs the streams, owns the storage (streams/backend.h) */
  uint32_t max_streams, max_tasks;
  weft_strategy strategy;
  uint32_t tag; /* distinguishes this device's kernel ids */
  /* inside.c: read by every client call */
  struct weft_live {
    _Atomic uint32_t closing;
    /* poisoning: the error is written once before the flag (release) */
    _Atomic uint32_t poisoned;
    weft_status poison_error;
    _Atomic(weft_poison_fn) on_poison;
    _Atomic(void *) on_poison_user;
    /* Callers inside a public call (weft__enter), spread over lines picked
     * per thread so that entering touches no line another thread writes;
     * close waits until their sum is 0 before it stops the scheduler. */
    struct weft_callers {
      _Alignas(64) _Atomic uint64_t n;
    } callers[WEFT_CALLER_SHARDS];
  } live;
  /* kernels.c */
  weft_kernel_entry *kernels;
  _Atomic uint32_t nkernels;
  /* labels.c: launch labels, interned (open addressing, WEFT_MAX_LABELS
   * slots, made by the first label; slots only go from NULL to a string) */
  _Atomic(_Atomic(char *) *) labels;
  /* buffers.c: the lock-free handle table clients check */
  weft_handles buffers;
  /* events.c: the event handles (a slot's value is its weft_event_obj), and
   * every event object made, recycled through a free list under |lock|
   * (objects live until close, so a stale handle's object is never freed
   * memory) */
  struct weft_events {
    weft_handles handles;
    pthread_mutex_t lock;
    struct weft_event_obj *all, *free;
  } events;
  /* export.c: live exports pin buffers past release and close. |refs| is 1
   * (the device) plus one per live export; whoever drops it to 0 (close, or
   * the last weft__buffer_unexport after close) finishes the teardown.
   * |dirty|: an export was dropped, the scheduler sweeps |list| (its own). */
  struct weft_exports {
    _Atomic uint64_t refs;
    _Atomic uint32_t dirty;
    struct weft_export *list; /* scheduler only (close once the scheduler stopped) */
  } exports;
  /* copy.c: staged write bytes not yet freed (the staging window) */
  _Alignas(64) _Atomic uint64_t staged_bytes;
  /* command.c (counts, pools) and submit.c (credits, thread caches, waiting for room) */
  struct weft_cmds {
    uint64_t max_pending;
    _Alignas(64) weft_freelist cmd_pool[WEFT_CMD_CLASSES]; /* recycled commands by size class */
    /* back-pressure: commands submitted and not yet retired, plus the credits
     * client threads hold for commands they have yet to make (weft_tcache),
     * per budget (a stream slot's, then the device's own for commands on no
     * stream), each on its own line: clients of different streams do not
     * share one */
    struct weft_budget {
      _Alignas(64) _Atomic uint64_t n;
    } pending[WEFT_MAX_STREAMS + 1];
    _Alignas(64) _Atomic uint64_t pending_peak, backpressure_waits;
    weft_eventcount room; /* clients waiting for pending < max_pending park here */
    /* Under the process-wide cache lock (submit.c): the thread caches bound
     * to this device, and how many of them hold a credit seat. */
    struct weft_tcache *caches;
    uint32_t seats;
    void *slab; /* the smallest class's commands made at open (one block), or NULL */
    size_t slab_bytes;
    /* scheduler only: commands retired and not yet returned to their
     * classes, returned in one push per class (and the pending counts
     * lowered once) per retirement pass */
    _Alignas(64) uint64_t fc_pending[WEFT_MAX_STREAMS + 1]; /* counted as pending, per budget */
    ck_stack_entry_t *fc_head[WEFT_CMD_CLASSES], *fc_tail[WEFT_CMD_CLASSES];
    uint64_t fc_n, fc_budgets;  /* commands in the chains; stream budgets (bits) in fc_pending */
    uint64_t launches_numbered; /* launch numbers handed out, in processing order */
  } cmds;
  /* loop.c */
  struct weft_loop {
    bool combining;   /* WEFT_SCHEDULER_COMBINING */
    weft_signal wake; /* the pool and clients wake the scheduler thread (inbox.ec) */
    pthread_t thread;
    _Alignas(64) weft_inbox inbox;
    _Atomic uint32_t role; /* COMBINING: 1 while a thread holds the scheduler role */
    /* scheduler only */
    _Alignas(64) ck_stack_entry_t *held_head, *held_tail; /* taken from the inbox, not yet
                                                              processed */
    uint32_t combines; /* COMBINING: passes made by clients (retirement every 16th) */
    bool shutdown;
    weft_spin spin; /* the scheduler thread's, before it parks */
  } loop;
  /* ---- scheduler thread only ---- */
  /* memory_calls.c */
  struct weft_memory {
    weft_storage *storage; /* the backend's */
    weft_mm **mms;         /* [max_streams]: memory managers, created by the first buffer */
    weft_mm_config mm_config;
    weft_pool_config *layout_pools; /* owned copy of a custom layout */
    uint32_t dry_depth;
    bool in_reclaim; /* the reclaim callback runs: releases take effect at once */
    weft_reclaim_fn reclaim;
    void *reclaim_user;
    weft_oom_fn on_oom; /* weft_memory_set_oom_observer */
    void *oom_user;
    uint64_t nevents; /* events recorded so far; the ring holds the last WEFT_MEMORY_EVENTS */
    weft_mem_event events[WEFT_MEMORY_EVENTS];
  } mem;
  /* multistream.c: placement and cross-stream order; retire.c pops |fifo| */
  struct weft_ms {
    struct weft_fifo {
      weft_task *head, *tail; /* tasks handed to the stream, oldest first, not yet retired */
    } fifo[WEFT_MAX_STREAMS];
    uint64_t *synced; /* [slot * max_streams + origin]: origin seq the slot has waited for */
    /* Barriers (multistream.c): away[s * max_streams + slot], the position
     * on s of the last task of slot's batches that Interleave placed on s's
     * queue, for the s in away_mask[slot] (cleared by a barrier on slot's
     * own queue); gate[slot]: the position on slot's queue of its last
     * weft_stream_wait_event, which its tasks placed elsewhere wait for. */
    uint64_t *away;
    uint64_t away_mask[WEFT_MAX_STREAMS];
    uint64_t gate[WEFT_MAX_STREAMS];
    weft_batch *batches; /* [max_streams] */
    uint64_t isolated;   /* slots that require isolation (a capture window): no interleaving */
    uint64_t inflight;   /* tasks dispatched and not yet completed */
    uint64_t placed;     /* tasks placed on streams so far */
  } ms;
  /* window.c and capture.c */
  struct weft_windows {
    uint64_t forbid_mask; /* slots whose reservations are Forbidden (recording) */
    struct weft_capture *capture_of[WEFT_MAX_STREAMS]; /* the window each slot is in */
    struct weft_capture *captures;                     /* live captures (close ends them) */
  } window;
  /* the backend's streams */
  weft_stream **streams;  /* [max_streams], created lazily */
  weft_drop_queue *drops; /* [max_streams]: staged write bytes, fenced by the stream */
  struct weft_slot_ref {
    weft_device *dev;
    uint32_t slot;
  } * slot_refs;
  /* device.c */
  weft_failures failures; /* the error graph and the failure-store surface */
  weft_failpoints failpoints;
  /* trace.c: the recording (weft_trace_begin, WEFT_TRACE), or NULL; the
   * hooks on the launch path test it (one predictable branch when off) */
  struct weft_trace *trace;
  weft_device_stats stats;
};

/* ---- one-line helpers every file uses ---- */

static inline size_t weft__align8(size_t n) {
  return (n + 7u) & ~(size_t)7u;
}

/* The stream slot a stream id folds onto (no division for the usual ids). */
static inline uint32_t weft__slot_of(const weft_device *dev, weft_stream_id id) {
  return id < dev->max_streams ? (uint32_t)id : (uint32_t)(id % (uint64_t)dev->max_streams);
}

static inline bool weft__is_write(weft_access a) {
  return (a & WEFT_WRITE) != 0;
}

static inline weft_range weft__range_of(uint64_t offset, uint64_t size) {
  return (weft_range){offset, offset + size};
}

static inline void *weft__buf_ptr(weft_buf *b, uint64_t offset) {
  return (char *)b->ptr + offset;
}

/* 1 once the poison error is published (2 while it is being written). */
static inline bool weft__poisoned(const weft_device *dev) {
  return atomic_load_explicit(&dev->live.poisoned, memory_order_acquire) == 1;
}

/* Asks the backend for a sticky fault (with |query|, of the streams too):
 * one poisons the device (weft_backend_vtable.check_fault). */
static inline void weft__check_fault(weft_device *dev, bool query) {
  if (dev->backend->vt->check_fault) dev->backend->vt->check_fault(dev->backend, query);
}

static inline WEFT_MUST_USE_RESULT weft_status weft__oom(size_t bytes, const char *what) {
  return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, bytes, "no memory for %s", what);
}

/* The command after |c| in a chain linked through task.link, or NULL. */
static inline cmd *weft__cmd_next(const cmd *c) {
  return (cmd *)weft_task_next(&c->task);
}

/* What the scheduler does with each kind of command (device.c fills the
 * table): |process| when it reaches the scheduler (after retiring what
 * completed, when |retire_first|: a question answers from everything
 * completed so far), |complete| when its task retires. The loop and
 * retirement call through it, so they depend on no kind's file. */
typedef struct weft_cmd_ops {
  void (*process)(weft_device *dev, cmd *c);
  void (*complete)(weft_device *dev, cmd *c);
  bool retire_first;
} weft_cmd_ops;
extern const weft_cmd_ops weft__cmd_ops[];

#endif
