/* The weft-bench harness: registry, command line, runs and reports. See
 * harness.h for the contract of a benchmark and docs/benchmarks.md for the
 * output. */
#include "bench/harness.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define WB_MAX_BENCHES  128
#define WB_MAX_SECTIONS 8
#define WB_QUICK_FACTOR 0.1 /* --quick: 1/10 of the iterations */
#define WB_MAX_REPS     100000u

/* ---- registry and helpers ------------------------------------------------------------------- */

static const wb_bench *registry[WB_MAX_BENCHES];
static size_t nregistered;
static const wb_section *sections[WB_MAX_SECTIONS];
static size_t nsections;

static int find_bench(const char *name) {
  for (size_t i = 0; i < nregistered; i++)
    if (strcmp(registry[i]->name, name) == 0) return (int)i;
  return -1;
}

void wb_register(const wb_bench *b) {
  if (!b || !b->name || !b->name[0] || !b->run || !b->iterations)
    wb_fatal("a benchmark without a name, a run function or an iteration count was registered");
  if (find_bench(b->name) >= 0) wb_fatal("benchmark %s is registered twice", b->name);
  if (nregistered == WB_MAX_BENCHES) wb_fatal("more than %d benchmarks", WB_MAX_BENCHES);
  registry[nregistered++] = b;
}

void wb_register_section(const wb_section *s) {
  if (!s || !s->json_key || !s->print_table || !s->print_json)
    wb_fatal("a report section without a JSON key or a print function was registered");
  if (nsections == WB_MAX_SECTIONS) wb_fatal("more than %d report sections", WB_MAX_SECTIONS);
  sections[nsections++] = s;
}

uint64_t wb_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) wb_fatal("clock_gettime: %s", strerror(errno));
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

void wb_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("weft-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

void wb_check(weft_status st, const char *what) {
  if (!st) return;
  size_t need = weft_error_format_backtrace(st, NULL, 0);
  char *text = malloc(need + 1);
  if (text) {
    weft_error_format_backtrace(st, text, need + 1);
    fprintf(stderr, "weft-bench: %s: %s\n", what, text);
    free(text);
  } else {
    char line[512];
    weft_error_format(st, line, sizeof(line));
    fprintf(stderr, "weft-bench: %s: %s\n", what, line);
  }
  weft_error_free(st);
  exit(1);
}

void wb_check_pthread(int rc, const char *what) {
  if (rc != 0) wb_fatal("%s: %s", what, strerror(rc));
}

typedef struct wb_thread {
  pthread_t tid;
  unsigned idx;
  uint64_t count, start, end;
  pthread_barrier_t *go;
  void (*body)(void *state, unsigned idx, uint64_t count);
  void *state;
} wb_thread;

static void *thread_main(void *arg) {
  wb_thread *t = arg;
  int rc = pthread_barrier_wait(t->go);
  if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) wb_check_pthread(rc, "barrier wait");
  t->start = wb_now_ns();
  t->body(t->state, t->idx, t->count);
  t->end = wb_now_ns();
  return NULL;
}

uint64_t wb_run_threads(unsigned nthreads, uint64_t total,
                        void (*body)(void *state, unsigned idx, uint64_t count), void *state) {
  enum { MAX_THREADS = 64 };
  if (nthreads == 0 || nthreads > MAX_THREADS) wb_fatal("wb_run_threads: %u threads", nthreads);
  wb_thread ts[MAX_THREADS];
  pthread_barrier_t go;
  wb_check_pthread(pthread_barrier_init(&go, NULL, nthreads), "barrier init");
  for (unsigned i = 0; i < nthreads; i++) {
    ts[i] = (wb_thread){.idx = i,
                        .count = total / nthreads + (i < total % nthreads),
                        .go = &go,
                        .body = body,
                        .state = state};
    wb_check_pthread(pthread_create(&ts[i].tid, NULL, thread_main, &ts[i]), "pthread_create");
  }
  uint64_t first = UINT64_MAX, last = 0;
  for (unsigned i = 0; i < nthreads; i++) {
    wb_check_pthread(pthread_join(ts[i].tid, NULL), "pthread_join");
    if (ts[i].start < first) first = ts[i].start;
    if (ts[i].end > last) last = ts[i].end;
  }
  wb_check_pthread(pthread_barrier_destroy(&go), "barrier destroy");
  return last - first;
}

