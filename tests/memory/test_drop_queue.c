/* The drop queue: two flushes free what was staged; fences are waited on
 * exactly when the reference says; the policy's two thresholds. */
#include <criterion/criterion.h>

#include "memory/drop_queue.h"

typedef struct fences {
  uint64_t made, waited, last_waited;
} fences;

static uint64_t make(void *ctx) {
  return ++((fences *)ctx)->made;
}
static void wait(void *ctx, uint64_t f) {
  fences *fc = ctx;
  fc->waited++;
  fc->last_waited = f;
}

typedef struct env {
  weft_counting_allocator *ca;
  weft_allocator a;
  fences f;
  weft_drop_queue q;
} env;

static void env_init(env *e) {
  memset(e, 0, sizeof(*e));
  cr_assert_null(weft_counting_allocator_create(&e->ca));
  e->a = weft_counting_allocator_get(e->ca);
  weft_drop_queue_init(&e->q, &e->a, (weft_drop_fence_ops){make, wait, &e->f});
}

static void push(env *e, size_t size) {
  void *p = e->a.alloc(e->a.self, size, 16);
  cr_assert_not_null(p);
  weft_drop_queue_push(&e->q, p, size);
}

static uint64_t live(env *e) {
  return weft_counting_allocator_counts(e->ca).live_blocks;
}

static void env_fini(env *e) {
  weft_drop_queue_destroy(&e->q);
  cr_assert_eq(live(e), 0, "everything staged is freed at destroy");
  weft_counting_allocator_destroy(e->ca);
}

Test(drop_queue, first_flush_creates_fence_without_syncing) {
  env e;
  env_init(&e);
  push(&e, 10);
  weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.f.made, 1);
  cr_assert_eq(e.f.waited, 0);
  env_fini(&e);
}

Test(drop_queue, second_flush_syncs_fence_from_first_flush) {
  env e;
  env_init(&e);
  push(&e, 10);
  weft_drop_queue_flush(&e.q);
  weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.f.waited, 1);
  cr_assert_eq(e.f.last_waited, 1, "the fence of the first flush");
  env_fini(&e);
}

Test(drop_queue, each_subsequent_flush_syncs_the_previous_fence) {
  env e;
  env_init(&e);
  for (int i = 0; i < 10; i++) weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.f.waited, 9);
  env_fini(&e);
}

Test(drop_queue, staged_is_empty_after_flush) {
  env e;
  env_init(&e);
  push(&e, 10);
  push(&e, 20);
  weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.q.nstaged, 0);
  cr_assert_eq(e.q.staged_bytes, 0);
  env_fini(&e);
}

Test(drop_queue, pending_holds_previously_staged_bytes_after_flush) {
  env e;
  env_init(&e);
  for (int i = 0; i < 5; i++) push(&e, 8);
  weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.q.npending, 5);
  cr_assert_eq(live(&e), 5 + 1, "still alive: one flush is not enough (plus the array)");
  env_fini(&e);
}

Test(drop_queue, pending_is_replaced_on_second_flush) {
  env e;
  env_init(&e);
  for (int i = 0; i < 5; i++) push(&e, 8);
  weft_drop_queue_flush(&e.q);
  push(&e, 8);
  weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.q.npending, 1);
  env_fini(&e);
}

Test(drop_queue, two_flushes_free_what_was_staged) {
  env e;
  env_init(&e);
  for (int i = 0; i < 3; i++) push(&e, 100);
  weft_drop_queue_flush(&e.q);
  weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.q.npending, 0);
  cr_assert_eq(e.q.nstaged, 0);
  env_fini(&e);
}

Test(drop_queue, should_flush_on_the_count_threshold) {
  env e;
  env_init(&e);
  e.q.max_count = 3;
  push(&e, 1);
  push(&e, 1);
  cr_assert_not(weft_drop_queue_should_flush(&e.q));
  push(&e, 1);
  cr_assert(weft_drop_queue_should_flush(&e.q));
  env_fini(&e);
}

Test(drop_queue, should_flush_on_the_size_threshold) {
  env e;
  env_init(&e);
  e.q.max_bytes = 1000;
  push(&e, 600);
  cr_assert_not(weft_drop_queue_should_flush(&e.q));
  push(&e, 400);
  cr_assert(weft_drop_queue_should_flush(&e.q), "whichever threshold comes first");
  env_fini(&e);
}

Test(drop_queue, should_flush_resets_after_flush) {
  env e;
  env_init(&e);
  e.q.max_count = 2;
  push(&e, 1);
  push(&e, 1);
  cr_assert(weft_drop_queue_should_flush(&e.q));
  weft_drop_queue_flush(&e.q);
  cr_assert_not(weft_drop_queue_should_flush(&e.q));
  env_fini(&e);
}

Test(drop_queue, flush_on_empty_queue_is_safe) {
  env e;
  env_init(&e);
  weft_drop_queue_flush(&e.q);
  weft_drop_queue_flush(&e.q);
  cr_assert_eq(e.q.npending, 0);
  env_fini(&e);
}

Test(drop_queue, a_push_without_room_to_remember_it_frees_after_a_fence) {
  env e;
  env_init(&e);
  void *p = e.a.alloc(e.a.self, 32, 16);
  weft_counting_allocator_fail_at(e.ca, 1); /* the staging array */
  weft_drop_queue_push(&e.q, p, 32);
  cr_assert_eq(e.f.waited, 1, "the device is done with it before it is freed");
  cr_assert_eq(live(&e), 0);
  env_fini(&e);
}
