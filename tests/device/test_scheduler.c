/* SchedulerMultiStream on the host backend: the stream pool (folding,
 * laziness, questions that never create a stream, per-thread default
 * streams), batching and its flush points, the Interleave and Sequential
 * strategies (same results), cross-stream hazards over three and more
 * streams with slow producers, the last-writer hazard, pinning of buffers a
 * consumer still uses, and linearizable submission across threads. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"
#include "support/uint_kernels.h"

/* ---- the stream pool ---------------------------------------------------------------------- */

Test(stream_pool, logical_ids_fold_onto_the_pool_and_share_its_order, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_streams = 4;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 1), y = make_buffer(e.dev, 1);
  /* 1, 5 and 4_000_000_001 are one slot: a slow write then a read on another
   * id of the same slot is ordered by the stream itself, with no wait. */
  set(e.dev, &k, 1, x, 7, 20000);
  add(e.dev, &k, 5, x, y, 1, 0);
  expect_all(e.dev, UINT64_C(4000000001), y, 8, "y");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.streams_created, 1, "ids 1, 5 and 4000000001 fold onto one slot");
  cr_assert_eq(s.cross_stream_waits, 0);
  /* The largest id folds too (computed in a wide type). */
  set(e.dev, &k, UINT64_MAX, x, 3, 0);
  expect_all(e.dev, UINT64_MAX, x, 3, "x on UINT64_MAX");
  cr_assert_eq(stats_of(e.dev).streams_created, 2, "UINT64_MAX %% 4 == 3: a second slot");
  env_close(&e);
}

Test(stream_pool, slots_are_created_lazily_and_questions_never_create_one, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_streams = 8;
  env_open(&e);
  cr_assert_eq(stats_of(e.dev).streams_created, 0, "opening creates no stream");
  weft_buffer x = make_buffer(e.dev, 2);
  weft_memory_usage u = {0};
  EXPECT_OK(weft_memory_usage_get(e.dev, &u));
  weft_pool_report rep[16] = {0};
  size_t n = 16;
  EXPECT_OK(weft_memory_report_get(e.dev, 6, rep, &n));
  EXPECT_OK(weft_sync(e.dev, 3));
  EXPECT_OK(weft_check(e.dev, &x, 1));
  cr_assert_eq(stats_of(e.dev).streams_created, 0,
               "creating a buffer, a memory report, a sync and a check create no stream");
  kernels k = make_kernels(e.dev);
  set(e.dev, &k, 2, x, 1, 0);
  EXPECT_OK(weft_sync(e.dev, 2));
  cr_assert_eq(stats_of(e.dev).streams_created, 1, "the first launch creates its slot only");
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

typedef struct ids {
  weft_stream_id first, second;
} ids;

static void *current_twice(void *arg) {
  ids *r = arg;
  r->first = weft_stream_current();
  r->second = weft_stream_current();
  return NULL;
}

Test(stream_pool, every_thread_has_its_own_stable_default_stream, .timeout = 60) {
  ids r[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&t[i], NULL, current_twice, &r[i]), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  weft_stream_id mine = weft_stream_current();
  cr_assert_eq(mine, weft_stream_current(), "stable within a thread");
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(r[i].first, r[i].second);
    cr_assert_neq(r[i].first, mine);
    for (int j = 0; j < i; j++) cr_assert_neq(r[i].first, r[j].first, "threads %d and %d", i, j);
  }
}

/* ---- batching ----------------------------------------------------------------------------- */

