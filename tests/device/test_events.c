/* Events on the host backend: record, query, bounded and unbounded waits
 * (Timeout leaves the event valid), stream_wait_event ordering two streams
 * that share no buffer (counted as a cross-stream wait), the refusal of a
 * wait from a kernel the event waits for, handles (stale, forged, released:
 * NotFound), release before completion, close with live events, and running
 * out of memory. Every device runs on a counting allocator that must end
 * with zero live blocks. */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static void expect_kind(weft_status st, weft_error_kind kind, const char *call, int line) {
  char text[2048] = "success";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: expected %s, got %s", line, call,
               weft_error_kind_name(kind), text);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind) expect_kind((call), (kind), #call, __LINE__)

/* A device opened with the failpoints |spec|. */
static env env_options_failing(const char *spec) {
  env e;
  env_options(&e);
  e.opts.failpoints = spec;
  env_open(&e);
  return e;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A kernel that waits for its gate to open, then marks itself done. */
typedef struct gate {
  _Atomic int open, ran, order;
  _Atomic int seen_first; /* the second kernel saw the first done */
} gate;

static weft_status gated(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  gate *g = user;
  while (!atomic_load(&g->open)) sleep_ms(1);
  atomic_store(&g->ran, 1);
  return NULL;
}

static weft_status after_gate(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  gate *g = user;
  atomic_store(&g->seen_first, atomic_load(&g->ran));
  atomic_store(&g->order, 1);
  return NULL;
}

static const uint32_t one[3] = {1, 1, 1};

static void launch_on(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer b) {
  weft_binding bd = {.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = WEFT_WRITE};
  EXPECT_OK(weft_launch(dev, s, k, one, one, &bd, 1, NULL, 0));
}

Test(events, a_record_on_an_idle_stream_completes_with_no_error) {
  env e = env_new();
  weft_event ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  cr_assert_neq(ev.id, 0);
  EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  bool done = false;
  EXPECT_OK(weft_event_query(e.dev, ev, &done));
  cr_assert(done);
  EXPECT_OK(weft_event_wait(e.dev, ev, 0)); /* waited again: the same answer */
  EXPECT_OK(weft_event_release(e.dev, ev));
  env_close(&e);
}

Test(events, a_wait_that_times_out_leaves_the_event_valid_until_its_work_is_done) {
  env e = env_new();
  gate g = {0};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated, &g, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  launch_on(e.dev, 0, k, b);
  weft_event ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  bool done = true;
  EXPECT_OK(weft_event_query(e.dev, ev, &done));
  cr_assert_not(done, "the record completed before the kernel before it");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  weft_status st = weft_event_wait(e.dev, ev, 20u * 1000u * 1000u);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_TIMEOUT);
  cr_assert_str_eq(weft_error_kind_name(weft_error_kind_of(st)), "Timeout");
  weft_error_free(st);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  cr_assert_geq(ms, 19.0, "timed out after %.1f ms, before its 20 ms", ms);
  EXPECT_KIND(weft_event_wait(e.dev, ev, 0), WEFT_ERR_TIMEOUT); /* 0: only asks */
  cr_assert_eq(atomic_load(&g.ran), 0);
  atomic_store(&g.open, 1);
  EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  cr_assert_eq(atomic_load(&g.ran), 1, "the wait returned before the work before the record");
  EXPECT_OK(weft_event_query(e.dev, ev, &done));
  cr_assert(done);
  EXPECT_OK(weft_event_release(e.dev, ev));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(events, a_plain_record_after_a_failed_launch_still_completes_with_null) {
  env e = env_options_failing("launch#1=Generic");
  weft_kernel k;
  gate g = {.open = 1};
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated, &g, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  launch_on(e.dev, 0, k, b);
  weft_event ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX)); /* the failure is the buffer's, not its */
  EXPECT_OK(weft_event_release(e.dev, ev));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(events, stream_wait_event_orders_a_stream_after_another_with_no_buffer_in_common) {
  env e = env_new();
  gate g = {0};
  weft_kernel first, second;
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated, &g, &first));
  EXPECT_OK(weft_kernel_host(e.dev, "after", after_gate, &g, &second));
  weft_buffer a, b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 1, 64, &b));
  weft_device_stats before = {0}, after = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &before));
  launch_on(e.dev, 0, first, a);
  weft_event ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  EXPECT_OK(weft_stream_wait_event(e.dev, 1, ev));
  launch_on(e.dev, 1, second, b);
  weft_event ev1;
  EXPECT_OK(weft_event_record(e.dev, 1, &ev1));
  EXPECT_KIND(weft_event_wait(e.dev, ev1, 30u * 1000u * 1000u), WEFT_ERR_TIMEOUT);
  cr_assert_eq(atomic_load(&g.order), 0, "stream 1 ran past its wait on stream 0");
  atomic_store(&g.open, 1);
  EXPECT_OK(weft_event_wait(e.dev, ev1, UINT64_MAX));
  cr_assert_eq(atomic_load(&g.order), 1);
  cr_assert_eq(atomic_load(&g.seen_first), 1, "the kernel on stream 1 ran before stream 0's");
  EXPECT_OK(weft_device_stats_get(e.dev, &after));
  cr_assert_geq(after.cross_stream_waits, before.cross_stream_waits + 1,
                "the wait is not counted as a cross-stream wait");
  /* A completed event adds no wait; one on its own stream needs none. */
  EXPECT_OK(weft_stream_wait_event(e.dev, 1, ev));
  EXPECT_OK(weft_stream_wait_event(e.dev, 0, ev));
  EXPECT_OK(weft_event_release(e.dev, ev));
  EXPECT_OK(weft_event_release(e.dev, ev1));
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(events, stream_wait_event_on_a_read_async_orders_the_other_stream_after_the_read) {
  env e = env_new();
  gate g = {0};
  weft_kernel first, second;
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated, &g, &first));
  EXPECT_OK(weft_kernel_host(e.dev, "after", after_gate, &g, &second));
  weft_buffer a, b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 1, 64, &b));
  launch_on(e.dev, 0, first, a);
  uint8_t dst[64];
  weft_event rd;
  EXPECT_OK(weft_buffer_read_async(e.dev, 0, a, 0, dst, sizeof(dst), &rd)); /* after the gate */
  EXPECT_OK(weft_stream_wait_event(e.dev, 1, rd));
  launch_on(e.dev, 1, second, b); /* shares no buffer with stream 0 */
  weft_event ev1;
  EXPECT_OK(weft_event_record(e.dev, 1, &ev1));
  EXPECT_KIND(weft_event_wait(e.dev, ev1, 30u * 1000u * 1000u), WEFT_ERR_TIMEOUT);
  cr_assert_eq(atomic_load(&g.order), 0, "stream 1 ran past its wait on the read");
  atomic_store(&g.open, 1);
  EXPECT_OK(weft_event_wait(e.dev, ev1, UINT64_MAX));
  cr_assert_eq(atomic_load(&g.seen_first), 1, "the kernel on stream 1 ran before the read");
  EXPECT_OK(weft_event_wait(e.dev, rd, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, rd));
  EXPECT_OK(weft_event_release(e.dev, ev1));
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

