/* weft_memory_snapshot and the OOM observer: the snapshot parses, its totals
 * equal weft_memory_usage_get and the sum of its slices (several streams,
 * several pools), slices cover their pages, buffers bound by unfinished work
 * show as pinned, tainted ranges carry their failure ids, the event ring
 * keeps the last WEFT_MEMORY_EVENTS reservations and releases; the observer
 * runs exactly once per reservation that fails for good, with a snapshot
 * that shows the full pools, and never for a request a reclaim rescued or
 * one that can never fit. Bad input is InvalidArgument. Every device runs
 * on a counting allocator that must end with zero live blocks. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"
#include "support/json_dom.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

static void expect_kind(weft_status st, weft_error_kind kind, const char *part, int line) {
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: expected %s, got %s", line,
               weft_error_kind_name(kind), text);
  if (part) cr_assert_not_null(strstr(text, part), "line %d: '%s' lacks '%s'", line, text, part);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, part) expect_kind((call), (kind), (part), __LINE__)

static jnode *snapshot(weft_device *dev) {
  char *json = NULL;
  EXPECT_OK(weft_memory_snapshot(dev, &json));
  cr_assert_not_null(json);
  jnode *root = jparse(json);
  cr_assert_not_null(root, "the snapshot is not JSON:\n%s", json);
  weft_free(json);
  return root;
}

/* Sums of the slices and pages of a snapshot's streams. */
typedef struct sums {
  uint64_t allocs, in_use, padding, reserved, pinned;
} sums;

/* Walks every page: its slices must be in offset order and cover it. */
static sums walk(const jnode *root) {
  sums s = {0};
  const jnode *streams = jget(root, "streams");
  cr_assert(streams && streams->type == J_ARR);
  for (size_t i = 0; i < streams->n; i++) {
    const jnode *pools = jget(streams->items[i], "pools");
    cr_assert(pools && pools->type == J_ARR);
    for (size_t p = 0; p < pools->n; p++) {
      const jnode *pages = jget(pools->items[p], "pages");
      cr_assert(pages && pages->type == J_ARR);
      for (size_t g = 0; g < pages->n; g++) {
        uint64_t size = jget_u64(pages->items[g], "size"), at = 0;
        s.reserved += size;
        const jnode *slices = jget(pages->items[g], "slices");
        cr_assert(slices && slices->type == J_ARR && slices->n > 0);
        for (size_t k = 0; k < slices->n; k++) {
          const jnode *sl = slices->items[k];
          const char *state = jget_str(sl, "state");
          cr_assert_not_null(state);
          cr_assert_eq(jget_u64(sl, "offset"), at, "a gap or an overlap in a page");
          uint64_t cap = jget_u64(sl, "size");
          if (strcmp(state, "free") != 0) {
            uint64_t pad = jget_u64(sl, "padding");
            s.allocs++;
            s.in_use += cap;
            s.padding += pad;
            s.pinned += !strcmp(state, "pinned");
            cap += pad;
          }
          at += cap;
        }
        /* An exclusive page may hold more than its one allocation's slice. */
        cr_assert_leq(at, size, "slices run past their page");
      }
    }
  }
  return s;
}

/* The slice object of buffer |id|, or NULL (it appears at most once). */
static const jnode *slice_of(const jnode *root, uint64_t id, uint64_t *stream) {
  const jnode *found = NULL;
  const jnode *streams = jget(root, "streams");
  for (size_t i = 0; streams && i < streams->n; i++) {
    const jnode *pools = jget(streams->items[i], "pools");
    for (size_t p = 0; pools && p < pools->n; p++) {
      const jnode *pages = jget(pools->items[p], "pages");
      for (size_t g = 0; pages && g < pages->n; g++) {
        const jnode *slices = jget(pages->items[g], "slices");
        for (size_t k = 0; slices && k < slices->n; k++)
          if (jget_u64(slices->items[k], "buffer") == id) {
            cr_assert_null(found, "buffer %" PRIu64 " appears twice", id);
            found = slices->items[k];
            if (stream) *stream = jget_u64(streams->items[i], "stream");
          }
      }
    }
  }
  return found;
}

