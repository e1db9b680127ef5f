/* fuzz_device_options: weft_device_open with every field of
 * weft_device_options drawn from the input (struct_size included: the fields
 * past it must be ignored), then a short workload on the device it opens.
 *
 * A reference written here from weft.h says which options are invalid
 * (a struct_size that is not one the struct has had, an unknown backend,
 * strategy, scheduler or persistent policy, max_streams outside 1..64,
 * max_tasks 0, an allocator with a NULL function, a memory_capacity of 1 to
 * 63 bytes (refused naming memory_capacity), a failpoint spec picked from a
 * list of known verdicts): those must be refused with
 * InvalidArgument and leave *out NULL. Options the reference finds valid,
 * with no layout, no cap and the host backend, must open. A capped device or
 * one with a layout may refuse (InvalidArgument, Validation). The CUDA
 * backend has no driver here: it must fail cleanly, or open if one is found.
 *
 * On a device that opened: weft_device_info_get must report the options
 * (backend, max_streams, capacity), then buffers are created on several
 * streams, written, copied by a kernel and read back. Every read returns the
 * model's bytes or, on a capped device or one with a layout or an alloc
 * failpoint, a reservation failure; a launch#1 failpoint makes the first
 * copy's output fail with its kind. The device allocates through the bounded
 * allocator (fuzz_support.h), which must end empty. */
#include "fuzz/fuzz_support.h"

#include <stddef.h>
#include <string.h>

#define MAX_BUFS 4

typedef struct spec_case {
  const char *spec;
  bool valid;
  bool first_launch_fails; /* launch#1 */
  bool alloc_fails;
} spec_case;

static const spec_case specs[] = {
    {NULL, true, false, false},
    {"", true, false, false},
    {" ; ;", true, false, false},
    {"launch#1=Validation", true, true, false},
    {"kernel:copy=Generic", true, true, false},
    {"kernel:copy=Timeout", true, true, false}, /* Timeout may be injected, like Generic */
    {"kernel:other=Generic;launch#99=Unknown", true, false, false},
    {"alloc#1=OutOfMemory", true, false, true},
    {"alloc#2=StorageMappingFailed;poison#1000", true, false, true},
    {"launch#0=Generic", false, false, false},
    {"kernel:copy", false, false, false},
    {"poison#1=Generic", false, false, false},
    {"alloc#1=Ok", false, false, false},
    {"bogus", false, false, false},
    /* Item 30 of issue 12: the kinds weft reports itself are no failpoint kinds. */
    {"launch#1=Skipped", false, false, false},
    {"kernel:copy=TornDown", false, false, false},
    {"alloc#1=Several", false, false, false},
    {"kernel:other=Generic;launch#2=Unwritten", false, false, false},
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

static weft_status copy_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  if (ctx->block_idx[0] | ctx->block_idx[1] | ctx->block_idx[2]) return NULL; /* block 0 copies */
  uint8_t *dst = ctx->buffers[1];
  const uint8_t *src = ctx->buffers[0];
  for (uint64_t j = 0; j < ctx->sizes[1]; j++) dst[j] = (uint8_t)(src[j % ctx->sizes[0]] ^ 0x5a);
  return NULL;
}

static void *null_alloc(void *self, size_t size, size_t align) {
  (void)self, (void)size, (void)align;
  return NULL;
}

static uint64_t capacity_of(fz *f) {
  uint8_t sel = fz_u8(f);
  if (sel < 128) return 0;
  if (sel < 160) return UINT64_C(1) << (sel % 64); /* item 29: 2^58 and up */
  if (sel < 200) return fz_u32(f);
  return fz_size(f);
}

