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
 * benchmark and its baseline in the same round (A B A B ...); the "io"
 * section pairs the runs of each round and reports the median ratio of
 * bandwidths (weft / memcpy) with its min and max over the rounds, and, for
 * the largest size, the process's peak resident memory during a write and a
 * read over what was resident before it (VmHWM after clear_refs; n/a where
 * /proc does not allow it). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

enum { IO_SIZES = 8, IO_MAX_RUNS = 4096 };
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

typedef struct io_run {
  uint64_t ns, bytes;
} io_run;

typedef struct io_record {
  io_run runs[IO_MAX_RUNS];
  unsigned n;
  bool ran;
  int64_t
      peak_extra; /* largest-size write/read: peak RSS over what was resident before (-1: n/a) */
  int64_t peak_total;
} io_record;
static io_record io_records[NOPS][IO_SIZES];

typedef struct io_bench_state {
  int op;
  int size;
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

static void io_setup(void **state, int op, int size) {
  io_bench_state *b = xmalloc(sizeof(*b));
  b->op = op;
  b->size = size;
  io_acquire(size);
  io_records[op][size].ran = true;
  io_records[op][size].peak_extra = -1;
  io_records[op][size].peak_total = -1;
  *state = b;
}

static uint64_t io_run_op(void *state, uint64_t iterations) {
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
  io_record *r = &io_records[b->op][b->size];
  if (before >= 0) {
    int64_t hwm = status_kib("VmHWM");
    if (hwm >= 0) {
      int64_t extra = (hwm - before) * 1024;
      if (extra > r->peak_extra) r->peak_extra = extra;
      if (hwm * 1024 > r->peak_total) r->peak_total = hwm * 1024;
    }
  }
  if (r->n < IO_MAX_RUNS) r->runs[r->n++] = (io_run){ns, n * iterations};
  return ns;
}

static void io_teardown(void *state) {
  io_bench_state *b = state;
  if (b->op == OP_READ) { /* the reads returned what the first write put there */
    io_size *s = &io_state[b->size];
    if (memcmp(s->src, s->dst, (size_t)io_sizes[b->size]) != 0)
      wb_fatal("io_read_%s: the bytes read differ from the bytes written", io_names[b->size]);
  }
  io_release(b->size);
  free(b);
}

#define IO_SETUPS(i)                                                                               \
  static void io_setup_w##i(void **s) {                                                            \
    io_setup(s, OP_WRITE, i);                                                                      \
  }                                                                                                \
  static void io_setup_r##i(void **s) {                                                            \
    io_setup(s, OP_READ, i);                                                                       \
  }                                                                                                \
  static void io_setup_m##i(void **s) {                                                            \
    io_setup(s, OP_MEMCPY, i);                                                                     \
  }
IO_SETUPS(0)
IO_SETUPS(1)
IO_SETUPS(2)
IO_SETUPS(3)
IO_SETUPS(4)
IO_SETUPS(5)
IO_SETUPS(6)
IO_SETUPS(7)

#define IO_BENCHES(i, label, big)                                                                  \
  {.name = "io_write_" label,                                                                      \
   .description = "weft_buffer_write of " label "B into a warm buffer, weft_sync at the end",      \
   .baseline = "io_memcpy_" label,                                                                 \
   .heavy = big,                                                                                   \
   .setup = io_setup_w##i,                                                                         \
   .run = io_run_op,                                                                               \
   .teardown = io_teardown},                                                                       \
      {.name = "io_read_" label,                                                                   \
       .description = "weft_buffer_read of " label "B into a warm host block",                     \
       .baseline = "io_memcpy_" label,                                                             \
       .heavy = big,                                                                               \
       .setup = io_setup_r##i,                                                                     \
       .run = io_run_op,                                                                           \
       .teardown = io_teardown},                                                                   \
  {                                                                                                \
    .name = "io_memcpy_" label,                                                                    \
    .description = "baseline: memcpy of " label "B between two warm host blocks", .heavy = big,    \
    .setup = io_setup_m##i, .run = io_run_op, .teardown = io_teardown                              \
  }

static wb_bench io_benches[] = {
    IO_BENCHES(0, "4k", false), IO_BENCHES(1, "64k", false), IO_BENCHES(2, "256k", false),
    IO_BENCHES(3, "1m", false), IO_BENCHES(4, "4m", false),  IO_BENCHES(5, "16m", false),
    IO_BENCHES(6, "64m", true), IO_BENCHES(7, "512m", true),
};

/* ---- the report section ------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double gbps(io_run r) {
  return r.ns ? (double)r.bytes / (double)r.ns : 0.0; /* bytes/ns = GB/s */
}

typedef struct io_ratio {
  unsigned n;
  double median, min, max, weft_gbps, memcpy_gbps;
} io_ratio;

