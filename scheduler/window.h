/* The capture window (window.c): the state of a capture the scheduler's
 * steps query as they run (is this stream recording? is this buffer kept
 * for warm-up?) and the hooks that doom a recording a replay could not
 * reproduce. capture.c, on top, owns the transitions, the recording's
 * instances and the client calls. */
#ifndef WEFT_SCHEDULER_WINDOW_H
#define WEFT_SCHEDULER_WINDOW_H

#include "scheduler/device_internal.h"

/* Replays of one capture in flight at most: end builds up to this many
 * instances (fewer when they would pass WEFT_REPLAY_INSTANCE_BYTES; never
 * fewer than WEFT_REPLAY_INSTANCES_MIN replay slots). */
#define WEFT_REPLAY_INSTANCES      64u
#define WEFT_REPLAY_INSTANCES_MIN  4u
#define WEFT_REPLAY_INSTANCE_BYTES (UINT64_C(16) << 20)

/* The fused replay's plan (capture.c), computed once at end by running the
 * placement rules over the recording with positions relative to each lane
 * (the stream slot a launch runs on): what every replay would otherwise
 * recompute per launch. */
typedef struct replay_node {
  uint32_t slot, pos;     /* its lane and 1-based position on it */
  uint32_t wait0, nwaits; /* its waits inside the replay (plan.iwaits), after elision */
  uint32_t seg;           /* its segment (index into an instance's segments) */
  bool writes;            /* it has a write scope (weft__scope_id) */
} replay_node;

typedef struct replay_pos {
  uint32_t slot, pos;
} replay_pos;

/* A buffer the replay binds: the lanes that touch and write it, where it is
 * left (last writer; readers since), so that a replay orders against the
 * work before it and the work after it against the replay. */
typedef struct replay_buf {
  weft_buf *b;
  uint64_t touch, write; /* slots */
  uint32_t pins;         /* bindings of it over the replay */
  replay_pos lw;         /* last writer (pos 0: the replay writes it nowhere) */
  uint32_t rd0, nrd;     /* plan.reads: the last read per lane since that write */
} replay_buf;

typedef struct replay_segdef {
  uint32_t head, tail, n; /* first and last node, launches */
  uint32_t pin0, npins;   /* plan.pins */
  uint64_t launches;
} replay_segdef;

typedef struct replay_plan {
  replay_node *nodes; /* [n], recording order */
  replay_pos *iwaits, *reads;
  replay_buf *bufs;
  replay_segdef *segs;
  weft_replay_pin *pins;
  uint32_t n, niwaits, nreads, nbufs, nsegs, npins;
  uint32_t cap_iwaits, cap_reads, cap_segs, cap_pins; /* allocated (weft__grow) */
  uint64_t lanes;                                     /* slots with launches */
  uint32_t lane_n[WEFT_MAX_STREAMS];                  /* launches per slot */
} replay_plan;

/* A copy of the recording the scheduler reuses: its commands are never
 * pooled; its count tracks those placed and not yet retired. */
typedef struct replay_instance {
  cmd **cmds;
  weft_replay_count count;
  weft_replay_seg *segs; /* [plan.nsegs], or |whole| without a plan */
  weft_replay_seg whole;
} replay_instance;

struct weft_capture {
  weft_device *dev;
  weft_allocator alloc; /* the device's: frees the object after the device closed */
  /* The object has two owners, the caller (until destroy) and the device
   * (until destroy or close); the last to let go frees it. |closed|: close
   * took everything the capture held, and the device pointer is stale. */
  _Atomic uint32_t owners, closed;
  _Atomic uint32_t state;       /* weft_capture_state; written by the scheduler */
  _Atomic uint64_t nrec;        /* recorded launches */
  _Atomic uint32_t outstanding; /* replays issued whose instance has not finished */
  uint64_t mask;                /* the slots it owns */
  /* The stream ids it was opened on: only their launches are recorded (ids
   * fold onto slots, and other ids on the same slots run normally). */
  weft_stream_id ids[WEFT_MAX_STREAMS];
  uint32_t nids;
  cmd *rec_head, *rec_tail; /* recorded launches, in order (linked through task.link) */
  cmd *graph;               /* one launch of the recording's backend graph (CUDA), or NULL */
  weft_status doom;         /* the first reason the recording cannot be kept */
  weft_buf **primed;        /* buffers released during warm-up, freed at begin */
  uint32_t nprimed, primed_cap;
  struct weft_capture *next_live; /* the device's live captures */
  replay_instance inst[WEFT_REPLAY_INSTANCES];
  uint32_t ninst;
  uint32_t limit;    /* replays in flight at most (written at end, read after READY) */
  replay_plan *plan; /* the fused replay's, or NULL (a deferred backend, or no memory) */
  /* The destroy command, taken at prepare so that destroy needs no memory;
   * detached (not counted in back-pressure) while it waits. Close frees it
   * when the caller never destroys the capture. */
  cmd *destroy_cmd;
};

static inline uint32_t state_of(const weft_capture *cap) {
  return atomic_load_explicit(&cap->state, memory_order_acquire);
}

static inline void set_state(weft_capture *cap, weft_capture_state st) {
  atomic_store_explicit(&cap->state, (uint32_t)st, memory_order_release);
}

static inline bool opened_on(const weft_capture *cap, weft_stream_id stream) {
  for (uint32_t i = 0; i < cap->nids; i++)
    if (cap->ids[i] == stream) return true;
  return false;
}

/* ---- hooks the scheduler's steps call (they act only on the stream ids a
 * capture was opened on, not on every id that folds onto its slots) ---- */
typedef enum weft_record {
  WEFT_NOT_RECORDING, /* run it */
  WEFT_RECORDED,      /* the recording keeps it */
  WEFT_REFUSED,       /* it dooms the recording: the caller discards it */
} weft_record;
weft_record weft__capture_record(weft_device *dev, cmd *c);
void weft__capture_on_create(weft_device *dev, weft_stream_id stream, uint64_t buffer);
void weft__capture_on_write(weft_device *dev, weft_stream_id stream, uint64_t buffer);
/* A launch on a recording stream that could not start (no stream): dooms it. */
void weft__capture_on_unstarted(weft_device *dev, const cmd *c, weft_status why);
WEFT_MUST_USE_RESULT weft_status weft__capture_refuse_sync(weft_device *dev, weft_stream_id stream,
                                                           const char *what);
bool weft__capture_keep(weft_device *dev, weft_buf *b); /* true: held until begin */
bool weft__capture_cleanup_skipped(weft_device *dev, uint32_t slot);
/* The first reason the recording cannot be kept wins (takes |why|). */
void weft__capture_doom(weft_capture *cap, weft_status why);

#endif