/* ---- command line --------------------------------------------------------------------------- */

typedef struct wb_config {
  unsigned reps, warmup;
  double scale; /* --scale as given */
  bool quick, list;
  const char *filter;    /* NULL: every benchmark */
  const char *json_path; /* NULL: no JSON; "-": stdout */
} wb_config;

static void usage(FILE *f) {
  fputs("usage: weft-bench [--list] [--filter SUBSTR] [--reps N] [--warmup N] [--scale F]\n"
        "                  [--json FILE] [--quick] [--help]\n"
        "\n"
        "Runs weft's benchmarks and prints min/median/max nanoseconds per operation.\n"
        "\n"
        "  --list           list the benchmarks and exit\n"
        "  --filter SUBSTR  run the benchmarks whose name contains SUBSTR (and their\n"
        "                   baselines, so that every ratio is measured in the same run)\n"
        "  --reps N         measured repetitions per benchmark (default 5, 1..100000)\n"
        "  --warmup N       unmeasured runs before them (default 1, 0..100000)\n"
        "  --scale F        multiply every iteration count by F (default 1, > 0)\n"
        "  --quick          1/10 of the iterations, heavy benchmarks only if --filter names them\n"
        "  --json FILE      also write the results as JSON to FILE ('-': stdout, and the\n"
        "                   table goes to stderr)\n"
        "  --help           show this help and exit\n"
        "\n"
        "Absolute times on a shared machine are noise; the ratio to the baseline,\n"
        "measured in the same run, is the figure of merit. See docs/benchmarks.md.\n",
        f);
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("weft-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\ntry 'weft-bench --help'\n", stderr);
  va_end(ap);
  return 2;
}

static bool parse_count(const char *s, unsigned lo, unsigned hi, unsigned *out) {
  if (!s || !*s || *s < '0' || *s > '9') return false;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = (unsigned)v;
  return true;
}

static bool parse_scale(const char *s, double *out) {
  if (!s || !*s) return false;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || v <= 0.0 || v > 1e6) return false;
  *out = v;
  return true;
}

/* Parses argv into |cfg|; returns 0, or the exit status (2 bad input, -1 help). */
static int parse_args(int argc, char **argv, wb_config *cfg) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *val = NULL;
    char opt[32];
    /* --name=value or --name value */
    if (strncmp(arg, "-", 1) != 0) return bad_usage("unexpected argument '%s'", arg);
    const char *eq = strchr(arg, '=');
    if (strncmp(arg, "--", 2) == 0 && eq) {
      size_t n = (size_t)(eq - arg);
      if (n >= sizeof(opt)) return bad_usage("unknown option '%s'", arg);
      memcpy(opt, arg, n);
      opt[n] = '\0';
      val = eq + 1;
    } else {
      if (strlen(arg) >= sizeof(opt)) return bad_usage("unknown option '%s'", arg);
      strcpy(opt, arg);
    }
    bool flag = strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0 ||
                strcmp(opt, "--list") == 0 || strcmp(opt, "--quick") == 0;
    bool takes = strcmp(opt, "--filter") == 0 || strcmp(opt, "--reps") == 0 ||
                 strcmp(opt, "--warmup") == 0 || strcmp(opt, "--scale") == 0 ||
                 strcmp(opt, "--json") == 0;
    if (!flag && !takes) return bad_usage("unknown option '%s'", arg);
    if (flag && val) return bad_usage("option %s takes no value", opt);
    if (takes && !val) {
      if (i + 1 >= argc) return bad_usage("option %s needs a value", opt);
      val = argv[++i];
    }
    if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
      usage(stdout);
      return -1;
    } else if (strcmp(opt, "--list") == 0) {
      cfg->list = true;
    } else if (strcmp(opt, "--quick") == 0) {
      cfg->quick = true;
    } else if (strcmp(opt, "--filter") == 0) {
      if (!*val) return bad_usage("--filter needs a non-empty substring");
      cfg->filter = val;
    } else if (strcmp(opt, "--reps") == 0) {
      if (!parse_count(val, 1, WB_MAX_REPS, &cfg->reps))
        return bad_usage("--reps '%s': expected an integer in 1..%u", val, WB_MAX_REPS);
    } else if (strcmp(opt, "--warmup") == 0) {
      if (!parse_count(val, 0, WB_MAX_REPS, &cfg->warmup))
        return bad_usage("--warmup '%s': expected an integer in 0..%u", val, WB_MAX_REPS);
    } else if (strcmp(opt, "--scale") == 0) {
      if (!parse_scale(val, &cfg->scale))
        return bad_usage("--scale '%s': expected a number > 0 (at most 1e6)", val);
    } else {
      if (!*val) return bad_usage("--json needs a file name (or '-' for stdout)");
      cfg->json_path = val;
    }
  }
  return 0;
}

