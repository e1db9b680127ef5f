/* The trace (trace.h): recording into the ring on the scheduler, the run
 * wrapper that stamps a task's interval on the thread that runs it, the
 * public begin and end, and the Chrome trace-event JSON writer.
 *
 * A record is 64 bytes: a head (a task, a flush, a mark, a buffer event, a
 * memory sample, the poisoning) followed by its details (bindings, waits,
 * message bytes). The ring keeps the newest records; a reader starts at the
 * oldest head, skipping details whose head was overwritten, and the file
 * says how many heads (events) were dropped. Writing the file allocates (it
 * is done by weft_trace_end's caller, or by close); recording never does. */
#include "scheduler/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "core/alloc.h"
#include "core/config.h"
#include "core/error_graph.h"
#include "scheduler/buffers.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/loop.h"
#include "scheduler/submit.h"

#define TRACE_DEFAULT_EVENTS (UINT64_C(1) << 20)
#define TRACE_MIN_RECORDS    UINT64_C(1024) /* more than the largest event (WEFT_MAX_BINDINGS) */
#define TRACE_MAX_RECORDS    (UINT64_C(1) << 28) /* 16 GiB of records */
#define TRACE_MSG_MAX        224u                /* bytes of a failure's message kept */
#define TRACE_SCHED_TID      100000u             /* the scheduler's track (streams are slot + 1) */

enum rec_type {
  R_NONE,
  /* heads */
  R_TASK,   /* sub: cmd kind; acc: stamped; w: t0, t1, id, seq, failure, carrier buffer,
             * kernel | registering slot << 32 | replays a graph << 63 */
  R_FLUSH,  /* sub: interleaved; n: slots; w: t, tasks, slot mask, back-pressure waits */
  R_MARK,   /* sub: weft_trace_mark_kind; w: t, a, b */
  R_BUF,    /* sub: weft_trace_buf_kind; outcome: allocated; w: t, buffer id, size */
  R_MEM,    /* w: t, bytes in use, bytes reserved */
  R_POISON, /* w: t */
  R_HEADS,
  /* details, after their head */
  R_BIND = R_HEADS, /* n: 1-2 of (buffer, offset, size), acc: access of each (2 bits) */
  R_WAIT,           /* n: 1-3 of (slot, seq) */
  R_MSG,            /* n: bytes of message text */
  R_LABEL,          /* w: a launch's interned label (lives as long as the device) */
  R_DEVICE,         /* w: a launch's time on the device, ns (a backend that times them) */
};

typedef struct trace_rec {
  uint8_t type, sub, outcome, acc;
  uint16_t slot;
  uint16_t n; /* a head: its detail records; a detail: its entries or bytes */
  uint64_t w[7];
} trace_rec;
_Static_assert(sizeof(trace_rec) == 64, "a trace record is one cache line");

struct weft_trace {
  trace_rec *ring;
  uint64_t cap, at;           /* the next record written */
  uint64_t wraps;             /* times |at| went round: with a wrap, every record holds something */
  uint64_t heads;             /* heads written: those no longer in the ring were dropped */
  uint64_t begin_ns, placed0; /* tasks placed after placed0 were wrapped */
  uint64_t begin_tick;        /* trace_clock() at begin_ns: stamps are ticks from here */
  uint64_t bp_last;           /* back-pressure waits at the last flush */
  bool poison_seen;
  bool timed; /* the backend times launches on the device (device_ms) */
  char *path; /* WEFT_TRACE: written at close (owned), or NULL */
  size_t path_bytes;
};

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* The recording's clock: the time-stamp counter where the kernel itself
 * keeps CLOCK_MONOTONIC on it (x86-64, clocksource "tsc": invariant and
 * synchronised across cores, or Linux would not use it), else
 * CLOCK_MONOTONIC in ns. rdtsc costs about 11 ns of CPU on this VM against
 * 26 for clock_gettime, on a task that runs in about 150: stamps are ticks,
 * turned into ns when the file is written (tick_scale). Chosen once per
 * process, before the first recording is installed. */
static _Atomic int clock_tsc = -1; /* -1: not chosen yet */

static bool kernel_clock_is_tsc(void) {
#if defined(__x86_64__)
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (!f) return false;
  char name[32] = "";
  bool tsc = fgets(name, sizeof(name), f) && !strcmp(name, "tsc\n");
  fclose(f);
  return tsc;
#else
  return false;
#endif
}

static void clock_choose(void) {
  if (atomic_load_explicit(&clock_tsc, memory_order_relaxed) < 0) {
    int tsc = !weft_config_trace_monotonic() && kernel_clock_is_tsc();
    atomic_store_explicit(&clock_tsc, tsc, memory_order_relaxed);
  }
}

static inline uint64_t trace_clock(void) {
#if defined(__x86_64__)
  if (__builtin_expect(atomic_load_explicit(&clock_tsc, memory_order_relaxed) > 0, 1))
    return __builtin_ia32_rdtsc();
#endif
  return now_ns();
}

/* ---- recording (scheduler role only) ----------------------------------------------------- */

/* The next record; a head counts itself (rec_head), so that what the ring
 * lost is counted when it is written, not on every record here. */
static inline trace_rec *rec_next(weft_trace *tr) {
  trace_rec *r = &tr->ring[tr->at];
  if (__builtin_expect(++tr->at == tr->cap, 0)) {
    tr->at = 0;
    tr->wraps++;
  }
  return r;
}

/* A record's first 8 bytes (type, sub, outcome, acc, slot, n), as one word. */
static inline uint64_t rec_hdr(unsigned type, unsigned sub, unsigned outcome, unsigned acc,
                               unsigned slot, unsigned n) {
  return (uint64_t)type | (uint64_t)sub << 8 | (uint64_t)outcome << 16 | (uint64_t)acc << 24 |
         (uint64_t)slot << 32 | (uint64_t)n << 48;
}

/* Writes a whole record with non-temporal stores, straight from registers:
 * the ring is written once and read only when the file is written, so its
 * lines need not be read for ownership nor fill the scheduler's cache (a
 * 64 MiB ring never fits). Streaming stores are weakly ordered:
 * weft__trace_fence, after each retirement pass and before the ring changes
 * hands, makes them visible. */
