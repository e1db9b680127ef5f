/* The default allocator (core/alloc.c). In a jemalloc build it frees with
 * sdallocx and the size the caller allocated with, so jemalloc skips the
 * extent lookup a plain dallocx makes. The test interposes sdallocx: weft's
 * call resolves to the definition below (the program's own symbol comes
 * first, static or shared weft alike), which records it and forwards to
 * jemalloc's. Sanitizer builds run on libc, where there is nothing to check. */
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/weft.h>

/* jemalloc's prototype (<jemalloc/jemalloc.h> is not included: it would
 * declare it with attributes of its own). */
void sdallocx(void *ptr, size_t size, int flags);

static void *watched;    /* the block whose free is recorded */
static size_t seen_size; /* the size sdallocx got for it; 0: not freed that way */
static int seen_calls;

void sdallocx(void *ptr, size_t size, int flags) {
  static void (*real)(void *, size_t, int);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "sdallocx");
  if (ptr && ptr == watched) {
    seen_size = size;
    seen_calls++;
  }
  if (real) real(ptr, size, flags);
}

TestSuite(alloc, .timeout = 30);

static void expect_sized_free(size_t size, size_t align, size_t expected) {
  weft_allocator a = weft_allocator_default();
  void *p = a.alloc(a.self, size, align);
  cr_assert_not_null(p, "the default allocator refused %zu bytes", size);
  cr_assert_eq((uintptr_t)p % (align ? align : 1), 0, "%zu bytes not aligned to %zu", size, align);
  watched = p;
  seen_size = 0;
  seen_calls = 0;
  a.free(a.self, p, size, align);
  watched = NULL;
  cr_assert_eq(seen_calls, 1,
               "freeing %zu bytes (align %zu) did not go through sdallocx (%d calls): the size "
               "the caller passed was ignored",
               size, align, seen_calls);
  cr_assert_eq(seen_size, expected, "sdallocx got size %zu for a block of %zu bytes", seen_size,
               size);
}

Test(alloc, default_allocator_frees_with_the_size_it_allocated) {
  if (!weft_allocator_default_is_jemalloc())
    cr_skip_test("the default allocator is libc in this build (no sized free to check)");
  expect_sized_free(1000, 16, 1000);
  expect_sized_free(64, 64, 64);
  expect_sized_free(3 << 20, 4096, 3 << 20); /* a large extent */
  expect_sized_free(0, 8, 1);                /* a zero-size request was allocated as 1 byte */
}
