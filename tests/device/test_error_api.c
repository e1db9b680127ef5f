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