static void expect_totals_equal_usage(weft_device *dev, const jnode *root) {
  weft_memory_usage u;
  EXPECT_OK(weft_memory_usage_get(dev, &u));
  const jnode *t = jget(root, "usage");
  cr_assert_eq(jget_u64(t, "number_allocs"), u.number_allocs);
  cr_assert_eq(jget_u64(t, "bytes_in_use"), u.bytes_in_use);
  cr_assert_eq(jget_u64(t, "bytes_padding"), u.bytes_padding);
  cr_assert_eq(jget_u64(t, "bytes_reserved"), u.bytes_reserved);
  sums s = walk(root);
  cr_assert_eq(s.allocs, u.number_allocs);
  cr_assert_eq(s.in_use, u.bytes_in_use);
  cr_assert_eq(s.padding, u.bytes_padding);
  cr_assert_eq(s.reserved, u.bytes_reserved);
}

Test(memory_snapshot, totals_equal_the_usage_over_several_streams_and_pools) {
  env e;
  env_options(&e);
  e.opts.max_streams = 4;
  env_open(&e);
  /* Stream 2 gets a custom layout: a small sliced pool, then an exclusive one. */
  weft_pool_config pools[2] = {
      {.kind = WEFT_POOL_SLICED, .page_size = 64 * KiB, .max_slice_size = 16 * KiB},
      {.kind = WEFT_POOL_EXCLUSIVE, .max_alloc_size = 8 * MiB, .dealloc_period = WEFT_NO_PERIOD}};
  weft_layout custom = {.kind = WEFT_LAYOUT_CUSTOM, .pools = pools, .num_pools = 2};
  EXPECT_OK(weft_memory_install_layout(e.dev, 2, &custom));
  static const struct {
    weft_stream_id stream;
    uint64_t size;
  } want[] = {{0, 100},  {0, 3000},    {0, 5 * MiB},   {1, 1},       {1, 40 * KiB},
              {2, 1000}, {2, 9 * KiB}, {2, 100 * KiB}, {2, 2 * MiB}, {3, 64}};
  enum { N = sizeof want / sizeof want[0] };
  weft_buffer b[N];
  for (int i = 0; i < N; i++)
    EXPECT_OK(weft_buffer_create(e.dev, want[i].stream, want[i].size, &b[i]));
  jnode *root = snapshot(e.dev);
  expect_totals_equal_usage(e.dev, root);
  cr_assert_eq(jget_u64(jget(root, "usage"), "number_allocs"), N);
  for (int i = 0; i < N; i++) {
    uint64_t stream = 99;
    const jnode *sl = slice_of(root, b[i].id, &stream);
    cr_assert_not_null(sl, "buffer %d is missing", i);
    cr_assert_eq(stream, want[i].stream);
    cr_assert_eq(jget_u64(sl, "size"), want[i].size);
    cr_assert_str_eq(jget_str(sl, "state"), "in_use");
    cr_assert_eq(jget(sl, "label")->type, J_NULL);
    cr_assert_eq(jget(sl, "tainted")->n, 0);
  }
  /* Stream 2's pools are the custom layout's, then the persistent and dedicated ones. */
  const jnode *streams = jget(root, "streams");
  cr_assert_eq(streams->n, 4);
  const jnode *s2 = jget(streams->items[2], "pools");
  cr_assert_eq(s2->n, 4);
  cr_assert_str_eq(jget_str(s2->items[0], "kind"), "sliced");
  cr_assert_eq(jget_u64(s2->items[0], "page_size"), 64 * KiB);
  cr_assert_str_eq(jget_str(s2->items[1], "kind"), "exclusive");
  cr_assert_str_eq(jget_str(s2->items[2], "role"), "persistent");
  cr_assert_str_eq(jget_str(s2->items[3], "role"), "dedicated");
  cr_assert_eq(jget(root, "oom")->type, J_NULL);
  jfree(root);
  /* Released and cleaned up: the totals follow. */
  for (int i = 0; i < N; i += 2) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  for (weft_stream_id s = 0; s < 4; s++) EXPECT_OK(weft_memory_cleanup(e.dev, s));
  root = snapshot(e.dev);
  expect_totals_equal_usage(e.dev, root);
  for (int i = 0; i < N; i++) cr_assert_eq(slice_of(root, b[i].id, NULL) != NULL, i % 2 == 1);
  jfree(root);
  for (int i = 1; i < N; i += 2) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  env_close(&e);
}

