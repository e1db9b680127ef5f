/* weft_handles (core/handles.c): generation-checked handles. Live handles
 * look up to their value; released, recycled, forged and foreign ones never
 * do; the table's limit and an allocation failure are errors, not aborts. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/handles.h"

TestSuite(handles, .timeout = 60);

typedef struct env {
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_handles t;
} env;

static void env_open(env *e) {
  cr_assert_null(weft_counting_allocator_create(&e->ca));
  e->alloc = weft_counting_allocator_get(e->ca);
  weft_handles_init(&e->t, &e->alloc);
}

static void env_close(env *e) {
  weft_handles_destroy(&e->t);
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "the table leaked %" PRIu64 " blocks", c.live_blocks);
  weft_counting_allocator_destroy(e->ca);
}

static uint64_t acquire(env *e, uint64_t value) {
  uint64_t id = 0;
  weft_status st = weft_handles_acquire(&e->t, value, &id);
  cr_assert_null(st, "acquire failed: %s", weft_error_message(st));
  return id;
}

Test(handles, a_new_handle_looks_up_to_its_value_and_is_never_zero) {
  env e;
  env_open(&e);
  uint64_t a = acquire(&e, 111), b = acquire(&e, 222), v = 0;
  cr_assert(a != 0 && b != 0 && a != b);
  cr_assert_not_null(weft_handles_lookup(&e.t, a, &v));
  cr_assert_eq(v, 111);
  cr_assert_not_null(weft_handles_lookup(&e.t, b, &v));
  cr_assert_eq(v, 222);
  cr_assert_not_null(weft_handles_lookup(&e.t, b, NULL), "the value is optional");
  cr_assert_eq((uint32_t)(a >> 32) & 1u, 1u, "a live generation is odd");
  env_close(&e);
}

Test(handles, forged_and_malformed_ids_are_refused) {
  env e;
  env_open(&e);
  uint64_t a = acquire(&e, 1), v = 7;
  uint64_t g = a >> 32, idx1 = (uint32_t)a;
  uint64_t bad[] = {
      0,                       /* never valid */
      g << 32,                 /* index 0 */
      idx1,                    /* generation 0 */
      ((g + 1) << 32) | idx1,  /* an even (dead) generation */
      ((g + 2) << 32) | idx1,  /* a live-looking generation the slot never had */
      (g << 32) | (idx1 + 1),  /* a slot never handed out */
      (g << 32) | 0xffffffffu, /* far beyond the table */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cr_assert_null(weft_handles_lookup(&e.t, bad[i], &v), "id %#" PRIx64 " looked up", bad[i]);
    cr_assert_not(weft_handles_kill(&e.t, bad[i]), "id %#" PRIx64 " was killed", bad[i]);
  }
  cr_assert_eq(v, 7, "a refused lookup leaves the value alone");
  cr_assert_not_null(weft_handles_lookup(&e.t, a, NULL), "the real handle is unharmed");
  env_close(&e);
}

/* weft_handles_find (the launch path's inline lookup) answers as
 * weft_handles_lookup for live, killed, recycled and forged ids, and says 0
 * for the value of every refused one. */
Test(handles, the_inline_find_agrees_with_lookup_and_zeroes_a_refused_value) {
  env e;
  env_open(&e);
  uint64_t a = acquire(&e, 41), b = acquire(&e, 42), v = 9;
  cr_assert_eq(weft_handles_find(&e.t, a, &v), weft_handles_lookup(&e.t, a, NULL));
  cr_assert_eq(v, 41);
  uint64_t g = b >> 32, idx1 = (uint32_t)b;
  uint64_t bad[] = {0,
                    g << 32,
                    idx1,
                    ((g + 1) << 32) | idx1,
                    ((g + 2) << 32) | idx1,
                    (g << 32) | (idx1 + 1),
                    (g << 32) | 0xffffffffu};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    v = 9;
    cr_assert_null(weft_handles_find(&e.t, bad[i], &v), "id %#" PRIx64 " found", bad[i]);
    cr_assert_eq(v, 0, "id %#" PRIx64 ": a refused find says 0", bad[i]);
  }
  cr_assert(weft_handles_kill(&e.t, b));
  v = 9;
  cr_assert_null(weft_handles_find(&e.t, b, &v), "dead at once");
  cr_assert_eq(v, 0);
  weft_handles_recycle(&e.t, b);
  uint64_t c = acquire(&e, 43); /* the recycled slot, a new generation */
  cr_assert_null(weft_handles_find(&e.t, b, &v), "the old handle stays dead");
  cr_assert_not_null(weft_handles_find(&e.t, c, &v));
  cr_assert_eq(v, 43);
  env_close(&e);
}