/* ---- running -------------------------------------------------------------------------------- */

typedef struct wb_result {
  const wb_bench *bench;
  uint64_t iterations;
  double *samples; /* [reps] ns/op, in run order */
  double min, median, max, ops_per_s;
  void *state;  /* what setup made */
  int baseline; /* index into the results, or -1 */
  double ratio; /* valid when baseline >= 0 */
} wb_result;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint64_t scaled_iterations(const wb_bench *b, const wb_config *cfg) {
  double f = cfg->scale * (cfg->quick ? WB_QUICK_FACTOR : 1.0);
  double n = round((double)b->iterations * f);
  return n < 1.0 ? 1 : (uint64_t)n;
}

static void prepare(const wb_bench *b, const wb_config *cfg, wb_result *r) {
  r->bench = b;
  r->iterations = scaled_iterations(b, cfg);
  r->samples = calloc(cfg->reps, sizeof(double));
  if (!r->samples) wb_fatal("out of memory for %u samples", cfg->reps);
  r->baseline = -1;
  r->state = NULL;
  if (b->setup) b->setup(&r->state);
}

static void summarize(const wb_config *cfg, wb_result *r) {
  double *sorted = calloc(cfg->reps, sizeof(double));
  if (!sorted) wb_fatal("out of memory for %u samples", cfg->reps);
  memcpy(sorted, r->samples, cfg->reps * sizeof(double));
  qsort(sorted, cfg->reps, sizeof(double), cmp_double);
  r->min = sorted[0];
  r->max = sorted[cfg->reps - 1];
  unsigned mid = cfg->reps / 2;
  r->median = cfg->reps % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0;
  r->ops_per_s = r->median > 0.0 ? 1e9 / r->median : 0.0;
  free(sorted);
}

/* Runs the |n| prepared benchmarks in rounds: round k runs each of them once,
 * in registry order (warm-up rounds first, unmeasured). Interleaving puts a
 * benchmark and its baseline side by side in time, so that a change of load
 * on a shared machine hits both alike instead of skewing their ratio. */
static void run_rounds(const wb_config *cfg, bool progress, wb_result *rs, size_t n) {
  unsigned rounds = cfg->warmup + cfg->reps;
  for (unsigned k = 0; k < rounds; k++) {
    bool warm = k < cfg->warmup;
    if (progress)
      fprintf(stderr, "\r%s %u/%u ", warm ? "warm-up" : "round", warm ? k + 1 : k - cfg->warmup + 1,
              warm ? cfg->warmup : cfg->reps);
    for (size_t i = 0; i < n; i++) {
      uint64_t ns = rs[i].bench->run(rs[i].state, rs[i].iterations);
      if (!warm) rs[i].samples[k - cfg->warmup] = (double)ns / (double)rs[i].iterations;
    }
  }
  if (progress) fputs("\r                    \r", stderr);
}

/* ---- reports -------------------------------------------------------------------------------- */

typedef struct wb_host {
  long cpus_online;
  int cpus_available; /* this process's affinity mask */
  struct utsname uts;
  bool have_uts;
} wb_host;

