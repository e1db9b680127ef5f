/* The error model: kinds and names, construction and accessors, Several and
 * Unwritten, formatting, backtraces, predicates, clone, static errors.
 * JSON is in test_error_json.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fork, setrlimit, sysconf */
#endif
#include <criterion/criterion.h>

#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/weft.h>

#include "core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

#ifdef HAVE_ASAN
#include <sanitizer/lsan_interface.h>
/* Criterion counts a test that leaks as passed: ask LSan directly. */
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "leak reported above")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define FIRST_KIND WEFT_ERR_BUFFER_TOO_BIG
#define FOR_EACH_KIND(k)                                                                           \
  for (weft_error_kind k = FIRST_KIND; (int)k < WEFT_ERROR_KIND_COUNT; k = (weft_error_kind)(k + 1))

static const char *const names[WEFT_ERROR_KIND_COUNT] = {
    "Ok",
    "BufferTooBig",
    "OutOfMemory",
    "PageUpdateForbidden",
    "PageSizesExhausted",
    "UnsupportedStrides",
    "NotFound",
    "StorageHandleNotFound",
    "StorageMappingFailed",
    "DevicePoisoned",
    "Unknown",
    "UnsupportedIoOperation",
    "InvalidArgument",
    "Validation",
    "Generic",
    "LaunchCompilation",
    "LaunchTooManyResources",
    "TornDown",
    "Skipped",
    "Unwritten",
    "Several",
    "Timeout",
};

static bool has_size(weft_error_kind k) {
  return k == WEFT_ERR_BUFFER_TOO_BIG || k == WEFT_ERR_OUT_OF_MEMORY ||
         k == WEFT_ERR_PAGE_UPDATE_FORBIDDEN || k == WEFT_ERR_PAGE_SIZES_EXHAUSTED ||
         k == WEFT_ERR_STORAGE_MAPPING_FAILED;
}

static bool payload_free(weft_error_kind k) {
  return k == WEFT_ERR_TORN_DOWN || k == WEFT_ERR_SKIPPED;
}

static bool is_launch_refusal(weft_error_kind k) {
  return k == WEFT_ERR_LAUNCH_COMPILATION || k == WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES;
}

/* The full one-line text of |st| in a fresh libc string. */
static char *fmt(weft_status st) {
  size_t n = weft_error_format(st, NULL, 0);
  char *s = malloc(n + 1);
  cr_assert_not_null(s);
  cr_assert_eq(weft_error_format(st, s, n + 1), n);
  cr_assert_eq(strlen(s), n);
  return s;
}

static char *fmt_bt(weft_status st) {
  size_t n = weft_error_format_backtrace(st, NULL, 0);
  char *s = malloc(n + 1);
  cr_assert_not_null(s);
  cr_assert_eq(weft_error_format_backtrace(st, s, n + 1), n);
  cr_assert_eq(strlen(s), n);
  return s;
}

static void assert_format_eq(weft_status st, const char *want) {
  char *got = fmt(st);
  cr_assert_str_eq(got, want);
  free(got);
}

static char *json(weft_status st) {
  char *j = weft_error_to_json(st);
  cr_assert_not_null(j);
  return j;
}

/* An error of |k| with every field its kind has set. */
static weft_status make_full(weft_error_kind k) {
  switch (k) {
  case WEFT_ERR_STORAGE_MAPPING_FAILED:
    return weft_error_wrap(k, 8192, weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 8192, "driver"),
                           "dry-run page %d", 3);
  case WEFT_ERR_DEVICE_POISONED:
    return weft_error_wrap(k, 0, weft_error_make(WEFT_ERR_UNKNOWN, "trap"), "illegal address");
  case WEFT_ERR_UNWRITTEN: {
    const char *chain[] = {"skipped k2: it needed memory 5", "skipped k1: it needed memory 3"};
    return weft_error_unwritten(7, 2, weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, "bad ptx"),
                                chain, 2);
  }
  case WEFT_ERR_SEVERAL: {
    weft_status items[] = {weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 64, "pool"),
                           weft_error_make(WEFT_ERR_NOT_FOUND, "stale handle")};
    return weft_error_several(items, 2);
  }
  default:
    if (has_size(k)) return weft_error_make_sized(k, 1000 + (uint64_t)k, "message of %s", names[k]);
    return weft_error_make(k, "message of %s", names[k]);
  }
}

/* ---- kinds and names ---------------------------------------------------------------------- */

Test(error_kind, every_kind_has_its_camel_case_name) {
  cr_assert_eq(WEFT_ERROR_KIND_COUNT, 22, "Ok and the 21 error kinds");
  for (int k = 0; k < WEFT_ERROR_KIND_COUNT; k++)
    cr_assert_str_eq(weft_error_kind_name((weft_error_kind)k), names[k]);
}

Test(error_kind, values_outside_the_enum_are_named_invalid) {
  cr_assert_str_eq(weft_error_kind_name((weft_error_kind)WEFT_ERROR_KIND_COUNT), "Invalid");
  cr_assert_str_eq(weft_error_kind_name((weft_error_kind)1000), "Invalid");
  cr_assert_str_eq(weft_error_kind_name((weft_error_kind)-1), "Invalid");
}

Test(error_kind, from_name_finds_every_kind) {
  for (int k = 0; k < WEFT_ERROR_KIND_COUNT; k++) {
    weft_error_kind out = (weft_error_kind)-1;
    cr_assert(weft_error_kind_from_name(names[k], &out), "%s", names[k]);
    cr_assert_eq(out, (weft_error_kind)k);
    cr_assert(weft_error_kind_from_name(names[k], NULL), "NULL out still answers");
  }
}

Test(error_kind, from_name_rejects_what_is_not_an_exact_name) {
  const char *bad[] = {"",         "Invalid",       "outOfMemory", "OUTOFMEMORY", "OutOfMemory ",
                       " Several", "Out Of Memory", "ok",          "WEFT_OK",     "Several\n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_error_kind out = WEFT_ERR_GENERIC;
    cr_assert_not(weft_error_kind_from_name(bad[i], &out), "'%s'", bad[i]);
    cr_assert_eq(out, WEFT_ERR_GENERIC, "out untouched on failure");
  }
  weft_error_kind out = WEFT_ERR_GENERIC;
  cr_assert_not(weft_error_kind_from_name(NULL, &out));
  cr_assert_eq(out, WEFT_ERR_GENERIC);
}

Test(error_kind, internal_kind_classification_matches_the_fields) {
  cr_assert_not(weft__error_kind_is_valid(WEFT_OK));
  cr_assert_not(weft__error_kind_is_valid((weft_error_kind)WEFT_ERROR_KIND_COUNT));
  FOR_EACH_KIND(k) {
    cr_assert(weft__error_kind_is_valid(k));
    cr_assert_eq(weft__error_kind_has_size(k), has_size(k), "%s", names[k]);
    cr_assert_eq(weft__error_kind_is_payload_free(k), payload_free(k), "%s", names[k]);
  }
}

/* ---- construction and accessors ----------------------------------------------------------- */

Test(error_make, every_kind_keeps_its_kind_and_message) {
  FOR_EACH_KIND(k) {
    weft_status st = weft_error_make(k, "reason %d for %s", 42, names[k]);
    cr_assert_not_null(st);
    cr_assert_eq(weft_error_kind_of(st), k);
    char want[96];
    snprintf(want, sizeof(want), "reason 42 for %s", names[k]);
    cr_assert_str_eq(weft_error_message(st), payload_free(k) ? "" : want, "%s", names[k]);
    cr_assert_eq(weft_error_size(st), 0);
    cr_assert_null(weft_error_source(st));
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

Test(error_make, sized_kinds_keep_their_size_and_others_drop_it) {
  FOR_EACH_KIND(k) {
    weft_status st = weft_error_make_sized(k, UINT64_C(1) << 40, "sized %s", names[k]);
    cr_assert_eq(weft_error_kind_of(st), k);
    cr_assert_eq(weft_error_size(st), has_size(k) ? UINT64_C(1) << 40 : 0, "%s", names[k]);
    weft_error_free(st);
  }
  weft_status max = weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, UINT64_MAX, NULL);
  cr_assert_eq(weft_error_size(max), UINT64_MAX);
  weft_error_free(max);
  ASSERT_NO_LEAKS();
}

Test(error_make, null_format_gives_no_message_and_empty_format_an_empty_one) {
  weft_status none = weft_error_make(WEFT_ERR_GENERIC, NULL);
  weft_status empty = weft_error_make(WEFT_ERR_GENERIC, "%s", "");
  cr_assert_str_eq(weft_error_message(none), "");
  cr_assert_null(weft__error_message_raw(none));
  cr_assert_str_eq(weft_error_message(empty), "");
  cr_assert_not_null(weft__error_message_raw(empty));
  weft_error_free(none);
  weft_error_free(empty);
  ASSERT_NO_LEAKS();
}

Test(error_make, long_messages_are_kept_whole) {
  char big[5000];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  weft_status st = weft_error_make(WEFT_ERR_UNKNOWN, "<%s>", big);
  cr_assert_eq(strlen(weft_error_message(st)), sizeof(big) + 1);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_make, ok_and_out_of_range_kinds_give_invalid_argument_saying_so) {
  weft_status ok = weft_error_make(WEFT_OK, "fine");
  cr_assert_eq(weft_error_kind_of(ok), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(ok), "WEFT_OK"), "%s", weft_error_message(ok));
  weft_error_free(ok);

  weft_status out = weft_error_make_sized((weft_error_kind)99, 5, "x");
  cr_assert_eq(weft_error_kind_of(out), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(out), "99"), "%s", weft_error_message(out));
  weft_error_free(out);

  weft_status neg = weft_error_make((weft_error_kind)-3, NULL);
  cr_assert_eq(weft_error_kind_of(neg), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(neg);
  ASSERT_NO_LEAKS();
}

