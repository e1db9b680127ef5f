/* The error API as an embedder uses it: only <weft/weft.h>, so that this
 * suite also runs against libweft.so (scripts/test-shared.sh). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

Test(error_api, a_backtrace_report_is_symbolized_and_freed_by_the_library) {
  weft_status inner = weft_error_make(WEFT_ERR_NOT_FOUND, "inner");
  weft_status st = weft_error_wrap(WEFT_ERR_GENERIC, 0, inner, "outer");
  size_t need = weft_error_format_backtrace(st, NULL, 0);
  cr_assert_gt(need, 0);
  char *text = malloc(need + 1);
  cr_assert_not_null(text);
  cr_assert_eq(weft_error_format_backtrace(st, text, need + 1), need);
  cr_assert_not_null(strstr(text, "backtrace of error (Generic):"), "%s", text);
  cr_assert_not_null(strstr(text, "backtrace of error.source (NotFound):"), "%s", text);
  cr_assert_not_null(strstr(text, "\n  #0 "), "frames are listed: %s", text);
  free(text);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

/* ---- deep trees: every walk in constant stack ---------------------------------------------- */

enum { DEEP = 200000 };

/* A cause chain DEEP errors long, DevicePoisoned at the bottom. */
static weft_status deep_chain(int n) {
  weft_status st = weft_error_make(WEFT_ERR_DEVICE_POISONED, "bottom");
  for (int i = 1; i < n; i++) st = weft_error_wrap(WEFT_ERR_GENERIC, 0, st, "level %d", i);
  return st;
}

Test(error_api, a_200k_deep_cause_chain_formats_clones_and_frees, .timeout = 300) {
  weft_status st = deep_chain(DEEP);
  size_t len = weft_error_format(st, NULL, 0);
  cr_assert_gt(len, (size_t)DEEP * 10);
  char head[64];
  weft_error_format(st, head, sizeof(head));
  cr_assert_eq(strncmp(head, "Generic: server error: level 199999: caused by: Generic", 55), 0,
               "%s", head);
  cr_assert(weft_error_is_device_poisoned(st), "found at the bottom");
  cr_assert(!weft_error_is_refusal(st));
  weft_status copy = weft_error_clone(st);
  cr_assert_eq(weft_error_format(copy, NULL, 0), len, "the copy formats the same");
  weft_status bottom = copy;
  for (int i = 1; i < DEEP; i++) bottom = weft_error_source(bottom);
  cr_assert_eq(weft_error_kind_of(bottom), WEFT_ERR_DEVICE_POISONED);
  cr_assert_str_eq(weft_error_message(bottom), "bottom");
  weft_error_free(copy);
  /* Deeper than JSON's limit: refused, never written unparseable. */
  cr_assert_null(weft_error_to_json(st));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_api, a_deep_cause_chain_formats_its_backtrace, .timeout = 300) {
  weft_status st = deep_chain(DEEP / 4);
  size_t len = weft_error_format_backtrace(st, NULL, 0);
  cr_assert_gt(len, weft_error_format(st, NULL, 0));
  char *text = malloc(len + 1);
  cr_assert_not_null(text);
  cr_assert_eq(weft_error_format_backtrace(st, text, len + 1), len);
  cr_assert_not_null(strstr(text, "\nbacktrace of error.source.source (Generic):"));
  cr_assert_not_null(strstr(text, " (depth 49999) (DevicePoisoned):"),
                     "a deep heading names its depth");
  free(text);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_api, a_200k_deep_tree_of_several_and_unwritten_walks_in_constant_stack, .timeout = 300) {
  /* Several{Unwritten{root: Several{Unwritten{... LaunchCompilation}}}}. */
  weft_status st = weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, "leaf");
  for (int i = 0; i < DEEP; i++) {
    if (i % 2)
      st = weft_error_several(&st, 1);
    else
      st = weft_error_unwritten((uint64_t)i + 1, 1, st, NULL, 0);
  }
  cr_assert(weft_error_is_refusal(st), "every leaf is a refusal");
  cr_assert(!weft_error_is_device_poisoned(st));
  size_t len = weft_error_format(st, NULL, 0);
  weft_status copy = weft_error_clone(st);
  cr_assert_eq(weft_error_format(copy, NULL, 0), len);
  cr_assert(weft_error_is_refusal(copy));
  weft_error_free(copy);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

static weft_status k_deep(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return deep_chain(DEEP);
}

Test(error_api, a_kernel_returning_a_200k_deep_chain_is_reported, .timeout = 300) {
  weft_device *dev;
  cr_assert_null(weft_device_open(NULL, &dev));
  weft_kernel k;
  cr_assert_null(weft_kernel_host(dev, "deep", k_deep, NULL, &k));
  weft_buffer b;
  cr_assert_null(weft_buffer_create(dev, 0, 64, &b));
  const uint32_t one[3] = {1, 1, 1};
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  cr_assert_null(weft_launch(dev, 0, k, one, one, &bd, 1, NULL, 0));
  char got[64];
  weft_status st = weft_buffer_read(dev, 1, b, 0, got, sizeof(got));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status root = weft_error_root(weft_error_at(st, 0));
  cr_assert_str_eq(weft_error_message(root), "level 199999");
  cr_assert(weft_error_is_device_poisoned(st), "the bottom of the root's chain");
  cr_assert_gt(weft_error_format(st, NULL, 0), (size_t)DEEP * 10);
  weft_error_free(st);
  cr_assert_null(weft_sync(dev, 0), "the scheduler is still there");
  weft_device_close(dev);
  ASSERT_NO_LEAKS();
}