Test(batching, a_batch_is_flushed_when_it_reaches_max_tasks, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_tasks = 4;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_device_stats before = stats_of(e.dev);
  /* The 12 launches reach the scheduler in one push (a task graph), so no
   * idle flush can split them: they form batches of 4 as they register. */
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding b = {x, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  args a = {1, 0};
  for (int i = 0; i < 12; i++)
    EXPECT_OK(weft_taskgraph_add_launch(g, k.inc, one, one, &b, 1, &a, sizeof(a), NULL));
  EXPECT_OK(weft_taskgraph_submit(g, 0));
  weft_taskgraph_destroy(g);
  expect_all(e.dev, 0, x, 12, "x after 12 increments");
  weft_device_stats after = stats_of(e.dev);
  cr_assert_geq(after.batches_full - before.batches_full, 2,
                "12 tasks in one push, batches of 4: at least 2 full batches "
                "(%" PRIu64 ")",
                after.batches_full - before.batches_full);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

Test(batching, max_tasks_one_flushes_every_task, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_tasks = 1;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  for (int i = 0; i < 50; i++) inc(e.dev, &k, 0, x, 2, 0);
  expect_all(e.dev, 0, x, 100, "x");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_geq(s.batches_full, 51, "every launch fills its batch of one");
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

Test(batching, a_read_flushes_the_streams_that_hold_its_buffer, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.scheduler = WEFT_SCHEDULER_THREAD; /* a combining client starts idle streams at once */
  e.opts.max_tasks = 1000;                  /* nothing flushes on size */
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 1), slow = make_buffer(e.dev, 3);
  hold h; /* both launches reach the scheduler together: no idle flush between */
  hold_begin(&h, e.dev, &k, slow, 3, 0, 200);
  set(e.dev, &k, 0, x, 5, 0);
  add(e.dev, &k, 1, x, y, 1, 0); /* registering it on 1 aligns stream 0 */
  hold_end(&h);
  expect_all(e.dev, 2, y, 6, "a read on a third stream sees y");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_geq(s.align_flushes, 1, "the add aligned the stream that wrote x");
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  EXPECT_OK(weft_buffer_release(e.dev, slow));
  env_close(&e);
}

/* ---- strategies ------------------------------------------------------------------------- */

enum { NBUF = 12, NOPS = 400 };

typedef struct program_result {
  uint32_t values[NBUF];
  weft_device_stats stats;
} program_result;

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A seeded random program over 4 streams (every dependency kind, crossing
 * streams all the time), checked against a host model. */
static program_result run_program(weft_strategy strategy, uint32_t max_tasks, uint64_t seed) {
  env e;
  env_options(&e);
  e.opts.max_streams = 4;
  e.opts.max_tasks = max_tasks;
  e.opts.strategy = strategy;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer b[NBUF];
  uint32_t model[NBUF];
  for (int i = 0; i < NBUF; i++) {
    b[i] = make_buffer(e.dev, (weft_stream_id)i);
    set(e.dev, &k, (weft_stream_id)i, b[i], (uint32_t)i, 0);
    model[i] = (uint32_t)i;
  }
  for (int op = 0; op < NOPS; op++) {
    uint64_t r = rng_next(&seed);
    weft_stream_id s = r % 6; /* 6 logical ids over 4 slots */
    int x = (int)((r >> 8) % NBUF), y = (int)((r >> 16) % NBUF), z = (int)((r >> 24) % NBUF);
    uint32_t delay = (r >> 40) % 16 == 0 ? 200 : 0;
    switch ((r >> 32) % 4) {
    case 0:
      set(e.dev, &k, s, b[x], (uint32_t)(r >> 44), delay);
      model[x] = (uint32_t)(r >> 44);
      break;
    case 1:
      if (x == y) break;
      add(e.dev, &k, s, b[x], b[y], 3, delay);
      model[y] = model[x] + 3;
      break;
    case 2:
      if (z == x || z == y) break;
      sum(e.dev, &k, s, b[x], b[y], b[z], delay);
      model[z] = model[x] + model[y];
      break;
    default:
      inc(e.dev, &k, s, b[x], 1, delay);
      model[x] += 1;
      break;
    }
  }
  program_result res;
  for (int i = 0; i < NBUF; i++) {
    uint32_t got[ELEMS];
    EXPECT_OK(weft_buffer_read(e.dev, (weft_stream_id)(i % 5), b[i], 0, got, BYTES));
    for (int j = 0; j < ELEMS; j++)
      cr_assert_eq(got[j], model[i], "strategy %d, buffer %d: %u, expected %u", (int)strategy, i,
                   got[j], model[i]);
    res.values[i] = got[0];
  }
  res.stats = stats_of(e.dev);
  for (int i = 0; i < NBUF; i++) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  env_close(&e);
  return res;
}

Test(strategies, interleave_and_sequential_give_the_same_results, .timeout = 120) {
  for (uint64_t seed = 1; seed <= 6; seed++) {
    uint32_t max_tasks = seed % 2 ? 3 : 32;
    program_result in = run_program(WEFT_STRATEGY_INTERLEAVE, max_tasks, seed);
    program_result sq = run_program(WEFT_STRATEGY_SEQUENTIAL, max_tasks, seed);
    cr_assert_arr_eq(in.values, sq.values, sizeof(in.values), "seed %" PRIu64, seed);
    cr_assert_eq(sq.stats.tasks_interleaved, 0, "Sequential runs each batch on its own stream");
    cr_assert_eq(in.stats.launches_run, sq.stats.launches_run);
  }
}

Test(strategies, interleave_runs_aligned_batches_on_one_stream, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.scheduler = WEFT_SCHEDULER_THREAD; /* a combining client starts idle streams at once */
  e.opts.max_tasks = 1000;
  e.opts.strategy = WEFT_STRATEGY_INTERLEAVE;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 1), z = make_buffer(e.dev, 2);
  weft_buffer slow = make_buffer(e.dev, 3);
  /* x and y are pending on streams 0 and 1; the sum on 2 aligns both (all
   * three reach the scheduler together: no idle flush between). */
  hold h;
  hold_begin(&h, e.dev, &k, slow, 3, 0, 200);
  set(e.dev, &k, 0, x, 1, 0);
  set(e.dev, &k, 1, y, 2, 0);
  sum(e.dev, &k, 2, x, y, z, 0);
  hold_end(&h);
  EXPECT_OK(weft_buffer_release(e.dev, slow));
  expect_all(e.dev, 2, z, 3, "z");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_geq(s.tasks_interleaved, 1, "stream 1's set ran on stream 0's queue");
  cr_assert_eq(s.cross_stream_waits, 1, "stream 2 waits on one stream, not two");
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  EXPECT_OK(weft_buffer_release(e.dev, z));
  env_close(&e);
}

/* ---- cross-stream hazards over three and more streams --------------------------------- */

Test(hazards, read_after_write_across_a_chain_of_four_streams, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer a = make_buffer(e.dev, 0), b = make_buffer(e.dev, 1), c = make_buffer(e.dev, 2),
              d = make_buffer(e.dev, 3);
  set(e.dev, &k, 0, a, 10, 20000); /* slow producer */
  add(e.dev, &k, 1, a, b, 1, 5000);
  add(e.dev, &k, 2, b, c, 1, 0);
  add(e.dev, &k, 3, c, d, 1, 0);
  expect_all(e.dev, 0, d, 13, "d = ((a + 1) + 1) + 1");
  weft_buffer all[4] = {a, b, c, d};
  for (int i = 0; i < 4; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(hazards, write_after_read_waits_for_every_reader_on_other_streams, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), r1 = make_buffer(e.dev, 1), r2 = make_buffer(e.dev, 2);
  set(e.dev, &k, 0, x, 5, 0);
  EXPECT_OK(weft_sync(e.dev, 0));
  add(e.dev, &k, 1, x, r1, 0, 20000); /* slow readers of x on 1 and 2 */
  add(e.dev, &k, 2, x, r2, 0, 10000);
  set(e.dev, &k, 3, x, 99, 0); /* must not overwrite x under them */
  expect_all(e.dev, 1, r1, 5, "reader on stream 1");
  expect_all(e.dev, 2, r2, 5, "reader on stream 2");
  expect_all(e.dev, 3, x, 99, "x");
  weft_buffer all[3] = {x, r1, r2};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(hazards, write_after_write_keeps_program_order_over_three_streams, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 1, 20000);
  set(e.dev, &k, 1, x, 2, 10000);
  set(e.dev, &k, 2, x, 3, 0);
  expect_all(e.dev, 3, x, 3, "the last write wins");
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

Test(hazards, an_in_place_write_on_the_origin_after_a_sync_is_still_waited_for, .timeout = 60) {
  /* The reference tracked the allocation's stream and cursor: after a sync,
   * a consumer on another stream no longer waited, even when the origin
   * wrote the buffer again in place. weft tracks the last writer. */
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 1);
  set(e.dev, &k, 0, x, 1, 0);
  add(e.dev, &k, 1, x, y, 0, 0); /* stream 1 syncs with 0 here */
  EXPECT_OK(weft_sync(e.dev, 1));
  inc(e.dev, &k, 0, x, 41, 30000); /* slow in-place write on the origin */
  add(e.dev, &k, 1, x, y, 0, 0);
  expect_all(e.dev, 1, y, 42, "the consumer saw the in-place write");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_geq(s.cross_stream_waits, 2, "one wait per write the consumer depends on");
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  env_close(&e);
}

Test(hazards, a_second_reader_on_a_stream_that_already_waited_elides_the_wait, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 1), z = make_buffer(e.dev, 1);
  set(e.dev, &k, 0, x, 4, 10000);
  add(e.dev, &k, 1, x, y, 1, 0);
  add(e.dev, &k, 1, x, z, 2, 0);
  expect_all(e.dev, 1, y, 5, "y");
  expect_all(e.dev, 1, z, 6, "z");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.cross_stream_waits, 1);
  cr_assert_eq(s.waits_elided, 1);
  weft_buffer all[3] = {x, y, z};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

/* ---- pinning ------------------------------------------------------------------------------ */

Test(pinning, a_released_buffer_is_not_reused_while_a_consumer_on_another_stream_runs,
     .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 1);
  set(e.dev, &k, 0, x, 77, 0);
  EXPECT_OK(weft_sync(e.dev, 0));
  add(e.dev, &k, 1, x, y, 0, 30000); /* a slow consumer of x */
  EXPECT_OK(weft_buffer_release(e.dev, x));
  /* New buffers of the same size on x's stream, overwritten at once: none
   * may take x's bytes while the consumer still reads them. */
  weft_buffer fresh[8];
  for (int i = 0; i < 8; i++) {
    fresh[i] = make_buffer(e.dev, 0);
    set(e.dev, &k, 0, fresh[i], 0xdead, 0);
  }
  expect_all(e.dev, 1, y, 77, "the consumer read x's bytes, not a newcomer's");
  for (int i = 0; i < 8; i++) EXPECT_OK(weft_buffer_release(e.dev, fresh[i]));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  env_close(&e);
}