Test(error_make, wrap_with_an_invalid_kind_keeps_the_source_as_cause) {
  weft_status src = weft_error_make(WEFT_ERR_NOT_FOUND, "h");
  weft_status st = weft_error_wrap(WEFT_OK, 0, src, "ctx");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_eq(weft_error_source(st), src);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_make, wrap_keeps_size_source_and_message) {
  weft_status src = weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 4096, "cuMemAlloc");
  weft_status st = weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 4096, src, "page %u", 9u);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_STORAGE_MAPPING_FAILED);
  cr_assert_eq(weft_error_size(st), 4096);
  cr_assert_str_eq(weft_error_message(st), "page 9");
  cr_assert_eq(weft_error_source(st), src, "the cause is borrowed, not copied");
  cr_assert_eq(weft_error_kind_of(weft_error_source(st)), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_null(weft_error_source(src));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_make, every_kind_with_a_payload_can_carry_a_cause) {
  FOR_EACH_KIND(k) {
    weft_status src = weft_error_make(WEFT_ERR_DEVICE_POISONED, "ecc");
    weft_status st = weft_error_wrap(k, 0, src, NULL);
    cr_assert_eq(weft_error_kind_of(st), k);
    if (payload_free(k))
      cr_assert_null(weft_error_source(st), "%s is payload-free: the cause is freed", names[k]);
    else
      cr_assert_eq(weft_error_source(st), src, "%s", names[k]);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

Test(error_make, wrap_with_null_source_has_no_cause) {
  weft_status st = weft_error_wrap(WEFT_ERR_DEVICE_POISONED, 0, NULL, "illegal address");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_DEVICE_POISONED);
  cr_assert_null(weft_error_source(st));
  cr_assert_str_eq(weft_error_message(st), "illegal address");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_make, cause_chains_are_walked_by_borrowing) {
  weft_status st = weft_error_make(WEFT_ERR_UNKNOWN, "level 0");
  for (int i = 1; i <= 5; i++) st = weft_error_wrap(WEFT_ERR_GENERIC, 0, st, "level %d", i);
  int depth = 5;
  for (weft_status at = st; at; at = weft_error_source(at), depth--) {
    char want[32];
    snprintf(want, sizeof(want), "level %d", depth);
    cr_assert_str_eq(weft_error_message(at), want);
    cr_assert_eq(weft_error_kind_of(at), depth ? WEFT_ERR_GENERIC : WEFT_ERR_UNKNOWN);
  }
  cr_assert_eq(depth, -1);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_make, a_very_long_cause_chain_frees_without_recursion) {
  weft_status st = NULL;
  for (int i = 0; i < 200000; i++) st = weft_error_wrap(WEFT_ERR_GENERIC, 0, st, NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_GENERIC);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_accessors, null_status_answers_ok_and_empty) {
  cr_assert_eq(weft_error_kind_of(NULL), WEFT_OK);
  cr_assert_str_eq(weft_error_message(NULL), "");
  cr_assert_eq(weft_error_size(NULL), 0);
  cr_assert_null(weft_error_source(NULL));
  cr_assert_eq(weft_error_count(NULL), 0);
  cr_assert_null(weft_error_at(NULL, 0));
  cr_assert_eq(weft_error_failure_id(NULL), 0);
  cr_assert_eq(weft_error_claimed(NULL), 0);
  cr_assert_null(weft_error_root(NULL));
  cr_assert_eq(weft_error_chain_length(NULL), 0);
  cr_assert_null(weft_error_chain_at(NULL, 0));
  cr_assert_eq(weft_error_backtrace_depth(NULL), 0);
  cr_assert_null(weft__error_message_raw(NULL));
  cr_assert_not(weft__error_is_static(NULL));
  weft_error_free(NULL);
  weft_free(NULL);
}

Test(error_accessors, every_kind_answers_each_accessor_for_its_fields_only) {
  FOR_EACH_KIND(k) {
    weft_status st = make_full(k);
    cr_assert_eq(weft_error_kind_of(st), k, "%s", names[k]);
    /* size */
    uint64_t want_size = k == WEFT_ERR_STORAGE_MAPPING_FAILED ? 8192
                         : has_size(k)                        ? 1000 + (uint64_t)k
                                                              : 0;
    cr_assert_eq(weft_error_size(st), want_size, "%s", names[k]);
    /* message */
    char want[64];
    if (k == WEFT_ERR_STORAGE_MAPPING_FAILED)
      snprintf(want, sizeof(want), "dry-run page 3");
    else if (k == WEFT_ERR_DEVICE_POISONED)
      snprintf(want, sizeof(want), "illegal address");
    else if (k == WEFT_ERR_UNWRITTEN || k == WEFT_ERR_SEVERAL || payload_free(k))
      want[0] = '\0';
    else
      snprintf(want, sizeof(want), "message of %s", names[k]);
    cr_assert_str_eq(weft_error_message(st), want, "%s", names[k]);
    /* source */
    if (k == WEFT_ERR_STORAGE_MAPPING_FAILED)
      cr_assert_eq(weft_error_kind_of(weft_error_source(st)), WEFT_ERR_OUT_OF_MEMORY);
    else if (k == WEFT_ERR_DEVICE_POISONED)
      cr_assert_eq(weft_error_kind_of(weft_error_source(st)), WEFT_ERR_UNKNOWN);
    else
      cr_assert_null(weft_error_source(st), "%s", names[k]);
    /* Several */
    cr_assert_eq(weft_error_count(st), k == WEFT_ERR_SEVERAL ? 2 : 0, "%s", names[k]);
    cr_assert_null(weft_error_at(st, 2));
    if (k != WEFT_ERR_SEVERAL) cr_assert_null(weft_error_at(st, 0));
    /* Unwritten */
    bool unw = k == WEFT_ERR_UNWRITTEN;
    cr_assert_eq(weft_error_failure_id(st), unw ? 7 : 0, "%s", names[k]);
    cr_assert_eq(weft_error_claimed(st), unw ? 2 : 0, "%s", names[k]);
    cr_assert_eq(weft_error_chain_length(st), unw ? 2 : 0, "%s", names[k]);
    cr_assert_eq(weft_error_root(st) != NULL, unw, "%s", names[k]);
    cr_assert_null(weft_error_chain_at(st, 2));
    if (!unw) cr_assert_null(weft_error_chain_at(st, 0));
    /* backtrace */
    if (payload_free(k))
      cr_assert_eq(weft_error_backtrace_depth(st), 0);
    else
      cr_assert_gt(weft_error_backtrace_depth(st), 0, "%s", names[k]);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

/* ---- Several ------------------------------------------------------------------------------ */

Test(error_several, count_and_at_follow_the_given_order) {
  weft_status items[] = {weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 1, NULL),
                         weft_error_make(WEFT_ERR_NOT_FOUND, "b"),
                         weft_error_make(WEFT_ERR_GENERIC, "c")};
  weft_status st = weft_error_several(items, 3);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  cr_assert_eq(weft_error_count(st), 3);
  for (size_t i = 0; i < 3; i++) cr_assert_eq(weft_error_at(st, i), items[i], "borrowed, in order");
  cr_assert_null(weft_error_at(st, 3));
  cr_assert_null(weft_error_at(st, SIZE_MAX));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_several, null_entries_are_skipped) {
  weft_status items[] = {NULL, weft_error_make(WEFT_ERR_VALIDATION, "a"), NULL,
                         NULL, weft_error_make(WEFT_ERR_GENERIC, "b"),    NULL};
  weft_status st = weft_error_several(items, 6);
  cr_assert_eq(weft_error_count(st), 2);
  cr_assert_eq(weft_error_kind_of(weft_error_at(st, 0)), WEFT_ERR_VALIDATION);
  cr_assert_eq(weft_error_kind_of(weft_error_at(st, 1)), WEFT_ERR_GENERIC);
  weft_error_free(st);

  weft_status nulls[3] = {NULL, NULL, NULL};
  st = weft_error_several(nulls, 3);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  cr_assert_eq(weft_error_count(st), 0);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_several, empty_and_null_arrays) {
  weft_status st = weft_error_several(NULL, 0);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  cr_assert_eq(weft_error_count(st), 0);
  cr_assert_null(weft_error_at(st, 0));
  weft_error_free(st);

  st = weft_error_several(NULL, 4);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "NULL array with n > 0");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_several, the_array_stays_the_callers) {
  weft_status *items = malloc(2 * sizeof(*items));
  items[0] = weft_error_make(WEFT_ERR_GENERIC, "a");
  items[1] = weft_error_make(WEFT_ERR_GENERIC, "b");
  weft_status st = weft_error_several(items, 2);
  free(items); /* the errors are the Several's now, the array is not */
  cr_assert_str_eq(weft_error_message(weft_error_at(st, 1)), "b");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_several, nests) {
  weft_status inner_items[] = {weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, "x"),
                               weft__error_skipped()};
  weft_status inner = weft_error_several(inner_items, 2);
  weft_status outer_items[] = {inner, weft_error_make(WEFT_ERR_UNKNOWN, "y")};
  weft_status outer = weft_error_several(outer_items, 2);
  cr_assert_eq(weft_error_count(outer), 2);
  cr_assert_eq(weft_error_at(outer, 0), inner);
  cr_assert_eq(weft_error_count(weft_error_at(outer, 0)), 2);
  cr_assert_eq(weft_error_kind_of(weft_error_at(weft_error_at(outer, 0), 1)), WEFT_ERR_SKIPPED);
  weft_error_free(outer);
  ASSERT_NO_LEAKS();
}