/* A kernel on another stream, ordered after a read_async by
 * weft_stream_wait_event alone, looks at the read's destination. */
typedef struct dst_look {
  volatile uint8_t *dst;
  _Atomic int seen;
} dst_look;

static weft_status looks_at_dst(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  dst_look *l = user;
  atomic_store(&l->seen, l->dst[0]);
  return NULL;
}

static weft_status refuses(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return weft_error_make(WEFT_ERR_GENERIC, "the kernel said no");
}

Test(events, work_ordered_after_a_read_async_finds_its_destination_filled_or_untouched) {
  env e = env_new();
  static uint8_t dst[64];
  dst_look l = {.dst = dst, .seen = -1};
  weft_kernel look, bad;
  EXPECT_OK(weft_kernel_host(e.dev, "look", looks_at_dst, &l, &look));
  EXPECT_OK(weft_kernel_host(e.dev, "refuses", refuses, NULL, &bad));
  weft_buffer a, b, t;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &t));
  EXPECT_OK(weft_buffer_create(e.dev, 1, 64, &b));
  uint8_t sevens[64];
  memset(sevens, 7, sizeof(sevens));
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, sevens, sizeof(sevens)));
  launch_on(e.dev, 0, bad, t); /* t's bytes are left unwritten by a failure */
  for (int i = 0; i < 100; i++) {
    bool tainted = i % 4 == 3;
    memset(dst, 0, sizeof(dst));
    atomic_store(&l.seen, -1);
    weft_event rd, done;
    EXPECT_OK(weft_buffer_read_async(e.dev, 0, tainted ? t : a, 0, dst, sizeof(dst), &rd));
    EXPECT_OK(weft_stream_wait_event(e.dev, 1, rd));
    launch_on(e.dev, 1, look, b); /* shares no buffer with the read */
    EXPECT_OK(weft_event_record(e.dev, 1, &done));
    EXPECT_OK(weft_event_wait(e.dev, done, UINT64_MAX));
    cr_assert_eq(atomic_load(&l.seen), tainted ? 0 : 7,
                 "round %d: the kernel after the read saw dst[0] = %d", i, atomic_load(&l.seen));
    weft_status st = weft_event_wait(e.dev, rd, UINT64_MAX);
    if (tainted) {
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "round %d", i);
      weft_error_free(st);
      for (size_t j = 0; j < sizeof(dst); j++) cr_assert_eq(dst[j], 0, "a failed read wrote dst");
    } else {
      EXPECT_OK(st);
      for (size_t j = 0; j < sizeof(dst); j++) cr_assert_eq(dst[j], 7);
    }
    EXPECT_OK(weft_event_release(e.dev, rd));
    EXPECT_OK(weft_event_release(e.dev, done));
  }
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_buffer_release(e.dev, t));
  env_close(&e);
}

