/* Barriers cover work the Interleave strategy moved off its stream. Align
 * executes the pending batches a task's buffers name together, and
 * Interleave places all their tasks on the first one's queue: a task
 * submitted on stream 2 can run on stream 0's queue, behind a kernel there.
 * weft_sync(2), a record on 2, a read on 2 (ordered after every command on
 * its stream, other buffers included) and what weft_stream_wait_event orders
 * after such a record must still wait for it; and a task of stream 2
 * submitted after weft_stream_wait_event(2, ev) and moved onto another queue
 * must still wait for the event. A kernel on stream 0 that the moved work
 * follows gets its sync on 2 refused rather than deadlocking.
 *
 * Deterministic: the work comes from one task-graph submission (one push,
 * so no idle flush splits it before align interleaves it), the stream 0
 * kernel blocks on a gate the test opens, and each check reads a state that
 * cannot change while the gate is closed (a bounded wait that must time out,
 * a flag only the moved kernel sets). Every scenario runs under both
 * strategies and both scheduler modes; Sequential never interleaves, and
 * the same checks hold there. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const uint32_t one[3] = {1, 1, 1};
/* How long a barrier that must not complete is given to complete anyway. */
static const uint64_t NOT_YET_NS = UINT64_C(150) * 1000 * 1000;

/* ---- kernels -------------------------------------------------------------------------- */

/* The gate: blocks its stream's queue until the test opens it. In the
 * refusal scenario it first calls its device (|dev| set) and keeps the
 * answers. */
typedef struct gate {
  _Atomic int open, ran;
  weft_device *dev;
  weft_status sync_answer, wait_answer;
  weft_event ev; /* recorded on stream 2 before the kernel runs */
  _Atomic int ev_set;
} gate;

static weft_status gated(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  gate *g = user;
  if (g->dev) {
    g->sync_answer = weft_sync(g->dev, 2);
    while (!atomic_load(&g->ev_set)) sleep_ms(1);
    g->wait_answer = weft_event_wait(g->dev, g->ev, UINT64_MAX);
  }
  while (!atomic_load(&g->open)) sleep_ms(1);
  atomic_store(&g->ran, 1);
  return NULL;
}

/* The task that moves: marks that it ran, and whether the gate had. */
typedef struct mark {
  gate *g;
  _Atomic int ran, saw_gate;
} mark;

static weft_status marked(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  mark *m = user;
  atomic_store(&m->saw_gate, atomic_load(&m->g->ran));
  atomic_store(&m->ran, 1);
  return NULL;
}

static weft_status nothing(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return NULL;
}

/* ---- configurations ------------------------------------------------------------------- */

typedef struct config {
  weft_strategy strategy;
  weft_scheduler_mode mode;
  const char *name;
} config;

static const config configs[] = {
    {WEFT_STRATEGY_INTERLEAVE, WEFT_SCHEDULER_THREAD, "interleave/thread"},
    {WEFT_STRATEGY_INTERLEAVE, WEFT_SCHEDULER_COMBINING, "interleave/combining"},
    {WEFT_STRATEGY_SEQUENTIAL, WEFT_SCHEDULER_THREAD, "sequential/thread"},
    {WEFT_STRATEGY_SEQUENTIAL, WEFT_SCHEDULER_COMBINING, "sequential/combining"},
};
#define NCONFIGS (sizeof(configs) / sizeof(configs[0]))

typedef struct rig {
  env e;
  const config *cf;
  gate g;
  mark m;
  weft_kernel gate_k, mark_k, nothing_k;
  weft_buffer x, y, w, u, v, z;
  uint64_t interleaved_before;
} rig;

static uint64_t interleaved_now(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s.tasks_interleaved;
}