static inline void rec_put(trace_rec *r, uint64_t hdr, uint64_t w0, uint64_t w1, uint64_t w2,
                           uint64_t w3, uint64_t w4, uint64_t w5, uint64_t w6) {
#if defined(__x86_64__)
  long long *p = (long long *)(void *)r;
  _mm_stream_si64(p, (long long)hdr);
  _mm_stream_si64(p + 1, (long long)w0);
  _mm_stream_si64(p + 2, (long long)w1);
  _mm_stream_si64(p + 3, (long long)w2);
  _mm_stream_si64(p + 4, (long long)w3);
  _mm_stream_si64(p + 5, (long long)w4);
  _mm_stream_si64(p + 6, (long long)w5);
  _mm_stream_si64(p + 7, (long long)w6);
#else
  r->type = (uint8_t)hdr, r->sub = (uint8_t)(hdr >> 8), r->outcome = (uint8_t)(hdr >> 16);
  r->acc = (uint8_t)(hdr >> 24), r->slot = (uint16_t)(hdr >> 32), r->n = (uint16_t)(hdr >> 48);
  r->w[0] = w0, r->w[1] = w1, r->w[2] = w2, r->w[3] = w3, r->w[4] = w4, r->w[5] = w5, r->w[6] = w6;
#endif
}
_Static_assert(offsetof(trace_rec, w) == 8 && offsetof(trace_rec, slot) == 4 &&
                   offsetof(trace_rec, n) == 6,
               "rec_hdr's layout is trace_rec's");
#if defined(__x86_64__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "rec_put stores rec_hdr as one word");
#endif

static inline trace_rec *rec_head(weft_trace *tr, uint8_t type, uint8_t sub, uint16_t slot,
                                  uint16_t n) {
  trace_rec *r = rec_next(tr);
  tr->heads += type < R_HEADS;
  r->type = type;
  r->sub = sub;
  r->outcome = 0;
  r->acc = 0;
  r->slot = slot;
  r->n = n;
  return r;
}

static uint16_t msg_records(size_t len) {
  return (uint16_t)((len + sizeof(((trace_rec *)0)->w) - 1) / sizeof(((trace_rec *)0)->w));
}

static void rec_msg(weft_trace *tr, const char *msg, size_t len) {
  const size_t per = sizeof(((trace_rec *)0)->w);
  for (size_t off = 0; off < len; off += per) {
    size_t k = len - off < per ? len - off : per;
    trace_rec *r = rec_head(tr, R_MSG, 0, 0, (uint16_t)k);
    memcpy(r->w, msg + off, k);
  }
}

static size_t format_error(weft_status st, char *buf) {
  size_t len = weft_error_format(st, buf, TRACE_MSG_MAX);
  return len < TRACE_MSG_MAX ? len : TRACE_MSG_MAX - 1;
}

static void rec_poison(weft_device *dev, weft_trace *tr) {
  tr->poison_seen = true;
  char msg[TRACE_MSG_MAX];
  size_t len = format_error(dev->live.poison_error, msg);
  trace_rec *r = rec_head(tr, R_POISON, 0, 0, msg_records(len));
  r->w[0] = trace_clock();
  rec_msg(tr, msg, len);
}

/* The poisoning, once, when it is first seen: by a task that did not run, a
 * flush, or the recording's end. */
static inline void check_poison(weft_device *dev, weft_trace *tr) {
  if (__builtin_expect(!tr->poison_seen && weft__poisoned(dev), 0)) rec_poison(dev, tr);
}

/* The general case: any kind, outcome, bindings, waits and message. */
static __attribute__((noinline)) void trace_task_any(weft_device *dev, weft_trace *tr,
                                                     const cmd *c) {
  check_poison(dev, tr);
  uint64_t t0 = c->tr_t0, t1 = c->tr_t1;
  bool stamped = c->task.placed > tr->placed0 && t0 >= tr->begin_tick && t1 >= t0;
  if (!stamped)
    t0 = t1 = trace_clock(); /* placed before the recording began: shown as it retires */
  uint32_t nb = c->kind == CMD_LAUNCH ? c->nb : (c->kind == CMD_WRITE || c->kind == CMD_READ);
  char msg[TRACE_MSG_MAX];
  size_t len = 0;
  uint64_t fail = 0, carrier = 0;
  if (c->result == OUT_FAILED) {
    fail = c->p;
    len = format_error(c->error, msg); /* a preset error became the launch's (run_launch) */
  } else if (c->result == OUT_SKIPPED) {
    fail = c->skip.failure;
    carrier = c->skip.needed;
    const weft_graph_node *nd = weft_graph_node_of(&dev->failures.graph, fail);
    if (nd) len = format_error(nd->error, msg);
  }
  uint32_t nbind = (nb + 1) / 2, nwait = (c->task.nwaits + 2) / 3;
  const char *label = c->kind == CMD_LAUNCH ? c->label : NULL;
  double ms = 0;
  bool timed =
      tr->timed && c->kind == CMD_LAUNCH &&
      dev->backend->vt->device_ms(dev->backend, dev->streams[c->on_slot], c->task.seq, &ms);
  trace_rec *r = rec_head(tr, R_TASK, (uint8_t)c->kind, c->on_slot,
                          (uint16_t)(nbind + nwait + msg_records(len) + (label != NULL) + timed));
  r->outcome = (uint8_t)c->result;
  r->acc = stamped;
  r->w[0] = t0;
  r->w[1] = t1;
  r->w[2] = c->kind == CMD_LAUNCH ? c->launch_no : c->buffer;
  r->w[3] = c->task.seq;
  r->w[4] = fail;
  r->w[5] = carrier;
  r->w[6] = (c->kind == CMD_LAUNCH ? c->kernel : 0) |
            (uint64_t)weft__slot_of(dev, c->stream) << 32 | (uint64_t)(c->graph != NULL) << 63;
  if (c->kind == CMD_LAUNCH) {
    for (uint32_t i = 0; i < nb; i += 2) {
      trace_rec *b = rec_head(tr, R_BIND, 0, 0, (uint16_t)(nb - i < 2 ? 1 : 2));
      for (uint32_t j = 0; j < b->n; j++) {
        const weft_binding *bd = &c->bindings[i + j];
        b->w[3 * j] = bd->buffer.id;
        b->w[3 * j + 1] = bd->offset;
        b->w[3 * j + 2] = bd->size;
        b->acc |= (uint8_t)((bd->access & 3u) << (2 * j));
      }
    }
  } else if (nb) {
    trace_rec *b = rec_head(tr, R_BIND, 0, 0, 1);
    b->w[0] = c->buffer;
    b->w[1] = c->offset;
    b->w[2] = c->len;
    b->acc = c->kind == CMD_WRITE ? WEFT_WRITE : WEFT_READ;
  }
  for (uint32_t i = 0; i < c->task.nwaits; i += 3) {
    uint32_t k = c->task.nwaits - i < 3 ? c->task.nwaits - i : 3;
    trace_rec *wr = rec_head(tr, R_WAIT, 0, 0, (uint16_t)k);
    for (uint32_t j = 0; j < k; j++) {
      wr->w[2 * j] = c->task.waits[i + j].stream->slot;
      wr->w[2 * j + 1] = c->task.waits[i + j].seq;
    }
  }
  if (len) rec_msg(tr, msg, len);
  if (label) rec_head(tr, R_LABEL, 0, 0, 1)->w[0] = (uint64_t)(uintptr_t)label;
  if (timed) rec_head(tr, R_DEVICE, 0, 0, 1)->w[0] = ms > 0 ? (uint64_t)(ms * 1e6 + 0.5) : 0;
}