/* ---- Unwritten ---------------------------------------------------------------------------- */

Test(error_unwritten, keeps_failure_claimed_chain_in_order_and_root) {
  const char *chain[] = {"hop newest", "hop middle", "hop oldest"};
  weft_status root = weft_error_make(WEFT_ERR_DEVICE_POISONED, "illegal address");
  weft_status st = weft_error_unwritten(UINT64_MAX, UINT32_MAX, root, chain, 3);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_UNWRITTEN);
  cr_assert_eq(weft_error_failure_id(st), UINT64_MAX);
  cr_assert_eq(weft_error_claimed(st), UINT32_MAX);
  cr_assert_eq(weft_error_root(st), root, "the root is borrowed");
  cr_assert_eq(weft_error_chain_length(st), 3);
  for (size_t i = 0; i < 3; i++) {
    cr_assert_str_eq(weft_error_chain_at(st, i), chain[i]);
    cr_assert_neq(weft_error_chain_at(st, i), chain[i], "the hops are copies");
  }
  cr_assert_null(weft_error_chain_at(st, 3));
  cr_assert_eq(weft_error_count(st), 0);
  cr_assert_null(weft_error_source(st));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_unwritten, the_chain_is_copied_so_the_callers_strings_may_go) {
  char *hop = malloc(8);
  memcpy(hop, "skipped", 8);
  const char *chain[] = {hop};
  weft_status st = weft_error_unwritten(1, 1, NULL, chain, 1);
  free(hop);
  cr_assert_str_eq(weft_error_chain_at(st, 0), "skipped");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_unwritten, null_hops_are_skipped_and_an_empty_chain_is_fine) {
  const char *chain[] = {NULL, "a", NULL, "b"};
  weft_status st = weft_error_unwritten(3, 0, NULL, chain, 4);
  cr_assert_eq(weft_error_chain_length(st), 2);
  cr_assert_str_eq(weft_error_chain_at(st, 0), "a");
  cr_assert_str_eq(weft_error_chain_at(st, 1), "b");
  cr_assert_null(weft_error_root(st));
  weft_error_free(st);

  st = weft_error_unwritten(4, 1, NULL, NULL, 0);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_UNWRITTEN);
  cr_assert_eq(weft_error_chain_length(st), 0);
  cr_assert_null(weft_error_chain_at(st, 0));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_unwritten, null_chain_with_a_length_is_invalid_and_keeps_the_root) {
  weft_status root = weft_error_make(WEFT_ERR_GENERIC, "r");
  weft_status st = weft_error_unwritten(5, 1, root, NULL, 2);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_eq(weft_error_source(st), root);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

/* ---- formatting --------------------------------------------------------------------------- */

Test(error_format, sized_kinds_read_like_their_documentation) {
  weft_status st = weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 4096, "pool %d", 2);
  assert_format_eq(st, "OutOfMemory: the device had no memory left for an allocation of 4096 "
                       "bytes: pool 2");
  weft_error_free(st);
  st = weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, UINT64_C(1) << 40, NULL);
  assert_format_eq(st, "BufferTooBig: buffer of 1099511627776 bytes exceeds the max available");
  weft_error_free(st);
  st = weft_error_make_sized(WEFT_ERR_PAGE_UPDATE_FORBIDDEN, 512, NULL);
  assert_format_eq(st, "PageUpdateForbidden: no room for an allocation of 512 bytes in the pages "
                       "held, and the reservation may not add a page");
  weft_error_free(st);
  st = weft_error_make_sized(WEFT_ERR_PAGE_SIZES_EXHAUSTED, 3, NULL);
  assert_format_eq(st, "PageSizesExhausted: an allocation of 3 bytes needs pages of a new size, "
                       "and the memory holds as many page sizes as it tracks");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_format, storage_mapping_failed_names_its_cause) {
  weft_status st = weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 8192,
                                   weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 8192, NULL), NULL);
  assert_format_eq(st, "StorageMappingFailed: an allocation of 8192 bytes carved under a dry run "
                       "could not be given device backing: caused by: OutOfMemory: the device had "
                       "no memory left for an allocation of 8192 bytes");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_format, kinds_without_size_read_their_phrase_and_message) {
  struct {
    weft_error_kind kind;
    const char *want;
  } cases[] = {
      {WEFT_ERR_UNSUPPORTED_STRIDES,
       "UnsupportedStrides: strides aren't supported for this copy operation on this runtime"},
      {WEFT_ERR_NOT_FOUND, "NotFound: memory wasn't found in the memory pool: m"},
      {WEFT_ERR_STORAGE_HANDLE_NOT_FOUND,
       "StorageHandleNotFound: the storage holds no allocation for the handle's storage id: m"},
      {WEFT_ERR_DEVICE_POISONED, "DevicePoisoned: the device is poisoned: m"},
      {WEFT_ERR_UNKNOWN, "Unknown: unknown error during execution: m"},
      {WEFT_ERR_UNSUPPORTED_IO_OPERATION,
       "UnsupportedIoOperation: the IO operation is not supported: m"},
      {WEFT_ERR_INVALID_ARGUMENT, "InvalidArgument: invalid argument: m"},
      {WEFT_ERR_VALIDATION, "Validation: validation failed: m"},
      {WEFT_ERR_GENERIC, "Generic: server error: m"},
      {WEFT_ERR_LAUNCH_COMPILATION, "LaunchCompilation: the kernel could not be compiled: m"},
      {WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES,
       "LaunchTooManyResources: the launch needs more resources than the device offers: m"},
      {WEFT_ERR_TORN_DOWN, "TornDown: a write scope never finished"},
      {WEFT_ERR_SKIPPED, "Skipped: the work did not run because an input carried a failure"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    weft_status st = cases[i].kind == WEFT_ERR_UNSUPPORTED_STRIDES
                         ? weft_error_make(cases[i].kind, NULL)
                         : weft_error_make(cases[i].kind, "m");
    assert_format_eq(st, cases[i].want);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

Test(error_format, an_empty_message_adds_nothing) {
  weft_status st = weft_error_make(WEFT_ERR_VALIDATION, "%s", "");
  assert_format_eq(st, "Validation: validation failed");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_format, unwritten_names_failure_claims_root_and_chain) {
  const char *chain[] = {"skipped k2: it needed memory 5", "skipped k1: it needed memory 3"};
  weft_status st = weft_error_unwritten(
      7, 2, weft_error_make(WEFT_ERR_DEVICE_POISONED, "illegal address"), chain, 2);
  assert_format_eq(st, "Unwritten: failure #7 (claimed by 2 buffers) left these bytes unwritten; "
                       "root: DevicePoisoned: the device is poisoned: illegal address; chain: "
                       "skipped k2: it needed memory 5; skipped k1: it needed memory 3");
  weft_error_free(st);

  st = weft_error_unwritten(12, 1, NULL, NULL, 0);
  assert_format_eq(st, "Unwritten: failure #12 (claimed by 1 buffer) left these bytes unwritten; "
                       "root: none");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_format, several_brackets_each_error) {
  weft_status items[] = {weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 8, NULL),
                         weft_error_make(WEFT_ERR_NOT_FOUND, "stale handle")};
  weft_status st = weft_error_several(items, 2);
  assert_format_eq(st, "Several (2): [OutOfMemory: the device had no memory left for an "
                       "allocation of 8 bytes] [NotFound: memory wasn't found in the memory pool: "
                       "stale handle]");
  weft_error_free(st);
  st = weft_error_several(NULL, 0);
  assert_format_eq(st, "Several (0)");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_format, several_of_unwritten_nests_the_text) {
  const char *chain[] = {"hop"};
  weft_status items[] = {
      weft_error_unwritten(3, 1, weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, NULL), chain, 1)};
  weft_status st = weft_error_several(items, 1);
  assert_format_eq(st, "Several (1): [Unwritten: failure #3 (claimed by 1 buffer) left these bytes "
                       "unwritten; root: LaunchCompilation: the kernel could not be compiled; "
                       "chain: hop]");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_format, every_kind_shows_its_name_and_every_field) {
  FOR_EACH_KIND(k) {
    weft_status st = make_full(k);
    char *s = fmt(st);
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "%s%s", names[k], k == WEFT_ERR_SEVERAL ? " (" : ": ");
    cr_assert_eq(strncmp(s, prefix, strlen(prefix)), 0, "'%s' starts '%s'", s, prefix);
    if (weft_error_size(st)) {
      char size[24];
      snprintf(size, sizeof(size), " %" PRIu64 " bytes", weft_error_size(st));
      cr_assert_not_null(strstr(s, size), "%s", s);
    }
    if (weft_error_message(st)[0]) cr_assert_not_null(strstr(s, weft_error_message(st)), "%s", s);
    if (weft_error_source(st)) {
      cr_assert_not_null(strstr(s, ": caused by: "), "%s", s);
      cr_assert_not_null(strstr(s, weft_error_message(weft_error_source(st))), "%s", s);
    }
    for (size_t i = 0; i < weft_error_count(st); i++) {
      char *item = fmt(weft_error_at(st, i));
      char bracketed[512];
      snprintf(bracketed, sizeof(bracketed), "[%s]", item);
      cr_assert_not_null(strstr(s, bracketed), "%s", s);
      free(item);
    }
    for (size_t i = 0; i < weft_error_chain_length(st); i++)
      cr_assert_not_null(strstr(s, weft_error_chain_at(st, i)), "%s", s);
    if (weft_error_root(st)) {
      char *root = fmt(weft_error_root(st));
      cr_assert_not_null(strstr(s, root), "%s", s);
      free(root);
      cr_assert_not_null(strstr(s, "failure #7 (claimed by 2 buffers)"), "%s", s);
    }
    free(s);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

Test(error_format, null_status_formats_ok) {
  char buf[8];
  cr_assert_eq(weft_error_format(NULL, buf, sizeof(buf)), 2);
  cr_assert_str_eq(buf, "Ok");
  cr_assert_eq(weft_error_format_backtrace(NULL, buf, sizeof(buf)), 2);
  cr_assert_str_eq(buf, "Ok");
}

Test(error_format, zero_capacity_and_null_buffer_only_measure) {
  weft_status st = weft_error_make(WEFT_ERR_GENERIC, "abc");
  size_t n = weft_error_format(st, NULL, 0);
  cr_assert_eq(n, strlen("Generic: server error: abc"));
  char untouched = 'Z';
  cr_assert_eq(weft_error_format(st, &untouched, 0), n);
  cr_assert_eq(untouched, 'Z', "cap 0 writes nothing");
  cr_assert_eq(weft_error_format(st, NULL, 100), n, "a NULL buffer is never written");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

/* For every capacity from 0 to past the end: the returned length is the full
 * length, the text is the full text's prefix, NUL-terminated, and nothing past
 * |cap| is written. */
static void check_truncation(weft_status st, size_t (*format)(weft_status, char *, size_t)) {
  size_t n = format(st, NULL, 0);
  char *full = malloc(n + 1);
  cr_assert_eq(format(st, full, n + 1), n);
  char *buf = malloc(n + 8);
  for (size_t cap = 0; cap <= n + 2; cap++) {
    memset(buf, 0x5a, n + 8);
    cr_assert_eq(format(st, buf, cap), n, "cap %zu", cap);
    if (cap > 0) {
      size_t kept = cap - 1 < n ? cap - 1 : n;
      cr_assert_eq(buf[kept], '\0', "cap %zu", cap);
      cr_assert_eq(memcmp(buf, full, kept), 0, "cap %zu", cap);
    }
    for (size_t i = cap; i < n + 8; i++) cr_assert_eq(buf[i], 0x5a, "byte %zu at cap %zu", i, cap);
  }
  free(buf);
  free(full);
}

Test(error_format, truncation_at_every_capacity_keeps_the_nul_and_the_length) {
  FOR_EACH_KIND(k) {
    weft_status st = make_full(k);
    check_truncation(st, weft_error_format);
    weft_error_free(st);
  }
  check_truncation(NULL, weft_error_format);
  ASSERT_NO_LEAKS();
}

Test(error_format, deep_cause_chains_format_whole) {
  weft_status st = weft_error_make(WEFT_ERR_UNKNOWN, "bottom");
  for (int i = 0; i < 1000; i++) st = weft_error_wrap(WEFT_ERR_GENERIC, 0, st, "l%d", i);
  char *s = fmt(st);
  cr_assert_not_null(strstr(s, "Unknown: unknown error during execution: bottom"));
  cr_assert_eq(strncmp(s, "Generic: server error: l999: caused by: Generic", 47), 0, "%.60s", s);
  free(s);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

/* ---- backtraces --------------------------------------------------------------------------- */

static size_t count_of(const char *s, const char *part) {
  size_t n = 0;
  for (const char *at = strstr(s, part); at; at = strstr(at + 1, part)) n++;
  return n;
}

Test(error_backtrace, made_errors_capture_raw_frames) {
  FOR_EACH_KIND(k) {
    weft_status st = weft_error_make(k, NULL);
    size_t depth = weft_error_backtrace_depth(st);
    if (payload_free(k)) {
      cr_assert_eq(depth, 0, "%s is payload-free", names[k]);
    } else {
      cr_assert_gt(depth, 0, "%s", names[k]);
      cr_assert_leq(depth, WEFT__ERROR_MAX_FRAMES);
    }
    weft_error_free(st);
  }
  weft_status several = weft_error_several(NULL, 0);
  weft_status unwritten = weft_error_unwritten(1, 1, NULL, NULL, 0);
  cr_assert_gt(weft_error_backtrace_depth(several), 0);
  cr_assert_gt(weft_error_backtrace_depth(unwritten), 0);
  weft_error_free(several);
  weft_error_free(unwritten);
  ASSERT_NO_LEAKS();
}

Test(error_backtrace, format_backtrace_is_the_line_then_one_frame_per_line) {
  weft_status st = weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 16, "pool");
  char *line = fmt(st);
  char *s = fmt_bt(st);
  cr_assert_eq(strncmp(s, line, strlen(line)), 0, "starts with the one-line form");
  cr_assert_eq(s[strlen(line)], '\n');
  cr_assert_not_null(strstr(s, "backtrace of error (OutOfMemory):"), "%s", s);
  cr_assert_not_null(strstr(s, "\n  #0 "), "%s", s);
  cr_assert_eq(count_of(s, "\n  #"), weft_error_backtrace_depth(st), "%s", s);
  free(line);
  free(s);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_backtrace, format_backtrace_covers_the_whole_cause_tree) {
  weft_status src = weft_error_make(WEFT_ERR_NOT_FOUND, "h");
  weft_status smf = weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 4, src, NULL);
  weft_status items[] = {weft_error_make(WEFT_ERR_GENERIC, "a"),
                         weft_error_unwritten(2, 1, smf, NULL, 0)};
  weft_status st = weft_error_several(items, 2);
  char *s = fmt_bt(st);
  cr_assert_not_null(strstr(s, "backtrace of error (Several):"), "%s", s);
  cr_assert_not_null(strstr(s, "backtrace of error.errors[0] (Generic):"), "%s", s);
  cr_assert_not_null(strstr(s, "backtrace of error.errors[1] (Unwritten):"), "%s", s);
  cr_assert_not_null(strstr(s, "backtrace of error.errors[1].root (StorageMappingFailed):"), "%s",
                     s);
  cr_assert_not_null(strstr(s, "backtrace of error.errors[1].root.source (NotFound):"), "%s", s);
  size_t frames = weft_error_backtrace_depth(st) + weft_error_backtrace_depth(items[0]) +
                  weft_error_backtrace_depth(items[1]) + weft_error_backtrace_depth(smf) +
                  weft_error_backtrace_depth(src);
  cr_assert_eq(count_of(s, "\n  #"), frames);
  free(s);
  check_truncation(st, weft_error_format_backtrace);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_backtrace, static_and_parsed_errors_have_none) {
  char *s = fmt_bt(weft__error_torn_down());
  cr_assert_str_eq(s, "TornDown: a write scope never finished\nbacktrace of error (TornDown): "
                      "none captured");
  free(s);
  cr_assert_eq(weft_error_backtrace_depth(weft__error_static(WEFT_ERR_OUT_OF_MEMORY)), 0);
  weft_status parsed = NULL;
  cr_assert_null(weft_error_from_json("{\"kind\":\"Generic\",\"message\":\"p\"}", &parsed));
  cr_assert_eq(weft_error_backtrace_depth(parsed), 0);
  weft_error_free(parsed);
  ASSERT_NO_LEAKS();
}

/* ---- predicates --------------------------------------------------------------------------- */

Test(error_predicates, truth_table_for_every_kind) {
  cr_assert_not(weft_error_may_succeed_after_reclaim(NULL));
  cr_assert_not(weft_error_is_device_poisoned(NULL));
  cr_assert_not(weft_error_is_refusal(NULL));
  FOR_EACH_KIND(k) {
    weft_status st = weft_error_make(k, "x");
    bool reclaim = k == WEFT_ERR_OUT_OF_MEMORY || k == WEFT_ERR_PAGE_SIZES_EXHAUSTED;
    cr_assert_eq(weft_error_may_succeed_after_reclaim(st), reclaim, "%s", names[k]);
    cr_assert_eq(weft_error_is_device_poisoned(st), k == WEFT_ERR_DEVICE_POISONED, "%s", names[k]);
    cr_assert_eq(weft_error_is_refusal(st), is_launch_refusal(k), "%s", names[k]);
    /* static errors answer the same */
    weft_status s = weft__error_static(k);
    cr_assert_eq(weft_error_may_succeed_after_reclaim(s), reclaim, "%s", names[k]);
    cr_assert_eq(weft_error_is_device_poisoned(s), k == WEFT_ERR_DEVICE_POISONED, "%s", names[k]);
    cr_assert_eq(weft_error_is_refusal(s), is_launch_refusal(k), "%s", names[k]);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

Test(error_predicates, through_an_unwritten_root) {
  FOR_EACH_KIND(k) {
    weft_status st = weft_error_unwritten(1, 1, weft_error_make(k, "x"), NULL, 0);
    cr_assert_not(weft_error_may_succeed_after_reclaim(st), "reclaim is never inferred: %s",
                  names[k]);
    cr_assert_eq(weft_error_is_device_poisoned(st), k == WEFT_ERR_DEVICE_POISONED, "%s", names[k]);
    cr_assert_eq(weft_error_is_refusal(st), is_launch_refusal(k), "%s", names[k]);
    weft_error_free(st);
  }
  weft_status bare = weft_error_unwritten(1, 1, NULL, NULL, 0);
  cr_assert_not(weft_error_is_refusal(bare));
  cr_assert_not(weft_error_is_device_poisoned(bare));
  weft_error_free(bare);
  ASSERT_NO_LEAKS();
}

Test(error_predicates, through_several_of_one) {
  FOR_EACH_KIND(k) {
    weft_status item = weft_error_make(k, "x");
    weft_status st = weft_error_several(&item, 1);
    cr_assert_not(weft_error_may_succeed_after_reclaim(st), "%s", names[k]);
    cr_assert_eq(weft_error_is_device_poisoned(st), k == WEFT_ERR_DEVICE_POISONED, "%s", names[k]);
    cr_assert_eq(weft_error_is_refusal(st), is_launch_refusal(k), "%s", names[k]);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

Test(error_predicates, through_a_source) {
  FOR_EACH_KIND(k) {
    weft_status st = weft_error_wrap(WEFT_ERR_GENERIC, 0, weft_error_make(k, "x"), NULL);
    cr_assert_not(weft_error_may_succeed_after_reclaim(st), "%s", names[k]);
    cr_assert_eq(weft_error_is_device_poisoned(st), k == WEFT_ERR_DEVICE_POISONED, "%s", names[k]);
    cr_assert_not(weft_error_is_refusal(st), "refusal does not follow sources: %s", names[k]);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

Test(error_predicates, several_is_a_refusal_only_when_non_empty_and_all_refuse) {
  weft_status empty = weft_error_several(NULL, 0);
  cr_assert_not(weft_error_is_refusal(empty));
  weft_error_free(empty);

  const char *chain[] = {"hop"};
  weft_status all[] = {
      weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, NULL),
      weft_error_make(WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES, NULL),
      weft_error_unwritten(4, 1, weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, NULL), chain, 1)};
  weft_status st = weft_error_several(all, 3);
  cr_assert(weft_error_is_refusal(st));
  weft_error_free(st);

  weft_status mixed[] = {weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, NULL),
                         weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 1, NULL)};
  st = weft_error_several(mixed, 2);
  cr_assert_not(weft_error_is_refusal(st));
  weft_error_free(st);

  weft_status inner_items[] = {weft_error_make(WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES, NULL)};
  weft_status nested[] = {weft_error_several(inner_items, 1),
                          weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, NULL)};
  st = weft_error_several(nested, 2);
  cr_assert(weft_error_is_refusal(st), "Several of Several of refusals");
  weft_error_free(st);

  weft_status with_empty[] = {weft_error_several(NULL, 0),
                              weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, NULL)};
  st = weft_error_several(with_empty, 2);
  cr_assert_not(weft_error_is_refusal(st), "an empty Several inside is not a refusal");
  weft_error_free(st);

  weft_status unw = weft_error_unwritten(9, 1, weft_error_several(all + 0, 0), NULL,
                                         0); /* root: an empty Several */
  cr_assert_not(weft_error_is_refusal(unw));
  weft_error_free(unw);
  ASSERT_NO_LEAKS();
}

Test(error_predicates, poison_is_found_anywhere_in_the_tree) {
  /* Several[Generic, Unwritten{root: StorageMappingFailed{source: Generic{source: poisoned}}}] */
  weft_status deep = weft_error_wrap(
      WEFT_ERR_STORAGE_MAPPING_FAILED, 8,
      weft_error_wrap(WEFT_ERR_GENERIC, 0, weft_error_make(WEFT_ERR_DEVICE_POISONED, "ecc"), NULL),
      NULL);
  weft_status items[] = {weft_error_make(WEFT_ERR_GENERIC, NULL),
                         weft_error_unwritten(1, 1, deep, NULL, 0)};
  weft_status st = weft_error_several(items, 2);
  cr_assert(weft_error_is_device_poisoned(st));
  cr_assert_not(weft_error_is_refusal(st));
  cr_assert_not(weft_error_may_succeed_after_reclaim(st));
  weft_error_free(st);

  weft_status clean[] = {
      weft_error_make(WEFT_ERR_GENERIC, NULL),
      weft_error_unwritten(1, 1, weft_error_make(WEFT_ERR_UNKNOWN, NULL), NULL, 0)};
  st = weft_error_several(clean, 2);
  cr_assert_not(weft_error_is_device_poisoned(st));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_predicates, reclaim_is_only_answered_for_the_error_itself) {
  weft_status oom = weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 4, NULL);
  weft_status smf = weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 4, oom, NULL);
  cr_assert_not(weft_error_may_succeed_after_reclaim(smf));
  cr_assert(weft_error_may_succeed_after_reclaim(weft_error_source(smf)));
  weft_error_free(smf);
  ASSERT_NO_LEAKS();
}