/* The launch that ran clean retires the released buffers it bound: its
 * completion's quick path must not keep one alive (nor free one early). */
Test(pinning, a_released_buffer_is_freed_when_the_last_launch_binding_it_retires, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 0), z = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 5, 0);
  EXPECT_OK(weft_sync(e.dev, 0));
  uint64_t live = stats_of(e.dev).buffers_live;
  add(e.dev, &k, 0, x, y, 1, 30000); /* slow: both releases find x and z pinned */
  add(e.dev, &k, 0, x, z, 2, 0);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, z)); /* its only writer is still queued */
  cr_assert_eq(stats_of(e.dev).buffers_live, live, "released while bound: kept");
  EXPECT_OK(weft_sync(e.dev, 0));
  expect_all(e.dev, 0, y, 6, "the consumer read x before it went");
  cr_assert_eq(stats_of(e.dev).buffers_live, live - 2,
               "freed when the last launch binding them retired");
  EXPECT_OK(weft_buffer_release(e.dev, y));
  env_close(&e);
}

/* ---- linearizable submission --------------------------------------------------------------- */

typedef struct relay {
  weft_device *dev;
  kernels k;
  weft_buffer x;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int turn; /* whose launch is next */
  int rounds;
} relay;

/* Two threads alternate, handing a turn through a mutex: each launch is
 * submitted after the other thread's previous one (happens-before) and on
 * another stream, so it must be scheduled after it. */
