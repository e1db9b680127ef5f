/* The trace (trace.h): recording into the ring on the scheduler (a task's
 * run interval is stamped by the thread that runs it: the streams stamp
 * while a trace records), the public begin and end, and the Chrome
 * trace-event JSON writer.
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
#include <stdarg.h>
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
#include "core/clock.h"
#include "core/config.h"
#include "core/error_graph.h"
#include "scheduler/buffers.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/labels.h"
#include "scheduler/loop.h"
#include "scheduler/submit.h"

#define TRACE_DEFAULT_EVENTS (UINT64_C(1) << 20)
#define TRACE_MIN_RECORDS    UINT64_C(1024) /* more than the largest event (WEFT_MAX_BINDINGS) */
#define TRACE_MAX_RECORDS    (UINT64_C(1) << 28) /* 16 GiB of records */
#define TRACE_MSG_MAX        224u                /* bytes of a failure's message kept */
#define TRACE_SCHED_TID      100000u             /* the scheduler's track (streams are slot + 1) */
#define TRACE_LAB_RECORDS    UINT64_C(8192)      /* the labels' own ring: 512 KiB */

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
  /* A buffer's label, in the labels' own ring (weft_trace.labs). sub: 1
   * when recorded at begin for a label set before; n: message records; w: t,
   * buffer id, launches numbered when it was set (0: before the recording),
   * the main ring's next record then (tr->wraps * cap + at); its text in
   * R_MSG details (none: cleared). */
  R_BUF_LABEL,
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
  uint64_t begin_ns, placed0; /* tasks placed after placed0 ran stamped */
  uint64_t begin_tick;        /* weft_clock_ticks() at begin_ns: stamps are ticks from here */
  uint64_t bp_last;           /* back-pressure waits at the last flush */
  /* The buffers' labels, in a ring of their own: the main ring's oldest
   * records go first when it wraps, and those are where the labels set
   * before the recording, and early in it, would be, while the events kept
   * still use them. */
  trace_rec *labs;
  uint64_t lab_cap, lab_at, lab_wraps, lab_heads;
  bool poison_seen;
  bool timed; /* the backend times launches on the device (device_ms) */
  char *path; /* WEFT_TRACE: written at close (owned), or NULL */
  size_t path_bytes;
};

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

static trace_rec *lab_next(weft_trace *tr);

/* |msg| as R_MSG details, in the main ring or (|labs|) the labels' ring. */
static void rec_msg_in(weft_trace *tr, bool labs, const char *msg, size_t len) {
  const size_t per = sizeof(((trace_rec *)0)->w);
  for (size_t off = 0; off < len; off += per) {
    size_t k = len - off < per ? len - off : per;
    trace_rec *r = labs ? lab_next(tr) : rec_next(tr);
    *r = (trace_rec){.type = R_MSG, .n = (uint16_t)k};
    memcpy(r->w, msg + off, k);
  }
}