static void host_info(wb_host *h) {
  h->cpus_online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  h->cpus_available =
      sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : (int)h->cpus_online;
  h->have_uts = uname(&h->uts) == 0;
}

static const char *allocator_name(void) {
  return weft_allocator_default_is_jemalloc() ? "jemalloc" : "libc";
}

static const char *sanitizers(void) {
#if defined(__SANITIZE_ADDRESS__) && defined(__SANITIZE_THREAD__)
  return "address,thread";
#elif defined(__SANITIZE_ADDRESS__)
  return "address";
#elif defined(__SANITIZE_THREAD__)
  return "thread";
#else
  return "none";
#endif
}

static const char *compiler_name(void) {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

static void fmt_ns(char *buf, size_t cap, double ns) {
  snprintf(buf, cap, "%.1f", ns);
}

static void print_table(FILE *f, const wb_config *cfg, const wb_host *h, const wb_result *rs,
                        size_t n) {
  fprintf(f, "weft-bench %s | %ld cpus (%d available) | %s %s | allocator %s | sanitize %s\n",
          weft_version(), h->cpus_online, h->cpus_available, h->have_uts ? h->uts.sysname : "?",
          h->have_uts ? h->uts.machine : "?", allocator_name(), sanitizers());
  fprintf(f, "reps %u, warm-up %u, scale %g%s; times are ns per operation (CLOCK_MONOTONIC)\n\n",
          cfg->reps, cfg->warmup, cfg->scale,
          cfg->quick ? " (--quick: 1/10 of the iterations)" : "");
  static const char *head[] = {"benchmark", "iterations", "min",      "median",
                               "max",       "ops/s",      "baseline", "ratio"};
  enum { NCOL = 8 };
  size_t w[NCOL];
  for (int c = 0; c < NCOL; c++) w[c] = strlen(head[c]);
  char cell[NCOL][96];
  /* Two passes: widths, then rows. */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      for (int c = 0; c < NCOL; c++)
        fprintf(f, c == 0 || c == 6 ? "%-*s%s" : "%*s%s", (int)w[c], head[c],
                c == NCOL - 1 ? "\n" : "  ");
      size_t total = 0;
      for (int c = 0; c < NCOL; c++) total += w[c] + (c == NCOL - 1 ? 0 : 2);
      for (size_t i = 0; i < total; i++) fputc('-', f);
      fputc('\n', f);
    }
    for (size_t i = 0; i < n; i++) {
      const wb_result *r = &rs[i];
      snprintf(cell[0], sizeof(cell[0]), "%s", r->bench->name);
      snprintf(cell[1], sizeof(cell[1]), "%llu", (unsigned long long)r->iterations);
      /* A benchmark that timed nothing (every run 0 ns) skipped itself, e.g.
       * the cuda_* ones without a driver: no figures, no ratio. */
      bool skipped = r->max <= 0.0 || (r->baseline >= 0 && rs[r->baseline].max <= 0.0);
      fmt_ns(cell[2], sizeof(cell[2]), r->min);
      fmt_ns(cell[3], sizeof(cell[3]), r->median);
      fmt_ns(cell[4], sizeof(cell[4]), r->max);
      snprintf(cell[5], sizeof(cell[5]), "%.0f", r->ops_per_s);
      if (r->max <= 0.0)
        for (int c = 2; c <= 5; c++) snprintf(cell[c], sizeof(cell[c]), "skipped");
      snprintf(cell[6], sizeof(cell[6]), "%s",
               r->baseline >= 0 ? rs[r->baseline].bench->name : "-");
      if (skipped)
        snprintf(cell[7], sizeof(cell[7]), "-");
      else if (r->baseline >= 0)
        snprintf(cell[7], sizeof(cell[7]), "%.2f", r->ratio);
      else
        snprintf(cell[7], sizeof(cell[7]), "-");
      for (int c = 0; c < NCOL; c++) {
        size_t len = strlen(cell[c]);
        if (pass == 0 && len > w[c]) w[c] = len;
        if (pass == 1)
          fprintf(f, c == 0 || c == 6 ? "%-*s%s" : "%*s%s", (int)w[c], cell[c],
                  c == NCOL - 1 ? "\n" : "  ");
      }
    }
  }
  bool any = false;
  for (size_t i = 0; i < n; i++) any |= rs[i].baseline >= 0;
  if (any)
    fputs("\nratio = median / baseline median, both measured in this run (< 1: faster than the "
          "baseline).\n",
          f);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void json_number(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.3f", v);
  else
    fputs("null", f);
}

