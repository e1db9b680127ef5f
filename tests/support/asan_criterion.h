/* Sanitizer glue for the Criterion suites (include once per test binary).
 *
 * Criterion counts a test that leaks as passed (its LSan report at worker
 * exit is ignored), so ASSERT_NO_LEAKS() asks LSan directly at the end of a
 * test body; it is a no-op without ASan.
 *
 * Criterion 2.4.1's runner (the parent process) sometimes leaks one 48-byte
 * BoxFort timeout request (bxfi_push_timeout; bxfi_cancel_timeout loses it)
 * when tests with .timeout run under --jobs 2, and LSan then fails the whole
 * binary at exit. It is suppressed by the runner's frame, which no test body
 * has (tests run in re-executed workers); the full unwinder is needed to see
 * that frame through libcriterion, which has no frame pointers.
 *
 * A check made while another thread is starting (a device's pool threads
 * start lazily, on a stream's first use) can see the attribute block that
 * the sanitizer's own thread start (GetThreadStackTopAndBottom, through
 * pthread_getattr_np) holds before it has registered that thread's stack:
 * a test with two devices open failed so in CI. weft never calls
 * pthread_getattr_np, so that frame is suppressed, and nothing else. */
#ifndef WEFT_TESTS_ASAN_CRITERION_H
#define WEFT_TESTS_ASAN_CRITERION_H

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

#ifdef HAVE_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
const char *__asan_default_options(void) {
  return "fast_unwind_on_malloc=0";
}
const char *__lsan_default_options(void) {
  return "print_suppressions=0";
}
const char *__lsan_default_suppressions(void) {
  return "leak:criterion_run_all_tests\n"
         "leak:GetThreadStackTopAndBottom\n";
}
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "leak reported above")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#endif