/* A kernel that reads its own buffer asynchronously on its own stream (the
 * read is ordered after the kernel) and waits for the read: refused, not a
 * deadlock; the read itself completes once the kernel returned. */
typedef struct async_self {
  weft_device *dev;
  weft_buffer buf;
  weft_event rd;
  uint8_t dst[64];
  weft_status refused, issued;
} async_self;

static weft_status waits_on_its_read(const weft_kernel_ctx *ctx, void *user) {
  async_self *w = user;
  memset(ctx->buffers[0], 7, ctx->sizes[0]);
  w->issued = weft_buffer_read_async(w->dev, 0, w->buf, 0, w->dst, sizeof(w->dst), &w->rd);
  if (!w->issued) w->refused = weft_event_wait(w->dev, w->rd, UINT64_MAX);
  return NULL;
}

Test(events, a_kernel_waiting_for_a_read_async_ordered_after_it_is_refused_not_a_deadlock,
     .timeout = 30) {
  env e = env_new();
  async_self w = {.dev = e.dev};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "self_read", waits_on_its_read, &w, &k));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &w.buf));
  launch_on(e.dev, 0, k, w.buf);
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(w.issued);
  cr_assert_eq(weft_error_kind_of(w.refused), WEFT_ERR_INVALID_ARGUMENT, "%s",
               w.refused ? weft_error_message(w.refused) : "the wait was answered");
  cr_assert_not_null(strstr(weft_error_message(w.refused), "weft_event_wait"), "%s",
                     weft_error_message(w.refused));
  weft_error_free(w.refused);
  EXPECT_OK(weft_event_wait(e.dev, w.rd, UINT64_MAX)); /* the read ran after the kernel */
  for (size_t i = 0; i < sizeof(w.dst); i++) cr_assert_eq(w.dst[i], 7);
  EXPECT_OK(weft_event_release(e.dev, w.rd));
  EXPECT_OK(weft_buffer_release(e.dev, w.buf));
  env_close(&e);
}

/* A kernel that records an event on its own stream (after itself) and waits
 * on it, then waits on one recorded before it: the first is refused, the
 * second answered. */
typedef struct self_wait {
  weft_device *dev;
  weft_event before;
  weft_status refused, answered, queried;
  bool done_before;
} self_wait;

static weft_status waits_on_itself(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  self_wait *w = user;
  weft_event mine;
  weft_status st = weft_event_record(w->dev, 0, &mine);
  if (st) return st;
  w->refused = weft_event_wait(w->dev, mine, UINT64_MAX);
  bool done = true;
  w->queried = weft_event_query(w->dev, mine, &done); /* never blocks, even here */
  if (done) w->queried = weft_error_make(WEFT_ERR_GENERIC, "done before the kernel returned");
  w->answered = weft_event_wait(w->dev, w->before, UINT64_MAX);
  return weft_event_release(w->dev, mine);
}