/* The common case in straight-line code: a stamped launch that ran, with at
 * most two bindings and no waits, is a head and at most one binding record,
 * the same records trace_task_any writes for it. */
void weft__trace_task(weft_device *dev, const cmd *c) {
  weft_trace *tr = dev->trace;
  uint32_t nb = c->nb;
  if (__builtin_expect(c->kind != CMD_LAUNCH || c->result != OUT_RUN || nb > 2 || c->task.nwaits ||
                           c->task.placed <= tr->placed0 || c->tr_t0 < tr->begin_tick || tr->timed,
                       0)) {
    trace_task_any(dev, tr, c);
    return;
  }
  tr->heads++;
  rec_put(rec_next(tr),
          rec_hdr(R_TASK, CMD_LAUNCH, OUT_RUN, 1, c->on_slot, (nb != 0) + (c->label != NULL)),
          c->tr_t0, c->tr_t1, c->launch_no, c->task.seq, 0, 0,
          c->kernel | (uint64_t)weft__slot_of(dev, c->stream) << 32 |
              (uint64_t)(c->graph != NULL) << 63);
  if (nb) {
    const weft_binding *bd = c->bindings;
    if (nb == 1)
      rec_put(rec_next(tr), rec_hdr(R_BIND, 0, 0, bd[0].access & 3u, 0, 1), bd[0].buffer.id,
              bd[0].offset, bd[0].size, 0, 0, 0, 0);
    else
      rec_put(
          rec_next(tr), rec_hdr(R_BIND, 0, 0, (bd[0].access & 3u) | (bd[1].access & 3u) << 2, 0, 2),
          bd[0].buffer.id, bd[0].offset, bd[0].size, bd[1].buffer.id, bd[1].offset, bd[1].size, 0);
  }
  if (__builtin_expect(c->label != NULL, 0))
    *rec_next(tr) = (trace_rec){.type = R_LABEL, .n = 1, .w = {(uint64_t)(uintptr_t)c->label}};
}