static void rig_open(rig *r, const config *cf) {
  memset(r, 0, sizeof(*r));
  r->cf = cf;
  env_options(&r->e);
  r->e.opts.max_streams = 4;
  r->e.opts.strategy = cf->strategy;
  r->e.opts.scheduler = cf->mode;
  env_open(&r->e);
  r->m.g = &r->g;
  weft_device *dev = r->e.dev;
  EXPECT_OK(weft_kernel_host(dev, "gated", gated, &r->g, &r->gate_k));
  EXPECT_OK(weft_kernel_host(dev, "marked", marked, &r->m, &r->mark_k));
  EXPECT_OK(weft_kernel_host(dev, "nothing", nothing, NULL, &r->nothing_k));
  weft_buffer *all[] = {&r->x, &r->y, &r->w, &r->u, &r->v, &r->z};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
    EXPECT_OK(weft_buffer_create(dev, 3, 64, all[i]));
  /* z holds bytes a read on stream 2 can read; nothing in the graph binds it. */
  char bytes[64];
  memset(bytes, 7, sizeof(bytes));
  EXPECT_OK(weft_buffer_write(dev, 3, r->z, 0, bytes, sizeof(bytes)));
  EXPECT_OK(weft_sync(dev, 3));
  r->interleaved_before = interleaved_now(dev);
}

static void rig_close(rig *r) {
  weft_buffer all[] = {r->x, r->y, r->w, r->u, r->v, r->z};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
    EXPECT_OK(weft_buffer_release(r->e.dev, all[i]));
  env_close(&r->e);
}

static void add_node(weft_taskgraph *g, weft_kernel k, const weft_binding *b, size_t n,
                     uint32_t want_lane) {
  uint32_t node;
  EXPECT_OK(weft_taskgraph_add_launch(g, k, one, one, b, n, NULL, 0, &node));
  weft_taskgraph_node_info info = {0};
  EXPECT_OK(weft_taskgraph_node(g, node, &info));
  cr_assert_eq(info.lane, want_lane, "graph node %u: lane %u, the scenario needs %u", node,
               info.lane, want_lane);
}

static weft_binding bind(weft_buffer b, weft_access a) {
  return (weft_binding){.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = a};
}

/* One push (lane L runs on stream L): the gate on 0 (writes x and u), the
 * marked task on 2 (writes w), a task on 1 (writes y), a task on 0 after
 * the gate (reads u), then a task on 1 binding x, then w: registering it
 * aligns the batches of 0 and 2 together, and Interleave places the marked
 * task of stream 2 on stream 0's queue, behind the gate. */
static void submit_moving_graph(rig *r) {
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(r->e.dev, &g));
  weft_binding gate_b[2] = {bind(r->x, WEFT_WRITE), bind(r->u, WEFT_WRITE)};
  weft_binding y_b = bind(r->y, WEFT_WRITE), w_b = bind(r->w, WEFT_WRITE);
  weft_binding after_b[2] = {bind(r->u, WEFT_READ), bind(r->v, WEFT_WRITE)};
  weft_binding cons_b[3] = {bind(r->x, WEFT_READ), bind(r->w, WEFT_READ), bind(r->y, WEFT_WRITE)};
  add_node(g, r->gate_k, gate_b, 2, 0);
  add_node(g, r->nothing_k, &y_b, 1, 1);
  add_node(g, r->mark_k, &w_b, 1, 2);
  add_node(g, r->nothing_k, after_b, 2, 0);
  add_node(g, r->nothing_k, cons_b, 3, 1);
  EXPECT_OK(weft_taskgraph_submit(g, 0));
  weft_taskgraph_destroy(g);
}

/* Under Interleave the scenario's premise holds: stream 2's task moved. */
static void expect_premise(rig *r) {
  uint64_t moved = interleaved_now(r->e.dev) - r->interleaved_before;
  if (r->cf->strategy == WEFT_STRATEGY_INTERLEAVE)
    cr_assert_geq(moved, 1, "%s: align did not interleave stream 2's task", r->cf->name);
  else
    cr_assert_eq(moved, 0, "%s: Sequential interleaved", r->cf->name);
}

/* A blocking call on stream 2 from a thread of its own: what it saw of the
 * marked task when it returned. */
typedef struct blocked_call {
  rig *r;
  bool read; /* weft_buffer_read of z, else weft_sync */
  weft_status st;
  _Atomic int returned, saw_mark;
  pthread_t thread;
} blocked_call;

static void *blocked_main(void *arg) {
  blocked_call *b = arg;
  char got[64];
  b->st = b->read ? weft_buffer_read(b->r->e.dev, 2, b->r->z, 0, got, sizeof(got))
                  : weft_sync(b->r->e.dev, 2);
  atomic_store(&b->saw_mark, atomic_load(&b->r->m.ran));
  atomic_store(&b->returned, 1);
  return NULL;
}

