/* weft_device_options.struct_size inside a field (found by fuzz_device_options):
 * weft copied struct_size bytes of the caller's options, so a size ending in
 * the middle of |allocator| kept half of the caller's pointer and half of
 * the default NULL, and weft_device_open dereferenced the wild result
 * (SEGV in validate_options). Only the sizes the struct has had are valid. */
#include <criterion/criterion.h>

#include <stddef.h>
#include <stdint.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

static bool is_field_boundary(size_t size) {
  const size_t sizes[] = {
      offsetof(weft_device_options, allocator),
      offsetof(weft_device_options, memory_layout),
      offsetof(weft_device_options, persistent_memory),
      offsetof(weft_device_options, max_pending_commands),
      offsetof(weft_device_options, scheduler),
      offsetof(weft_device_options, scheduler) + sizeof(weft_scheduler_mode),
      sizeof(weft_device_options),
  };
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    if (size == sizes[i]) return true;
  return false;
}

Test(device_options, struct_size_inside_the_allocator_pointer_is_refused) {
  weft_allocator libc = weft_allocator_libc();
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &libc;
  o.struct_size = (uint32_t)(offsetof(weft_device_options, allocator) + 4);
  weft_device *dev = (weft_device *)&o;
  weft_status st = weft_device_open(&o, &dev);
  cr_assert_not_null(st, "a struct_size inside |allocator| was accepted");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s",
               weft_error_kind_name(weft_error_kind_of(st)));
  cr_assert_null(dev);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(device_options, every_struct_size_between_releases_is_refused) {
  weft_allocator libc = weft_allocator_libc();
  const weft_layout layout = {.kind = WEFT_LAYOUT_EXCLUSIVE_PAGES};
  for (size_t size = offsetof(weft_device_options, allocator); size <= sizeof(weft_device_options);
       size++) {
    weft_device_options o;
    weft_device_options_init(&o);
    o.allocator = &libc;
    o.memory_layout = &layout;
    o.struct_size = (uint32_t)size;
    weft_device *dev = NULL;
    weft_status st = weft_device_open(&o, &dev);
    if (is_field_boundary(size)) {
      cr_assert_null(st, "struct_size %zu (a field boundary) was refused", size);
      cr_assert_not_null(dev);
      weft_device_close(dev);
    } else {
      cr_assert_not_null(st, "struct_size %zu (inside a field) was accepted", size);
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
      cr_assert_null(dev);
      weft_error_free(st);
    }
  }
  ASSERT_NO_LEAKS();
}