/* Copies |len| bytes into |dst| through the public struct, as a caller would. */
static void workload(weft_device *dev, const weft_device_options *o, const spec_case *sc, bool lax,
                     fz *f) {
  weft_device_info info = {0};
  weft_status st = weft_device_info_get(dev, &info);
  FZ_CHECK(!st, "info: %s", fz_text(st));
  FZ_CHECK(info.backend == o->backend, "backend %d, asked %d", info.backend, o->backend);
  if (o->backend == WEFT_BACKEND_HOST) {
    FZ_CHECK(info.max_streams == o->max_streams, "max_streams %u, asked %u", info.max_streams,
             o->max_streams);
    FZ_CHECK(info.total_memory == o->memory_capacity, "total_memory %llu, capacity %llu",
             (unsigned long long)info.total_memory, (unsigned long long)o->memory_capacity);
  }
  weft_kernel k;
  st = weft_kernel_host(dev, "copy", copy_kernel, NULL, &k);
  if (o->backend != WEFT_BACKEND_HOST) {
    FZ_CHECK(st, "a host kernel on a CUDA device");
    weft_error_free(st);
    return;
  }
  FZ_CHECK(!st, "kernel: %s", fz_text(st));
  size_t n = 1 + fz_below(f, MAX_BUFS);
  weft_buffer bufs[MAX_BUFS];
  uint64_t sizes[MAX_BUFS];
  bool live[MAX_BUFS] = {false};
  static uint8_t model[MAX_BUFS][65536], got[65536];
  bool defined[MAX_BUFS] = {false}, failed[MAX_BUFS] = {false};
  for (size_t i = 0; i < n; i++) {
    sizes[i] = 1 + fz_u16(f);
    weft_stream_id s = fz_u64(f);
    if (getenv("FZ_TRACE"))
      fprintf(stderr, "create %zu: %llu bytes on stream %llu\n", i, (unsigned long long)sizes[i],
              (unsigned long long)s);
    st = weft_buffer_create(dev, s, sizes[i], &bufs[i]);
    if (st) {
      FZ_CHECK(lax && fz_memory_kind(weft_error_kind_of(st)), "create of %llu bytes: %s",
               (unsigned long long)sizes[i], fz_text(st));
      weft_error_free(st);
      continue;
    }
    live[i] = true;
    for (uint64_t j = 0; j < sizes[i]; j++) model[i][j] = (uint8_t)(i * 31 + j * 7 + 3);
    st = weft_buffer_write(dev, s, bufs[i], 0, model[i], sizes[i]);
    FZ_CHECK(!st, "write: %s", fz_text(st));
    defined[i] = true;
  }
  /* One copy: buffer 0 -> buffer n-1 (the same buffer when n == 1). */
  if (live[0] && live[n - 1]) {
    weft_binding b[2] = {{bufs[0], 0, WEFT_WHOLE, WEFT_READ},
                         {bufs[n - 1], 0, WEFT_WHOLE, WEFT_WRITE}};
    uint32_t grid[3] = {1 + fz_below(f, 4), 1, 1}, block[3] = {fz_u32(f) | 1, 1, 1};
    weft_stream_id ls = fz_u64(f);
    if (getenv("FZ_TRACE"))
      fprintf(stderr, "copy %zu -> %zu on stream %llu, grid %u block %u\n", (size_t)0, n - 1,
              (unsigned long long)ls, grid[0], block[0]);
    st = weft_launch(dev, ls, k, grid, block, b, 2, NULL, 0);
    FZ_CHECK(!st, "launch: %s", fz_text(st));
    uint8_t src[65536];
    memcpy(src, model[0], sizes[0]);
    for (uint64_t j = 0; j < sizes[n - 1]; j++)
      model[n - 1][j] = (uint8_t)(src[j % sizes[0]] ^ 0x5a);
    if (sc->first_launch_fails) failed[n - 1] = true;
  }
  for (size_t i = 0; i < n; i++) {
    if (!live[i]) continue;
    weft_stream_id rs = fz_u64(f);
    if (getenv("FZ_TRACE"))
      fprintf(stderr, "read %zu (%llu bytes) on stream %llu\n", i, (unsigned long long)sizes[i],
              (unsigned long long)rs);
    st = weft_buffer_read(dev, rs, bufs[i], 0, got, sizes[i]);
    if (st) {
      bool ok = lax ? fz_reservation_failure(st) : false;
      if (failed[i] && weft_error_kind_of(st) == WEFT_ERR_SEVERAL && weft_error_count(st) == 1) {
        weft_status root = weft_error_root(weft_error_at(st, 0));
        weft_error_kind want = sc->spec[0] == 'l'             ? WEFT_ERR_VALIDATION
                               : strstr(sc->spec, "=Timeout") ? WEFT_ERR_TIMEOUT
                                                              : WEFT_ERR_GENERIC;
        ok = ok || weft_error_kind_of(root) == want;
      }
      FZ_CHECK(ok, "read of buffer %zu (%llu bytes): %s", i, (unsigned long long)sizes[i],
               fz_text(st));
      weft_error_free(st);
      continue;
    }
    FZ_CHECK(!failed[i], "the read of a failed launch's output succeeded");
    for (uint64_t j = 0; defined[i] && j < sizes[i]; j++)
      FZ_CHECK(got[j] == model[i][j], "buffer %zu byte %llu: %u, not %u", i, (unsigned long long)j,
               got[j], model[i][j]);
  }
  weft_device_stats stats = {0};
  st = weft_device_stats_get(dev, &stats);
  FZ_CHECK(!st, "stats: %s", fz_text(st));
  for (size_t i = 0; i < n; i++) {
    if (!live[i]) continue;
    st = weft_buffer_release(dev, bufs[i]);
    FZ_CHECK(!st, "release: %s", fz_text(st));
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  fz_alloc_state as;
  weft_allocator alloc = fz_allocator(&as);
  weft_allocator broken = alloc;
  static weft_pool_config pools[8];
  weft_layout layout;

  weft_device_options o;
  weft_device_options_init(&o);
  uint8_t sel = fz_u8(&f);
  size_t base = offsetof(weft_device_options, allocator);
  if (sel >= 16)
    o.struct_size = sel < 240 ? (uint32_t)sizeof(o) : fz_u32(&f);
  else
    o.struct_size = (uint32_t)(base + sel * (sizeof(o) - base) / 16);
  sel = fz_u8(&f);
  o.backend = sel < 240 ? WEFT_BACKEND_HOST : sel < 248 ? WEFT_BACKEND_CUDA : (weft_backend)sel;
  o.ordinal = (int)fz_u8(&f) - 2;
  sel = fz_u8(&f);
  o.max_streams = sel < 200 ? 1 + sel % 8 : sel < 250 ? sel - 200 : fz_u32(&f);
  sel = fz_u8(&f);
  o.max_tasks = sel < 200 ? 1 + sel % 64 : sel < 250 ? 0 : fz_u32(&f);
  sel = fz_u8(&f);
  o.strategy = sel < 250 ? (weft_strategy)(sel % 2) : (weft_strategy)sel;
  o.memory_capacity = capacity_of(&f);
  const spec_case *sc = &specs[fz_below(&f, NSPECS)];
  o.failpoints = sc->spec;
  sel = fz_u8(&f);
  if (sel < 240) {
    o.allocator = &alloc;
  } else if (sel < 250) {
    broken.alloc = sel & 1 ? NULL : null_alloc;
    broken.free = sel & 2 ? NULL : alloc.free;
    o.allocator = &broken;
  } else {
    o.allocator = NULL; /* the default (libc in sanitizer builds) */
  }
  sel = fz_u8(&f);
  if (sel >= 200) {
    layout = fz_layout(&f, pools, sizeof(pools) / sizeof(pools[0]));
    o.memory_layout = &layout;
  }
  /* A layout or a cap may ask for pages of any size: the bounded allocator
   * turns those past what a fuzzing machine has into OutOfMemory. */
  if (!o.allocator && (o.memory_layout || o.memory_capacity)) o.allocator = &alloc;
  sel = fz_u8(&f);
  o.persistent_memory = sel < 250 ? sel % 4 : (int)sel - 256;
  sel = fz_u8(&f);
  o.max_pending_commands = sel < 128 ? 0 : sel < 250 ? sel : fz_u32(&f);
  sel = fz_u8(&f);
  o.scheduler = sel < 250 ? (weft_scheduler_mode)(sel % 3) : (weft_scheduler_mode)sel;

  /* What weft sees: the defaults, then the first struct_size bytes. */
  weft_device_options eff;
  weft_device_options_init(&eff);
  /* The sizes the struct has had (a field's start or end); a size inside a
   * field would tear it (test_options_struct_size.c). */
  const size_t known[] = {base,
                          offsetof(weft_device_options, memory_layout),
                          offsetof(weft_device_options, persistent_memory),
                          offsetof(weft_device_options, max_pending_commands),
                          offsetof(weft_device_options, scheduler),
                          offsetof(weft_device_options, scheduler) + sizeof(weft_scheduler_mode),
                          sizeof(weft_device_options)};
  bool size_ok = false;
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
    size_ok |= o.struct_size == known[i];
  if (size_ok) memcpy(&eff, &o, o.struct_size);
  bool tiny_capacity = eff.memory_capacity && eff.memory_capacity < 64;
  bool invalid_else =
      !size_ok || (eff.backend != WEFT_BACKEND_HOST && eff.backend != WEFT_BACKEND_CUDA) ||
      eff.max_streams == 0 || eff.max_streams > 64 || eff.max_tasks == 0 ||
      (eff.strategy != WEFT_STRATEGY_INTERLEAVE && eff.strategy != WEFT_STRATEGY_SEQUENTIAL) ||
      (eff.scheduler != WEFT_SCHEDULER_DEFAULT && eff.scheduler != WEFT_SCHEDULER_THREAD &&
       eff.scheduler != WEFT_SCHEDULER_COMBINING) ||
      (eff.allocator && (!eff.allocator->alloc || !eff.allocator->free)) ||
      eff.persistent_memory < 0 || eff.persistent_memory > 3 ||
      (eff.backend == WEFT_BACKEND_HOST && !sc->valid);
  bool invalid = tiny_capacity || invalid_else;
  bool broken_alloc = eff.allocator == &broken; /* null_alloc: open runs out of memory */
  /* A cap of 1 GiB and more, however large, holds the few small buffers of
   * the workload: their reads must succeed (item 29 of issue 12: pages are
   * sized from the request, not from the capacity). */
  bool roomy = eff.memory_capacity >= (UINT64_C(1) << 30);
  bool lax = (eff.memory_capacity && !roomy) || eff.memory_layout || sc->alloc_fails;
  bool must_open = !invalid && !lax && !broken_alloc && eff.backend == WEFT_BACKEND_HOST;

  weft_device *dev = (weft_device *)(uintptr_t)1;
  weft_status st = weft_device_open(&o, &dev);
  if (st) {
    FZ_CHECK(!dev, "a refused open left *out set");
    FZ_CHECK(!must_open, "valid options refused: %s", fz_text(st));
    weft_error_kind k = weft_error_kind_of(st);
    /* An allocator that fails, or a missing CUDA driver, may fail the open
     * before the memory policy and the failpoints are read. */
    if (invalid && eff.backend == WEFT_BACKEND_HOST)
      FZ_CHECK(k == WEFT_ERR_INVALID_ARGUMENT || (broken_alloc && k == WEFT_ERR_OUT_OF_MEMORY),
               "invalid options refused with %s", fz_text(st));
    /* Item 30: a capacity under 64 bytes is refused as what it is. */
    if (tiny_capacity && !invalid_else && !broken_alloc && eff.backend == WEFT_BACKEND_HOST)
      FZ_CHECK(strstr(weft_error_message(st), "memory_capacity"),
               "a capacity of %llu refused as: %s", (unsigned long long)eff.memory_capacity,
               fz_text(st));
    else if (eff.backend == WEFT_BACKEND_HOST)
      FZ_CHECK(k == WEFT_ERR_INVALID_ARGUMENT || k == WEFT_ERR_VALIDATION ||
                   k == WEFT_ERR_OUT_OF_MEMORY,
               "refused with %s", fz_text(st));
    weft_error_free(st);
  } else {
    FZ_CHECK(!invalid,
             "invalid options accepted (struct_size %u, backend %d, streams %u, tasks %u, "
             "strategy %d, scheduler %d, policy %d, spec '%s')",
             o.struct_size, (int)eff.backend, eff.max_streams, eff.max_tasks, (int)eff.strategy,
             (int)eff.scheduler, eff.persistent_memory, sc->spec ? sc->spec : "(null)");
    FZ_CHECK(dev, "open succeeded without a device");
    if (getenv("FZ_TRACE"))
      fprintf(stderr,
              "opened: struct_size %u backend %d streams %u tasks %u strategy %d capacity %llu "
              "spec '%s' allocator %p layout %p policy %d pending %u scheduler %d\n",
              o.struct_size, (int)eff.backend, eff.max_streams, eff.max_tasks, (int)eff.strategy,
              (unsigned long long)eff.memory_capacity, sc->spec ? sc->spec : "(null)",
              (const void *)eff.allocator, (const void *)eff.memory_layout, eff.persistent_memory,
              eff.max_pending_commands, (int)eff.scheduler);
    workload(dev, &eff, sc, lax, &f);
    weft_device_close(dev);
  }
  fz_alloc_check_empty(&as);
  return 0;
}