/* ---- clone -------------------------------------------------------------------------------- */

Test(error_clone, every_kind_clones_deeply_and_equal) {
  FOR_EACH_KIND(k) {
    weft_status st = make_full(k);
    weft_status c = weft_error_clone(st);
    cr_assert_not_null(c);
    if (payload_free(k))
      cr_assert_eq(c, st, "payload-free singletons clone to themselves");
    else
      cr_assert_neq(c, st, "%s", names[k]);
    char *a = json(st), *b = json(c);
    cr_assert_str_eq(a, b, "%s", names[k]);
    char *fa = fmt(st), *fb = fmt(c);
    cr_assert_str_eq(fa, fb);
    cr_assert_eq(weft_error_backtrace_depth(c), weft_error_backtrace_depth(st));
    char *ba = fmt_bt(st), *bb = fmt_bt(c);
    cr_assert_str_eq(ba, bb, "the backtrace is copied too");
    if (weft_error_source(st)) cr_assert_neq(weft_error_source(c), weft_error_source(st));
    if (weft_error_root(st)) cr_assert_neq(weft_error_root(c), weft_error_root(st));
    for (size_t i = 0; i < weft_error_count(st); i++)
      cr_assert_neq(weft_error_at(c, i), weft_error_at(st, i));
    for (size_t i = 0; i < weft_error_chain_length(st); i++)
      cr_assert_neq(weft_error_chain_at(c, i), weft_error_chain_at(st, i));
    free(a);
    free(b);
    free(fa);
    free(fb);
    free(ba);
    free(bb);
    /* The copy outlives the original (ASan would see any shared storage). */
    weft_error_free(st);
    char *after = fmt(c);
    cr_assert_eq(strncmp(after, names[k], strlen(names[k])), 0);
    free(after);
    weft_error_free(c);
  }
  cr_assert_null(weft_error_clone(NULL));
  ASSERT_NO_LEAKS();
}