void wb_json_string(FILE *f, const char *s) {
  json_string(f, s);
}

void wb_json_number(FILE *f, double v) {
  json_number(f, v);
}

static void print_json(FILE *f, const wb_config *cfg, const wb_host *h, const wb_result *rs,
                       size_t n) {
  char stamp[32] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  fputs("{\n  \"weft_version\": ", f);
  json_string(f, weft_version());
  fputs(",\n  \"timestamp\": ", f);
  json_string(f, stamp);
  fprintf(f, ",\n  \"host\": {\"cpus\": %ld, \"cpus_available\": %d, \"os\": ", h->cpus_online,
          h->cpus_available);
  json_string(f, h->have_uts ? h->uts.sysname : "");
  fputs(", \"release\": ", f);
  json_string(f, h->have_uts ? h->uts.release : "");
  fputs(", \"machine\": ", f);
  json_string(f, h->have_uts ? h->uts.machine : "");
  fputs(", \"hostname\": ", f);
  json_string(f, h->have_uts ? h->uts.nodename : "");
  fputs(", \"compiler\": ", f);
  json_string(f, compiler_name());
  fputs(", \"allocator\": ", f);
  json_string(f, allocator_name());
  fputs(", \"sanitize\": ", f);
  json_string(f, sanitizers());
  fprintf(f,
          "},\n  \"config\": {\"reps\": %u, \"warmup\": %u, \"scale\": %g, \"quick\": %s, "
          "\"filter\": ",
          cfg->reps, cfg->warmup, cfg->scale, cfg->quick ? "true" : "false");
  if (cfg->filter)
    json_string(f, cfg->filter);
  else
    fputs("null", f);
  fputs("},\n  \"results\": [", f);
  for (size_t i = 0; i < n; i++) {
    const wb_result *r = &rs[i];
    fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", f);
    json_string(f, r->bench->name);
    fprintf(f, ", \"unit\": \"ns/op\", \"iterations\": %llu, \"min\": ",
            (unsigned long long)r->iterations);
    json_number(f, r->min);
    fputs(", \"median\": ", f);
    json_number(f, r->median);
    fputs(", \"max\": ", f);
    json_number(f, r->max);
    fputs(", \"ops_per_s\": ", f);
    json_number(f, r->ops_per_s);
    fputs(", \"baseline\": ", f);
    if (r->baseline >= 0)
      json_string(f, rs[r->baseline].bench->name);
    else
      fputs("null", f);
    fputs(", \"ratio\": ", f);
    if (r->baseline >= 0)
      json_number(f, r->ratio);
    else
      fputs("null", f);
    fputs(", \"samples\": [", f);
    for (unsigned k = 0; k < cfg->reps; k++) {
      if (k) fputs(", ", f);
      json_number(f, r->samples[k]);
    }
    fputs("]}", f);
  }
  fputs(n ? "\n  ]" : "]", f);
  for (size_t i = 0; i < nsections; i++) {
    fputs(",\n  ", f);
    json_string(f, sections[i]->json_key);
    fputs(": ", f);
    sections[i]->print_json(f);
  }
  fputs("\n}\n", f);
}

static void list_benches(void) {
  size_t w = strlen("benchmark");
  for (size_t i = 0; i < nregistered; i++)
    if (strlen(registry[i]->name) > w) w = strlen(registry[i]->name);
  printf("%-*s  %10s  %s\n", (int)w, "benchmark", "iterations", "description");
  for (size_t i = 0; i < nregistered; i++) {
    const wb_bench *b = registry[i];
    printf("%-*s  %10llu  %s", (int)w, b->name, (unsigned long long)b->iterations,
           b->description ? b->description : "");
    if (b->baseline) printf(" [baseline: %s]", b->baseline);
    putchar('\n');
  }
}

