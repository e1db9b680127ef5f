/* fuzz_layout: memory layouts, in the options and through
 * weft_memory_install_layout.
 *
 * Input: a device capacity, a layout (kind, and for CUSTOM up to 300 pools of
 * any kind with any sizes: fz_layout), then buffer sizes. The same layout is
 * given to two devices of that capacity: one takes it in its options at
 * open, the other installs it on stream 0 after a default open. Both must
 * agree on whether the layout is valid (InvalidArgument or Validation when
 * not), and a layout weft accepts must serve: on each device that took it,
 * buffers of the sizes in the input (on streams 0..2) are created, written
 * and read back; a read returns the written bytes or a reservation failure
 * (Several of Unwritten with a memory-kind root), never other bytes or
 * another error. The usage must add up (bytes in use within bytes reserved,
 * reserved within the capacity), every pool report must be readable, and
 * after the buffers are released and the streams cleaned up nothing may stay
 * in use. Devices allocate through the bounded allocator of fuzz_support.h,
 * which must end empty. */
#include "fuzz/fuzz_support.h"

#define MAX_POOLS 300
#define MAX_BUFS  6
#define STREAMS   3

static uint64_t capacity_of(fz *f) {
  static const uint64_t caps[] = {0,
                                  1,
                                  63,
                                  64,
                                  4096,
                                  UINT64_C(1) << 20,
                                  UINT64_C(16) << 20,
                                  UINT64_C(64) << 20,
                                  UINT64_C(200) << 20};
  uint8_t sel = fz_u8(f);
  if (sel < 224) return caps[sel % (sizeof(caps) / sizeof(caps[0]))];
  return fz_u32(f) % ((UINT64_C(256) << 20) + 1);
}

static bool accepted(weft_status st, const char *what) {
  if (!st) return true;
  weft_error_kind k = weft_error_kind_of(st);
  FZ_CHECK(k == WEFT_ERR_INVALID_ARGUMENT || k == WEFT_ERR_VALIDATION ||
               k == WEFT_ERR_OUT_OF_MEMORY,
           "%s refused the layout with %s", what, fz_text(st));
  return false;
}

static uint8_t pattern(uint32_t buf, uint64_t j) {
  return (uint8_t)(buf * 37u + j * 11u + 1u);
}