Test(memory_snapshot, a_device_that_never_allocated_has_no_streams) {
  env e = env_new();
  jnode *root = snapshot(e.dev);
  cr_assert_eq(jget(root, "streams")->n, 0);
  cr_assert_eq(jget_u64(jget(root, "usage"), "bytes_reserved"), 0);
  cr_assert_eq(jget_u64(jget(root, "events"), "recorded"), 0);
  cr_assert_eq(jget_u64(jget(root, "events"), "capacity"), WEFT_MEMORY_EVENTS);
  jfree(root);
  env_close(&e);
}

/* ---- pins and taints ---------------------------------------------------------------------- */

static _Atomic int gate;

static weft_status hold(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate)) sched_yield();
  return NULL;
}

static weft_status fill(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  memset(ctx->buffers[0], 1, 64);
  return NULL;
}

Test(memory_snapshot, a_buffer_bound_by_unfinished_work_is_pinned) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "hold", hold, NULL, &k));
  weft_buffer held, idle;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 256, &held));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 256, &idle));
  atomic_store(&gate, 0);
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {held, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, k, g, g, &bd, 1, NULL, 0));
  jnode *root = snapshot(e.dev); /* the kernel is still held */
  const jnode *h = slice_of(root, held.id, NULL), *i = slice_of(root, idle.id, NULL);
  cr_assert_str_eq(jget_str(h, "state"), "pinned");
  cr_assert_geq(jget_u64(h, "pins"), 1);
  cr_assert_str_eq(jget_str(i, "state"), "in_use");
  cr_assert_eq(jget_u64(i, "pins"), 0);
  jfree(root);
  atomic_store(&gate, 1);
  EXPECT_OK(weft_sync(e.dev, 0));
  root = snapshot(e.dev);
  cr_assert_str_eq(jget_str(slice_of(root, held.id, NULL), "state"), "in_use");
  cr_assert_eq(walk(root).pinned, 0);
  jfree(root);
  EXPECT_OK(weft_buffer_release(e.dev, held));
  EXPECT_OK(weft_buffer_release(e.dev, idle));
  env_close(&e);
}

Test(memory_snapshot, tainted_ranges_carry_their_failure_ids) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4096, &b));
  EXPECT_OK(weft_device_set_failpoints(e.dev, "launch#1=Generic"));
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {b, 1024, 64, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, k, g, g, &bd, 1, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 0));
  uint8_t byte;
  weft_status st = weft_buffer_read(e.dev, 0, b, 1024, &byte, 1);
  cr_assert_not_null(st, "the failed launch's bytes read back");
  weft_error_free(st);
  jnode *root = snapshot(e.dev);
  const jnode *t = jget(slice_of(root, b.id, NULL), "tainted");
  cr_assert_eq(t->n, 1);
  cr_assert_eq(jget_u64(t->items[0], "start"), 1024);
  cr_assert_eq(jget_u64(t->items[0], "end"), 1088);
  uint64_t f = jget_u64(t->items[0], "failure");
  cr_assert(f > 0 && f != UINT64_MAX);
  jfree(root);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

/* ---- the event ring ----------------------------------------------------------------------- */