void weft__trace_fence(void) {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

/* A task's run interval is stamped on the thread that runs it, with one
 * clock read where it can: a task that follows the previous one of its
 * placed chain, on the same stream and thread, without a wait of its own,
 * starts when that one ended (the pool's hop between them counts as the
 * later task's). The first of a chain, one with waits, or one that another
 * thread's or another stream's task came before reads the clock twice. */
typedef struct trace_lane {
  const weft_stream *on;
  uint64_t seq, t1;
} trace_lane;
static _Thread_local trace_lane last_run __attribute__((tls_model("initial-exec")));

#define TRACE_CHAINED UINT64_C(1) /* tr_t0 before the run: may start at the last end */

/* The command is the running thread's until its stream's cursor passes it
 * (after this returns). */
static void trace_run(weft_task *t, weft_stream *on) {
  cmd *c = (cmd *)t;
  void (*run)(weft_task *, weft_stream *) = c->tr_run;
  t->run = run;
  trace_lane *l = &last_run;
  uint64_t seq = t->seq;
  /* nwaits is read here, not at wrap: the flush wraps a batch before it is
   * placed, and a task that waited ran after its producer, not at the end of
   * the task before it (a wait's flow must not finish before it starts). */
  uint64_t t0 = c->tr_t0 == TRACE_CHAINED && !t->nwaits && l->on == on && l->seq + 1 == seq
                    ? l->t1
                    : trace_clock();
  run(t, on);
  uint64_t t1 = trace_clock();
  c->tr_t0 = t0;
  c->tr_t1 = t1;
  *l = (trace_lane){on, seq, t1};
}

static inline void wrap(weft_task *t, bool chained) {
  cmd *c = (cmd *)t;
  c->tr_run = t->run;
  c->tr_t0 = chained ? TRACE_CHAINED : 0;
  t->run = trace_run;
}

static inline void wrap_chain(weft_task *first) {
  for (weft_task *t = first; t; t = weft_task_next(t)) wrap(t, t != first);
}

void weft__trace_wrap_chain(weft_device *dev, weft_task *first) {
  (void)dev;
  wrap_chain(first);
}

void weft__trace_flush(weft_device *dev, const uint32_t *slots, uint32_t n, bool interleave) {
  weft_trace *tr = dev->trace;
  check_poison(dev, tr);
  uint64_t tasks = 0, mask = 0;
  for (uint32_t i = 0; i < n; i++) {
    const weft_batch *b = &dev->ms.batches[slots[i]];
    tasks += b->n;
    mask |= UINT64_C(1) << slots[i];
    wrap_chain(b->head);
  }
  trace_rec *r = rec_head(tr, R_FLUSH, interleave, (uint16_t)slots[0], (uint16_t)n);
  r->w[0] = trace_clock();
  r->w[1] = tasks;
  r->w[2] = mask;
  r->w[3] = atomic_load_explicit(&dev->cmds.backpressure_waits, memory_order_relaxed);
}

void weft__trace_mark(weft_device *dev, weft_trace_mark_kind what, uint32_t slot, uint64_t a,
                      uint64_t b) {
  trace_rec *r = rec_head(dev->trace, R_MARK, (uint8_t)what, (uint16_t)slot, 0);
  r->w[0] = trace_clock();
  r->w[1] = a;
  r->w[2] = b;
}

void weft__trace_buffer(weft_device *dev, weft_trace_buf_kind what, const weft_buf *b) {
  weft_trace *tr = dev->trace;
  uint64_t t = trace_clock();
  uint32_t slot = b->mm ? b->slot : 0;
  trace_rec *r = rec_head(tr, R_BUF, (uint8_t)what, (uint16_t)slot, 0);
  r->outcome = b->allocated;
  r->w[0] = t;
  r->w[1] = b->id;
  r->w[2] = b->size;
  if (what == WEFT_TRACE_BUF_RELEASE || !b->mm) return;
  weft_memory_usage u = weft_mm_usage(b->mm);
  trace_rec *m = rec_head(tr, R_MEM, 0, (uint16_t)slot, 0);
  m->w[0] = t;
  m->w[1] = u.bytes_in_use;
  m->w[2] = u.bytes_reserved;
}

/* ---- begin and end ------------------------------------------------------------------------- */

typedef struct trace_call {
  bool begin;
  weft_trace *tr; /* begin: the recording to install; end: the one taken off */
} trace_call;

static weft_status trace_make(weft_device *dev, uint64_t max_events, weft_trace **out) {
  *out = NULL;
  if (max_events > TRACE_MAX_RECORDS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "max_events %" PRIu64 " is more than a trace holds (%" PRIu64 ")",
                           max_events, TRACE_MAX_RECORDS);
  uint64_t cap = max_events ? max_events : TRACE_DEFAULT_EVENTS;
  if (cap < TRACE_MIN_RECORDS) cap = TRACE_MIN_RECORDS;
  clock_choose(); /* before the ring is installed: every stamp after is in its clock */
  weft_trace *tr = weft__calloc(&dev->alloc, sizeof(*tr), 16);
  if (!tr) return weft__oom(sizeof(*tr), "a trace");
  tr->ring = weft__alloc(&dev->alloc, sizeof(trace_rec) * cap, 64);
  if (!tr->ring) {
    weft__free(&dev->alloc, tr, sizeof(*tr), 16);
    return weft__oom(sizeof(trace_rec) * cap, "a trace's ring");
  }
  /* Touched now, not by the recording: a fresh ring's first write to each
   * page is a page fault, which costs more than the records it holds (a
   * record is read only once written: |at| and |wraps| say which). */
  memset(tr->ring, 0, sizeof(trace_rec) * cap);
  tr->cap = cap;
  *out = tr;
  return NULL;
}

static void trace_free(weft_device *dev, weft_trace *tr) {
  if (!tr) return;
  weft__free(&dev->alloc, tr->ring, sizeof(trace_rec) * tr->cap, 64);
  if (tr->path) weft__free(&dev->alloc, tr->path, tr->path_bytes, 1);
  weft__free(&dev->alloc, tr, sizeof(*tr), 16);
}

/* The backend's device time goes on and off with the recording. */
static void trace_timing(weft_device *dev, bool on) {
  weft_backend_base *b = dev->backend;
  if (b && b->vt->trace_timing && b->vt->device_ms) b->vt->trace_timing(b, on);
}

static void trace_install(weft_device *dev, weft_trace *tr) {
  trace_timing(dev, true);
  tr->timed = dev->backend && dev->backend->vt->trace_timing && dev->backend->vt->device_ms;
  tr->begin_ns = now_ns();
  tr->begin_tick = trace_clock();
  tr->placed0 = dev->ms.placed;
  tr->bp_last = atomic_load_explicit(&dev->cmds.backpressure_waits, memory_order_relaxed);
  dev->trace = tr;
}

void weft__trace_process(weft_device *dev, cmd *c) {
  trace_call *call = c->data;
  weft_status st = NULL;
  if (call->begin) {
    if (dev->trace)
      st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_trace_begin: the device is already recording a trace%s",
                           dev->trace->path ? " (WEFT_TRACE)" : "");
    else
      trace_install(dev, call->tr);
  } else if (!dev->trace || dev->trace->path) {
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         dev->trace ? "weft_trace_end: the recording is WEFT_TRACE's (written at "
                                      "close)"
                                    : "weft_trace_end: the device is not recording a trace");
  } else {
    weft__dev_drain(dev); /* the work submitted before the end retires into the ring */
    check_poison(dev, dev->trace);
    weft__trace_fence(); /* the ring goes to the caller's thread */
    call->tr = dev->trace;
    dev->trace = NULL;
    trace_timing(dev, false);
  }
  weft__token_complete(c->token, st);
  weft__cmd_free(c);
}

static weft_status trace_call_submit(weft_device *dev, trace_call *call) {
  cmd *c = weft__cmd_new(dev, CMD_TRACE, 0);
  if (!c) return weft__oom(sizeof(cmd), "a trace command");
  c->data = call;
  return weft__cmd_call(dev, c);
}

static weft_status trace_write(weft_device *dev, weft_trace *tr, FILE *f);

/* Inside the device, on a poisoned one too (its trace says why), never from
 * its own scheduler thread (the call waits for the scheduler). */
static weft_status trace_enter(weft_device *dev, weft_inside *in, const char *call) {
  weft_status st = weft__enter_open(dev, in);
  if (!st && weft__dev_scheduling() == dev)
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "%s from the device's own scheduler thread would deadlock", call);
  return st;
}

weft_status weft_trace_begin(weft_device *dev, uint64_t max_events) {
  WEFT_INSIDE in = {0};
  weft_status st = trace_enter(dev, &in, "weft_trace_begin");
  if (st) return st;
  trace_call call = {.begin = true};
  if ((st = trace_make(dev, max_events, &call.tr))) return st;
  st = trace_call_submit(dev, &call);
  if (st) trace_free(dev, call.tr); /* refused: the ring was never installed */
  return st;
}

/* Opens |path| for writing without truncating it (|*created|: it was not
 * there), so that a refused end leaves an existing file as it was. */
static weft_status open_path(const char *path, const char *what, FILE **out, bool *created) {
  *out = NULL;
  if (!path) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s: path is NULL", what);
  if (!*path) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s: path is empty", what);
  *created = access(path, F_OK) != 0;
  FILE *f = fopen(path, "a");
  if (!f)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s: cannot write the path '%s' (%s)", what,
                           path, strerror(errno));
  *out = f;
  return NULL;
}