/* Creates, writes and reads back the buffers; checks usage and cleanup. */
static void serve(weft_device *dev, uint64_t capacity, const uint64_t *sizes, size_t n) {
  weft_buffer bufs[MAX_BUFS];
  bool live[MAX_BUFS] = {false};
  static uint8_t data[65536], got[65536];
  for (size_t i = 0; i < n; i++) {
    weft_stream_id s = i % STREAMS;
    weft_status st = weft_buffer_create(dev, s, sizes[i], &bufs[i]);
    if (st) {
      /* Refused at once: only sizes no device could hold. */
      FZ_CHECK(weft_error_kind_of(st) == WEFT_ERR_INVALID_ARGUMENT ||
                   fz_memory_kind(weft_error_kind_of(st)),
               "create of %llu bytes: %s", (unsigned long long)sizes[i], fz_text(st));
      weft_error_free(st);
      continue;
    }
    live[i] = true;
    size_t len = sizes[i] < sizeof(data) ? (size_t)sizes[i] : sizeof(data);
    for (size_t j = 0; j < len; j++) data[j] = pattern((uint32_t)i, j);
    st = weft_buffer_write(dev, s, bufs[i], 0, data, len);
    FZ_CHECK(!st, "write: %s", fz_text(st));
  }
  for (size_t i = 0; i < n; i++) {
    if (!live[i]) continue;
    size_t len = sizes[i] < sizeof(got) ? (size_t)sizes[i] : sizeof(got);
    weft_status st =
        weft_buffer_read(dev, (weft_stream_id)(i % STREAMS + STREAMS), bufs[i], 0, got, len);
    if (st) {
      FZ_CHECK(fz_reservation_failure(st), "read of a %llu-byte buffer: %s",
               (unsigned long long)sizes[i], fz_text(st));
      weft_error_free(st);
      continue;
    }
    for (size_t j = 0; j < len; j++)
      FZ_CHECK(got[j] == pattern((uint32_t)i, j), "buffer %zu (%llu bytes) byte %zu: %u, not %u", i,
               (unsigned long long)sizes[i], j, got[j], pattern((uint32_t)i, j));
  }
  weft_memory_usage u = {0};
  weft_status st = weft_memory_usage_get(dev, &u);
  FZ_CHECK(!st, "usage: %s", fz_text(st));
  FZ_CHECK(u.bytes_in_use <= u.bytes_reserved, "in use %llu > reserved %llu",
           (unsigned long long)u.bytes_in_use, (unsigned long long)u.bytes_reserved);
  FZ_CHECK(!capacity || u.bytes_reserved <= capacity, "reserved %llu on a device of %llu",
           (unsigned long long)u.bytes_reserved, (unsigned long long)capacity);
  for (weft_stream_id s = 0; s < STREAMS; s++) {
    static weft_pool_report reports[WEFT_MAX_POOL_REPORTS];
    size_t cap = WEFT_MAX_POOL_REPORTS;
    st = weft_memory_report_get(dev, s, reports, &cap);
    FZ_CHECK(!st, "report: %s", fz_text(st));
    uint64_t in_use = 0;
    for (size_t i = 0; i < cap && i < WEFT_MAX_POOL_REPORTS; i++) {
      FZ_CHECK(reports[i].usage.bytes_in_use <= reports[i].usage.bytes_reserved,
               "pool %zu: in use %llu > reserved %llu", i,
               (unsigned long long)reports[i].usage.bytes_in_use,
               (unsigned long long)reports[i].usage.bytes_reserved);
      in_use += reports[i].usage.bytes_in_use;
    }
    (void)in_use;
  }
  for (size_t i = 0; i < n; i++) {
    if (!live[i]) continue;
    st = weft_buffer_release(dev, bufs[i]);
    FZ_CHECK(!st, "release: %s", fz_text(st));
  }
  for (weft_stream_id s = 0; s < STREAMS; s++) {
    st = weft_memory_cleanup(dev, s);
    FZ_CHECK(!st, "cleanup: %s", fz_text(st));
  }
  st = weft_memory_usage_get(dev, &u);
  FZ_CHECK(!st, "usage: %s", fz_text(st));
  FZ_CHECK(u.number_allocs == 0 && u.bytes_in_use == 0,
           "%llu allocations (%llu bytes) in use after every buffer was released and cleaned up",
           (unsigned long long)u.number_allocs, (unsigned long long)u.bytes_in_use);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  static weft_pool_config pools[MAX_POOLS];
  uint64_t capacity = capacity_of(&f);
  weft_layout layout = fz_layout(&f, pools, MAX_POOLS);
  uint64_t sizes[MAX_BUFS];
  size_t n = fz_below(&f, MAX_BUFS + 1);
  for (size_t i = 0; i < n; i++) {
    sizes[i] = fz_size(&f);
    /* Beyond what a test can back when the device has no cap of its own. */
    if (!capacity && sizes[i] > (UINT64_C(1) << 24)) sizes[i] = sizes[i] % (UINT64_C(1) << 24) + 1;
  }

  fz_alloc_state sa, sb;
  weft_allocator aa = fz_allocator(&sa), ab = fz_allocator(&sb);
  weft_device_options o;
  weft_device_options_init(&o);
  o.memory_capacity = capacity;
  o.scheduler = WEFT_SCHEDULER_THREAD;

  /* A: the layout in the options. */
  o.allocator = &aa;
  o.memory_layout = &layout;
  weft_device *da = NULL;
  weft_status st = weft_device_open(&o, &da);
  bool ok_a = accepted(st, "weft_device_open");
  weft_error_free(st);

  /* B: a default open, then the layout installed on stream 0. */
  o.allocator = &ab;
  o.memory_layout = NULL;
  weft_device *db = NULL;
  st = weft_device_open(&o, &db);
  if (st) {
    /* Capacities under 64 bytes are refused, as what they are (item 30 of
     * issue 12), whatever the layout: nothing to compare. */
    FZ_CHECK(weft_error_kind_of(st) == WEFT_ERR_INVALID_ARGUMENT && capacity < 64 &&
                 strstr(weft_error_message(st), "memory_capacity") && !ok_a,
             "default open of capacity %llu: %s (the layout's open: %s)",
             (unsigned long long)capacity, fz_text(st), ok_a ? "accepted" : "refused");
    weft_error_free(st);
    weft_device_close(da);
    fz_alloc_check_empty(&sa);
    fz_alloc_check_empty(&sb);
    return 0;
  }
  st = weft_memory_install_layout(db, 0, &layout);
  bool ok_b = accepted(st, "weft_memory_install_layout");
  char why[512];
  snprintf(why, sizeof(why), "%s", st ? fz_text(st) : "Ok");
  weft_error_free(st);
  FZ_CHECK(ok_a == ok_b, "open %s the layout, install %s it (%s)", ok_a ? "accepts" : "refuses",
           ok_b ? "accepts" : "refuses", why);

  if (ok_a) serve(da, capacity, sizes, n);
  if (ok_b) serve(db, capacity, sizes, n);
  weft_device_close(da);
  weft_device_close(db);
  fz_alloc_check_empty(&sa);
  fz_alloc_check_empty(&sb);
  return 0;
}