Test(events, a_wait_from_a_kernel_the_event_waits_for_is_refused_not_a_deadlock) {
  env e = env_new();
  self_wait w = {.dev = e.dev};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "self", waits_on_itself, &w, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  EXPECT_OK(weft_event_record(e.dev, 0, &w.before));
  launch_on(e.dev, 0, k, b);
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(weft_error_kind_of(w.refused), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(w.refused), "weft_event_wait"), "%s",
                     weft_error_message(w.refused));
  weft_error_free(w.refused);
  EXPECT_OK(w.queried);
  EXPECT_OK(w.answered);
  EXPECT_OK(weft_check(e.dev, &b, 1)); /* the kernel itself succeeded */
  EXPECT_OK(weft_event_release(e.dev, w.before));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(events, released_stale_and_forged_events_are_not_found) {
  env e = env_new();
  weft_event ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  EXPECT_OK(weft_event_release(e.dev, ev));
  bool done;
  EXPECT_KIND(weft_event_query(e.dev, ev, &done), WEFT_ERR_NOT_FOUND);
  EXPECT_KIND(weft_event_wait(e.dev, ev, UINT64_MAX), WEFT_ERR_NOT_FOUND);
  EXPECT_KIND(weft_stream_wait_event(e.dev, 1, ev), WEFT_ERR_NOT_FOUND);
  EXPECT_KIND(weft_event_release(e.dev, ev), WEFT_ERR_NOT_FOUND);
  weft_event forged[] = {
      {0}, {1}, {UINT64_MAX}, {ev.id + 2}, {(ev.id & 0xffffffffu) | (7ull << 32)}};
  for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
    EXPECT_KIND(weft_event_query(e.dev, forged[i], &done), WEFT_ERR_NOT_FOUND);
    EXPECT_KIND(weft_event_wait(e.dev, forged[i], 0), WEFT_ERR_NOT_FOUND);
    EXPECT_KIND(weft_event_release(e.dev, forged[i]), WEFT_ERR_NOT_FOUND);
  }
  /* The slot is reused: the old handle still names nothing. */
  weft_event again;
  EXPECT_OK(weft_event_record(e.dev, 0, &again));
  cr_assert_neq(again.id, ev.id);
  EXPECT_KIND(weft_event_query(e.dev, ev, &done), WEFT_ERR_NOT_FOUND);
  EXPECT_OK(weft_event_wait(e.dev, again, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, again));
  /* A buffer handle is no event. */
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 8, &b));
  EXPECT_KIND(weft_event_query(e.dev, (weft_event){b.id}, &done), WEFT_ERR_NOT_FOUND);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(events, null_arguments_are_invalid) {
  env e = env_new();
  EXPECT_KIND(weft_event_record(e.dev, 0, NULL), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_event_record(NULL, 0, &(weft_event){0}), WEFT_ERR_INVALID_ARGUMENT);
  weft_event ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  EXPECT_KIND(weft_event_query(e.dev, ev, NULL), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_event_query(NULL, ev, &(bool){false}), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_event_wait(NULL, ev, 0), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_event_release(NULL, ev), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_stream_wait_event(NULL, 0, ev), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_OK(weft_event_release(e.dev, ev));
  env_close(&e);
}

Test(events, an_event_released_before_it_completes_is_freed_when_it_does) {
  env e = env_new();
  gate g = {0};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated, &g, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  launch_on(e.dev, 0, k, b);
  weft_event ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  EXPECT_OK(weft_event_release(e.dev, ev));
  bool done;
  EXPECT_KIND(weft_event_query(e.dev, ev, &done), WEFT_ERR_NOT_FOUND);
  atomic_store(&g.open, 1);
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e); /* nothing leaked */
}

Test(events, close_frees_live_events_completed_or_not) {
  env e = env_new();
  gate g = {0};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated, &g, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  weft_event done_ev, pending_ev;
  EXPECT_OK(weft_event_record(e.dev, 0, &done_ev));
  EXPECT_OK(weft_event_wait(e.dev, done_ev, UINT64_MAX));
  launch_on(e.dev, 0, k, b);
  EXPECT_OK(weft_event_record(e.dev, 0, &pending_ev));
  atomic_store(&g.open, 1); /* close waits for the kernel */
  env_close(&e);
}

Test(events, running_out_of_memory_loses_nothing) {
  for (uint64_t n = 1; n <= 3; n++) {
    env e = env_new();
    weft_event warm;
    EXPECT_OK(weft_event_record(e.dev, 0, &warm)); /* the handle table's chunk exists */
    EXPECT_OK(weft_event_release(e.dev, warm));
    weft_counting_allocator_fail_at(e.ca, n);
    weft_event ev = {123};
    weft_status st = weft_event_record(e.dev, 0, &ev);
    weft_counting_allocator_fail_at(e.ca, 0);
    if (st) {
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
      cr_assert_eq(ev.id, 0);
      weft_error_free(st);
    } else {
      EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
      EXPECT_OK(weft_event_release(e.dev, ev));
    }
    env_close(&e);
  }
}

Test(events, a_poisoned_device_refuses_records_but_answers_existing_events) {
  env e = env_options_failing("poison#1");
  gate g = {.open = 1};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated, &g, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  weft_event before;
  EXPECT_OK(weft_event_record(e.dev, 0, &before));
  EXPECT_OK(weft_event_wait(e.dev, before, UINT64_MAX));
  launch_on(e.dev, 0, k, b);
  EXPECT_KIND(weft_sync(e.dev, 0), WEFT_ERR_DEVICE_POISONED);
  weft_event ev = {5};
  EXPECT_KIND(weft_event_record(e.dev, 0, &ev), WEFT_ERR_DEVICE_POISONED);
  cr_assert_eq(ev.id, 0);
  EXPECT_OK(weft_event_wait(e.dev, before, UINT64_MAX)); /* completed before the poison */
  EXPECT_OK(weft_event_release(e.dev, before));
  env_close(&e);
}