static void blocked_start(blocked_call *b, rig *r, bool read) {
  memset(b, 0, sizeof(*b));
  b->r = r;
  b->read = read;
  cr_assert_eq(pthread_create(&b->thread, NULL, blocked_main, b), 0);
}

static void blocked_end(blocked_call *b, const char *what) {
  pthread_join(b->thread, NULL);
  EXPECT_OK(b->st);
  b->st = NULL;
  cr_assert_eq(atomic_load(&b->saw_mark), 1,
               "%s: %s on stream 2 returned before stream 2's interleaved task ran", b->r->cf->name,
               what);
}

/* ---- the barriers ---------------------------------------------------------------------- */

/* While the gate is closed: under Interleave the barrier |ev| on stream 2
 * (or one ordered after it) must not complete, since the marked task waits
 * behind the gate; under Sequential the marked task is on stream 2's own
 * queue and the barrier completes, after it. */
static void expect_covered(rig *r, weft_event ev, const char *what) {
  weft_status st = weft_event_wait(r->e.dev, ev, NOT_YET_NS);
  if (r->cf->strategy == WEFT_STRATEGY_INTERLEAVE) {
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_TIMEOUT,
                 "%s: %s completed while stream 2's task waits behind the gate", r->cf->name, what);
    weft_error_free(st);
    bool done = true;
    EXPECT_OK(weft_event_query(r->e.dev, ev, &done));
    cr_assert(!done, "%s: %s reads done", r->cf->name, what);
    cr_assert_eq(atomic_load(&r->m.ran), 0, "the gate holds the marked task");
  } else {
    char text[1024] = "";
    if (st) weft_error_format(st, text, sizeof(text));
    cr_assert_null(st, "%s: %s: %s", r->cf->name, what, text);
    cr_assert_eq(atomic_load(&r->m.ran), 1, "%s: %s completed before stream 2's task ran",
                 r->cf->name, what);
  }
}

static void barriers_wait_for_the_moved_task(const config *cf) {
  rig r;
  rig_open(&r, cf);
  weft_device *dev = r.e.dev;
  submit_moving_graph(&r);
  weft_event rec, rd, after;
  char got[64];
  memset(got, 0, sizeof(got));
  EXPECT_OK(weft_event_record(dev, 2, &rec));
  EXPECT_OK(weft_buffer_read_async(dev, 2, r.z, 0, got, sizeof(got), &rd));
  blocked_call sync, read;
  blocked_start(&sync, &r, false);
  blocked_start(&read, &r, true);
  /* Stream 3 waits for the record: work placed there after it waits too. */
  EXPECT_OK(weft_stream_wait_event(dev, 3, rec));
  weft_binding zb = bind(r.z, WEFT_READ);
  EXPECT_OK(weft_launch(dev, 3, r.nothing_k, one, one, &zb, 1, NULL, 0));
  EXPECT_OK(weft_event_record(dev, 3, &after));
  expect_covered(&r, rec, "the record on stream 2");
  expect_premise(&r);
  expect_covered(&r, rd, "a read_async on stream 2 (of a buffer the task does not bind)");
  expect_covered(&r, after, "a record on stream 3 after it waited for the record");
  if (cf->strategy == WEFT_STRATEGY_INTERLEAVE) {
    cr_assert_eq(atomic_load(&sync.returned), 0, "%s: weft_sync(2) returned behind the gate",
                 cf->name);
    cr_assert_eq(atomic_load(&read.returned), 0, "%s: weft_buffer_read on 2 returned", cf->name);
  }
  atomic_store(&r.g.open, 1);
  EXPECT_OK(weft_event_wait(dev, rec, UINT64_MAX));
  cr_assert_eq(atomic_load(&r.m.ran), 1, "%s: the record completed before the marked task ran",
               cf->name);
  EXPECT_OK(weft_event_wait(dev, rd, UINT64_MAX));
  cr_assert_eq(got[0], 7, "the read's bytes");
  EXPECT_OK(weft_event_wait(dev, after, UINT64_MAX));
  blocked_end(&sync, "weft_sync");
  blocked_end(&read, "weft_buffer_read");
  EXPECT_OK(weft_event_release(dev, rec));
  EXPECT_OK(weft_event_release(dev, rd));
  EXPECT_OK(weft_event_release(dev, after));
  rig_close(&r);
}