Test(memory_snapshot, events_list_reservations_and_releases_oldest_first) {
  env e = env_new();
  weft_buffer a, b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 100, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 1, 200, &b));
  EXPECT_OK(weft_buffer_release(e.dev, a));
  jnode *root = snapshot(e.dev);
  const jnode *ev = jget(root, "events");
  cr_assert_eq(jget_u64(ev, "recorded"), 3);
  cr_assert_eq(jget_u64(ev, "dropped"), 0);
  const jnode *r = jget(ev, "recent");
  cr_assert_eq(r->n, 3);
  const char *kinds[] = {"reserve", "reserve", "release"};
  const uint64_t ids[] = {a.id, b.id, a.id}, bytes[] = {100, 200, 100}, streams[] = {0, 1, 0};
  for (size_t i = 0; i < 3; i++) {
    cr_assert_str_eq(jget_str(r->items[i], "kind"), kinds[i]);
    cr_assert_eq(jget_u64(r->items[i], "seq"), i + 1);
    cr_assert_eq(jget_u64(r->items[i], "buffer"), ids[i]);
    cr_assert_eq(jget_u64(r->items[i], "bytes"), bytes[i]);
    cr_assert_eq(jget_u64(r->items[i], "stream"), streams[i]);
    cr_assert_not_null(jget_str(r->items[i], "pool"));
  }
  /* The release names where the reservation sat. */
  cr_assert_eq(jget_u64(r->items[2], "page"), jget_u64(r->items[0], "page"));
  cr_assert_eq(jget_u64(r->items[2], "offset"), jget_u64(r->items[0], "offset"));
  cr_assert_leq(jget_u64(r->items[0], "t_ns"), jget_u64(r->items[2], "t_ns"));
  jfree(root);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(memory_snapshot, the_ring_keeps_the_most_recent_events_without_allocating) {
  env e = env_new();
  enum { ROUNDS = 300 }; /* 600 events: more than the ring holds */
  weft_buffer warm;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &warm));
  EXPECT_OK(weft_buffer_release(e.dev, warm));
  jnode *root = snapshot(e.dev);
  jfree(root);
  for (int i = 0; i < ROUNDS; i++) {
    weft_buffer b;
    EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
    EXPECT_OK(weft_buffer_release(e.dev, b));
  }
  root = snapshot(e.dev);
  const jnode *ev = jget(root, "events");
  uint64_t total = 2 + 2 * ROUNDS;
  cr_assert_eq(jget_u64(ev, "recorded"), total);
  cr_assert_eq(jget_u64(ev, "dropped"), total - WEFT_MEMORY_EVENTS);
  const jnode *r = jget(ev, "recent");
  cr_assert_eq(r->n, WEFT_MEMORY_EVENTS);
  for (size_t i = 0; i < r->n; i++)
    cr_assert_eq(jget_u64(r->items[i], "seq"), total - WEFT_MEMORY_EVENTS + 1 + i);
  cr_assert_str_eq(jget_str(r->items[r->n - 1], "kind"), "release");
  jfree(root);
  env_close(&e);
}

/* ---- the OOM observer --------------------------------------------------------------------- */

typedef struct oom_seen {
  int calls;
  weft_stream_id stream;
  uint64_t bytes;
  char *json;
  weft_device *dev;
  weft_error_kind refused; /* what a blocking call from inside the observer got */
} oom_seen;

static void on_oom(void *user, weft_stream_id stream, uint64_t bytes, const char *json) {
  oom_seen *s = user;
  s->calls++;
  s->stream = stream;
  s->bytes = bytes;
  free(s->json);
  s->json = strdup(json);
  if (s->dev) { /* a blocking call on the device from the scheduler thread: refused */
    char *nested = NULL;
    weft_status st = weft_memory_snapshot(s->dev, &nested);
    s->refused = weft_error_kind_of(st);
    weft_error_free(st);
    weft_free(nested);
  }
}

/* A 4 MiB device: 3 MiB held by |big| on stream 1. */
static env small_device(weft_buffer *big) {
  env e;
  env_options(&e);
  e.opts.memory_capacity = 4 * MiB;
  env_open(&e);
  EXPECT_OK(weft_buffer_create(e.dev, 1, 3 * MiB, big));
  return e;
}

/* Reading a buffer whose reservation failed reports the root OutOfMemory. */
static void expect_unallocated(weft_device *dev, weft_buffer b) {
  uint8_t byte;
  EXPECT_KIND(weft_buffer_read(dev, 1, b, 0, &byte, 1), WEFT_ERR_SEVERAL, "root: OutOfMemory");
}