static void rec_msg(weft_trace *tr, const char *msg, size_t len) {
  rec_msg_in(tr, false, msg, len);
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
  r->w[0] = weft_clock_ticks();
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
  uint64_t t0 = c->tr.t0, t1 = c->tr.t1;
  bool stamped = c->task.placed > tr->placed0 && t0 >= tr->begin_tick && t1 >= t0;
  if (!stamped)
    t0 = t1 = weft_clock_ticks(); /* placed before the recording began: shown as it retires */
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
                           c->task.placed <= tr->placed0 || c->tr.t0 < tr->begin_tick || tr->timed,
                       0)) {
    trace_task_any(dev, tr, c);
    return;
  }
  tr->heads++;
  rec_put(rec_next(tr),
          rec_hdr(R_TASK, CMD_LAUNCH, OUT_RUN, 1, c->on_slot, (nb != 0) + (c->label != NULL)),
          c->tr.t0, c->tr.t1, c->launch_no, c->task.seq, 0, 0,
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

void weft__trace_flush(weft_device *dev, const uint32_t *slots, uint32_t n, bool interleave) {
  weft_trace *tr = dev->trace;
  check_poison(dev, tr);
  uint64_t tasks = 0, mask = 0;
  for (uint32_t i = 0; i < n; i++) {
    const weft_batch *b = &dev->ms.batches[slots[i]];
    tasks += b->n;
    mask |= UINT64_C(1) << slots[i];
  }
  /* One a batch: streamed like a task's records (a plain store would read a
   * ring line the cache no longer holds). */
  tr->heads++;
  rec_put(rec_next(tr), rec_hdr(R_FLUSH, interleave, 0, 0, slots[0], n), weft_clock_ticks(), tasks,
          mask, atomic_load_explicit(&dev->cmds.backpressure_waits, memory_order_relaxed), 0, 0, 0);
}

void weft__trace_mark(weft_device *dev, weft_trace_mark_kind what, uint32_t slot, uint64_t a,
                      uint64_t b) {
  trace_rec *r = rec_head(dev->trace, R_MARK, (uint8_t)what, (uint16_t)slot, 0);
  r->w[0] = weft_clock_ticks();
  r->w[1] = a;
  r->w[2] = b;
}

void weft__trace_buffer(weft_device *dev, weft_trace_buf_kind what, const weft_buf *b) {
  weft_trace *tr = dev->trace;
  uint64_t t = weft_clock_ticks();
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

static trace_rec *lab_next(weft_trace *tr) {
  trace_rec *r = &tr->labs[tr->lab_at];
  if (++tr->lab_at == tr->lab_cap) {
    tr->lab_at = 0;
    tr->lab_wraps++;
  }
  return r;
}

/* A buffer's label, as a head and the label's text in message records, in
 * the labels' ring; the head keeps the main ring's place, so the writer
 * knows which events come after it. */
static void rec_buf_label(weft_device *dev, weft_trace *tr, const weft_buf *b, bool before) {
  size_t len = b->label ? strnlen(b->label, WEFT_MAX_LABEL_LEN) : 0;
  tr->lab_heads++;
  *lab_next(tr) =
      (trace_rec){.type = R_BUF_LABEL,
                  .sub = before,
                  .n = msg_records(len),
                  .w = {weft_clock_ticks(), b->id, before ? 0 : dev->cmds.launches_numbered,
                        tr->wraps * tr->cap + tr->at}};
  rec_msg_in(tr, true, b->label, len);
}

void weft__trace_buf_label(weft_device *dev, const weft_buf *b) {
  rec_buf_label(dev, dev->trace, b, false);
}

/* At begin, the labels already set: every buffer the scheduler still holds
 * (a released one still bound by work keeps its label until it is freed,
 * as weft__buf_label_name names it). Scheduler role: slots' objects are its. */
static void rec_labels_set(weft_device *dev, weft_trace *tr) {
  weft_handles *t = &dev->buffers;
  uint32_t fresh = atomic_load_explicit(&t->fresh, memory_order_acquire);
  for (uint32_t i = 0; i < fresh; i++) {
    const weft_handle_slot *s = weft_handles_at(t, i);
    const weft_buf *b = s ? s->obj : NULL;
    if (b && b->label && (uint32_t)b->id == i + 1) rec_buf_label(dev, tr, b, true);
  }
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
  weft_clock_choose(); /* before the ring is installed: every stamp after is in its clock */
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
  tr->labs = weft__alloc(&dev->alloc, sizeof(trace_rec) * TRACE_LAB_RECORDS, 64);
  if (!tr->labs) {
    weft__free(&dev->alloc, tr->ring, sizeof(trace_rec) * cap, 64);
    weft__free(&dev->alloc, tr, sizeof(*tr), 16);
    return weft__oom(sizeof(trace_rec) * TRACE_LAB_RECORDS, "a trace's label ring");
  }
  memset(tr->labs, 0, sizeof(trace_rec) * TRACE_LAB_RECORDS);
  tr->lab_cap = TRACE_LAB_RECORDS;
  *out = tr;
  return NULL;
}

static void trace_free(weft_device *dev, weft_trace *tr) {
  if (!tr) return;
  weft__free(&dev->alloc, tr->ring, sizeof(trace_rec) * tr->cap, 64);
  weft__free(&dev->alloc, tr->labs, sizeof(trace_rec) * tr->lab_cap, 64);
  if (tr->path) weft__free(&dev->alloc, tr->path, tr->path_bytes, 1);
  weft__free(&dev->alloc, tr, sizeof(*tr), 16);
}

/* The backend's device time goes on and off with the recording. */
static void trace_timing(weft_device *dev, bool on) {
  weft_backend_base *b = dev->backend;
  if (b && b->vt->trace_timing && b->vt->device_ms) b->vt->trace_timing(b, on);
}

/* Every stream stamps its tasks' runs while the recording lasts (a stream
 * made meanwhile starts stamping when it is made: multistream.c). */
static void trace_stamping(weft_device *dev, bool on) {
  for (uint32_t i = 0; i < dev->max_streams; i++)
    if (dev->streams[i]) weft__trace_stamp(dev->streams[i], on);
}

static void trace_install(weft_device *dev, weft_trace *tr) {
  trace_timing(dev, true);
  tr->timed = dev->backend && dev->backend->vt->trace_timing && dev->backend->vt->device_ms;
  tr->begin_ns = weft_clock_monotonic_ns();
  tr->begin_tick = weft_clock_ticks();
  tr->placed0 = dev->ms.placed;
  tr->bp_last = atomic_load_explicit(&dev->cmds.backpressure_waits, memory_order_relaxed);
  rec_labels_set(dev, tr);
  trace_stamping(dev, true);
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
    trace_stamping(dev, false);
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
  if (dev->trace) {
    trace_timing(dev, false);
    trace_stamping(dev, false);
  }
  trace_free(dev, dev->trace);
  dev->trace = NULL;
}

void weft__trace_close(weft_device *dev) {
  weft_trace *tr = dev->trace;
  if (!tr) return;
  dev->trace = NULL;
  check_poison(dev, tr); /* the scheduler stopped: this thread is the only writer */
  trace_timing(dev, false);
  trace_stamping(dev, false);
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

/* A slot's tasks by position: in retirement order they are sorted already
 * but for a stream's tasks that retire out of order. */
static void pos_sort(pos_ev *v, size_t n) {
  for (size_t i = 1; i < n; i++)
    if (v[i].seq < v[i - 1].seq) {
      qsort(v, n, sizeof(*v), pos_cmp);
      return;
    }
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The runs' starts or ends, in time: in retirement order they are sorted
 * already on one stream; several streams interleave. */
static void time_sort(uint64_t *v, size_t n) {
  for (size_t i = 1; i < n; i++)
    if (v[i] < v[i - 1]) {
      qsort(v, n, sizeof(*v), u64_cmp);
      return;
    }
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

/* A buffer's label as the ring recorded it (R_BUF_LABEL). A launch's
 * bindings show the label their buffer had when the scheduler took the
 * launch: the labels set before its number; a copy's, a buffer event's and
 * a label event's, the label it had when that record was written: the
 * labels before it in the ring. */
typedef struct lab_ev {
  uint64_t id;  /* the buffer */
  uint64_t at;  /* launches numbered when it was set (0: before the recording) */
  uint64_t pos; /* the first of the main ring's records read that come after it */
  size_t off;   /* its text in the table's bytes */
  size_t len;   /* 0: the label was cleared */
  uint64_t seq; /* its place in the labels' ring, oldest first */
} lab_ev;

typedef struct label_table {
  const lab_ev *ev; /* by buffer, then in ring order */
  size_t n;
  const char *text;
} label_table;

static int lab_cmp(const void *a, const void *b) {
  const lab_ev *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq; /* its places never decrease with it */
}

/* The label buffer |id| had at |x|: the newest set before launch number |x|
 * (|by_launch|), else before the main ring's record |x| (the |x|th read);
 * NULL when it had none. A buffer's labels are in ring order, in which
 * their launch numbers and places never decrease, so both are a binary
 * search. */
static const lab_ev *label_at(const label_table *t, uint64_t id, bool by_launch, uint64_t x) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) { /* the buffer's first label */
    size_t mid = lo + (hi - lo) / 2;
    if (t->ev[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  size_t first = lo;
  hi = t->n;
  while (lo < hi) { /* the first of its labels set at or after |x| */
    size_t mid = lo + (hi - lo) / 2;
    const lab_ev *e = &t->ev[mid];
    if (e->id == id && (by_launch ? e->at < x : e->pos <= x))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > first && t->ev[lo - 1].len ? &t->ev[lo - 1] : NULL;
}

/* The label record |seq| of buffer |id| itself (NULL: it cleared the label). */
static const lab_ev *label_self(const label_table *t, uint64_t id, uint64_t seq) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const lab_ev *e = &t->ev[mid];
    if (e->id < id || (e->id == id && e->seq < seq))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < t->n && t->ev[lo].id == id && t->ev[lo].seq == seq && t->ev[lo].len ? &t->ev[lo]
                                                                                  : NULL;
}

/* The writer's output: every byte goes through a buffer of its own, written
 * with fwrite when full (so that the order holds), formatted by hand where
 * an event is common (printf's float formatting cost about 10,000
 * instructions an event), with vsnprintf for the rare ones. */
#define JW_BYTES (64u * 1024u)
#define JW_ROOM  512u /* the most one piece of output asks room for (a time takes at most 313) */

typedef struct jw {
  char *buf;
  size_t len;
  FILE *f;
  bool failed; /* an fwrite failed (its errno in |err|): the rest is not written */
  int err;
  bool first;
  uint32_t pid;
  uint64_t base; /* the recording's first tick */
  double us, ns; /* microseconds, nanoseconds per tick */
  label_table labels;
} jw;

static void jw_write(jw *w, const char *s, size_t n) {
  if (w->failed || !n) return;
  errno = 0;
  if (fwrite(s, 1, n, w->f) != n) {
    w->failed = true;
    w->err = errno ? errno : EIO;
  }
}

static void jw_flush(jw *w) {
  jw_write(w, w->buf, w->len);
  w->len = 0;
}

/* Where the next |n| (at most JW_BYTES) bytes go; jw_done says how far they went. */
static inline char *jw_room(jw *w, size_t n) {
  if (__builtin_expect(JW_BYTES - w->len < n, 0)) jw_flush(w);
  return w->buf + w->len;
}

static inline void jw_done(jw *w, char *p) {
  w->len = (size_t)(p - w->buf);
}

static void jw_put(jw *w, const char *s, size_t n) {
  if (n > JW_BYTES - w->len) {
    jw_flush(w);
    if (n > JW_BYTES) {
      jw_write(w, s, n);
      return;
    }
  }
  memcpy(w->buf + w->len, s, n);
  w->len += n;
}

static void jw_printf(jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jw_printf(jw *w, const char *fmt, ...) {
  va_list ap, again, last;
  va_start(ap, fmt);
  va_copy(again, ap);
  va_copy(last, ap);
  size_t room = JW_BYTES - w->len;
  int n = vsnprintf(w->buf + w->len, room, fmt, ap);
  if (n >= 0 && (size_t)n >= room) { /* did not fit: flushed first, then tried again */
    jw_flush(w);
    n = vsnprintf(w->buf, JW_BYTES, fmt, again);
    if (n >= 0 && (size_t)n >= JW_BYTES) { /* larger than the buffer: to the file itself */
      if (!w->failed && vfprintf(w->f, fmt, last) < 0) {
        w->failed = true;
        w->err = errno ? errno : EIO;
      }
      n = 0;
    }
  }
  if (n < 0) {
    if (!w->failed) {
      w->failed = true;
      w->err = errno ? errno : EINVAL;
    }
    n = 0;
  }
  w->len += (size_t)n;
  va_end(last);
  va_end(again);
  va_end(ap);
}

#define P_LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) + sizeof(s) - 1)

static inline char *p_cpy(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}

static inline char *p_str(char *p, const char *s) {
  return p_cpy(p, s, strlen(s));
}

static const char digits2[] = "00010203040506070809101112131415161718192021222324252627282930313233"
                              "34353637383940414243444546474849505152535455565758596061626364656667"
                              "6869707172737475767778798081828384858687888990919293949596979899";

/* |v| in decimal (at most 20 bytes). */
static inline char *p_u64(char *p, uint64_t v) {
  unsigned n = 1;
  for (uint64_t m = 10; n < 20 && v >= m; m *= 10) n++;
  char *e = p + n;
  while (v >= 100) {
    unsigned d = (unsigned)(v % 100);
    v /= 100;
    e -= 2;
    memcpy(e, digits2 + 2 * d, 2);
  }
  if (v >= 10)
    memcpy(e - 2, digits2 + 2 * v, 2);
  else
    e[-1] = (char)('0' + v);
  return p + n;
}

static inline char *p_i64(char *p, int64_t v) {
  if (v >= 0) return p_u64(p, (uint64_t)v);
  *p++ = '-';
  return p_u64(p, 0 - (uint64_t)v);
}

/* The last |digits| decimal digits of |v|, zero-padded. */
static inline char *p_frac(char *p, uint64_t v, unsigned digits) {
  for (unsigned i = digits; i-- > 0; v /= 10) p[i] = (char)('0' + v % 10);
  return p + digits;
}

/* |ticks| of the recording's clock in microseconds with 3 decimals: what
 * "%.3f" prints of (double)ticks * us, up to the rounding of the double,
 * from integer nanoseconds (rounded): ns / 1000 "." ns % 1000. Beyond 2^64
 * ns (584 years), printf's. At most 313 bytes. */
static char *p_time(const jw *w, char *p, uint64_t ticks) {
  double ns = (double)ticks * w->ns + 0.5;
  if (__builtin_expect(!(ns < 18446744073709551616.0), 0)) {
    int n = snprintf(p, 400, "%.3f", (double)ticks * w->us);
    return p + (n > 0 ? n : 0);
  }
  uint64_t v = (uint64_t)ns;
  p = p_u64(p, v / 1000);
  *p++ = '.';
  return p_frac(p, v % 1000, 3);
}

/* The length of the UTF-8 sequence (RFC 3629: no overlong form, no
 * surrogate, nothing past U+10FFFF) that starts a non-ASCII byte at |s|,
 * within |n| bytes, or 0 when the byte starts none. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t k = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
  if (!k || k > n) return 0;
  uint32_t cp = c & (0x7fu >> k);
  for (size_t j = 1; j < k; j++) {
    if ((s[j] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[j] & 0x3fu);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  return cp < least[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : k;
}

/* |s| (its first |len| bytes, up to a NUL) escaped for a JSON string. The
 * file is UTF-8, as JSON text must be: a byte of a label or message that is
 * not part of valid UTF-8 is written as the code point of its value
 * (U+00XX, escaped: as if Latin-1), valid UTF-8 as it is. */
static void jw_esc(jw *w, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  size_t i = 0;
  while (i < len && s[i]) {
    char *p = jw_room(w, 6 * 64);
    for (unsigned k = 0; k < 64 && i < len && s[i]; k++, i++) {
      unsigned char ch = (unsigned char)s[i];
      if (ch == '"' || ch == '\\') {
        *p++ = '\\';
        *p++ = (char)ch;
      } else if (ch < 0x20) {
        p = P_LIT(p, "\\u00");
        *p++ = hex[ch >> 4];
        *p++ = hex[ch & 15];
      } else if (ch < 0x80) {
        *p++ = (char)ch;
      } else {
        size_t n = utf8_seq((const unsigned char *)s + i, len - i); /* no NUL in a sequence */
        if (n) {
          p = p_cpy(p, s + i, n); /* at most 4 bytes for one of the 6 it has room for */
          i += n - 1;
        } else {
          p = P_LIT(p, "\\u00");
          *p++ = hex[ch >> 4];
          *p++ = hex[ch & 15];
        }
      }
    }
    jw_done(w, p);
  }
}

static void jstr(jw *w, const char *s, size_t len) {
  jw_put(w, "\"", 1);
  jw_esc(w, s, len);
  jw_put(w, "\"", 1);
}

/* Starts an event object with its phase, track and time (µs since the
 * recording began; "ts" of an event before it is 0). */
static void ev_open(jw *w, char ph, uint32_t tid, uint64_t t) {
  char *p = jw_room(w, JW_ROOM);
  if (!w->first) *p++ = ',';
  w->first = false;
  p = P_LIT(p, "\n{\"ph\":\"");
  *p++ = ph;
  p = P_LIT(p, "\",\"pid\":");
  p = p_u64(p, w->pid);
  p = P_LIT(p, ",\"tid\":");
  p = p_u64(p, tid);
  p = P_LIT(p, ",\"ts\":");
  p = p_time(w, p, t > w->base ? t - w->base : 0);
  jw_done(w, p);
}

/* An instant event on the scheduler's track, open up to its name's text:
 * the caller writes the name, the rest, and jw_done. */
static char *sched_instant(jw *w, uint64_t t) {
  ev_open(w, 'i', TRACE_SCHED_TID, t);
  char *p = jw_room(w, JW_ROOM);
  return P_LIT(p, ",\"s\":\"t\",\"name\":\"");
}

static void meta(jw *w, const char *what, uint32_t tid, const char *name, int64_t sort) {
  jw_printf(w,
            "%s\n{\"ph\":\"M\",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"name\":\"%s\",\"args\":{",
            w->first ? "" : ",", w->pid, tid, what);
  w->first = false;
  if (name) {
    jw_put(w, "\"name\":", 7);
    jstr(w, name, strlen(name));
  } else {
    jw_printf(w, "\"sort_index\":%" PRId64, sort);
  }
  jw_put(w, "}}", 2);
}

/* A buffer as reports name it, escaped: "buffer 'LABEL' (#N)", else "buffer #N". */
static void jw_buf_name(jw *w, uint64_t id, const lab_ev *l) {
  char *p = jw_room(w, 32);
  if (l) {
    p = P_LIT(p, "buffer '");
    jw_done(w, p);
    jw_esc(w, w->labels.text + l->off, l->len);
    p = jw_room(w, 32);
    p = P_LIT(p, "' (#");
    p = p_u64(p, (uint32_t)id);
    *p++ = ')';
  } else {
    p = P_LIT(p, "buffer #");
    p = p_u64(p, (uint32_t)id);
  }
  jw_done(w, p);
}

/* A buffer's "name", and its "label" when it has one (each after a comma). */
static void buf_keys(jw *w, uint64_t id, const lab_ev *l) {
  jw_put(w, ",\"name\":\"", 9);
  jw_buf_name(w, id, l);
  if (l) {
    jw_put(w, "\",\"label\":\"", 11);
    jw_esc(w, w->labels.text + l->off, l->len);
  }
  jw_put(w, "\"", 1);
}

/* Microseconds per tick of the recording's clock: 1e-3 on CLOCK_MONOTONIC;
 * on the TSC, measured against CLOCK_MONOTONIC from the recording's begin to
 * now, at least 20 ms apart (a short recording waits for the rest) so that
 * the pairs' read latency is a few parts per million of the span. */
static double tick_us(const weft_trace *tr) {
  if (!weft_clock_is_tsc()) return 1e-3;
  const uint64_t span = UINT64_C(20000000);
  uint64_t ns = weft_clock_monotonic_ns();
  if (ns - tr->begin_ns < span) {
    uint64_t left = span - (ns - tr->begin_ns);
    struct timespec d = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
    ns = weft_clock_monotonic_ns();
  }
  uint64_t tick = weft_clock_ticks();
  return tick > tr->begin_tick
             ? (double)(ns - tr->begin_ns) / 1000.0 / (double)(tick - tr->begin_tick)
             : 1e-3;
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

/* The message of the details after |ring[hi]| (its R_MSG records), or an empty one. */
static size_t ring_msg(const trace_rec *ring, uint64_t cap, uint64_t hi, char *out) {
  size_t len = 0;
  const trace_rec *h = &ring[hi];
  for (uint16_t i = 1; i <= h->n; i++) {
    const trace_rec *d = &ring[(hi + i) % cap];
    if (d->type != R_MSG || len + d->n >= TRACE_MSG_MAX) continue;
    memcpy(out + len, d->w, d->n);
    len += d->n;
  }
  out[len] = 0;
  return len;
}

static size_t head_msg(const weft_trace *tr, uint64_t hi, char *out) {
  return ring_msg(tr->ring, tr->cap, hi, out);
}

/* The label of buffer |id| where task |h| (the |pos|th record read) uses it. */
static inline const lab_ev *task_label(const jw *w, const trace_rec *h, uint64_t pos, uint64_t id) {
  if (!w->labels.n) return NULL;
  bool launch = h->sub == CMD_LAUNCH;
  return label_at(&w->labels, id, launch, launch ? h->w[2] : pos);
}

static void task_args(jw *w, const weft_device *dev, const weft_trace *tr, uint64_t hi,
                      uint64_t pos) {
  const trace_rec *h = &tr->ring[hi];
  char *p = jw_room(w, JW_ROOM);
  p = P_LIT(p, ",\"args\":{");
  if (h->sub == CMD_LAUNCH) {
    p = P_LIT(p, "\"launch\":");
    p = p_u64(p, h->w[2]);
    *p++ = ',';
    const char *k = kernel_name(dev, h);
    if (k && head_label(tr, hi)) { /* named by its label: the kernel is an argument */
      p = P_LIT(p, "\"kernel\":");
      jw_done(w, p);
      jstr(w, k, strlen(k));
      p = jw_room(w, JW_ROOM);
      *p++ = ',';
    }
  }
  p = P_LIT(p, "\"outcome\":\"");
  p = p_str(p, outcome_name(h->outcome));
  p = P_LIT(p, "\",\"stream_slot\":");
  p = p_u64(p, h->slot);
  p = P_LIT(p, ",\"seq\":");
  p = p_u64(p, h->w[3]);
  uint32_t registered = (uint32_t)(h->w[6] >> 32) & 0x7fffffffu;
  if (registered != h->slot) {
    p = P_LIT(p, ",\"registered_on_slot\":");
    p = p_u64(p, registered);
  }
  if (!h->acc) p = P_LIT(p, ",\"run_stamped\":false"); /* placed before the recording began */
  if (h->w[4]) {
    p = P_LIT(p, ",\"failure\":");
    p = p_u64(p, h->w[4]);
  }
  jw_done(w, p);
  for (uint16_t i = 1; i <= h->n; i++) { /* its time on the device (CUDA events) */
    const trace_rec *d = &tr->ring[(hi + i) % tr->cap];
    if (d->type != R_DEVICE) continue;
    p = jw_room(w, 64);
    p = P_LIT(p, ",\"device_ms\":");
    p = p_u64(p, d->w[0] / 1000000u);
    *p++ = '.';
    p = p_frac(p, d->w[0] % 1000000u, 6);
    jw_done(w, p);
  }
  char msg[TRACE_MSG_MAX];
  size_t len = head_msg(tr, hi, msg);
  if (len) {
    if (h->outcome == OUT_FAILED)
      jw_put(w, ",\"error\":", 9);
    else
      jw_put(w, ",\"root\":", 8);
    jstr(w, msg, len);
  }
  if (h->w[5]) {
    jw_put(w, ",\"skipped_because\":\"", 20);
    jw_buf_name(w, h->w[5], task_label(w, h, pos, h->w[5]));
    p = jw_room(w, 64);
    p = P_LIT(p, " carried failure #");
    p = p_u64(p, h->w[4]);
    *p++ = '"';
    jw_done(w, p);
  }
  jw_put(w, ",\"bindings\":[", 13);
  bool first = true;
  for (uint16_t i = 1; i <= h->n; i++) {
    const trace_rec *d = &tr->ring[(hi + i) % tr->cap];
    if (d->type != R_BIND) continue;
    for (uint16_t j = 0; j < d->n && j < 2; j++) {
      uint64_t id = d->w[3 * j];
      const lab_ev *l = task_label(w, h, pos, id);
      p = jw_room(w, JW_ROOM);
      if (!first) *p++ = ',';
      first = false;
      p = P_LIT(p, "{\"buffer\":");
      p = p_u64(p, (uint32_t)id);
      if (l) {
        jw_done(w, p);
        buf_keys(w, id, l);
        p = jw_room(w, JW_ROOM);
      } else {
        p = P_LIT(p, ",\"name\":\"buffer #");
        p = p_u64(p, (uint32_t)id);
        *p++ = '"';
      }
      p = P_LIT(p, ",\"offset\":");
      p = p_u64(p, d->w[3 * j + 1]);
      p = P_LIT(p, ",\"size\":");
      p = p_u64(p, d->w[3 * j + 2]);
      p = P_LIT(p, ",\"access\":\"");
      p = p_str(p, access_name((d->acc >> (2 * j)) & 3u));
      p = P_LIT(p, "\"}");
      jw_done(w, p);
    }
  }
  jw_put(w, "]}", 2);
}

static void flow(jw *w, const char *name, const char *cat, uint64_t *id, const task_ev *from,
                 const task_ev *to) {
  if (!from->stamped || !to->stamped) return;
  ++*id;
  for (int end = 0; end < 2; end++) {
    const task_ev *at = end ? to : from;
    ev_open(w, end ? 'f' : 's', at->slot + 1, at->t0);
    char *p = jw_room(w, JW_ROOM);
    p = P_LIT(p, ",\"name\":\"");
    p = p_str(p, name);
    p = P_LIT(p, "\",\"cat\":\"");
    p = p_str(p, cat);
    p = P_LIT(p, "\",\"id\":");
    p = p_u64(p, *id);
    if (end) p = P_LIT(p, ",\"bp\":\"e\"");
    *p++ = '}';
    jw_done(w, p);
  }
}

/* The label ring's heads, oldest first: |*start| and |*count| (details
 * whose head was overwritten are skipped by their type). */
static void lab_span(const weft_trace *tr, uint64_t *start, uint64_t *count) {
  *start = tr->lab_wraps ? tr->lab_at : 0;
  *count = tr->lab_wraps ? tr->lab_cap : tr->lab_at;
}

/* The labels the label ring holds, by buffer, with their text (|t| empty
 * when none); |base| is the main ring's place of its first record read. */
static weft_status labels_read(const weft_allocator *a, const weft_trace *tr, uint64_t base,
                               uint64_t nlab, size_t bytes, label_table *t, lab_ev **ev_out,
                               char **text_out) {
  *ev_out = NULL;
  *text_out = NULL;
  *t = (label_table){NULL, 0, NULL};
  if (!nlab) return NULL;
  lab_ev *ev = weft__alloc(a, sizeof(*ev) * nlab, 16);
  char *text = weft__alloc(a, bytes + 1, 1);
  if (!ev || !text) {
    weft__free(a, ev, sizeof(*ev) * nlab, 16);
    weft__free(a, text, bytes + 1, 1);
    return weft__oom(sizeof(*ev) * nlab + bytes, "a trace's buffer labels");
  }
  size_t n = 0, off = 0;
  uint64_t start, count;
  lab_span(tr, &start, &count);
  for (uint64_t i = 0; i < count && n < nlab; i++) {
    uint64_t hi = (start + i) % tr->lab_cap;
    const trace_rec *r = &tr->labs[hi];
    if (r->type != R_BUF_LABEL) continue;
    char msg[TRACE_MSG_MAX];
    size_t len = ring_msg(tr->labs, tr->lab_cap, hi, msg);
    if (off + len > bytes) len = bytes - off;
    memcpy(text + off, msg, len);
    ev[n++] = (lab_ev){r->w[1], r->w[2], r->w[3] > base ? r->w[3] - base : 0, off, len, i};
    off += len;
  }
  qsort(ev, n, sizeof(*ev), lab_cmp);
  *t = (label_table){ev, n, text};
  *ev_out = ev;
  *text_out = text;
  return NULL;
}

/* The label events, from the labels' ring: each names its buffer by the
 * label it set. */
static void label_events(jw *w, const weft_trace *tr) {
  uint64_t start, count;
  lab_span(tr, &start, &count);
  for (uint64_t i = 0; i < count; i++) {
    const trace_rec *r = &tr->labs[(start + i) % tr->lab_cap];
    if (r->type != R_BUF_LABEL) continue;
    const lab_ev *l = label_self(&w->labels, r->w[1], i);
    char *p = sched_instant(w, r->w[0]);
    p = P_LIT(p, "buffer label\",\"cat\":\"memory\",\"args\":{\"buffer\":");
    p = p_u64(p, (uint32_t)r->w[1]);
    jw_done(w, p);
    buf_keys(w, r->w[1], l);
    p = jw_room(w, JW_ROOM);
    if (r->sub) p = P_LIT(p, ",\"set_before_recording\":true");
    p = P_LIT(p, "}}");
    jw_done(w, p);
  }
}

static weft_status trace_write(weft_device *dev, weft_trace *tr, FILE *f) {
  weft_status st = NULL;
  /* The records, oldest first; details whose head was overwritten skipped. */
  bool full = tr->wraps != 0;
  uint64_t start = full ? tr->at : 0, count = full ? tr->cap : tr->at;
  uint64_t skip = 0;
  while (skip < count && tr->ring[(start + skip) % tr->cap].type >= R_HEADS) skip++;
  uint64_t ntasks = 0, nwrites = 0, kept = 0, nlab = 0;
  size_t lab_bytes = 0;
  for (uint64_t i = skip; i < count; i++) {
    uint64_t hi = (start + i) % tr->cap;
    const trace_rec *r = &tr->ring[hi];
    kept += r->type >= R_TASK && r->type < R_HEADS;
    if (r->type == R_TASK) ntasks++;
    if (r->type == R_BIND) nwrites += r->n;
  }
  uint64_t lstart, lcount;
  lab_span(tr, &lstart, &lcount);
  for (uint64_t i = 0; i < lcount; i++) {
    uint64_t hi = (lstart + i) % tr->lab_cap;
    if (tr->labs[hi].type != R_BUF_LABEL) continue;
    char msg[TRACE_MSG_MAX];
    nlab++;
    lab_bytes += ring_msg(tr->labs, tr->lab_cap, hi, msg);
  }
  /* The main ring's place of the first record read. */
  const uint64_t base = full ? tr->wraps * tr->cap + tr->at - tr->cap : 0;
  /* The writer's tables, in the device's allocator (not on the recording path). */
  const weft_allocator *a = &dev->alloc;
  size_t cmcap = 16;
  while (cmcap < 2 * (nwrites + 1)) cmcap <<= 1;
  const size_t b_evs = sizeof(task_ev) * (ntasks + 1), b_pos = sizeof(pos_ev) * (ntasks + 1),
               b_slot = sizeof(uint32_t) * (WEFT_MAX_STREAMS + 1),
               b_edges = sizeof(uint64_t) * 2 * (ntasks + 1), b_cm = sizeof(struct carrier) * cmcap;
  task_ev *evs = weft__calloc(a, b_evs, 16);
  pos_ev *pos = weft__calloc(a, b_pos, 16);
  uint32_t *per_slot = weft__calloc(a, b_slot, 16);
  uint64_t *starts = weft__calloc(a, b_edges, 16), nrun = 0; /* then the ends */
  carrier_map cm = {weft__calloc(a, b_cm, 16), cmcap - 1};
  char *out = weft__alloc(a, JW_BYTES, 64);
  lab_ev *lab_ev_mem = NULL;
  char *lab_text = NULL;
  label_table labels = {NULL, 0, NULL};
  if (!evs || !pos || !per_slot || !starts || !cm.slots || !out) {
    st = weft__oom(sizeof(*evs) * ntasks, "writing a trace");
    goto out;
  }
  if ((st = labels_read(a, tr, base, nlab, lab_bytes, &labels, &lab_ev_mem, &lab_text))) goto out;
  uint64_t *ends = starts + ntasks + 1;
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
      pos_sort(pos + per_slot[s], per_slot[s + 1] - per_slot[s]);
  }

  double us = tick_us(tr);
  jw w = {.buf = out,
          .f = f,
          .first = true,
          .pid = dev->tag,
          .base = tr->begin_tick,
          .us = us,
          .ns = us * 1000.0,
          .labels = labels};
  jw_printf(&w,
            "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"weft_version\":\"%s\","
            "\"clock\":\"%s\",\"ns_per_tick\":%.6f,\"ring_records\":%" PRIu64
            ",\"records_written\":%" PRIu64 ",\"events_dropped\":%" PRIu64
            ",\"label_events_dropped\":%" PRIu64 "},\n\"traceEvents\":[",
            weft_version(),
            weft_clock_is_tsc() ? "tsc (calibrated against CLOCK_MONOTONIC)" : "CLOCK_MONOTONIC",
            w.us * 1000.0, tr->cap, tr->wraps * tr->cap + tr->at, tr->heads - kept,
            tr->lab_heads - nlab);
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
    char msg[TRACE_MSG_MAX], *p;
    switch (r->type) {
    case R_TASK: {
      const task_ev *me = &evs[e];
      ev_open(&w, 'X', me->slot + 1, me->t0);
      p = jw_room(&w, JW_ROOM);
      p = P_LIT(p, ",\"dur\":");
      p = p_time(&w, p, me->t1 - me->t0);
      p = P_LIT(p, ",\"name\":");
      jw_done(&w, p);
      const char *tn = trace_name(dev, tr, hi);
      jstr(&w, tn, strlen(tn));
      p = jw_room(&w, JW_ROOM);
      p = P_LIT(p, ",\"cat\":\"");
      p = p_str(p, r->sub == CMD_LAUNCH                              ? "launch"
                   : r->sub == CMD_SYNC                              ? "sync"
                   : r->sub == CMD_EVENT || r->sub == CMD_EVENT_WAIT ? "event"
                                                                     : "copy");
      *p++ = '"';
      jw_done(&w, p);
      task_args(&w, dev, tr, hi, i);
      jw_put(&w, "}", 1);
      /* Cross-stream waits: from the task at the position waited for. */
      for (uint16_t k = 1; k <= r->n; k++) {
        const trace_rec *d = &tr->ring[(hi + k) % tr->cap];
        if (d->type != R_WAIT) continue;
        for (uint16_t j = 0; j < d->n && j < 3; j++) {
          uint64_t s = d->w[2 * j], q = d->w[2 * j + 1];
          if (s >= WEFT_MAX_STREAMS) continue;
          pos_ev key = {q, 0};
          pos_ev *ps = bsearch(&key, pos + per_slot[s], per_slot[s + 1] - per_slot[s], sizeof(*pos),
                               pos_cmp);
          if (ps && ps->ev < e) flow(&w, "wait", "wait", &flow_id, &evs[ps->ev], me);
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
          for (uint16_t j = 0; j < d->n && j < 2; j++) {
            if (!((d->acc >> (2 * j)) & WEFT_WRITE)) continue;
            struct carrier *c = &cm.slots[carrier_find(&cm, d->w[3 * j], r->w[4])];
            *c = (struct carrier){d->w[3 * j], r->w[4], (uint32_t)e};
          }
        }
      }
      if (me->t1 > me->t0 || r->outcome == OUT_RUN) {
        starts[nrun] = me->t0;
        ends[nrun++] = me->t1;
      }
      e++;
      break;
    }
    case R_FLUSH:
      p = sched_instant(&w, r->w[0]);
      p = r->sub ? P_LIT(p, "flush (interleaved)") : P_LIT(p, "flush");
      p = P_LIT(p, "\",\"cat\":\"scheduler\",\"args\":{\"slots\":");
      p = p_u64(p, r->n);
      p = P_LIT(p, ",\"tasks\":");
      p = p_u64(p, r->w[1]);
      p = P_LIT(p, ",\"slot_mask\":");
      p = p_u64(p, r->w[2]);
      p = P_LIT(p, "}}");
      jw_done(&w, p);
      if (r->w[3] != tr->bp_last) { /* clients waited for room since the last flush */
        ev_open(&w, 'C', TRACE_SCHED_TID, r->w[0]);
        p = jw_room(&w, JW_ROOM);
        p = P_LIT(p, ",\"name\":\"back-pressure waits\",\"args\":{\"waits\":");
        p = p_u64(p, r->w[3]);
        p = P_LIT(p, "}}");
        jw_done(&w, p);
        tr->bp_last = r->w[3];
      }
      break;
    case R_MARK:
      p = sched_instant(&w, r->w[0]);
      p = p_str(p, r->sub == WEFT_TRACE_RECLAIM_DONE
                       ? (r->w[2] ? "reclaim rescued" : "reclaim failed")
                       : mark_name(r->sub));
      p = P_LIT(p, "\",\"cat\":\"");
      p = p_str(p, r->sub == WEFT_TRACE_ALIGN ? "scheduler" : "memory");
      p = P_LIT(p, "\",\"args\":{\"stream_slot\":");
      p = p_u64(p, r->slot);
      p = p_str(p, r->sub == WEFT_TRACE_ALIGN      ? ",\"batches\":"
                   : r->sub == WEFT_TRACE_RELOCATE ? ",\"moved\":"
                                                   : ",\"bytes\":");
      p = p_u64(p, r->w[1]);
      p = P_LIT(p, "}}");
      jw_done(&w, p);
      break;
    case R_BUF: {
      const lab_ev *l = w.labels.n ? label_at(&w.labels, r->w[1], false, i) : NULL;
      p = sched_instant(&w, r->w[0]);
      p = p_str(p, buf_event_name(r->sub));
      p = P_LIT(p, "\",\"cat\":\"memory\",\"args\":{\"buffer\":");
      p = p_u64(p, (uint32_t)r->w[1]);
      jw_done(&w, p);
      buf_keys(&w, r->w[1], l);
      p = jw_room(&w, JW_ROOM);
      p = P_LIT(p, ",\"size\":");
      p = p_u64(p, r->w[2]);
      p = P_LIT(p, ",\"stream_slot\":");
      p = p_u64(p, r->slot);
      p = r->outcome ? P_LIT(p, ",\"allocated\":true") : P_LIT(p, ",\"allocated\":false");
      p = P_LIT(p, "}}");
      jw_done(&w, p);
      break;
    }
    case R_MEM:
      ev_open(&w, 'C', 0, r->w[0]);
      p = jw_room(&w, JW_ROOM);
      p = P_LIT(p, ",\"name\":\"memory stream slot ");
      p = p_u64(p, r->slot);
      p = P_LIT(p, "\",\"args\":{\"in_use\":");
      p = p_u64(p, r->w[1]);
      p = P_LIT(p, ",\"reserved\":");
      p = p_u64(p, r->w[2]);
      p = P_LIT(p, "}}");
      jw_done(&w, p);
      break;
    case R_POISON: {
      size_t len = head_msg(tr, hi, msg);
      ev_open(&w, 'i', TRACE_SCHED_TID, r->w[0]);
      static const char poisoned[] =
          ",\"s\":\"p\",\"name\":\"device poisoned\",\"cat\":\"failure\",\"args\":{\"error\":";
      jw_put(&w, poisoned, sizeof(poisoned) - 1);
      jstr(&w, msg, len);
      jw_put(&w, "}}", 2);
      break;
    }
    default:
      break;
    }
  }
  label_events(&w, tr);
  /* The workers' occupancy: how many task runs overlap, over time. */
  time_sort(starts, nrun);
  time_sort(ends, nrun);
  int64_t busy = 0;
  for (uint64_t is = 0, ie = 0; is < nrun || ie < nrun;) {
    bool end = ie < nrun && (is == nrun || ends[ie] <= starts[is]); /* an end first at a tie */
    uint64_t t = end ? ends[ie++] : starts[is++];
    busy += end ? -1 : 1;
    if ((ie < nrun && ends[ie] == t) || (is < nrun && starts[is] == t))
      continue; /* one sample per instant */
    ev_open(&w, 'C', 0, t);
    char *p = jw_room(&w, JW_ROOM);
    p = P_LIT(p, ",\"name\":\"workers busy\",\"args\":{\"tasks running\":");
    p = p_i64(p, busy);
    p = P_LIT(p, "}}");
    jw_done(&w, p);
  }
  jw_put(&w, "\n]}\n", 4);
  jw_flush(&w);
  if (w.failed)
    st = weft_error_make(WEFT_ERR_GENERIC, "writing the trace failed (%s)", strerror(w.err));
out:
  if (fclose(f) != 0 && !st)
    st = weft_error_make(WEFT_ERR_GENERIC, "writing the trace failed (%s)", strerror(errno));
  weft__free(a, evs, b_evs, 16);
  weft__free(a, pos, b_pos, 16);
  weft__free(a, per_slot, b_slot, 16);
  weft__free(a, starts, b_edges, 16);
  weft__free(a, cm.slots, b_cm, 16);
  weft__free(a, out, JW_BYTES, 64);
  weft__free(a, lab_ev_mem, sizeof(*lab_ev_mem) * nlab, 16);
  weft__free(a, lab_text, lab_bytes + 1, 1);
  return st;
}