Test(barrier_interleave, sync_record_and_read_on_a_stream_wait_for_its_task_on_another_queue,
     .timeout = 120) {
  for (size_t i = 0; i < NCONFIGS; i++) barriers_wait_for_the_moved_task(&configs[i]);
}

/* A record after the barrier sees it through: a second barrier on the
 * stream needs no new wait and still covers the moved task (and later work
 * moved again is covered again). */
static void a_second_round_is_covered_too(const config *cf) {
  rig r;
  rig_open(&r, cf);
  weft_device *dev = r.e.dev;
  submit_moving_graph(&r);
  weft_event first, second;
  EXPECT_OK(weft_event_record(dev, 2, &first));
  EXPECT_OK(weft_event_record(dev, 2, &second));
  expect_covered(&r, second, "a second record on stream 2");
  expect_premise(&r);
  atomic_store(&r.g.open, 1);
  EXPECT_OK(weft_event_wait(dev, second, UINT64_MAX));
  cr_assert_eq(atomic_load(&r.m.ran), 1, "%s: the second record completed first", cf->name);
  EXPECT_OK(weft_event_wait(dev, first, UINT64_MAX));
  EXPECT_OK(weft_event_release(dev, first));
  EXPECT_OK(weft_event_release(dev, second));
  EXPECT_OK(weft_sync(dev, 0)); /* the gate saw itself open (Sequential did not wait for it) */
  EXPECT_OK(weft_sync(dev, 1));
  /* Round two: the gate closed again, the same graph moves stream 2's task again. */
  atomic_store(&r.g.open, 0);
  atomic_store(&r.g.ran, 0);
  atomic_store(&r.m.ran, 0);
  r.interleaved_before = interleaved_now(dev);
  submit_moving_graph(&r);
  weft_event again;
  EXPECT_OK(weft_event_record(dev, 2, &again));
  expect_covered(&r, again, "round two's record on stream 2");
  expect_premise(&r);
  atomic_store(&r.g.open, 1);
  EXPECT_OK(weft_event_wait(dev, again, UINT64_MAX));
  cr_assert_eq(atomic_load(&r.m.ran), 1, "%s: round two's record completed first", cf->name);
  EXPECT_OK(weft_event_release(dev, again));
  rig_close(&r);
}

Test(barrier_interleave, later_barriers_on_the_stream_cover_moved_work_every_time, .timeout = 120) {
  for (size_t i = 0; i < NCONFIGS; i++) a_second_round_is_covered_too(&configs[i]);
}

/* ---- stream_wait_event: work after the wait, moved onto another queue ----------------- */

/* The gate runs on stream 3 and a record follows it; stream 2 waits for the
 * record. Then one push (lane L on stream L): a task on 0 (writes v), one on
 * 1 (writes y), the marked task on 2 (writes w), and a task on 0 after the
 * first, binding y, then w: align places stream 2's marked task on stream
 * 1's queue, which nothing blocks. It must still wait for the event. */