/* ---- main
 * ---------------------------------------------------------------------------------------- */

int wb_main(int argc, char **argv) {
  wb_config cfg = {.reps = 5, .warmup = 1, .scale = 1.0};
  int rc = parse_args(argc, argv, &cfg);
  if (rc == -1) return 0;
  if (rc) return rc;

  for (size_t i = 0; i < nregistered; i++)
    if (registry[i]->baseline && find_bench(registry[i]->baseline) < 0)
      wb_fatal("benchmark %s names an unknown baseline %s", registry[i]->name,
               registry[i]->baseline);
  if (cfg.list) {
    list_benches();
    return 0;
  }

  /* Selection: the filtered benchmarks plus their baselines, in registry order. */
  bool selected[WB_MAX_BENCHES] = {false};
  size_t nsel = 0;
  for (size_t i = 0; i < nregistered; i++) {
    if (cfg.filter && !strstr(registry[i]->name, cfg.filter)) continue;
    if (cfg.quick && !cfg.filter && registry[i]->heavy) continue;
    selected[i] = true;
    if (registry[i]->baseline) selected[find_bench(registry[i]->baseline)] = true;
  }
  for (size_t i = 0; i < nregistered; i++) nsel += selected[i];
  if (nsel == 0) return bad_usage("no benchmark matches --filter '%s' (see --list)", cfg.filter);

  /* Open the JSON file first: a bad path fails now, not after the run. */
  FILE *json = NULL;
  bool json_stdout = cfg.json_path && strcmp(cfg.json_path, "-") == 0;
  if (json_stdout) {
    json = stdout;
  } else if (cfg.json_path) {
    json = fopen(cfg.json_path, "w");
    if (!json) return bad_usage("cannot open '%s' for writing: %s", cfg.json_path, strerror(errno));
  }
  FILE *table = json_stdout ? stderr : stdout;

  wb_host host;
  host_info(&host);
  wb_result *rs = calloc(nsel, sizeof(*rs));
  int *index_of = calloc(nregistered, sizeof(int)); /* registry index -> result index */
  if (!rs || !index_of) wb_fatal("out of memory");
  bool progress = isatty(STDERR_FILENO) && table != stderr;
  size_t n = 0;
  for (size_t i = 0; i < nregistered; i++) {
    index_of[i] = -1;
    if (!selected[i]) continue;
    index_of[i] = (int)n;
    prepare(registry[i], &cfg, &rs[n++]);
  }
  run_rounds(&cfg, progress, rs, n);
  for (size_t i = 0; i < n; i++) {
    if (rs[i].bench->teardown) rs[i].bench->teardown(rs[i].state);
    summarize(&cfg, &rs[i]);
  }
  for (size_t i = 0; i < n; i++) {
    const char *base = rs[i].bench->baseline;
    if (!base) continue;
    rs[i].baseline = index_of[find_bench(base)];
    const wb_result *b = &rs[rs[i].baseline];
    rs[i].ratio = b->median > 0.0 ? rs[i].median / b->median : INFINITY;
  }

  print_table(table, &cfg, &host, rs, n);
  bool sections_ok = true;
  for (size_t i = 0; i < nsections; i++) sections_ok &= sections[i]->print_table(table);
  rc = 0;
  if (fflush(table) != 0) rc = 1;
  if (json) {
    print_json(json, &cfg, &host, rs, n);
    if (json_stdout ? fflush(json) != 0 : fclose(json) != 0) {
      fprintf(stderr, "weft-bench: writing the JSON report to '%s' failed: %s\n", cfg.json_path,
              strerror(errno));
      rc = 1;
    }
  }
  if (!sections_ok) {
    fputs("weft-bench: a check of the report failed (see the WARNING lines above)\n", stderr);
    rc = 1;
  }
  for (size_t i = 0; i < n; i++) free(rs[i].samples);
  free(rs);
  free(index_of);
  return rc;
}