Test(error_clone, keeps_message_presence_and_nested_structure) {
  weft_status none = weft_error_make(WEFT_ERR_GENERIC, NULL);
  weft_status c = weft_error_clone(none);
  cr_assert_null(weft__error_message_raw(c));
  weft_error_free(c);
  weft_error_free(none);

  weft_status inner[] = {weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, "a"),
                         weft__error_torn_down()};
  weft_status items[] = {weft_error_several(inner, 2), weft_error_make(WEFT_ERR_GENERIC, "b")};
  weft_status st = weft_error_several(items, 2);
  c = weft_error_clone(st);
  cr_assert_eq(weft_error_count(weft_error_at(c, 0)), 2);
  cr_assert_eq(weft_error_at(weft_error_at(c, 0), 1), weft__error_torn_down());
  char *a = json(st), *b = json(c);
  cr_assert_str_eq(a, b);
  free(a);
  free(b);
  weft_error_free(st);
  weft_error_free(c);
  ASSERT_NO_LEAKS();
}

/* ---- static errors and singletons --------------------------------------------------------- */

Test(error_static, every_kind_has_a_static_error_that_keeps_its_kind) {
  FOR_EACH_KIND(k) {
    weft_status s = weft__error_static(k);
    cr_assert_not_null(s);
    cr_assert(weft__error_is_static(s));
    cr_assert_eq(weft_error_kind_of(s), k);
    cr_assert_eq(weft__error_static(k), s, "one per kind");
    cr_assert_str_eq(weft_error_message(s), "");
    cr_assert_eq(weft_error_size(s), 0);
    cr_assert_null(weft_error_source(s));
    cr_assert_eq(weft_error_count(s), 0);
    cr_assert_null(weft_error_root(s));
    cr_assert_eq(weft_error_chain_length(s), 0);
    cr_assert_eq(weft_error_backtrace_depth(s), 0);
    weft_error_free(s); /* a no-op: the object is still there */
    cr_assert_eq(weft_error_kind_of(s), k);
    cr_assert_eq(weft_error_clone(s), s);
    char buf[256];
    weft_error_format(s, buf, sizeof(buf));
    cr_assert_eq(strncmp(buf, names[k], strlen(names[k])), 0, "%s", buf);
  }
  cr_assert_eq(weft_error_kind_of(weft__error_static(WEFT_OK)), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_eq(weft_error_kind_of(weft__error_static((weft_error_kind)77)),
               WEFT_ERR_INVALID_ARGUMENT);
}

Test(error_static, made_errors_are_not_static) {
  weft_status st = weft_error_make(WEFT_ERR_GENERIC, "x");
  cr_assert_not(weft__error_is_static(st));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_static, torn_down_and_skipped_are_payload_free_singletons) {
  weft_status td = weft__error_torn_down();
  weft_status sk = weft__error_skipped();
  cr_assert_eq(weft_error_kind_of(td), WEFT_ERR_TORN_DOWN);
  cr_assert_eq(weft_error_kind_of(sk), WEFT_ERR_SKIPPED);
  cr_assert(weft__error_is_static(td));
  cr_assert(weft__error_is_static(sk));
  cr_assert_eq(weft__error_torn_down(), td);
  cr_assert_eq(weft__error_skipped(), sk);
  /* Making one never allocates: it is the singleton, whatever the payload. */
  cr_assert_eq(weft_error_make(WEFT_ERR_TORN_DOWN, "ignored %d", 1), td);
  cr_assert_eq(weft_error_make_sized(WEFT_ERR_SKIPPED, 5, NULL), sk);
  cr_assert_eq(weft_error_wrap(WEFT_ERR_TORN_DOWN, 0, weft_error_make(WEFT_ERR_GENERIC, "c"), NULL),
               td);
  cr_assert_eq(weft_error_clone(td), td);
  cr_assert_eq(weft_error_clone(sk), sk);
  weft_error_free(td);
  weft_error_free(sk);
  cr_assert_eq(weft_error_kind_of(td), WEFT_ERR_TORN_DOWN, "still alive after free");
  ASSERT_NO_LEAKS();
}

Test(error_static, singletons_may_sit_in_several_any_number_of_times) {
  weft_status items[] = {weft__error_skipped(), weft__error_skipped(), weft__error_torn_down()};
  weft_status st = weft_error_several(items, 3);
  cr_assert_eq(weft_error_count(st), 3);
  weft_error_free(st);
  cr_assert_eq(weft_error_kind_of(weft__error_skipped()), WEFT_ERR_SKIPPED);
  ASSERT_NO_LEAKS();
}

/* The kind of helper other modules write around weft__error_vmake. */
static weft_status module_error(weft_error_kind kind, uint64_t size, weft_status source,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static weft_status module_error(weft_error_kind kind, uint64_t size, weft_status source,
                                const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft_status st = weft__error_vmake(kind, size, source, fmt, ap);
  va_end(ap);
  return st;
}

Test(error_make, internal_vmake_behaves_like_wrap) {
  weft_status st = module_error(WEFT_ERR_STORAGE_MAPPING_FAILED, 64,
                                weft_error_make(WEFT_ERR_UNKNOWN, NULL), "stream %d", 4);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_STORAGE_MAPPING_FAILED);
  cr_assert_eq(weft_error_size(st), 64);
  cr_assert_str_eq(weft_error_message(st), "stream 4");
  cr_assert_eq(weft_error_kind_of(weft_error_source(st)), WEFT_ERR_UNKNOWN);
  cr_assert_gt(weft_error_backtrace_depth(st), 0);
  weft_error_free(st);
  st = module_error(WEFT_OK, 0, weft_error_make(WEFT_ERR_UNKNOWN, NULL), NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_make, assemble_builds_from_owned_parts_and_frees_what_the_kind_lacks) {
  weft__error_parts p = {.kind = WEFT_ERR_NOT_FOUND, .size = 9};
  p.message = malloc(4);
  memcpy(p.message, "abc", 4);
  p.root = weft_error_make(WEFT_ERR_GENERIC, "not NotFound's"); /* freed: NotFound has no root */
  p.errors = malloc(sizeof(*p.errors));
  p.errors[0] = weft_error_make(WEFT_ERR_GENERIC, "neither");
  p.count = 1;
  weft_status st = weft__error_assemble(&p, false);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_NOT_FOUND);
  cr_assert_eq(weft_error_size(st), 0);
  cr_assert_str_eq(weft_error_message(st), "abc");
  cr_assert_null(weft_error_root(st));
  cr_assert_eq(weft_error_count(st), 0);
  cr_assert_eq(weft_error_backtrace_depth(st), 0);
  weft_error_free(st);

  weft__error_parts bad = {.kind = WEFT_OK, .source = weft_error_make(WEFT_ERR_GENERIC, NULL)};
  cr_assert_null(weft__error_assemble(&bad, true), "no error for WEFT_OK; parts freed");
  weft__error_parts td = {.kind = WEFT_ERR_TORN_DOWN,
                          .source = weft_error_make(WEFT_ERR_GENERIC, NULL)};
  cr_assert_eq(weft__error_assemble(&td, true), weft__error_torn_down());
  cr_assert_null(weft__error_assemble(NULL, true));
  ASSERT_NO_LEAKS();
}

#ifndef HAVE_ASAN
/* Runs |body| in a child process whose address space is full: every libc
 * allocation fails there. The child reports through its exit status. */
static void with_memory_exhausted(int (*body)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* Room for the stack and libc, then fill the heap down to its last bytes. */
    struct rlimit lim;
    long pages = 0, resident;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) _exit(90);
    fclose(f);
    rlim_t want = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (32u << 20);
    if (getrlimit(RLIMIT_AS, &lim) != 0) _exit(91);
    if (lim.rlim_max == RLIM_INFINITY || lim.rlim_max > want) lim.rlim_max = want;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(92);
    /* Large blocks first, then every small size: an allocator keeping one
     * bin per size class (jemalloc) must have each bin drained. */
    void *hoard = NULL;
    for (size_t size = 1u << 20; size >= sizeof(void *);) {
      void **block = malloc(size);
      if (!block) {
        size /= 2;
        continue;
      }
      *block = hoard;
      hoard = block;
    }
    for (bool got = true; got;) {
      got = false;
      for (size_t size = sizeof(void *); size <= 8192; size += sizeof(void *)) {
        void **block;
        while ((block = malloc(size)) != NULL) {
          *block = hoard;
          hoard = block;
          got = true;
        }
      }
    }
    int rc = body(arg);
    while (hoard) {
      void *next = *(void **)hoard;
      free(hoard);
      hoard = next;
    }
    _exit(rc);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "child died: status %d", status);
  cr_assert_eq(WEXITSTATUS(status), 0, "check %d failed in the child", WEXITSTATUS(status));
}