typedef struct relay_arg {
  relay *r;
  int id;
} relay_arg;

static void *relay_main(void *arg) {
  relay_arg *a = arg;
  relay *r = a->r;
  for (int i = 0; i < r->rounds; i++) {
    pthread_mutex_lock(&r->mu);
    while (r->turn != a->id) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    /* x = x * 1 + 1 in place, on this thread's own stream: the final value
     * counts the launches only if every one ran after the previous. */
    inc(r->dev, &r->k, (weft_stream_id)a->id, r->x, 1, (i % 7 == 0) ? 300 : 0);
    pthread_mutex_lock(&r->mu);
    r->turn = 1 - a->id;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
  }
  return NULL;
}

Test(linearizable, launches_handed_across_threads_run_in_submission_order, .timeout = 60) {
  env e = env_new();
  relay r = {.dev = e.dev, .k = make_kernels(e.dev), .turn = 0, .rounds = 300};
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  r.x = make_buffer(e.dev, 0);
  set(e.dev, &r.k, 0, r.x, 0, 0);
  relay_arg a0 = {&r, 0}, a1 = {&r, 1};
  pthread_t t0, t1;
  pthread_create(&t0, NULL, relay_main, &a0);
  pthread_create(&t1, NULL, relay_main, &a1);
  pthread_join(t0, NULL);
  pthread_join(t1, NULL);
  expect_all(e.dev, 2, r.x, 600, "600 increments, none lost or reordered");
  pthread_mutex_destroy(&r.mu);
  pthread_cond_destroy(&r.cv);
  EXPECT_OK(weft_buffer_release(e.dev, r.x));
  env_close(&e);
}

