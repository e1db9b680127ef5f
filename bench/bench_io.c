/* Host I/O benchmarks: weft_buffer_write and weft_buffer_read on a host
 * device against memcpy of the same bytes, 4 KiB .. 512 MiB. See
 * docs/benchmarks.md, "Host writes and reads".
 *
 *   io_write_<size>   one op = weft_buffer_write of <size> bytes into a warm
 *                     buffer (the same range each time); a run ends with
 *                     weft_sync, inside the timed part, so every byte is in
 *                     the buffer when the clock stops
 *   io_read_<size>    one op = weft_buffer_read of <size> bytes into a warm
 *                     host destination (a read blocks until the bytes are
 *                     there)
 *   io_memcpy_<size>  baseline of both: memcpy of <size> bytes between two
 *                     warm host blocks
 *
 * Each run moves at least 16 MiB (one op from 16 MiB up). The harness runs a
 * benchmark and its baseline in the same round (A B A B ...) and gives the
 * ratio with the spread of the per-round ratios (a time ratio: the
 * bandwidth ratio weft / memcpy is its inverse). The "io" group gives each
 * benchmark's median GB/s and, for the largest size, the process's peak
 * resident memory during a write and a read over what was resident before
 * it (VmHWM after clear_refs; a note says n/a where /proc does not allow
 * it). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

enum { IO_SIZES = 8 };
static const uint64_t io_sizes[IO_SIZES] = {4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB,
                                            4 * MiB, 16 * MiB, 64 * MiB,  512 * MiB};
static const char *const io_names[IO_SIZES] = {"4k", "64k", "256k", "1m",
                                               "4m", "16m", "64m",  "512m"};

enum { OP_WRITE, OP_READ, OP_MEMCPY, NOPS };

/* One device for every I/O benchmark, opened on first setup. */
static weft_device *io_dev;
static unsigned io_users;

typedef struct io_size {
  uint8_t *src, *dst; /* warm host blocks */
  weft_buffer buf;    /* a warm weft buffer on stream 0 */
  unsigned users;
} io_size;
static io_size io_state[IO_SIZES];

enum { K_GBPS, K_PEAK_RSS, K_PEAK_EXTRA };

static const wb_group io_group = {
    .title = "io: host writes and reads against memcpy (median bandwidth over the runs, warm-up "
             "included; the table's ratio is a time ratio: bandwidth weft / memcpy = 1 / ratio)",
    .json_key = "io",
    .legend = "peak_rss_mib: the process's peak RSS during a 512 MiB write or read; "
              "over_resident_mib: how far it rose over what was resident before (source and "
              "buffer included there)",
    .counters = {
        {"gb_per_s", WB_MEDIAN, 2}, {"peak_rss_mib", WB_MAX, 1}, {"over_resident_mib", WB_MAX, 1}}};

typedef struct io_bench_state {
  int op;
  int size;
  bool peak_na; /* the peak RSS could not be measured */
} io_bench_state;

static uint64_t io_iterations(int size) {
  uint64_t n = 16 * MiB / io_sizes[size];
  return n ? n : 1;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) wb_fatal("out of memory (%zu bytes)", n);
  return p;
}

static void io_acquire(int size) {
  if (!io_users++) {
    weft_device_options o;
    weft_device_options_init(&o);
    wb_check(weft_device_open(&o, &io_dev), "io: open the device");
  }
  io_size *s = &io_state[size];
  if (s->users++) return;
  size_t n = (size_t)io_sizes[size];
  s->src = xmalloc(n);
  s->dst = xmalloc(n);
  for (size_t i = 0; i < n; i++) s->src[i] = (uint8_t)(i * 7u + 3u); /* faults them in */
  memset(s->dst, 0, n);
  wb_check(weft_buffer_create(io_dev, 0, io_sizes[size], &s->buf), "io: create a buffer");
  /* Warm: the buffer's pages are faulted in before any timed run. */
  wb_check(weft_buffer_write(io_dev, 0, s->buf, 0, s->src, io_sizes[size]), "io: first write");
  wb_check(weft_sync(io_dev, 0), "io: sync");
}

static void io_release(int size) {
  io_size *s = &io_state[size];
  if (!--s->users) {
    wb_check(weft_buffer_release(io_dev, s->buf), "io: release");
    free(s->src);
    free(s->dst);
    s->src = s->dst = NULL;
  }
  if (!--io_users) {
    weft_device_close(io_dev);
    io_dev = NULL;
  }
}