Test(memory_snapshot, the_oom_observer_runs_once_per_final_failure_with_the_full_pools) {
  weft_buffer big;
  env e = small_device(&big);
  oom_seen s = {0};
  EXPECT_OK(weft_memory_set_oom_observer(e.dev, on_oom, &s));
  weft_buffer fits, no_room;
  EXPECT_OK(weft_buffer_create(e.dev, 1, 512 * KiB, &fits));
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(s.calls, 0, "a reservation that fit was reported");
  EXPECT_OK(weft_buffer_create(e.dev, 1, 2 * MiB, &no_room));
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(s.calls, 1);
  cr_assert_eq(s.stream, 1);
  cr_assert_eq(s.bytes, 2 * MiB);
  jnode *root = jparse(s.json);
  cr_assert_not_null(root, "%s", s.json);
  const jnode *oom = jget(root, "oom");
  cr_assert_eq(jget_u64(oom, "bytes"), 2 * MiB);
  cr_assert_eq(jget_u64(oom, "stream"), 1);
  cr_assert_str_eq(jget_str(oom, "error"), "OutOfMemory");
  /* The storage is full: what it holds and the request exceed the capacity,
   * and the pools hold exactly what it holds, in the pages of |big| and |fits|. */
  const jnode *storage = jget(root, "storage");
  uint64_t held = jget_u64(storage, "held");
  cr_assert_eq(jget_u64(storage, "capacity"), 4 * MiB);
  cr_assert_gt(held + 2 * MiB, 4 * MiB);
  cr_assert_eq(walk(root).reserved, held);
  cr_assert_str_eq(jget_str(slice_of(root, big.id, NULL), "state"), "in_use");
  cr_assert_not_null(slice_of(root, fits.id, NULL));
  cr_assert_null(slice_of(root, no_room.id, NULL));
  const jnode *r = jget(jget(root, "events"), "recent");
  const jnode *last = r->items[r->n - 1];
  cr_assert_str_eq(jget_str(last, "kind"), "reserve_failed");
  cr_assert_eq(jget_u64(last, "buffer"), no_room.id);
  cr_assert_str_eq(jget_str(last, "error"), "OutOfMemory");
  jfree(root);
  expect_unallocated(e.dev, no_room);
  /* A second final failure: a second call; a request that can never fit: none. */
  weft_buffer again, never;
  EXPECT_OK(weft_buffer_create(e.dev, 1, 3 * MiB, &again));
  EXPECT_OK(weft_buffer_create(e.dev, 1, 5 * MiB, &never));
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(s.calls, 2, "%d calls", s.calls);
  cr_assert_eq(s.bytes, 3 * MiB);
  /* Cleared: no more calls. */
  EXPECT_OK(weft_memory_set_oom_observer(e.dev, NULL, NULL));
  weft_buffer third;
  EXPECT_OK(weft_buffer_create(e.dev, 1, 2 * MiB, &third));
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(s.calls, 2);
  weft_buffer all[] = {big, fits, no_room, again, never, third};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  free(s.json);
  env_close(&e);
}

typedef struct rescuer {
  weft_device *dev;
  weft_buffer victim;
} rescuer;

static uint64_t release_victim(void *user, weft_stream_id stream, uint64_t bytes) {
  rescuer *r = user;
  (void)stream, (void)bytes;
  weft_status st = weft_buffer_release(r->dev, r->victim);
  weft_error_free(st);
  return 3 * MiB;
}

Test(memory_snapshot, a_reservation_the_reclaim_callback_rescues_is_not_reported) {
  weft_buffer big;
  env e = small_device(&big);
  oom_seen s = {0};
  rescuer r = {e.dev, big};
  EXPECT_OK(weft_memory_set_oom_observer(e.dev, on_oom, &s));
  EXPECT_OK(weft_memory_set_reclaim(e.dev, release_victim, &r));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 1, 2 * MiB, &b));
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(s.calls, 0);
  weft_device_stats st;
  EXPECT_OK(weft_device_stats_get(e.dev, &st));
  cr_assert_eq(st.reclaims_rescued, 1);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(memory_snapshot, blocking_calls_from_the_observer_are_refused) {
  weft_buffer big;
  env e = small_device(&big);
  oom_seen s = {.dev = e.dev};
  EXPECT_OK(weft_memory_set_oom_observer(e.dev, on_oom, &s));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 1, 2 * MiB, &b));
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(s.calls, 1);
  cr_assert_eq(s.refused, WEFT_ERR_INVALID_ARGUMENT, "%s", weft_error_kind_name(s.refused));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_buffer_release(e.dev, big));
  free(s.json);
  env_close(&e);
}

/* ---- bad input ---------------------------------------------------------------------------- */

Test(memory_snapshot, bad_arguments_are_invalid_argument) {
  env e = env_new();
  EXPECT_KIND(weft_memory_snapshot(e.dev, NULL), WEFT_ERR_INVALID_ARGUMENT, "json_out");
  char *json = (char *)"untouched";
  EXPECT_KIND(weft_memory_snapshot(NULL, &json), WEFT_ERR_INVALID_ARGUMENT, NULL);
  cr_assert_null(json, "*json_out is NULL on failure");
  EXPECT_KIND(weft_memory_set_oom_observer(NULL, on_oom, NULL), WEFT_ERR_INVALID_ARGUMENT, NULL);
  env_close(&e);
}
