/* CUDA lanes: weft streams enqueued on CUstreams; see lane.h. */
#include "streams/cuda/lane.h"

#include <dlfcn.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"

/* Events kept per lane for later waits to bind to and for completion polls
 * (the newest ones). */
#define LANE_RING 32u
/* A chain records an event when this many positions passed since the last
 * one: a poll point for completion. Waits record their own when they need
 * a later one, so fine-grained chains do not pay a record each. */
#define LANE_EVENT_EVERY 32u

typedef struct lane_event {
  uint64_t seq;
  weft_cuda_event *ev;
} lane_event;

/* Launches timed and not yet retired per lane (the trace's device time);
 * past that, launches go untimed until retirement frees pairs. */
#define LANE_TIMED 256u

/* A timed launch: timing events recorded around its enqueue. */
typedef struct lane_timing {
  uint64_t seq;
  CUevent start, end;
} lane_timing;

typedef struct lane {
  weft_stream s; /* first: a weft_stream * is a lane * */
  weft_lanes *b;
  weft_cuda_stream *cs;
  uint64_t enqueued; /* the last position handed to the CUDA stream */
  uint64_t marked;   /* the last position a completion mark was enqueued after */
  uint64_t evented;  /* the position of the newest event recorded */
  lane_event ring[LANE_RING];
  uint32_t rhead, rn; /* the oldest entry, and how many */
  uint64_t running;   /* the position of the task lane_submit runs */
  /* LANE_TIMED pairs of timing events, made by the first timed launch (NULL
   * before, or when they could not be made); |thead|, |tn|: the oldest
   * pair in use and how many. */
  lane_timing *timed;
  uint32_t thead, tn;
  bool timing_failed; /* the events could not be made: the lane is not timed */
} lane;

struct weft_lanes {
  const weft_allocator *alloc;
  const weft_cuda_driver *d;
  weft_cuda_context *ctx;
  weft_signal *progress;
  char name[256];
  uint64_t total_mem;
  lane *lanes[WEFT_MAX_STREAMS];
  uint32_t nlanes;
  weft_lanes_stats stats;
};

/* ---- the driver, once per process -------------------------------------------------------- */

/* A real libcuda must never be unloaded under its own threads, and weft
 * devices come and go: each driver path is loaded once and kept. */
#define MAX_DRIVERS 4
static weft_cuda_driver drivers[MAX_DRIVERS];
static unsigned ndrivers;
static pthread_mutex_t drivers_lock = PTHREAD_MUTEX_INITIALIZER;

static weft_status driver_get(const weft_cuda_driver **out) {
  const char *path = weft_cuda_driver_path(NULL);
  weft_status st = NULL;
  pthread_mutex_lock(&drivers_lock);
  for (unsigned i = 0; i < ndrivers; i++)
    if (!strcmp(drivers[i].path, path)) {
      *out = &drivers[i];
      goto done;
    }
  if (ndrivers == MAX_DRIVERS) {
    st = weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "%u different CUDA drivers were loaded by this process already; %s is "
                         "one too many",
                         ndrivers, path);
    goto done;
  }
  st = weft_cuda_driver_open(&drivers[ndrivers], path, 0);
  if (st) goto done;
  /* A second reference that dlclose never drops. */
  (void)dlopen(drivers[ndrivers].path, RTLD_NOW | RTLD_NODELETE);
  *out = &drivers[ndrivers++];
done:
  pthread_mutex_unlock(&drivers_lock);
  return st;
}

/* ---- the backend ------------------------------------------------------------------------- */

static void mark_fired(void *arg) {
  weft__signal_raise(arg);
}