/* The file holds the trace alone (opened for appending: emptied first). */
static weft_status trace_write_path(weft_device *dev, weft_trace *tr, FILE *f, const char *path) {
  if (ftruncate(fileno(f), 0) != 0) {
    weft_status st =
        weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "cannot empty '%s' (%s)", path, strerror(errno));
    fclose(f);
    return st;
  }
  return trace_write(dev, tr, f);
}

weft_status weft_trace_end(weft_device *dev, const char *path) {
  WEFT_INSIDE in = {0};
  weft_status st = trace_enter(dev, &in, "weft_trace_end");
  if (!st)
    st = weft__refuse_in_kernel(dev, "weft_trace_end",
                                "ending a trace waits for every running kernel");
  if (st) return st;
  FILE *f;
  bool created;
  /* The file first: a path that cannot be written leaves the recording on. */
  if ((st = open_path(path, "weft_trace_end", &f, &created))) return st;
  trace_call call = {.begin = false};
  if ((st = trace_call_submit(dev, &call))) {
    fclose(f);
    if (created) remove(path);
    return st;
  }
  st = trace_write_path(dev, call.tr, f, path);
  trace_free(dev, call.tr);
  return st;
}

weft_status weft__trace_open_env(weft_device *dev) {
  const char *path = weft_config_trace();
  if (!path) return NULL;
  weft_trace *tr;
  weft_status st = trace_make(dev, 0, &tr);
  if (st) return st;
  tr->path_bytes = strlen(path) + 1;
  tr->path = weft__alloc(&dev->alloc, tr->path_bytes, 1);
  if (!tr->path) {
    tr->path_bytes = 0;
    trace_free(dev, tr);
    return weft__oom(strlen(path) + 1, "WEFT_TRACE's path");
  }
  memcpy(tr->path, path, tr->path_bytes);
  trace_install(dev, tr);
  return NULL;
}

void weft__trace_drop(weft_device *dev) {
  if (dev->trace) trace_timing(dev, false);
  trace_free(dev, dev->trace);
  dev->trace = NULL;
}

void weft__trace_close(weft_device *dev) {
  weft_trace *tr = dev->trace;
  if (!tr) return;
  dev->trace = NULL;
  check_poison(dev, tr); /* the scheduler stopped: this thread is the only writer */
  trace_timing(dev, false);
  if (tr->path) { /* close cannot fail: a file it cannot write is said on stderr */
    FILE *f;
    bool created;
    weft_status st = open_path(tr->path, "WEFT_TRACE", &f, &created);
    if (!st) st = trace_write_path(dev, tr, f, tr->path);
    if (st) {
      char msg[512];
      weft_error_format(st, msg, sizeof(msg));
      fprintf(stderr, "weft: %s\n", msg);
      weft_error_free(st);
    }
  }
  trace_free(dev, tr); /* a recording begun and never ended: dropped */
}

/* ---- the writer ---------------------------------------------------------------------------- */

/* A task, as read back from the ring. */
typedef struct task_ev {
  const trace_rec *head;
  uint64_t t0, t1;
  uint32_t slot;
  bool stamped; /* else its time is its retirement's: no flow ends on it */
} task_ev;

typedef struct pos_ev {
  uint64_t seq;
  uint32_t ev;
} pos_ev;