/* Peak RSS accounting (Linux): "5" to clear_refs resets VmHWM to VmRSS. */
static int64_t status_kib(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  size_t kl = strlen(key);
  int64_t v = -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
      v = strtoll(line + kl + 1, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

static bool reset_peak(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

/* arg: the op * IO_SIZES + the size's index. */
static void io_setup(void **state, wb_ctx *c) {
  io_bench_state *b = wb_calloc(1, sizeof(*b));
  b->op = wb_arg(c) / IO_SIZES;
  b->size = wb_arg(c) % IO_SIZES;
  io_acquire(b->size);
  *state = b;
}

static uint64_t io_run_op(void *state, uint64_t iterations, wb_ctx *c) {
  io_bench_state *b = state;
  io_size *s = &io_state[b->size];
  uint64_t n = io_sizes[b->size];
  bool measure_peak = b->size == IO_SIZES - 1 && b->op != OP_MEMCPY;
  int64_t before = -1;
  if (measure_peak && reset_peak()) before = status_kib("VmRSS");
  uint64_t t0 = wb_now_ns();
  switch (b->op) {
  case OP_WRITE:
    for (uint64_t i = 0; i < iterations; i++)
      wb_check(weft_buffer_write(io_dev, 0, s->buf, 0, s->src, n), "io: write");
    wb_check(weft_sync(io_dev, 0), "io: sync");
    break;
  case OP_READ:
    for (uint64_t i = 0; i < iterations; i++)
      wb_check(weft_buffer_read(io_dev, 0, s->buf, 0, s->dst, n), "io: read");
    break;
  default:
    for (uint64_t i = 0; i < iterations; i++) {
      memcpy(s->dst, s->src, (size_t)n);
      __asm__ volatile("" : : "r"(s->dst) : "memory"); /* every copy happens */
    }
    break;
  }
  uint64_t ns = wb_now_ns() - t0;
  int64_t hwm = before >= 0 ? status_kib("VmHWM") : -1;
  if (hwm >= 0) {
    wb_report(c, K_PEAK_RSS, (double)hwm / 1024.0);
    wb_report(c, K_PEAK_EXTRA, (double)(hwm - before) / 1024.0);
  } else if (measure_peak) {
    b->peak_na = true;
  }
  wb_report(c, K_GBPS, ns ? (double)(n * iterations) / (double)ns : 0.0); /* bytes/ns = GB/s */
  return ns;
}

static void io_teardown(void *state, wb_ctx *c) {
  io_bench_state *b = state;
  if (b->peak_na) wb_note(c, "%s: peak RSS n/a (no /proc/self/clear_refs)", wb_name(c));
  if (b->op == OP_READ) { /* the reads returned what the first write put there */
    io_size *s = &io_state[b->size];
    if (memcmp(s->src, s->dst, (size_t)io_sizes[b->size]) != 0)
      wb_fatal("io_read_%s: the bytes read differ from the bytes written", io_names[b->size]);
  }
  io_release(b->size);
  free(b);
}

#define IO_BENCHES(i, label, big)                                                                  \
  {.name = "io_write_" label,                                                                      \
   .description = "weft_buffer_write of " label "B into a warm buffer, weft_sync at the end",      \
   .baseline = "io_memcpy_" label,                                                                 \
   .heavy = big,                                                                                   \
   .group = &io_group,                                                                             \
   .arg = OP_WRITE * IO_SIZES + i,                                                                 \
   .setup = io_setup,                                                                              \
   .run = io_run_op,                                                                               \
   .teardown = io_teardown},                                                                       \
      {.name = "io_read_" label,                                                                   \
       .description = "weft_buffer_read of " label "B into a warm host block",                     \
       .baseline = "io_memcpy_" label,                                                             \
       .heavy = big,                                                                               \
       .group = &io_group,                                                                         \
       .arg = OP_READ * IO_SIZES + i,                                                              \
       .setup = io_setup,                                                                          \
       .run = io_run_op,                                                                           \
       .teardown = io_teardown},                                                                   \
  {                                                                                                \
    .name = "io_memcpy_" label,                                                                    \
    .description = "baseline: memcpy of " label "B between two warm host blocks", .heavy = big,    \
    .group = &io_group, .arg = OP_MEMCPY * IO_SIZES + i, .setup = io_setup, .run = io_run_op,      \
    .teardown = io_teardown                                                                        \
  }

static wb_bench io_benches[] = {
    IO_BENCHES(0, "4k", false), IO_BENCHES(1, "64k", false), IO_BENCHES(2, "256k", false),
    IO_BENCHES(3, "1m", false), IO_BENCHES(4, "4m", false),  IO_BENCHES(5, "16m", false),
    IO_BENCHES(6, "64m", true), IO_BENCHES(7, "512m", true),
};

void wb_register_io(void) {
  for (size_t i = 0; i < sizeof(io_benches) / sizeof(io_benches[0]); i++) {
    io_benches[i].iterations = io_iterations((int)(i / NOPS));
    wb_register(&io_benches[i]);
  }
}