weft_status weft_lanes_open(const weft_allocator *alloc, int ordinal, weft_signal *progress,
                            weft_lanes **out) {
  *out = NULL;
  const weft_cuda_driver *d = NULL;
  weft_status st = driver_get(&d);
  if (st) return st;
  weft_lanes *b = weft__calloc(alloc, sizeof(*b), WEFT_CACHELINE);
  if (!b) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*b), "the CUDA backend");
  b->alloc = alloc;
  b->d = d;
  b->progress = progress;
  st = weft_cuda_context_create(alloc, d, ordinal, &b->ctx);
  if (st) {
    weft__free(alloc, b, sizeof(*b), WEFT_CACHELINE);
    return st;
  }
  CUdevice dev = weft_cuda_context_device(b->ctx);
  if (d->cuDeviceGetName(b->name, (int)sizeof(b->name), dev) != CUDA_SUCCESS)
    snprintf(b->name, sizeof(b->name), "CUDA device %d", ordinal);
  size_t total = 0;
  if (d->cuDeviceTotalMem(&total, dev) == CUDA_SUCCESS) b->total_mem = total;
  *out = b;
  return NULL;
}

static void timing_free(lane *l) {
  if (!l->timed) return;
  for (uint32_t i = 0; i < LANE_TIMED; i++) {
    l->b->d->cuEventDestroy(l->timed[i].start);
    l->b->d->cuEventDestroy(l->timed[i].end);
  }
  weft__free(l->b->alloc, l->timed, sizeof(lane_timing) * LANE_TIMED, 16);
  l->timed = NULL;
}

static void lane_destroy(lane *l) {
  weft_lanes *b = l->b;
  timing_free(l);
  for (uint32_t i = 0; i < l->rn; i++)
    weft_cuda_event_release(l->ring[(l->rhead + i) % LANE_RING].ev);
  b->stats.events_created += weft_cuda_stream_events_created(l->cs);
  weft_cuda_stream_destroy(l->cs); /* synchronises: every mark has fired */
  weft__free(b->alloc, l, sizeof(*l), WEFT_CACHELINE);
}

void weft_lanes_close(weft_lanes *b) {
  if (!b) return;
  weft_error_free(weft_cuda_context_make_current(b->ctx));
  for (uint32_t i = 0; i < b->nlanes; i++) lane_destroy(b->lanes[i]);
  weft_cuda_context_destroy(b->ctx);
  weft__free(b->alloc, b, sizeof(*b), WEFT_CACHELINE);
}

weft_cuda_context *weft_lanes_context(weft_lanes *b) {
  return b->ctx;
}

const weft_cuda_driver *weft_lanes_driver(const weft_lanes *b) {
  return b->d;
}

const char *weft_lanes_device_name(const weft_lanes *b) {
  return b->name;
}

uint64_t weft_lanes_total_memory(const weft_lanes *b) {
  return b->total_mem;
}

void weft_lanes_get_stats(const weft_lanes *b, weft_lanes_stats *out) {
  *out = b->stats;
  for (uint32_t i = 0; i < b->nlanes; i++)
    out->events_created += weft_cuda_stream_events_created(b->lanes[i]->cs);
}

weft_cuda_stream *weft_lane_cuda_stream(const weft_stream *s) {
  return ((const lane *)s)->cs;
}

bool weft_lanes_poisoned(const weft_lanes *b) {
  return weft_cuda_context_is_poisoned(b->ctx);
}

/* Moves |l|'s cursor to |seq| unless a mark already moved it further;
 * true if it moved. */
static bool cursor_advance(lane *l, uint64_t seq) {
  uint64_t cur = atomic_load_explicit(&l->s.completed, memory_order_relaxed);
  while (cur < seq) {
    if (atomic_compare_exchange_weak_explicit(&l->s.completed, &cur, seq, memory_order_release,
                                              memory_order_relaxed))
      return true;
  }
  return false;
}

bool weft_lanes_poll(weft_lanes *b) {
  for (uint32_t i = 0; i < b->nlanes && !weft_lanes_poisoned(b); i++) {
    lane *l = b->lanes[i];
    if (atomic_load_explicit(&l->s.completed, memory_order_acquire) >= l->enqueued) continue;
    bool idle = false;
    weft_error_free(weft_cuda_stream_query(l->cs, &idle)); /* a sticky error is recorded */
  }
  return weft_lanes_poisoned(b);
}