static int pos_cmp(const void *a, const void *b) {
  const pos_ev *x = a, *y = b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

typedef struct edge {
  uint64_t t;
  int d;
} edge;

static int edge_cmp(const void *a, const void *b) {
  const edge *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->d - y->d; /* an end before a start at the same instant */
}

/* (buffer, failure) -> the newest task that wrote the buffer carrying the
 * failure: where a skip's flow starts. Open addressing, sized up front. */
typedef struct carrier_map {
  struct carrier {
    uint64_t buffer, failure;
    uint32_t ev;
  } * slots;
  size_t mask;
} carrier_map;

static size_t carrier_find(const carrier_map *m, uint64_t buffer, uint64_t failure) {
  size_t h =
      (size_t)((buffer * UINT64_C(0x9E3779B97F4A7C15)) ^ (failure * UINT64_C(0xC2B2AE3D27D4EB4F)));
  for (h &= m->mask;; h = (h + 1) & m->mask)
    if (!m->slots[h].failure || (m->slots[h].buffer == buffer && m->slots[h].failure == failure))
      return h;
}

typedef struct jw {
  FILE *f;
  bool first;
  uint32_t pid;
  uint64_t base; /* the recording's first tick */
  double us;     /* microseconds per tick */
} jw;

/* Microseconds per tick of the recording's clock: 1e-3 on CLOCK_MONOTONIC;
 * on the TSC, measured against CLOCK_MONOTONIC from the recording's begin to
 * now, at least 20 ms apart (a short recording waits for the rest) so that
 * the pairs' read latency is a few parts per million of the span. */
static double tick_us(const weft_trace *tr) {
  if (atomic_load_explicit(&clock_tsc, memory_order_relaxed) <= 0) return 1e-3;
  const uint64_t span = UINT64_C(20000000);
  uint64_t ns = now_ns();
  if (ns - tr->begin_ns < span) {
    uint64_t left = span - (ns - tr->begin_ns);
    struct timespec d = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
    ns = now_ns();
  }
  uint64_t tick = trace_clock();
  return tick > tr->begin_tick
             ? (double)(ns - tr->begin_ns) / 1000.0 / (double)(tick - tr->begin_tick)
             : 1e-3;
}

static void jstr(FILE *f, const char *s, size_t len) {
  fputc('"', f);
  for (size_t i = 0; i < len && s[i]; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

/* Starts an event object with its phase, track and time (µs since the
 * recording began; "ts" of an event before it is 0). */
static void ev_open(jw *w, const char *ph, uint32_t tid, uint64_t t) {
  fprintf(w->f, "%s\n{\"ph\":\"%s\",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"ts\":%.3f",
          w->first ? "" : ",", ph, w->pid, tid, t > w->base ? (double)(t - w->base) * w->us : 0.0);
  w->first = false;
}

static void meta(jw *w, const char *what, uint32_t tid, const char *name, int64_t sort) {
  fprintf(w->f,
          "%s\n{\"ph\":\"M\",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"name\":\"%s\",\"args\":{",
          w->first ? "" : ",", w->pid, tid, what);
  w->first = false;
  if (name) {
    fputs("\"name\":", w->f);
    jstr(w->f, name, strlen(name));
  } else {
    fprintf(w->f, "\"sort_index\":%" PRId64, sort);
  }
  fputs("}}", w->f);
}

static const char *outcome_name(uint8_t o) {
  switch (o) {
  case OUT_RUN:
    return "ran";
  case OUT_FAILED:
    return "failed";
  case OUT_SKIPPED:
    return "skipped";
  case OUT_POISONED:
    return "poisoned";
  default:
    return "none";
  }
}

static const char *access_name(unsigned a) {
  return a == WEFT_READ ? "read" : a == WEFT_WRITE ? "write" : "read_write";
}

/* A launch's label (its R_LABEL detail), or NULL. */
static const char *head_label(const weft_trace *tr, uint64_t hi) {
  const trace_rec *h = &tr->ring[hi];
  for (uint16_t i = 1; i <= h->n; i++) {
    const trace_rec *d = &tr->ring[(hi + i) % tr->cap];
    if (d->type == R_LABEL) return (const char *)(uintptr_t)d->w[0];
  }
  return NULL;
}

/* A launch's kernel name, or NULL. */
static const char *kernel_name(const weft_device *dev, const trace_rec *h) {
  uint32_t k = (uint32_t)h->w[6];
  return k < WEFT_MAX_KERNELS && k < atomic_load(&((weft_device *)dev)->nkernels)
             ? dev->kernels[k].k.name
             : NULL;
}

/* What a task is called on the timeline: a launch by its label, else by its
 * kernel's name. */
static const char *trace_name(const weft_device *dev, const weft_trace *tr, uint64_t hi) {
  const trace_rec *h = &tr->ring[hi];
  switch (h->sub) {
  case CMD_LAUNCH: {
    const char *label = head_label(tr, hi), *k = kernel_name(dev, h);
    if (label) return label;
    if (h->w[6] >> 63) return "replay (graph)";
    return k ? k : "launch";
  }
  case CMD_WRITE:
    return "write";
  case CMD_READ:
    return "read";
  case CMD_EVENT:
    return "event record";
  case CMD_EVENT_WAIT:
    return "event wait";
  default:
    return "sync";
  }
}

static const char *mark_name(uint8_t k) {
  static const char *const names[] = {"align", "reclaim", "reclaim done", "relocate"};
  return k < WEFT_TRACE_MARK_KINDS ? names[k] : "mark";
}

static const char *buf_event_name(uint8_t k) {
  return k == WEFT_TRACE_BUF_CREATE    ? "buffer create"
         : k == WEFT_TRACE_BUF_RELEASE ? "buffer release"
                                       : "buffer free";
}

/* The message of the details after |h| (its R_MSG records), or an empty one. */
static size_t head_msg(const weft_trace *tr, uint64_t hi, char *out) {
  size_t len = 0;
  const trace_rec *h = &tr->ring[hi];
  for (uint16_t i = 1; i <= h->n; i++) {
    const trace_rec *d = &tr->ring[(hi + i) % tr->cap];
    if (d->type != R_MSG || len + d->n >= TRACE_MSG_MAX) continue;
    memcpy(out + len, d->w, d->n);
    len += d->n;
  }
  out[len] = 0;
  return len;
}

static void task_args(jw *w, const weft_device *dev, const weft_trace *tr, uint64_t hi) {
  const trace_rec *h = &tr->ring[hi];
  FILE *f = w->f;
  char name[48];
  fprintf(f, ",\"args\":{");
  if (h->sub == CMD_LAUNCH) {
    fprintf(f, "\"launch\":%" PRIu64 ",", h->w[2]);
    const char *k = kernel_name(dev, h);
    if (k && head_label(tr, hi)) { /* named by its label: the kernel is an argument */
      fputs("\"kernel\":", f);
      jstr(f, k, strlen(k));
      fputc(',', f);
    }
  }
  fprintf(f, "\"outcome\":\"%s\",\"stream_slot\":%u,\"seq\":%" PRIu64, outcome_name(h->outcome),
          h->slot, h->w[3]);
  uint32_t registered = (uint32_t)(h->w[6] >> 32) & 0x7fffffffu;
  if (registered != h->slot) fprintf(f, ",\"registered_on_slot\":%" PRIu32, registered);
  if (!h->acc) fputs(",\"run_stamped\":false", f); /* placed before the recording began */
  if (h->w[4]) fprintf(f, ",\"failure\":%" PRIu64, h->w[4]);
  for (uint16_t i = 1; i <= h->n; i++) { /* its time on the device (CUDA events) */
    const trace_rec *d = &tr->ring[(hi + i) % tr->cap];
    if (d->type == R_DEVICE)
      fprintf(f, ",\"device_ms\":%" PRIu64 ".%06" PRIu64, d->w[0] / 1000000u, d->w[0] % 1000000u);
  }
  char msg[TRACE_MSG_MAX];
  size_t len = head_msg(tr, hi, msg);
  if (len) {
    fputs(h->outcome == OUT_FAILED ? ",\"error\":" : ",\"root\":", f);
    jstr(f, msg, len);
  }
  if (h->w[5]) {
    weft__buf_name(h->w[5], name, sizeof(name));
    fputs(",\"skipped_because\":", f);
    char why[96];
    int n = snprintf(why, sizeof(why), "%s carried failure #%" PRIu64, name, h->w[4]);
    jstr(f, why, n > 0 ? (size_t)n : 0);
  }
  fputs(",\"bindings\":[", f);
  bool first = true;
  for (uint16_t i = 1; i <= h->n; i++) {
    const trace_rec *d = &tr->ring[(hi + i) % tr->cap];
    if (d->type != R_BIND) continue;
    for (uint16_t j = 0; j < d->n; j++) {
      weft__buf_name(d->w[3 * j], name, sizeof(name));
      fprintf(f,
              "%s{\"buffer\":%" PRIu32 ",\"name\":\"%s\",\"offset\":%" PRIu64 ",\"size\":%" PRIu64
              ",\"access\":\"%s\"}",
              first ? "" : ",", (uint32_t)d->w[3 * j], name, d->w[3 * j + 1], d->w[3 * j + 2],
              access_name((d->acc >> (2 * j)) & 3u));
      first = false;
    }
  }
  fputs("]}", f);
}

static void flow(jw *w, const char *name, const char *cat, uint64_t *id, const task_ev *from,
                 const task_ev *to) {
  if (!from->stamped || !to->stamped) return;
  ev_open(w, "s", from->slot + 1, from->t0);
  fprintf(w->f, ",\"name\":\"%s\",\"cat\":\"%s\",\"id\":%" PRIu64 "}", name, cat, ++*id);
  ev_open(w, "f", to->slot + 1, to->t0);
  fprintf(w->f, ",\"name\":\"%s\",\"cat\":\"%s\",\"id\":%" PRIu64 ",\"bp\":\"e\"}", name, cat, *id);
}

static weft_status trace_write(weft_device *dev, weft_trace *tr, FILE *f) {
  weft_status st = NULL;
  /* The records, oldest first; details whose head was overwritten skipped. */
  bool full = tr->wraps != 0;
  uint64_t start = full ? tr->at : 0, count = full ? tr->cap : tr->at;
  uint64_t skip = 0;
  while (skip < count && tr->ring[(start + skip) % tr->cap].type >= R_HEADS) skip++;
  uint64_t ntasks = 0, nwrites = 0, kept = 0;
  for (uint64_t i = skip; i < count; i++) {
    const trace_rec *r = &tr->ring[(start + i) % tr->cap];
    kept += r->type >= R_TASK && r->type < R_HEADS;
    if (r->type == R_TASK) ntasks++;
    if (r->type == R_BIND) nwrites += r->n;
  }
  /* The writer's tables, in the device's allocator (not on the recording path). */
  const weft_allocator *a = &dev->alloc;
  size_t cmcap = 16;
  while (cmcap < 2 * (nwrites + 1)) cmcap <<= 1;
  const size_t b_evs = sizeof(task_ev) * (ntasks + 1), b_pos = sizeof(pos_ev) * (ntasks + 1),
               b_slot = sizeof(uint32_t) * (WEFT_MAX_STREAMS + 1),
               b_edges = sizeof(edge) * (2 * ntasks + 1), b_cm = sizeof(struct carrier) * cmcap;
  task_ev *evs = weft__calloc(a, b_evs, 16);
  pos_ev *pos = weft__calloc(a, b_pos, 16);
  uint32_t *per_slot = weft__calloc(a, b_slot, 16);
  edge *edges = weft__calloc(a, b_edges, 16);
  carrier_map cm = {weft__calloc(a, b_cm, 16), cmcap - 1};
  if (!evs || !pos || !per_slot || !edges || !cm.slots) {
    st = weft__oom(sizeof(*evs) * ntasks, "writing a trace");
    goto out;
  }
  /* Tasks per slot by position, for the waits' producers. */
  uint64_t n = 0;
  bool slot_seen[WEFT_MAX_STREAMS] = {0};
  for (uint64_t i = skip; i < count; i++) {
    uint64_t hi = (start + i) % tr->cap;
    const trace_rec *r = &tr->ring[hi];
    if (r->type != R_TASK) continue;
    uint32_t slot = r->slot < WEFT_MAX_STREAMS ? r->slot : 0;
    evs[n] = (task_ev){r, r->w[0], r->w[1], slot, r->acc != 0};
    per_slot[slot + 1]++;
    slot_seen[slot] = true;
    n++;
  }
  for (uint32_t s = 0; s < WEFT_MAX_STREAMS; s++) per_slot[s + 1] += per_slot[s];
  {
    uint32_t fill[WEFT_MAX_STREAMS];
    memcpy(fill, per_slot, sizeof(fill));
    for (uint64_t e = 0; e < n; e++)
      pos[fill[evs[e].slot]++] = (pos_ev){evs[e].head->w[3], (uint32_t)e};
    for (uint32_t s = 0; s < WEFT_MAX_STREAMS; s++)
      qsort(pos + per_slot[s], per_slot[s + 1] - per_slot[s], sizeof(*pos), pos_cmp);
  }

  jw w = {f, true, dev->tag, tr->begin_tick, tick_us(tr)};
  fprintf(f,
          "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"weft_version\":\"%s\","
          "\"clock\":\"%s\",\"ns_per_tick\":%.6f,\"ring_records\":%" PRIu64
          ",\"records_written\":%" PRIu64 ",\"events_dropped\":%" PRIu64 "},\n\"traceEvents\":[",
          weft_version(),
          atomic_load_explicit(&clock_tsc, memory_order_relaxed) > 0
              ? "tsc (calibrated against CLOCK_MONOTONIC)"
              : "CLOCK_MONOTONIC",
          w.us * 1000.0, tr->cap, tr->wraps * tr->cap + tr->at, tr->heads - kept);
  char pname[64];
  snprintf(pname, sizeof(pname), "weft device %" PRIu32 " (%s)", dev->tag,
           dev->backend->deferred ? "cuda" : "host");
  meta(&w, "process_name", 0, pname, 0);
  meta(&w, "thread_name", TRACE_SCHED_TID, "scheduler", 0);
  meta(&w, "thread_sort_index", TRACE_SCHED_TID, NULL, -1);
  for (uint32_t s = 0; s < WEFT_MAX_STREAMS; s++) {
    if (!slot_seen[s]) continue;
    char tname[32];
    snprintf(tname, sizeof(tname), "stream slot %u", s);
    meta(&w, "thread_name", s + 1, tname, 0);
    meta(&w, "thread_sort_index", s + 1, NULL, s);
  }

  uint64_t flow_id = 0, e = 0;
  for (uint64_t i = skip; i < count; i++) {
    uint64_t hi = (start + i) % tr->cap;
    const trace_rec *r = &tr->ring[hi];
    char msg[TRACE_MSG_MAX], name[48];
    switch (r->type) {
    case R_TASK: {
      const task_ev *me = &evs[e];
      ev_open(&w, "X", me->slot + 1, me->t0);
      fprintf(f, ",\"dur\":%.3f,\"name\":", (double)(me->t1 - me->t0) * w.us);
      const char *tn = trace_name(dev, tr, hi);
      jstr(f, tn, strlen(tn));
      fprintf(f, ",\"cat\":\"%s\"",
              r->sub == CMD_LAUNCH                              ? "launch"
              : r->sub == CMD_SYNC                              ? "sync"
              : r->sub == CMD_EVENT || r->sub == CMD_EVENT_WAIT ? "event"
                                                                : "copy");
      task_args(&w, dev, tr, hi);
      fputc('}', f);
      /* Cross-stream waits: from the task at the position waited for. */
      for (uint16_t k = 1; k <= r->n; k++) {
        const trace_rec *d = &tr->ring[(hi + k) % tr->cap];
        if (d->type != R_WAIT) continue;
        for (uint16_t j = 0; j < d->n; j++) {
          uint64_t s = d->w[2 * j], q = d->w[2 * j + 1];
          if (s >= WEFT_MAX_STREAMS) continue;
          pos_ev key = {q, 0};
          pos_ev *p = bsearch(&key, pos + per_slot[s], per_slot[s + 1] - per_slot[s], sizeof(*pos),
                              pos_cmp);
          if (p && p->ev < e) flow(&w, "wait", "wait", &flow_id, &evs[p->ev], me);
        }
      }
      /* A failure's chain: from the task that left the taint to the skip. */
      if (r->outcome == OUT_SKIPPED && r->w[5]) {
        struct carrier *c = &cm.slots[carrier_find(&cm, r->w[5], r->w[4])];
        if (c->failure) flow(&w, "taint", "failure", &flow_id, &evs[c->ev], me);
      }
      if ((r->outcome == OUT_FAILED || r->outcome == OUT_SKIPPED) && r->w[4]) {
        for (uint16_t k = 1; k <= r->n; k++) {
          const trace_rec *d = &tr->ring[(hi + k) % tr->cap];
          if (d->type != R_BIND) continue;
          for (uint16_t j = 0; j < d->n; j++) {
            if (!((d->acc >> (2 * j)) & WEFT_WRITE)) continue;
            struct carrier *c = &cm.slots[carrier_find(&cm, d->w[3 * j], r->w[4])];
            *c = (struct carrier){d->w[3 * j], r->w[4], (uint32_t)e};
          }
        }
      }
      if (me->t1 > me->t0 || r->outcome == OUT_RUN) {
        edges[2 * e] = (edge){me->t0, 1};
        edges[2 * e + 1] = (edge){me->t1, -1};
      }
      e++;
      break;
    }
    case R_FLUSH:
      ev_open(&w, "i", TRACE_SCHED_TID, r->w[0]);
      fprintf(f,
              ",\"s\":\"t\",\"name\":\"%s\",\"cat\":\"scheduler\",\"args\":{\"slots\":%u,"
              "\"tasks\":%" PRIu64 ",\"slot_mask\":%" PRIu64 "}}",
              r->sub ? "flush (interleaved)" : "flush", r->n, r->w[1], r->w[2]);
      if (r->w[3] != tr->bp_last) { /* clients waited for room since the last flush */
        ev_open(&w, "C", TRACE_SCHED_TID, r->w[0]);
        fprintf(f, ",\"name\":\"back-pressure waits\",\"args\":{\"waits\":%" PRIu64 "}}", r->w[3]);
        tr->bp_last = r->w[3];
      }
      break;
    case R_MARK:
      ev_open(&w, "i", TRACE_SCHED_TID, r->w[0]);
      fprintf(f, ",\"s\":\"t\",\"name\":\"%s\",\"cat\":\"%s\",\"args\":{\"stream_slot\":%u",
              r->sub == WEFT_TRACE_RECLAIM_DONE ? (r->w[2] ? "reclaim rescued" : "reclaim failed")
                                                : mark_name(r->sub),
              r->sub == WEFT_TRACE_ALIGN ? "scheduler" : "memory", r->slot);
      if (r->sub == WEFT_TRACE_ALIGN)
        fprintf(f, ",\"batches\":%" PRIu64 "}}", r->w[1]);
      else if (r->sub == WEFT_TRACE_RELOCATE)
        fprintf(f, ",\"moved\":%" PRIu64 "}}", r->w[1]);
      else
        fprintf(f, ",\"bytes\":%" PRIu64 "}}", r->w[1]);
      break;
    case R_BUF:
      weft__buf_name(r->w[1], name, sizeof(name));
      ev_open(&w, "i", TRACE_SCHED_TID, r->w[0]);
      fprintf(f,
              ",\"s\":\"t\",\"name\":\"%s\",\"cat\":\"memory\",\"args\":{\"buffer\":%" PRIu32
              ",\"name\":\"%s\",\"size\":%" PRIu64 ",\"stream_slot\":%u,\"allocated\":%s}}",
              buf_event_name(r->sub), (uint32_t)r->w[1], name, r->w[2], r->slot,
              r->outcome ? "true" : "false");
      break;
    case R_MEM:
      ev_open(&w, "C", 0, r->w[0]);
      fprintf(f,
              ",\"name\":\"memory stream slot %u\",\"args\":{\"in_use\":%" PRIu64
              ",\"reserved\":%" PRIu64 "}}",
              r->slot, r->w[1], r->w[2]);
      break;
    case R_POISON: {
      size_t len = head_msg(tr, hi, msg);
      ev_open(&w, "i", TRACE_SCHED_TID, r->w[0]);
      fputs(",\"s\":\"p\",\"name\":\"device poisoned\",\"cat\":\"failure\",\"args\":{\"error\":",
            f);
      jstr(f, msg, len);
      fputs("}}", f);
      break;
    }
    default:
      break;
    }
  }
  /* The workers' occupancy: how many task runs overlap, over time. */
  qsort(edges, 2 * n, sizeof(*edges), edge_cmp);
  int64_t busy = 0;
  for (uint64_t i = 0; i < 2 * n; i++) {
    if (!edges[i].d) continue;
    busy += edges[i].d;
    if (i + 1 < 2 * n && edges[i + 1].t == edges[i].t) continue; /* one sample per instant */
    ev_open(&w, "C", 0, edges[i].t);
    fprintf(f, ",\"name\":\"workers busy\",\"args\":{\"tasks running\":%" PRId64 "}}", busy);
  }
  fputs("\n]}\n", f);
out:
  if (fclose(f) != 0 && !st)
    st = weft_error_make(WEFT_ERR_GENERIC, "writing the trace failed (%s)", strerror(errno));
  weft__free(a, evs, b_evs, 16);
  weft__free(a, pos, b_pos, 16);
  weft__free(a, per_slot, b_slot, 16);
  weft__free(a, edges, b_edges, 16);
  weft__free(a, cm.slots, b_cm, 16);
  return st;
}