Test(handles, the_owner_finds_a_slot_by_its_index_and_never_for_a_malformed_id) {
  env e;
  env_open(&e);
  uint64_t a = acquire(&e, 1), b = acquire(&e, 2);
  uint64_t g = a >> 32, idx1 = (uint32_t)a;
  uint64_t bad[] = {0, g << 32, idx1, (g << 32) | (idx1 + 2), (g << 32) | 0xffffffffu};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    cr_assert_null(weft_handles_slot(&e.t, bad[i]), "id %#" PRIx64 " has a slot", bad[i]);
  weft_handle_slot *sa = weft_handles_slot(&e.t, a), *sb = weft_handles_slot(&e.t, b);
  cr_assert(sa && sb && sa != sb);
  cr_assert_eq(weft_handles_lookup(&e.t, a, NULL), sa, "the owner's slot is the lookup's");
  cr_assert_eq(weft_handles_slot_seen(&e.t, a), sa, "a handle seen live: the same slot, unchecked");
  cr_assert_eq(weft_handles_slot_seen(&e.t, b), sb);
  cr_assert(weft_handles_kill(&e.t, a));
  cr_assert_eq(weft_handles_slot_seen(&e.t, a), sa, "still there once the handle is dead");
  cr_assert_eq(weft_handles_slot(&e.t, ((g + 1) << 32) | idx1), sa, "a dead generation too");
  env_close(&e);
}

Test(handles, a_killed_handle_is_refused_and_cannot_be_killed_twice) {
  env e;
  env_open(&e);
  uint64_t a = acquire(&e, 5);
  cr_assert(weft_handles_kill(&e.t, a));
  cr_assert_null(weft_handles_lookup(&e.t, a, NULL), "dead at once, before it is recycled");
  cr_assert_not(weft_handles_kill(&e.t, a), "a double release is refused");
  cr_assert_not_null(weft_handles_slot(&e.t, a), "the owner still finds the dead slot");
  weft_handles_recycle(&e.t, a);
  cr_assert_null(weft_handles_lookup(&e.t, a, NULL));
  cr_assert_not(weft_handles_kill(&e.t, a));
  env_close(&e);
}

Test(handles, a_recycled_slot_comes_back_with_a_new_generation) {
  env e;
  env_open(&e);
  uint64_t a = acquire(&e, 1);
  cr_assert(weft_handles_kill(&e.t, a));
  weft_handles_recycle(&e.t, a);
  uint64_t b = acquire(&e, 2), v = 0;
  cr_assert_eq((uint32_t)b, (uint32_t)a, "the free slot is reused");
  cr_assert_eq(b >> 32, (a >> 32) + 2, "its generation moved past the dead one");
  cr_assert_null(weft_handles_lookup(&e.t, a, NULL), "the stale handle stays dead (ABA)");
  cr_assert_not(weft_handles_kill(&e.t, a), "the stale handle cannot kill the new one");
  cr_assert_not_null(weft_handles_lookup(&e.t, b, &v));
  cr_assert_eq(v, 2);
  env_close(&e);
}

Test(handles, free_slots_are_reused_last_freed_first_before_fresh_ones) {
  env e;
  env_open(&e);
  uint64_t id[4];
  for (int i = 0; i < 4; i++) id[i] = acquire(&e, (uint64_t)i);
  for (int i = 1; i < 3; i++) {
    cr_assert(weft_handles_kill(&e.t, id[i]));
    weft_handles_recycle(&e.t, id[i]);
  }
  cr_assert_eq((uint32_t)acquire(&e, 10), (uint32_t)id[2]);
  cr_assert_eq((uint32_t)acquire(&e, 11), (uint32_t)id[1]);
  cr_assert_eq((uint32_t)acquire(&e, 12), (uint32_t)id[3] + 1u, "then a fresh slot");
  cr_assert_eq(atomic_load(&e.t.fresh), 5);
  env_close(&e);
}

Test(handles, handles_of_another_table_do_not_match) {
  env e1, e2;
  env_open(&e1);
  env_open(&e2);
  e2.t.gen_base = 2654435761u; /* as weft_device_open does per device tag */
  uint64_t a = acquire(&e1, 1), b = acquire(&e2, 1);
  cr_assert_eq((uint32_t)a, (uint32_t)b, "the same slot in both tables");
  cr_assert_neq(a, b);
  cr_assert_null(weft_handles_lookup(&e2.t, a, NULL));
  cr_assert_null(weft_handles_lookup(&e1.t, b, NULL));
  cr_assert_not(weft_handles_kill(&e2.t, a));
  env_close(&e1);
  env_close(&e2);
}