void weft_lanes_force_complete(weft_lanes *b) {
  bool moved = false;
  for (uint32_t i = 0; i < b->nlanes; i++)
    moved |= cursor_advance(b->lanes[i], b->lanes[i]->enqueued);
  if (moved) weft__signal_raise(b->progress);
}

/* ---- submission -------------------------------------------------------------------------- */

/* Returns the ring's entries the lane has completed to the pool. */
static void ring_prune(lane *l) {
  uint64_t done = atomic_load_explicit(&l->s.completed, memory_order_acquire);
  while (l->rn && l->ring[l->rhead].seq <= done) {
    weft_cuda_event_release(l->ring[l->rhead].ev);
    l->rhead = (l->rhead + 1) % LANE_RING;
    l->rn--;
  }
}

static bool ring_record(lane *l, uint64_t seq);

/* Makes |l| wait (on the device) for |origin| to pass |seq|. */
static void lane_wait(lane *l, lane *origin, uint64_t seq) {
  weft_lanes *b = l->b;
  if (atomic_load_explicit(&origin->s.completed, memory_order_acquire) >= seq) {
    b->stats.waits_complete++;
    return;
  }
  ring_prune(origin);
  /* The oldest event at or after |seq|; none yet: one recorded now at the
   * origin's end, which is at or past |seq| (everything the origin was
   * handed is enqueued already, and before this wait: no cycle). */
  lane_event *use = NULL;
  for (uint32_t i = 0; i < origin->rn && !use; i++) {
    lane_event *e = &origin->ring[(origin->rhead + i) % LANE_RING];
    if (e->seq >= seq) use = e;
  }
  if (!use && ring_record(origin, origin->enqueued))
    use = &origin->ring[(origin->rhead + origin->rn - 1) % LANE_RING];
  if (use) {
    weft_status st = weft_cuda_stream_wait(l->cs, use->ev);
    if (!st) {
      b->stats.event_waits++;
      return;
    }
    weft_error_free(st);
  }
  /* No event to bind to (the driver refused one): wait on the host. */
  weft_error_free(weft_cuda_stream_sync(origin->cs));
  if (!weft_lanes_poisoned(b)) cursor_advance(origin, origin->enqueued);
}

/* Records an event at the lane's current end, for later waits and for
 * polling; false when none could be recorded. */
static bool ring_record(lane *l, uint64_t seq) {
  ring_prune(l);
  if (l->rn == LANE_RING) { /* the oldest goes: a wait for it binds to a later one */
    weft_cuda_event_release(l->ring[l->rhead].ev);
    l->rhead = (l->rhead + 1) % LANE_RING;
    l->rn--;
  }
  weft_cuda_event *ev = NULL;
  weft_status st = weft_cuda_stream_record(l->cs, &ev);
  if (st) {
    weft_error_free(st);
    return false;
  }
  l->ring[(l->rhead + l->rn) % LANE_RING] = (lane_event){seq, ev};
  l->rn++;
  l->evented = seq;
  return true;
}

/* Enqueues a completion mark at the lane's end: the driver moves the cursor
 * and wakes the owner once the GPU gets there. Without one (the driver
 * refused), the lane is synchronised and completed on the host. */
static void lane_mark(lane *l) {
  weft_lanes *b = l->b;
  /* One mark pending at a time: when it fires the owner wakes, polls, and
   * arms again if work is left (so a lane needs one pooled mark node). */
  if (l->marked >= l->enqueued || weft_cuda_stream_mark_pending(l->cs)) return;
  weft_status st = weft_cuda_stream_mark(l->cs, l->enqueued);
  if (!st) {
    l->marked = l->enqueued;
    b->stats.marks++;
    return;
  }
  weft_error_free(st);
  st = weft_cuda_stream_sync(l->cs);
  if (!st && cursor_advance(l, l->enqueued)) weft__signal_raise(b->progress);
  weft_error_free(st);
}