static int constructors_fall_back_to_static(void *arg) {
  weft_status pre_made = arg; /* made before memory ran out; ownership passes to wrap */
  int check = 0;
  for (weft_error_kind k = FIRST_KIND; (int)k < WEFT_ERROR_KIND_COUNT;
       k = (weft_error_kind)(k + 1)) {
    weft_status st = weft_error_make_sized(k, 100, "message %d", 1);
    check++;
    if (weft_error_kind_of(st) != k || !weft__error_is_static(st)) return check;
    check++;
    if (weft_error_message(st)[0] != '\0' || weft_error_size(st) != 0) return check;
    weft_error_free(st); /* no-op */
    check++;
    if (weft_error_kind_of(st) != k) return check;
  }
  const char *chain[] = {"hop"};
  weft_status st = weft_error_unwritten(1, 1, NULL, chain, 1);
  if (weft_error_kind_of(st) != WEFT_ERR_UNWRITTEN || !weft__error_is_static(st)) return 71;
  weft_status items[] = {weft__error_skipped()};
  st = weft_error_several(items, 1);
  if (weft_error_kind_of(st) != WEFT_ERR_SEVERAL || !weft__error_is_static(st)) return 72;
  st = weft_error_make(WEFT_OK, NULL);
  if (weft_error_kind_of(st) != WEFT_ERR_INVALID_ARGUMENT) return 73;
  if (weft_error_to_json(weft_error_make(WEFT_ERR_GENERIC, NULL)) != NULL) return 74;
  weft_status parsed = NULL;
  st = weft_error_from_json("{\"kind\":\"Generic\",\"message\":\"m\"}", &parsed);
  if (parsed != NULL || weft_error_kind_of(st) != WEFT_ERR_OUT_OF_MEMORY) return 75;
  /* Last: freeing the cause it cannot keep gives memory back. */
  st = weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 8, pre_made, "x");
  if (weft_error_kind_of(st) != WEFT_ERR_STORAGE_MAPPING_FAILED || !weft__error_is_static(st))
    return 76;
  return 0;
}
#endif