Test(handles, the_table_refuses_a_handle_past_its_capacity) {
  env e;
  env_open(&e);
  /* Skip to the last slot rather than allocate 4M of them. */
  uint32_t cap = WEFT_HANDLE_CHUNK * WEFT_HANDLE_CHUNKS;
  atomic_store(&e.t.fresh, cap - 1);
  uint64_t last = acquire(&e, 42), id = 0, v = 0;
  cr_assert_eq((uint32_t)last, cap);
  weft_status st = weft_handles_acquire(&e.t, 43, &id);
  cr_assert_not_null(st);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(weft_error_message(st), "too many live buffers"), "%s", weft_error_message(st));
  weft_error_free(st);
  cr_assert_eq(atomic_load(&e.t.fresh), cap, "a refusal takes no slot");
  cr_assert_not_null(weft_handles_lookup(&e.t, last, &v));
  cr_assert_eq(v, 42);
  /* A freed slot is still available at the limit. */
  cr_assert(weft_handles_kill(&e.t, last));
  weft_handles_recycle(&e.t, last);
  cr_assert_eq((uint32_t)acquire(&e, 44), cap);
  env_close(&e);
}

Test(handles, out_of_memory_for_a_chunk_is_an_error_and_the_next_acquire_works) {
  env e;
  env_open(&e);
  weft_counting_allocator_fail_at(e.ca, 1);
  uint64_t id = 0;
  weft_status st = weft_handles_acquire(&e.t, 1, &id);
  cr_assert_not_null(st);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
  weft_error_free(st);
  uint64_t a = acquire(&e, 2), v = 0;
  cr_assert_not_null(weft_handles_lookup(&e.t, a, &v));
  cr_assert_eq(v, 2);
  cr_assert_null(weft_handles_lookup(&e.t, (UINT64_C(1) << 32) | 1u, NULL),
                 "the slot lost to the failure never had a live handle");
  env_close(&e);
}

/* ---- threads ---- */

enum { THREADS = 4, LIVE = 8, CYCLES = 5000 };

static env shared;
static _Atomic uint32_t owner[THREADS * LIVE * 4 + 1]; /* index + 1 -> thread + 1 holding it */
static _Atomic uint64_t published[THREADS];            /* a live id of each thread, for others */
static _Atomic int failures;

static void *cycle(void *arg) {
  uint32_t me = (uint32_t)(intptr_t)arg;
  uint64_t ids[LIVE] = {0};
  for (int c = 0; c < CYCLES; c++) {
    int k = c % LIVE;
    if (ids[k]) { /* release the oldest: kill, check, recycle */
      uint32_t idx1 = (uint32_t)ids[k];
      atomic_store(&owner[idx1], 0);
      if (!weft_handles_kill(&shared.t, ids[k]) || weft_handles_lookup(&shared.t, ids[k], NULL) ||
          weft_handles_kill(&shared.t, ids[k]))
        atomic_fetch_add(&failures, 1);
      weft_handles_recycle(&shared.t, ids[k]);
    }
    uint64_t value = ((uint64_t)me << 32) | (uint32_t)c, id = 0, v = 0;
    weft_status st = weft_handles_acquire(&shared.t, value, &id);
    if (st) {
      weft_error_free(st);
      atomic_fetch_add(&failures, 1);
      return NULL;
    }
    uint32_t idx1 = (uint32_t)id, none = 0;
    if (idx1 >= sizeof(owner) / sizeof(owner[0]) ||
        !atomic_compare_exchange_strong(&owner[idx1], &none, me + 1))
      atomic_fetch_add(&failures, 1); /* a slot handed out twice, or slots leaked */
    else if (!weft_handles_lookup(&shared.t, id, &v) || v != value)
      atomic_fetch_add(&failures, 1);
    ids[k] = id;
    atomic_store(&published[me], id);
    /* Another thread's handle is live with its value, or already dead. */
    uint32_t other = (me + 1) % THREADS;
    uint64_t oid = atomic_load(&published[other]);
    if (oid && weft_handles_lookup(&shared.t, oid, &v) && (v >> 32) != other)
      atomic_fetch_add(&failures, 1);
  }
  return NULL;
}

Test(handles, threads_acquiring_and_releasing_never_share_a_live_slot) {
  env_open(&shared);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, cycle, (void *)(intptr_t)i), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  cr_assert_eq(atomic_load(&failures), 0);
  cr_assert_leq(atomic_load(&shared.t.fresh), THREADS * LIVE * 4,
                "released slots were not reused (%u fresh)", atomic_load(&shared.t.fresh));
  env_close(&shared);
}