static void lane_submit(weft_stream *s, weft_task *first, weft_task *last) {
  lane *l = (lane *)s;
  weft_lanes *b = l->b;
  bool dead = weft_lanes_poisoned(b);
  uint64_t ended = 0; /* stamping: the enqueue before ended then (weft_stream_run_task) */
  for (weft_task *t = first, *nx; t; t = nx) {
    nx = t == last ? NULL : weft_task_next(t);
    for (uint32_t i = 0; i < t->nwaits && !dead; i++)
      lane_wait(l, (lane *)t->waits[i].stream, t->waits[i].seq);
    l->running = t->seq;
    weft_stream_run_task(s, t, &ended); /* enqueues the task's work on l->cs (or records why not) */
  }
  l->enqueued = last->seq;
  /* Completion is polled through events while the owner is busy
   * (weft_lanes_progress; one every LANE_EVENT_EVERY positions); a mark,
   * which holds the stream up until the driver's thread runs it, is
   * enqueued only before the owner parks (weft_lanes_arm), or here when no
   * event could be recorded. */
  if (!dead && !weft_lanes_poisoned(b) && last->seq - l->evented >= LANE_EVENT_EVERY &&
      !ring_record(l, last->seq))
    lane_mark(l);
  if (weft_lanes_poisoned(b)) weft_lanes_force_complete(b);
}

bool weft_lanes_progress(weft_lanes *b) {
  bool moved = false;
  for (uint32_t i = 0; i < b->nlanes; i++) {
    lane *l = b->lanes[i];
    if (atomic_load_explicit(&l->s.completed, memory_order_acquire) >= l->enqueued) continue;
    ring_prune(l);
    /* The ring is in stream order: the first event not done ends the look. */
    for (uint32_t k = 0; k < l->rn; k++) {
      lane_event *e = &l->ring[(l->rhead + k) % LANE_RING];
      bool done = false;
      weft_status st = weft_cuda_event_done(e->ev, &done);
      if (st) { /* a sticky error is recorded; the caller poisons */
        weft_error_free(st);
        break;
      }
      if (!done) break;
      moved |= cursor_advance(l, e->seq);
    }
  }
  return moved;
}

void weft_lanes_arm(weft_lanes *b) {
  if (weft_lanes_poisoned(b)) return;
  for (uint32_t i = 0; i < b->nlanes; i++) {
    lane *l = b->lanes[i];
    if (atomic_load_explicit(&l->s.completed, memory_order_acquire) < l->enqueued) lane_mark(l);
  }
}

static void lane_wait_for(weft_stream *s, uint64_t seq) {
  lane *l = (lane *)s;
  if (atomic_load_explicit(&l->s.completed, memory_order_acquire) >= seq) return;
  weft_status st = weft_cuda_stream_sync(l->cs);
  weft_error_free(st);
  /* A successful sync ran every mark; after a fault nothing will. Either
   * way everything enqueued is as done as it will ever be. */
  cursor_advance(l, l->enqueued);
  if (weft_lanes_poisoned(l->b)) weft_lanes_force_complete(l->b);
}

static bool lane_is_idle(weft_stream *s) {
  return atomic_load_explicit(&s->completed, memory_order_acquire) >= s->submitted;
}

static const weft_stream_ops lane_ops = {
    .submit = lane_submit, .wait_for = lane_wait_for, .is_idle = lane_is_idle};