Test(error_static, constructors_return_the_static_error_of_the_kind_when_memory_runs_out) {
#ifdef HAVE_ASAN
  cr_skip_test("exhausting the address space is not possible under ASan");
#else
  weft_error_free(weft_error_make(WEFT_ERR_GENERIC, "load the unwinder first"));
  weft_status pre_made = weft_error_make(WEFT_ERR_UNKNOWN, "cause");
  with_memory_exhausted(constructors_fall_back_to_static, pre_made);
  weft_error_free(pre_made); /* the child's copy was consumed, the parent's is still ours */
#endif
}

/* ---- annotation and WEFT_RETURN_IF_ERROR -------------------------------------------------- */

/* The backtrace text of |st| after its first line (the frames, symbolized). */
static char *frames_of(weft_status st) {
  char *s = fmt_bt(st);
  char *nl = strchr(s, '\n');
  cr_assert_not_null(nl, "%s", s);
  memmove(s, nl + 1, strlen(nl + 1) + 1);
  return s;
}

Test(error_annotate, keeps_kind_size_cause_and_frames_and_the_message_shows_both) {
  weft_status cause = weft_error_make(WEFT_ERR_NOT_FOUND, "stale handle");
  weft_status st = weft_error_wrap(WEFT_ERR_OUT_OF_MEMORY, 4096, cause, "pool %d full", 2);
  size_t depth = weft_error_backtrace_depth(st);
  char *before = frames_of(st);
  cr_assert_gt(depth, 0);
  weft_status out = weft_error_annotate(st, "memory snapshot: %u pages", 3u);
  cr_assert_eq(out, st, "annotated in place");
  cr_assert_eq(weft_error_kind_of(out), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(weft_error_size(out), 4096);
  cr_assert_eq(weft_error_source(out), cause);
  cr_assert_str_eq(weft_error_message(weft_error_source(out)), "stale handle");
  cr_assert_str_eq(weft_error_message(out), "pool 2 full; memory snapshot: 3 pages");
  cr_assert_eq(weft_error_backtrace_depth(out), depth);
  char *after = frames_of(out);
  cr_assert_str_eq(after, before, "the frames are the original's");
  char *line = fmt(out);
  cr_assert_not_null(strstr(line, "pool 2 full; memory snapshot: 3 pages"), "%s", line);
  cr_assert_not_null(strstr(line, "stale handle"), "the cause still formats: %s", line);
  free(line);
  free(before);
  free(after);
  weft_error_free(out);
  ASSERT_NO_LEAKS();
}

Test(error_annotate, annotations_accumulate_in_order) {
  weft_status st = weft_error_make(WEFT_ERR_GENERIC, "root");
  st = weft_error_annotate(st, "first");
  st = weft_error_annotate(st, "second %s", "note");
  cr_assert_str_eq(weft_error_message(st), "root; first; second note");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_annotate, an_error_without_a_message_gets_the_annotation_alone) {
  weft_status none = weft_error_annotate(weft_error_make(WEFT_ERR_VALIDATION, NULL), "ctx");
  weft_status empty = weft_error_annotate(weft_error_make(WEFT_ERR_VALIDATION, "%s", ""), "ctx");
  cr_assert_str_eq(weft_error_message(none), "ctx");
  cr_assert_str_eq(weft_error_message(empty), "ctx");
  weft_error_free(none);
  weft_error_free(empty);
  ASSERT_NO_LEAKS();
}

Test(error_annotate, every_kind_keeps_every_field_but_the_message) {
  FOR_EACH_KIND(k) {
    if (payload_free(k)) continue;
    weft_status st = make_full(k), copy = weft_error_clone(st);
    char *json_before = json(copy);
    weft_status out = weft_error_annotate(st, "while testing %s", names[k]);
    cr_assert_eq(out, st, "%s", names[k]);
    cr_assert_eq(weft_error_kind_of(out), k);
    cr_assert_eq(weft_error_size(out), weft_error_size(copy), "%s", names[k]);
    cr_assert_eq(weft_error_count(out), weft_error_count(copy), "%s", names[k]);
    for (size_t i = 0; i < weft_error_count(out); i++)
      cr_assert_eq(weft_error_kind_of(weft_error_at(out, i)),
                   weft_error_kind_of(weft_error_at(copy, i)));
    cr_assert_eq(weft_error_failure_id(out), weft_error_failure_id(copy), "%s", names[k]);
    cr_assert_eq(weft_error_claimed(out), weft_error_claimed(copy), "%s", names[k]);
    cr_assert_eq(weft_error_chain_length(out), weft_error_chain_length(copy), "%s", names[k]);
    for (size_t i = 0; i < weft_error_chain_length(out); i++)
      cr_assert_str_eq(weft_error_chain_at(out, i), weft_error_chain_at(copy, i));
    cr_assert_eq(weft_error_kind_of(weft_error_root(out)),
                 weft_error_kind_of(weft_error_root(copy)));
    cr_assert_eq(weft_error_kind_of(weft_error_source(out)),
                 weft_error_kind_of(weft_error_source(copy)));
    cr_assert_eq(weft_error_backtrace_depth(out), weft_error_backtrace_depth(copy));
    char want[256];
    const char *old = weft_error_message(copy);
    snprintf(want, sizeof want, "%s%swhile testing %s", old, *old ? "; " : "", names[k]);
    cr_assert_str_eq(weft_error_message(out), want);
    /* The JSON differs from the original's in the message alone. */
    char *json_after = json(out);
    weft_status msg_only = weft_error_annotate(copy, "while testing %s", names[k]);
    char *json_copy = json(msg_only);
    cr_assert_str_eq(json_after, json_copy);
    cr_assert_str_neq(json_after, json_before);
    weft_free(json_before);
    weft_free(json_after);
    weft_free(json_copy);
    weft_error_free(out);
    weft_error_free(msg_only);
  }
  ASSERT_NO_LEAKS();
}

Test(error_annotate, null_is_ok_and_stays_null_without_allocating) {
  struct mallinfo2 before = mallinfo2();
  cr_assert_null(weft_error_annotate(NULL, "never formatted %s", "x"));
  struct mallinfo2 after = mallinfo2();
  cr_assert_eq(after.uordblks, before.uordblks, "annotating OK allocated");
}

Test(error_annotate, a_null_format_and_the_payload_free_kinds_change_nothing) {
  weft_status st = weft_error_make(WEFT_ERR_GENERIC, "m");
  cr_assert_eq(weft_error_annotate(st, NULL), st);
  cr_assert_str_eq(weft_error_message(st), "m");
  cr_assert_eq(weft_error_annotate(weft__error_torn_down(), "x"), weft__error_torn_down());
  cr_assert_eq(weft_error_annotate(weft__error_skipped(), "x"), weft__error_skipped());
  cr_assert_str_eq(weft_error_message(weft__error_torn_down()), "");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_annotate, a_static_error_becomes_a_fresh_error_of_its_kind) {
  FOR_EACH_KIND(k) {
    if (payload_free(k)) continue;
    weft_status s = weft__error_static(k);
    weft_status out = weft_error_annotate(s, "context %d", 7);
    cr_assert_neq(out, s, "%s: the shared static error is never written", names[k]);
    cr_assert_not(weft__error_is_static(out));
    cr_assert_eq(weft_error_kind_of(out), k);
    cr_assert_str_eq(weft_error_message(out), "context 7");
    cr_assert_gt(weft_error_backtrace_depth(out), 0);
    cr_assert_str_eq(weft_error_message(s), "", "%s's static error kept", names[k]);
    weft_error_free(out);
  }
  ASSERT_NO_LEAKS();
}

Test(error_annotate, sized_restates_the_size_and_keeps_the_rest) {
  weft_status cause = weft_error_make(WEFT_ERR_UNKNOWN, "driver");
  weft_status st = weft_error_wrap(WEFT_ERR_OUT_OF_MEMORY, 65536, cause, "page");
  size_t depth = weft_error_backtrace_depth(st);
  weft_status out = weft_error_annotate_sized(st, 100, "request %d bytes", 100);
  cr_assert_eq(out, st);
  cr_assert_eq(weft_error_size(out), 100);
  cr_assert_str_eq(weft_error_message(out), "page; request 100 bytes");
  cr_assert_eq(weft_error_source(out), cause);
  cr_assert_eq(weft_error_backtrace_depth(out), depth);
  /* A NULL format sets the size alone. */
  out = weft_error_annotate_sized(out, 7, NULL);
  cr_assert_eq(weft_error_size(out), 7);
  cr_assert_str_eq(weft_error_message(out), "page; request 100 bytes");
  weft_error_free(out);
  /* A kind without a size keeps having none. */
  st = weft_error_annotate_sized(weft_error_make(WEFT_ERR_GENERIC, "g"), 9, "n");
  cr_assert_eq(weft_error_size(st), 0);
  cr_assert_str_eq(weft_error_message(st), "g; n");
  weft_error_free(st);
  /* A static error's copy carries the size. */
  st = weft_error_annotate_sized(weft__error_static(WEFT_ERR_BUFFER_TOO_BIG), 5, NULL);
  cr_assert_not(weft__error_is_static(st));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_BUFFER_TOO_BIG);
  cr_assert_eq(weft_error_size(st), 5);
  cr_assert_str_eq(weft_error_message(st), "");
  weft_error_free(st);
  cr_assert_null(weft_error_annotate_sized(NULL, 1, "x"));
  ASSERT_NO_LEAKS();
}