typedef struct order_arg {
  weft_device *dev;
  kernels *k;
  weft_buffer x;
  pthread_barrier_t *bar;
  int id;
} order_arg;

static void *set_then_barrier(void *arg) {
  order_arg *a = arg;
  if (a->id == 0) set(a->dev, a->k, 0, a->x, 1, 2000); /* slow, submitted first */
  pthread_barrier_wait(a->bar);
  if (a->id == 1) set(a->dev, a->k, 1, a->x, 2, 0); /* after the barrier: must win */
  return NULL;
}

Test(linearizable, a_write_submitted_after_a_barrier_is_ordered_after_writes_before_it,
     .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  for (int round = 0; round < 50; round++) {
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    order_arg a[2] = {{e.dev, &k, x, &bar, 0}, {e.dev, &k, x, &bar, 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, set_then_barrier, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    expect_all(e.dev, 2, x, 2, "the write after the barrier is the last one");
  }
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

/* ---- many streams, few cores ------------------------------------------------------------- */

Test(pool, sixty_four_streams_with_a_dependency_ring_complete, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_streams = 64;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer b[64];
  for (int i = 0; i < 64; i++) {
    b[i] = make_buffer(e.dev, (weft_stream_id)i);
    set(e.dev, &k, (weft_stream_id)i, b[i], 0, 0);
  }
  /* Each round, stream i adds stream (i + 63) % 64's buffer into its own. */
  for (int round = 0; round < 20; round++)
    for (int i = 0; i < 64; i++) inc(e.dev, &k, (weft_stream_id)i, b[i], 1, 0);
  for (int i = 1; i < 64; i++) add(e.dev, &k, (weft_stream_id)i, b[i - 1], b[i], 1, 0);
  for (int i = 0; i < 64; i++) expect_all(e.dev, 0, b[i], i == 0 ? 20 : 20 + (uint32_t)i, "b");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.streams_created, 64);
  for (int i = 0; i < 64; i++) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  env_close(&e);
}

/* Host kernels may block on one another outside weft's knowledge (here: a
 * flag, no shared buffer). The pool has a thread per stream and passes
 * wake-ups on, so the kernel that unblocks the other always gets a thread. */
static _Atomic uint32_t flag_round;

static weft_status k_wait_flag(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const args *a = ctx->scalars;
  for (int i = 0; i < 5000 && atomic_load(&flag_round) != a->value; i++) sleep_us(1000);
  return atomic_load(&flag_round) == a->value
             ? NULL
             : weft_error_make(WEFT_ERR_GENERIC, "round %u: the flag never came", a->value);
}

static weft_status k_set_flag(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const args *a = ctx->scalars;
  atomic_store(&flag_round, a->value);
  return NULL;
}

Test(pool, a_kernel_that_blocks_never_starves_another_stream, .timeout = 120) {
  env e;
  env_options(&e);
  e.opts.max_streams = 4;
  env_open(&e);
  weft_kernel kw, ks;
  EXPECT_OK(weft_kernel_host(e.dev, "wait_flag", k_wait_flag, NULL, &kw));
  EXPECT_OK(weft_kernel_host(e.dev, "set_flag", k_set_flag, NULL, &ks));
  weft_buffer a = make_buffer(e.dev, 0), b = make_buffer(e.dev, 1);
  for (uint32_t round = 1; round <= 50; round++) {
    args x = {round, 0};
    weft_binding ba = {a, 0, WEFT_WHOLE, WEFT_READ_WRITE}, bb = {b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
    EXPECT_OK(weft_launch(e.dev, 0, kw, one, one, &ba, 1, &x, sizeof(x))); /* blocks until ... */
    EXPECT_OK(weft_launch(e.dev, 1, ks, one, one, &bb, 1, &x, sizeof(x))); /* ... this runs */
    EXPECT_OK(weft_sync(e.dev, 0));
    EXPECT_OK(weft_check(e.dev, &a, 1));
  }
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}