static void work_after_a_stream_wait_waits_when_moved(const config *cf) {
  rig r;
  rig_open(&r, cf);
  weft_device *dev = r.e.dev;
  weft_binding xb = bind(r.x, WEFT_WRITE);
  EXPECT_OK(weft_launch(dev, 3, r.gate_k, one, one, &xb, 1, NULL, 0));
  weft_event ev;
  EXPECT_OK(weft_event_record(dev, 3, &ev));
  EXPECT_OK(weft_stream_wait_event(dev, 2, ev));
  r.interleaved_before = interleaved_now(dev);
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(dev, &g));
  weft_binding v_b = bind(r.v, WEFT_WRITE), y_b = bind(r.y, WEFT_WRITE),
               w_b = bind(r.w, WEFT_WRITE);
  weft_binding cons_b[3] = {bind(r.y, WEFT_READ), bind(r.w, WEFT_READ), bind(r.v, WEFT_WRITE)};
  add_node(g, r.nothing_k, &v_b, 1, 0);
  add_node(g, r.nothing_k, &y_b, 1, 1);
  add_node(g, r.mark_k, &w_b, 1, 2);
  add_node(g, r.nothing_k, cons_b, 3, 0);
  EXPECT_OK(weft_taskgraph_submit(g, 0));
  weft_taskgraph_destroy(g);
  weft_event on1;
  EXPECT_OK(weft_event_record(dev, 1, &on1));
  /* Interleave: stream 1 runs stream 2's task, which waits for the event;
   * Sequential: stream 1 holds only its own task, and its record completes. */
  weft_status st = weft_event_wait(dev, on1, NOT_YET_NS);
  if (cf->strategy == WEFT_STRATEGY_INTERLEAVE) {
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_TIMEOUT,
                 "%s: stream 1 ran stream 2's task past the event it waits for", cf->name);
    weft_error_free(st);
  } else {
    EXPECT_OK(st);
  }
  expect_premise(&r);
  cr_assert_eq(atomic_load(&r.m.ran), 0,
               "%s: stream 2's task ran before the event it was ordered after", cf->name);
  atomic_store(&r.g.open, 1);
  EXPECT_OK(weft_event_wait(dev, on1, UINT64_MAX));
  EXPECT_OK(weft_sync(dev, 2)); /* Sequential: the task is on stream 2's own queue */
  cr_assert_eq(atomic_load(&r.m.ran), 1);
  cr_assert_eq(atomic_load(&r.m.saw_gate), 1, "%s: stream 2's task did not see the gate's work",
               cf->name);
  EXPECT_OK(weft_sync(dev, 3));
  EXPECT_OK(weft_event_release(dev, ev));
  EXPECT_OK(weft_event_release(dev, on1));
  rig_close(&r);
}

Test(barrier_interleave, work_after_stream_wait_event_waits_for_the_event_on_any_queue,
     .timeout = 120) {
  for (size_t i = 0; i < NCONFIGS; i++) work_after_a_stream_wait_waits_when_moved(&configs[i]);
}

/* ---- a kernel the moved work follows ----------------------------------------------------- */

/* The gate itself, on stream 0, syncs stream 2 and waits for a record on
 * 2: both wait for the marked task queued behind the gate, so both are
 * refused with InvalidArgument instead of deadlocking. (Sequential: the
 * marked task is on stream 2's own queue, nothing waits for the gate, and
 * both are answered.) */
static void a_kernel_the_moved_work_follows_is_refused(const config *cf) {
  rig r;
  rig_open(&r, cf);
  weft_device *dev = r.e.dev;
  r.g.dev = dev;
  atomic_store(&r.g.open, 1); /* the gate only calls, then returns */
  submit_moving_graph(&r);
  EXPECT_OK(weft_event_record(dev, 2, &r.g.ev));
  atomic_store(&r.g.ev_set, 1);
  EXPECT_OK(weft_sync(dev, 0));
  EXPECT_OK(weft_sync(dev, 2));
  expect_premise(&r);
  if (cf->strategy == WEFT_STRATEGY_INTERLEAVE) {
    cr_assert_eq(weft_error_kind_of(r.g.sync_answer), WEFT_ERR_INVALID_ARGUMENT,
                 "%s: the kernel's sync on 2 was not refused", cf->name);
    cr_assert_not_null(strstr(weft_error_message(r.g.sync_answer), "weft_sync"), "%s",
                       weft_error_message(r.g.sync_answer));
    cr_assert_eq(weft_error_kind_of(r.g.wait_answer), WEFT_ERR_INVALID_ARGUMENT,
                 "%s: the kernel's event wait was not refused", cf->name);
  } else {
    EXPECT_OK(r.g.sync_answer);
    EXPECT_OK(r.g.wait_answer);
    r.g.sync_answer = r.g.wait_answer = NULL;
  }
  weft_error_free(r.g.sync_answer);
  weft_error_free(r.g.wait_answer);
  cr_assert_eq(atomic_load(&r.m.ran), 1);
  EXPECT_OK(weft_event_release(dev, r.g.ev));
  rig_close(&r);
}

Test(barrier_interleave, a_kernel_that_moved_work_follows_is_refused_its_sync_not_deadlocked,
     .timeout = 120) {
  for (size_t i = 0; i < NCONFIGS; i++) a_kernel_the_moved_work_follows_is_refused(&configs[i]);
}