weft_status weft_lanes_stream_create(weft_lanes *b, uint32_t slot, weft_stream **out) {
  if (b->nlanes == WEFT_MAX_STREAMS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "more than %u CUDA lanes", WEFT_MAX_STREAMS);
  lane *l = weft__calloc(b->alloc, sizeof(*l), WEFT_CACHELINE);
  if (!l) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*l), "a CUDA lane");
  weft_status st = weft_cuda_stream_create(b->ctx, &l->cs);
  if (st) {
    weft__free(b->alloc, l, sizeof(*l), WEFT_CACHELINE);
    return st;
  }
  /* Warm the pools now: the ring never holds more than LANE_RING events and
   * one mark is pending at most, so later submissions create nothing. */
  weft_cuda_event *warm[LANE_RING];
  uint32_t nwarm = 0;
  while (!st && nwarm < LANE_RING) st = weft_cuda_stream_record(l->cs, &warm[nwarm++]);
  if (st) nwarm--;
  while (nwarm) weft_cuda_event_release(warm[--nwarm]);
  if (!st) st = weft_cuda_stream_mark(l->cs, 0);
  if (!st) st = weft_cuda_stream_sync(l->cs);
  if (st) {
    weft_cuda_stream_destroy(l->cs);
    weft__free(b->alloc, l, sizeof(*l), WEFT_CACHELINE);
    return st;
  }
  l->b = b;
  l->s.slot = slot;
  l->s.ops = &lane_ops;
  l->s.impl = l;
  weft_cuda_stream_set_cursor(l->cs, &l->s.completed, mark_fired, b->progress);
  b->lanes[b->nlanes++] = l;
  *out = &l->s;
  return NULL;
}

/* ---- the trace's device time --------------------------------------------------------------- */

/* The lane's timing pairs, made once (timing-enabled events: the pool's
 * have timing disabled). */
static bool timing_make(lane *l) {
  if (l->timed) return true;
  if (l->timing_failed || !l->b->d->cuEventElapsedTime) return false;
  const weft_cuda_driver *d = l->b->d;
  lane_timing *t = weft__calloc(l->b->alloc, sizeof(*t) * LANE_TIMED, 16);
  uint32_t made = 0;
  for (; t && made < LANE_TIMED; made++) {
    if (d->cuEventCreate(&t[made].start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) break;
    if (d->cuEventCreate(&t[made].end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      d->cuEventDestroy(t[made].start);
      break;
    }
  }
  if (!t || made < LANE_TIMED) { /* untimed from now on: the trace shows no device time */
    for (uint32_t i = 0; t && i < made; i++) {
      d->cuEventDestroy(t[i].start);
      d->cuEventDestroy(t[i].end);
    }
    if (t) weft__free(l->b->alloc, t, sizeof(*t) * LANE_TIMED, 16);
    l->timing_failed = true;
    return false;
  }
  l->timed = t;
  return true;
}

bool weft_lane_time_start(weft_stream *s) {
  lane *l = (lane *)s;
  if (l->tn == LANE_TIMED || !timing_make(l)) return false;
  lane_timing *t = &l->timed[(l->thead + l->tn) % LANE_TIMED];
  return l->b->d->cuEventRecord(t->start, weft_cuda_stream_handle(l->cs)) == CUDA_SUCCESS;
}

void weft_lane_time_end(weft_stream *s) {
  lane *l = (lane *)s;
  lane_timing *t = &l->timed[(l->thead + l->tn) % LANE_TIMED];
  if (l->b->d->cuEventRecord(t->end, weft_cuda_stream_handle(l->cs)) != CUDA_SUCCESS) return;
  t->seq = l->running;
  l->tn++;
}

bool weft_lane_device_ms(weft_stream *s, uint64_t seq, double *ms) {
  lane *l = (lane *)s;
  while (l->tn && l->timed[l->thead].seq < seq) { /* not asked for: not traced, or skipped */
    l->thead = (l->thead + 1) % LANE_TIMED;
    l->tn--;
  }
  if (!l->tn || l->timed[l->thead].seq != seq) return false;
  lane_timing *t = &l->timed[l->thead];
  l->thead = (l->thead + 1) % LANE_TIMED;
  l->tn--;
  float f = 0;
  if (l->b->d->cuEventElapsedTime(&f, t->start, t->end) != CUDA_SUCCESS) return false;
  *ms = f;
  return true;
}

void weft_lanes_timing_drop(weft_lanes *b) {
  for (uint32_t i = 0; i < b->nlanes; i++) b->lanes[i]->tn = 0;
}