static double median_sorted(const double *v, unsigned n) {
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* Pairs run k of |op| with run k of memcpy (the same round). */
static io_ratio ratio_of(int op, int size) {
  io_ratio q = {0};
  const io_record *a = &io_records[op][size], *m = &io_records[OP_MEMCPY][size];
  unsigned n = a->n < m->n ? a->n : m->n;
  if (!n) return q;
  double *r = xmalloc(sizeof(double) * n), *ga = xmalloc(sizeof(double) * n),
         *gm = xmalloc(sizeof(double) * n);
  for (unsigned k = 0; k < n; k++) {
    ga[k] = gbps(a->runs[k]);
    gm[k] = gbps(m->runs[k]);
    r[k] = gm[k] > 0.0 ? ga[k] / gm[k] : 0.0;
  }
  qsort(r, n, sizeof(double), cmp_double);
  qsort(ga, n, sizeof(double), cmp_double);
  qsort(gm, n, sizeof(double), cmp_double);
  q = (io_ratio){n,        median_sorted(r, n),  r[0],
                 r[n - 1], median_sorted(ga, n), median_sorted(gm, n)};
  free(r);
  free(ga);
  free(gm);
  return q;
}

static void print_peak(FILE *f, const char *what, const io_record *r) {
  if (!r->ran) return;
  if (r->peak_extra < 0) {
    fprintf(f, "%s: peak RSS n/a (no /proc/self/clear_refs)\n", what);
    return;
  }
  fprintf(f,
          "%s: peak RSS %.1f MiB, %.1f MiB over what was resident before (source and buffer "
          "included there)\n",
          what, (double)r->peak_total / (double)MiB, (double)r->peak_extra / (double)MiB);
}

static bool print_io(FILE *f) {
  bool any = false;
  for (int i = 0; i < IO_SIZES; i++) any |= io_records[OP_MEMCPY][i].ran;
  if (!any) return true;
  fputs("\nio: host writes and reads against memcpy (bandwidth ratio weft / memcpy, runs paired "
        "by round, warm-up included)\n\n",
        f);
  fprintf(f, "%-6s  %-5s  %5s  %10s  %10s  %7s  %7s  %7s\n", "size", "op", "runs", "weft GB/s",
          "memcpy GB/s", "ratio", "min", "max");
  fprintf(f, "%.*s\n", 70,
          "----------------------------------------------------------------------");
  for (int i = 0; i < IO_SIZES; i++)
    for (int op = OP_WRITE; op <= OP_READ; op++) {
      if (!io_records[op][i].ran) continue;
      io_ratio q = ratio_of(op, i);
      fprintf(f, "%-6s  %-5s  %5u  %10.2f  %10.2f  %7.3f  %7.3f  %7.3f\n", io_names[i],
              op == OP_WRITE ? "write" : "read", q.n, q.weft_gbps, q.memcpy_gbps, q.median, q.min,
              q.max);
    }
  print_peak(f, "io_write_512m", &io_records[OP_WRITE][IO_SIZES - 1]);
  print_peak(f, "io_read_512m", &io_records[OP_READ][IO_SIZES - 1]);
  return true;
}

static void json_io(FILE *f) {
  fputc('[', f);
  bool first = true;
  for (int i = 0; i < IO_SIZES; i++)
    for (int op = OP_WRITE; op <= OP_READ; op++) {
      const io_record *r = &io_records[op][i];
      if (!r->ran) continue;
      io_ratio q = ratio_of(op, i);
      fputs(first ? "\n    {\"size\": " : ",\n    {\"size\": ", f);
      first = false;
      fprintf(f, "%" PRIu64 ", \"op\": ", io_sizes[i]);
      wb_json_string(f, op == OP_WRITE ? "write" : "read");
      fprintf(f, ", \"runs\": %u, \"weft_gb_per_s\": ", q.n);
      wb_json_number(f, q.weft_gbps);
      fputs(", \"memcpy_gb_per_s\": ", f);
      wb_json_number(f, q.memcpy_gbps);
      fputs(", \"ratio_median\": ", f);
      wb_json_number(f, q.median);
      fputs(", \"ratio_min\": ", f);
      wb_json_number(f, q.min);
      fputs(", \"ratio_max\": ", f);
      wb_json_number(f, q.max);
      if (r->peak_extra >= 0)
        fprintf(f, ", \"peak_rss_bytes\": %" PRId64 ", \"peak_rss_over_resident_bytes\": %" PRId64,
                r->peak_total, r->peak_extra);
      fputc('}', f);
    }
  fputs(first ? "]" : "\n  ]", f);
}

static const wb_section io_section = {
    .json_key = "io", .print_table = print_io, .print_json = json_io};

void wb_register_io(void) {
  for (size_t i = 0; i < sizeof(io_benches) / sizeof(io_benches[0]); i++) {
    io_benches[i].iterations = io_iterations((int)(i / NOPS));
    wb_register(&io_benches[i]);
  }
  wb_register_section(&io_section);
}