static int return_if_calls;

static weft_status step(weft_status st) {
  return_if_calls++;
  return st;
}

static int counted(int v) {
  return_if_calls += 100;
  return v;
}

static weft_status two_steps(weft_status a, weft_status b) {
  WEFT_RETURN_IF_ERROR(step(a));
  WEFT_RETURN_IF_ERROR(step(b));
  return NULL;
}

static weft_status annotated_step(weft_status a) {
  WEFT_RETURN_IF_ERROR_ANNOTATE(step(a), "step %d", counted(4));
  return NULL;
}

Test(error_return_if, returns_the_first_error_and_runs_nothing_after_it) {
  return_if_calls = 0;
  cr_assert_null(two_steps(NULL, NULL));
  cr_assert_eq(return_if_calls, 2);
  return_if_calls = 0;
  weft_status e = weft_error_make(WEFT_ERR_GENERIC, "first");
  weft_status f = weft_error_make(WEFT_ERR_UNKNOWN, "second");
  weft_status got = two_steps(e, f);
  cr_assert_eq(got, e);
  cr_assert_eq(return_if_calls, 1, "the second step never ran");
  weft_error_free(got);
  weft_error_free(f);
  ASSERT_NO_LEAKS();
}

Test(error_return_if, annotate_formats_only_on_error) {
  return_if_calls = 0;
  cr_assert_null(annotated_step(NULL));
  cr_assert_eq(return_if_calls, 1, "the annotation's arguments were evaluated on success");
  weft_status got = annotated_step(weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, 9, "big"));
  cr_assert_eq(return_if_calls, 102);
  cr_assert_eq(weft_error_kind_of(got), WEFT_ERR_BUFFER_TOO_BIG);
  cr_assert_eq(weft_error_size(got), 9);
  cr_assert_str_eq(weft_error_message(got), "big; step 4");
  weft_error_free(got);
  ASSERT_NO_LEAKS();
}

#ifndef HAVE_ASAN
static int annotate_keeps_the_original(void *arg) {
  weft_status st = arg; /* made before memory ran out */
  const char *msg = weft_error_message(st);
  weft_status out = weft_error_annotate(st, "a note %s", "that needs memory");
  if (out != st) return 1;
  if (weft_error_message(out) != msg || strcmp(msg, "made before")) return 2;
  if (weft_error_kind_of(out) != WEFT_ERR_GENERIC || weft_error_backtrace_depth(out) == 0) return 3;
  return 0;
}
#endif

Test(error_annotate, when_memory_runs_out_the_original_comes_back_unchanged) {
#ifdef HAVE_ASAN
  cr_skip_test("exhausting the address space is not possible under ASan");
#else
  weft_error_free(weft_error_make(WEFT_ERR_GENERIC, "load the unwinder first"));
  weft_status st = weft_error_make(WEFT_ERR_GENERIC, "made before");
  with_memory_exhausted(annotate_keeps_the_original, st);
  weft_error_free(st);
#endif
}
