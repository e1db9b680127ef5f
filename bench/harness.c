/* The weft-bench harness: registry, command line, runs and reports. See
 * harness.h for the contract of a benchmark and docs/benchmarks.md for the
 * output. */
#include "bench/harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench/report.h"
#include "core/sync.h" /* weft__futex_counts: weft's futex calls, process-wide */

#define WB_MAX_BENCHES  128
#define WB_QUICK_FACTOR 0.1 /* --quick: 1/10 of the iterations */
#define WB_MAX_REPS     100000u
#define WB_MAX_LOAD     64u /* --load: busy threads */
#define WB_LOAD_COMPARE 2u  /* --load-compare without --load: two busy threads (issue 14) */

/* ---- registry and helpers ------------------------------------------------------------------- */

static const wb_bench *registry[WB_MAX_BENCHES];
static size_t nregistered;

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
  pthread_setname_np(pthread_self(), "client"); /* the thread accounting's class */
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
  bool peers;             /* --peers: only the benchmarks with a peer, and their peers */
  unsigned load;          /* --load N: busy threads (the whole run, or the loaded pass) */
  bool load_compare;      /* --load-compare: each round runs unloaded, then beside |load| threads */
  unsigned passes;        /* 1, or 2 with --load-compare */
  const char *filter;     /* NULL: every benchmark */
  const char *json_path;  /* NULL: no JSON; "-": stdout */
  const char *report_dir; /* --report DIR: the HTML report, or NULL */
  const char *report_trace; /* --report-trace FILE: the trace the report draws, or NULL */
} wb_config;

static void usage(FILE *f) {
  fputs("usage: weft-bench [--list] [--filter SUBSTR] [--reps N] [--warmup N] [--scale F]\n"
        "                  [--json FILE] [--quick] [--peers] [--load N] [--load-compare]\n"
        "                  [--report DIR [--report-trace FILE]] [--help]\n"
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
        "  --peers          run only the workloads that have a peer on another runtime\n"
        "                   (oneTBB's flow graph, bench/peers/) and their peers, alternating,\n"
        "                   and print the ratios weft / peer (a build without oneTBB says so\n"
        "                   and runs nothing)\n"
        "  --load N         run beside N busy threads named \"load\" (0..64, default 0); CPU\n"
        "                   figures exclude their time\n"
        "  --load-compare   each round runs every benchmark unloaded, then beside the --load\n"
        "                   threads (default 2), and the CPU rise per operation is printed\n"
        "  --report DIR     also write DIR/index.html: SVG figures of the run (each benchmark\n"
        "                   against its baseline, scaling with producers and streams, replay,\n"
        "                   memory, failures), a timeline of a small traced workload, and the\n"
        "                   JSON; progress goes to stderr, a line per benchmark and round\n"
        "  --report-trace FILE  draw the timeline from FILE (Chrome trace-event JSON, e.g.\n"
        "                   from weft_trace_end) instead of recording one\n"
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
  bool load_given = false;
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
                strcmp(opt, "--list") == 0 || strcmp(opt, "--quick") == 0 ||
                strcmp(opt, "--peers") == 0 || strcmp(opt, "--load-compare") == 0;
    bool takes = strcmp(opt, "--filter") == 0 || strcmp(opt, "--reps") == 0 ||
                 strcmp(opt, "--warmup") == 0 || strcmp(opt, "--scale") == 0 ||
                 strcmp(opt, "--json") == 0 || strcmp(opt, "--load") == 0 ||
                 strcmp(opt, "--report") == 0 || strcmp(opt, "--report-trace") == 0;
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
    } else if (strcmp(opt, "--peers") == 0) {
      cfg->peers = true;
    } else if (strcmp(opt, "--load-compare") == 0) {
      cfg->load_compare = true;
    } else if (strcmp(opt, "--load") == 0) {
      if (!parse_count(val, 0, WB_MAX_LOAD, &cfg->load))
        return bad_usage("--load '%s': expected a number of busy threads in 0..%u", val,
                         WB_MAX_LOAD);
      load_given = true;
    } else if (strcmp(opt, "--report") == 0) {
      if (!*val) return bad_usage("--report needs a directory");
      cfg->report_dir = val;
    } else if (strcmp(opt, "--report-trace") == 0) {
      if (!*val) return bad_usage("--report-trace needs a file name");
      cfg->report_trace = val;
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
  if (cfg->report_trace && !cfg->report_dir)
    return bad_usage("--report-trace draws the timeline of a --report: give --report DIR too");
  if (cfg->load_compare && !load_given) cfg->load = WB_LOAD_COMPARE;
  if (cfg->load_compare && cfg->load == 0)
    return bad_usage("--load-compare compares with a loaded pass: --load must be at least 1");
  cfg->passes = cfg->load_compare ? 2 : 1;
  return 0;
}

/* ---- results and what benchmarks report ----------------------------------------------------- */

/* One counter's reports, folded as its wb_fold says. */
typedef struct wb_fold_state {
  bool have;
  double sum, last, min, max;
  double *vals; /* WB_MEDIAN: every value */
  size_t n, cap;
} wb_fold_state;

/* One benchmark against another, run k against run k of the same round. */
typedef struct wb_pair {
  int other; /* result index, or -1 */
  double target, cpu_target;
  unsigned rounds; /* rounds where both timed something */
  double median, min, max, cpu_median, cpu_min, cpu_max;
} wb_pair;

/* The thread classes of wb_account (harness.h). */
enum { WB_CLIENT, WB_SCHED, WB_POOL, WB_OTHER, WB_NCLASS };
static const char *const class_json[WB_NCLASS] = {"cpu_client", "cpu_scheduler", "cpu_pool",
                                                  "cpu_other"};

/* The measured runs of one pass: unloaded, or (--load-compare) beside the
 * load threads. Per operation; NAN where not measured. */
typedef struct wb_pass {
  double *wall, *cpu; /* [reps] ns/op in run order; cpu: every thread but the load */
  double *cls[WB_NCLASS], *fwait, *fwake, *ctx; /* [reps] (wb_account) */
  double min, median, max, cpu_median, cls_median[WB_NCLASS], fwait_median, fwake_median,
      ctx_median;
  bool skipped;
  wb_pair peer; /* against the peer's same pass */
} wb_pass;

struct wb_ctx {
  const wb_bench *bench;
  uint64_t iterations;
  double *wall, *cpu; /* pass[0]'s [reps] ns/op of the measured runs, in run order */
  uint64_t runs, ops; /* every run, warm-up included */
  void *state;        /* what setup made */
  double min, median, max, ops_per_s, cpu_median;
  bool skipped; /* every measured run timed nothing */
  double ratio; /* median / baseline median, when paired_base.other >= 0 */
  wb_pair paired_base, paired_versus;
  wb_pass pass[2]; /* [1]: --load-compare's loaded pass */
  wb_pair rise;    /* --load-compare: pass[1]'s run k / pass[0]'s run k */
  wb_fold_state counters[WB_MAX_COUNTERS];
};

typedef struct wb_note_rec {
  const wb_ctx *from;
  bool warning;
  char *text;
} wb_note_rec;

static wb_note_rec *notes;
static size_t nnotes, notes_cap;

static unsigned ncounters(const wb_group *g) {
  unsigned n = 0;
  while (g && n < WB_MAX_COUNTERS && g->counters[n].name) n++;
  return n;
}

void *wb_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) wb_fatal("out of memory (%zu x %zu bytes)", n, size);
  return p;
}

const char *wb_name(const wb_ctx *c) {
  return c->bench->name;
}

int wb_arg(const wb_ctx *c) {
  return c->bench->arg;
}

void wb_report(wb_ctx *c, unsigned counter, double value) {
  const wb_group *g = c->bench->group;
  if (counter >= ncounters(g))
    wb_fatal("%s reported counter %u, which its group does not declare", c->bench->name, counter);
  wb_fold_state *f = &c->counters[counter];
  if (!f->have) {
    f->min = f->max = value;
  } else {
    if (value < f->min) f->min = value;
    if (value > f->max) f->max = value;
  }
  f->have = true;
  f->sum += value;
  f->last = value;
  if (g->counters[counter].fold == WB_MEDIAN) {
    if (f->n == f->cap) {
      size_t nc = f->cap ? f->cap * 2 : 16;
      double *v = realloc(f->vals, nc * sizeof(double));
      if (!v) wb_fatal("out of memory for counter values");
      f->vals = v;
      f->cap = nc;
    }
    f->vals[f->n++] = value;
  }
}

static void add_note(wb_ctx *c, bool warning, const char *fmt, va_list ap) {
  char line[1024];
  vsnprintf(line, sizeof(line), fmt, ap);
  if (nnotes == notes_cap) {
    size_t nc = notes_cap ? notes_cap * 2 : 16;
    wb_note_rec *v = realloc(notes, nc * sizeof(*v));
    if (!v) wb_fatal("out of memory for notes");
    notes = v;
    notes_cap = nc;
  }
  char *text = strdup(line);
  if (!text) wb_fatal("out of memory for notes");
  notes[nnotes++] = (wb_note_rec){.from = c, .warning = warning, .text = text};
}

void wb_note(wb_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_note(c, false, fmt, ap);
  va_end(ap);
}

void wb_warn(wb_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_note(c, true, fmt, ap);
  va_end(ap);
}

/* ---- thread accounting and load -------------------------------------------------------------- */

/* The --load threads: they spin until told to stop. Their CPU time is read
 * through their thread clocks and their context switches from procfs, and
 * both are taken out of every figure. */
static struct {
  unsigned n;
  pthread_t thread[WB_MAX_LOAD];
  clockid_t clock[WB_MAX_LOAD];
  _Atomic int tid[WB_MAX_LOAD]; /* kernel thread ids, published by each thread */
  _Atomic bool stop;
} load;

static void *load_main(void *arg) {
  unsigned i = (unsigned)(uintptr_t)arg;
  pthread_setname_np(pthread_self(), "load");
  atomic_store(&load.tid[i], (int)syscall(SYS_gettid));
  volatile uint64_t spins = 0;
  while (!atomic_load_explicit(&load.stop, memory_order_relaxed)) spins = spins + 1;
  return NULL;
}

static void load_start(unsigned n) {
  atomic_store(&load.stop, false);
  for (unsigned i = 0; i < n; i++) {
    atomic_store(&load.tid[i], 0);
    wb_check_pthread(pthread_create(&load.thread[i], NULL, load_main, (void *)(uintptr_t)i),
                     "pthread_create (load)");
    wb_check_pthread(pthread_getcpuclockid(load.thread[i], &load.clock[i]),
                     "pthread_getcpuclockid (load)");
  }
  for (unsigned i = 0; i < n; i++)
    while (atomic_load(&load.tid[i]) == 0) sched_yield();
  load.n = n;
}

static void load_stop(void) {
  atomic_store(&load.stop, true);
  for (unsigned i = 0; i < load.n; i++)
    wb_check_pthread(pthread_join(load.thread[i], NULL), "pthread_join (load)");
  load.n = 0;
}

static bool is_load(int tid) {
  for (unsigned i = 0; i < load.n; i++)
    if (atomic_load_explicit(&load.tid[i], memory_order_relaxed) == tid) return true;
  return false;
}

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  if (clock_gettime(id, &ts) != 0) wb_fatal("clock_gettime: %s", strerror(errno));
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* A small procfs file into |buf| (NUL-terminated); false when it can't be read. */
static bool read_text(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t k = read(fd, buf, len - 1);
  close(fd);
  if (k <= 0) return false;
  buf[k] = '\0';
  return true;
}

/* The load threads' context switches (voluntary + involuntary), from their status files. */
static uint64_t load_ctx(void) {
  uint64_t n = 0;
  for (unsigned i = 0; i < load.n; i++) {
    char path[64], text[2048];
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", atomic_load(&load.tid[i]));
    if (!read_text(path, text, sizeof(text))) continue;
    for (const char *key = text; (key = strstr(key, "ctxt_switches:")) != NULL;) {
      key += strlen("ctxt_switches:");
      n += strtoull(key, NULL, 10);
    }
  }
  return n;
}

static uint64_t load_cpu(void) {
  uint64_t ns = 0;
  for (unsigned i = 0; i < load.n; i++) ns += clock_ns(load.clock[i]);
  return ns;
}

/* On-CPU nanoseconds of one thread (schedstat's first field) and its class. */
typedef struct wb_task_ns {
  int tid, cls;
  uint64_t ns;
} wb_task_ns;

typedef struct wb_tasks {
  bool ok; /* /proc/self/task could be read */
  wb_task_ns *v;
  size_t n, cap;
} wb_tasks;

static int class_of(int tid, const char *comm) {
  if (strcmp(comm, "weft-sched") == 0) return WB_SCHED;
  if (strcmp(comm, "weft-pool") == 0) return WB_POOL;
  if (tid == (int)getpid() || strcmp(comm, "client") == 0) return WB_CLIENT;
  return WB_OTHER;
}

/* Every thread of the process but the client's and the load. */
static void tasks_sample(wb_tasks *t) {
  t->n = 0;
  DIR *d = opendir("/proc/self/task");
  t->ok = d != NULL;
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int tid = atoi(e->d_name);
    char path[64], comm[32], stat[128];
    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
    if (is_load(tid) || !read_text(path, comm, sizeof(comm))) continue;
    comm[strcspn(comm, "\n")] = '\0';
    int cls = class_of(tid, comm);
    snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
    if (cls == WB_CLIENT || !read_text(path, stat, sizeof(stat))) continue; /* exited meanwhile */
    if (t->n == t->cap) {
      size_t nc = t->cap ? t->cap * 2 : 64;
      wb_task_ns *v = realloc(t->v, nc * sizeof(*v));
      if (!v) wb_fatal("out of memory for the thread accounting");
      t->v = v;
      t->cap = nc;
    }
    t->v[t->n++] = (wb_task_ns){.tid = tid, .cls = cls, .ns = strtoull(stat, NULL, 10)};
  }
  closedir(d);
}

/* Per class, the on-CPU time from |a| to |b|: a thread new in |b| counts
 * from 0; one that exited between them is lost (and lands in the client's
 * remainder, which is where wb_run_threads' threads belong). */
static void tasks_delta(const wb_tasks *a, const wb_tasks *b, uint64_t out[WB_NCLASS]) {
  for (int c = 0; c < WB_NCLASS; c++) out[c] = 0;
  for (size_t i = 0; i < b->n; i++) {
    uint64_t from = 0;
    for (size_t k = 0; k < a->n; k++)
      if (a->v[k].tid == b->v[i].tid) {
        from = a->v[k].ns;
        break;
      }
    if (b->v[i].ns > from) out[b->v[i].cls] += b->v[i].ns - from;
  }
}

/* What one run is measured by, besides its own wall time. */
typedef struct wb_probe {
  uint64_t cpu, load_cpu, ctx, load_ctx, fwait, fwake;
  wb_tasks tasks;
} wb_probe;

static uint64_t ctx_switches(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) wb_fatal("getrusage: %s", strerror(errno));
  return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

/* The windows nest: procfs is read outside the process's clocks, so that
 * the walk's own time stays out of the figures, and the load's counters
 * inside them, so that what is taken out for the load never exceeds what
 * the process counted over the run (their difference over-counts the load's
 * few microseconds between the reads, nothing on a run of milliseconds). */
static void probe_begin(wb_probe *p, wb_account acct) {
  if (acct != WB_ACCOUNT_NONE) {
    tasks_sample(&p->tasks);
    weft__futex_counts(&p->fwait, &p->fwake);
    p->ctx = ctx_switches();
    p->load_ctx = load_ctx();
  }
  p->cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  p->load_cpu = load_cpu();
}

static void probe_end(wb_probe *p, wb_account acct) {
  p->load_cpu = load_cpu();
  p->cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  if (acct != WB_ACCOUNT_NONE) {
    p->load_ctx = load_ctx();
    p->ctx = ctx_switches();
    weft__futex_counts(&p->fwait, &p->fwake);
    tasks_sample(&p->tasks);
  }
}

/* ---- running -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts |v| in place and returns its median (the mean of the middle two of an even count). */
static double median_sort(double *v, size_t n) {
  if (n == 0) return 0.0;
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static double median_copy(const double *v, size_t n, double *scratch) {
  memcpy(scratch, v, n * sizeof(double));
  return median_sort(scratch, n);
}

/* The median of the finite values of |v| (NAN when there is none). */
static double median_finite(const double *v, size_t n) {
  double *w = wb_calloc(n, sizeof(double));
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(v[i])) w[m++] = v[i];
  double med = m ? median_sort(w, m) : NAN;
  free(w);
  return med;
}

static uint64_t scaled_iterations(const wb_bench *b, const wb_config *cfg) {
  double f = cfg->scale * (cfg->quick ? WB_QUICK_FACTOR : 1.0);
  double n = round((double)b->iterations * f);
  return n < 1.0 ? 1 : (uint64_t)n;
}

static void prepare(const wb_bench *b, const wb_config *cfg, wb_ctx *r) {
  r->bench = b;
  r->iterations = scaled_iterations(b, cfg);
  for (unsigned k = 0; k < cfg->passes; k++) {
    wb_pass *p = &r->pass[k];
    double **arrays[] = {&p->wall,          &p->cpu,          &p->cls[WB_CLIENT],
                         &p->cls[WB_SCHED], &p->cls[WB_POOL], &p->cls[WB_OTHER],
                         &p->fwait,         &p->fwake,        &p->ctx};
    for (size_t a = 0; a < sizeof(arrays) / sizeof(arrays[0]); a++) {
      *arrays[a] = wb_calloc(cfg->reps, sizeof(double));
      for (unsigned i = 0; i < cfg->reps; i++) (*arrays[a])[i] = NAN;
    }
    p->peer.other = -1;
  }
  r->wall = r->pass[0].wall;
  r->cpu = r->pass[0].cpu;
  r->paired_base.other = r->paired_versus.other = r->rise.other = -1;
  if (b->setup) b->setup(&r->state, r);
}

/* Runs the |n| prepared benchmarks in rounds: round k runs each of them once,
 * in registry order (warm-up rounds first, unmeasured). Interleaving puts a
 * benchmark and its baseline side by side in time, so that a change of load
 * on a shared machine hits both alike instead of skewing their ratio. */
static void run_one(wb_ctx *r, wb_pass *p, int m /* measured run, or -1 */, wb_probe pr[2]) {
  wb_account acct = r->bench->account;
  probe_begin(&pr[0], acct);
  uint64_t ns = r->bench->run(r->state, r->iterations, r);
  probe_end(&pr[1], acct);
  r->runs++;
  r->ops += r->iterations;
  if (m < 0) return;
  double ops = (double)r->iterations;
  uint64_t cpu = (pr[1].cpu - pr[0].cpu) - (pr[1].load_cpu - pr[0].load_cpu);
  p->wall[m] = (double)ns / ops;
  p->cpu[m] = ns ? (double)cpu / ops : 0.0;
  if (acct == WB_ACCOUNT_NONE || !ns) return;
  if (pr[0].tasks.ok && pr[1].tasks.ok) {
    uint64_t cls[WB_NCLASS];
    tasks_delta(&pr[0].tasks, &pr[1].tasks, cls);
    uint64_t rest = cls[WB_SCHED] + cls[WB_POOL] + cls[WB_OTHER];
    cls[WB_CLIENT] = cpu > rest ? cpu - rest : 0; /* the client's threads: the remainder */
    for (int c = 0; c < WB_NCLASS; c++) p->cls[c][m] = (double)cls[c] / ops;
  }
  uint64_t ctx = (pr[1].ctx - pr[0].ctx) - (pr[1].load_ctx - pr[0].load_ctx);
  p->ctx[m] = (double)ctx / ops;
  if (acct == WB_ACCOUNT_WEFT) {
    p->fwait[m] = (double)(pr[1].fwait - pr[0].fwait) / ops;
    p->fwake[m] = (double)(pr[1].fwake - pr[0].fwake) / ops;
  }
}

/* "1h02m", "3m12s", "42s", "0.4s": a duration for the progress lines. */
static void fmt_left(double s, char *out, size_t cap) {
  if (s >= 3600)
    snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
  else if (s >= 60)
    snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else
    snprintf(out, cap, s >= 10 ? "%.0fs" : "%.1fs", s);
}

/* Long runs: a line per benchmark and round on stderr, with the time the
 * runs still to come should take, each estimated by its benchmark's latest
 * run (the first round: by the mean of the runs so far). */
static void progress_line(const wb_config *cfg, const wb_ctx *rs, size_t n, const double *last,
                          unsigned k, unsigned pass, size_t i) {
  unsigned rounds = cfg->warmup + cfg->reps;
  bool warm = k < cfg->warmup;
  double done = 0, left = 0;
  size_t ndone = 0;
  for (size_t j = 0; j < n; j++)
    if (last[j] >= 0) done += last[j], ndone++;
  double mean = ndone ? done / (double)ndone : 0;
  for (size_t j = 0; j < n; j++) {
    /* runs of j still to come: later rounds, and this round's if j is after i */
    size_t runs_after =
        (size_t)(rounds - k - 1) * cfg->passes + (cfg->passes - pass - 1) + (j > i ? 1 : 0);
    left += (double)runs_after * (last[j] >= 0 ? last[j] : mean);
  }
  char eta[32];
  fmt_left(left, eta, sizeof(eta));
  fprintf(stderr, "weft-bench: %s %u/%u%s, %zu/%zu %s: %.4g s; about %s left\n",
          warm ? "warm-up" : "round", warm ? k + 1 : k - cfg->warmup + 1,
          warm ? cfg->warmup : cfg->reps, pass ? " (loaded)" : "", i + 1, n, rs[i].bench->name,
          last[i], eta);
}

static void run_rounds(const wb_config *cfg, bool progress, bool lines, wb_ctx *rs, size_t n) {
  unsigned rounds = cfg->warmup + cfg->reps;
  wb_probe pr[2] = {{0}};
  double *last = wb_calloc(n, sizeof(double)); /* seconds of each benchmark's latest run */
  for (size_t i = 0; i < n; i++) last[i] = -1;
  for (unsigned k = 0; k < rounds; k++) {
    bool warm = k < cfg->warmup;
    if (progress && !lines)
      fprintf(stderr, "\r%s %u/%u ", warm ? "warm-up" : "round", warm ? k + 1 : k - cfg->warmup + 1,
              warm ? cfg->warmup : cfg->reps);
    for (unsigned pass = 0; pass < cfg->passes; pass++) {
      if (pass == 1) load_start(cfg->load); /* --load-compare's loaded pass */
      for (size_t i = 0; i < n; i++) {
        uint64_t t = lines ? wb_now_ns() : 0;
        run_one(&rs[i], &rs[i].pass[pass], warm ? -1 : (int)(k - cfg->warmup), pr);
        if (!lines) continue;
        last[i] = (double)(wb_now_ns() - t) / 1e9;
        progress_line(cfg, rs, n, last, k, pass, i);
      }
      if (pass == 1) load_stop();
    }
  }
  free(last);
  for (int i = 0; i < 2; i++) free(pr[i].tasks.v);
  if (progress && !lines) fputs("\r                    \r", stderr);
}

static void summarize(const wb_config *cfg, wb_ctx *r) {
  double *sorted = wb_calloc(cfg->reps, sizeof(double));
  for (unsigned k = 0; k < cfg->passes; k++) {
    wb_pass *p = &r->pass[k];
    p->median = median_copy(p->wall, cfg->reps, sorted);
    p->min = sorted[0];
    p->max = sorted[cfg->reps - 1];
    p->cpu_median = median_copy(p->cpu, cfg->reps, sorted);
    p->skipped = p->max <= 0.0;
    for (int c = 0; c < WB_NCLASS; c++) p->cls_median[c] = median_finite(p->cls[c], cfg->reps);
    p->fwait_median = median_finite(p->fwait, cfg->reps);
    p->fwake_median = median_finite(p->fwake, cfg->reps);
    p->ctx_median = median_finite(p->ctx, cfg->reps);
  }
  r->median = r->pass[0].median;
  r->min = r->pass[0].min;
  r->max = r->pass[0].max;
  r->ops_per_s = r->median > 0.0 ? 1e9 / r->median : 0.0;
  r->cpu_median = r->pass[0].cpu_median;
  r->skipped = r->pass[0].skipped;
  free(sorted);
}

/* Pairs run k of |a| with run k of |b| (the same round) into |p|. */
static void pair_passes(const wb_config *cfg, const wb_pass *a, const wb_pass *b, wb_pair *p) {
  double *w = wb_calloc(cfg->reps, sizeof(double)), *c = wb_calloc(cfg->reps, sizeof(double));
  unsigned n = 0;
  for (unsigned k = 0; k < cfg->reps; k++) {
    if (a->wall[k] <= 0.0 || b->wall[k] <= 0.0) continue;
    w[n] = a->wall[k] / b->wall[k];
    c[n] = b->cpu[k] > 0.0 ? a->cpu[k] / b->cpu[k] : 0.0;
    n++;
  }
  p->rounds = n;
  if (n) {
    p->median = median_sort(w, n);
    p->min = w[0];
    p->max = w[n - 1];
    p->cpu_median = median_sort(c, n);
    p->cpu_min = c[0];
    p->cpu_max = c[n - 1];
  }
  free(w);
  free(c);
}

/* Pairs run k of |r| with run k of |p->other| (the same round). */
static void pair_up(const wb_config *cfg, const wb_ctx *rs, const wb_ctx *r, wb_pair *p) {
  if (p->other >= 0) pair_passes(cfg, &r->pass[0], &rs[p->other].pass[0], p);
}

/* ---- reports: the tables -------------------------------------------------------------------- */

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

/* A table: cells are formatted first, then printed with each column as wide
 * as its widest cell; columns flagged |left| are left-aligned. */
#define WB_MAX_COLS 16
#define WB_CELL     64

typedef struct wb_table {
  unsigned ncols, nrows, cap;
  bool left[WB_MAX_COLS];
  char (*cells)[WB_MAX_COLS][WB_CELL]; /* [0]: the heading */
} wb_table;

static void table_init(wb_table *t, unsigned ncols) {
  if (ncols > WB_MAX_COLS) wb_fatal("a table of %u columns", ncols);
  *t = (wb_table){.ncols = ncols};
}

/* Starts a row; returns its cells. */
static char (*table_row(wb_table *t))[WB_CELL] {
  if (t->nrows == t->cap) {
    unsigned nc = t->cap ? t->cap * 2 : 16;
    void *v = realloc(t->cells, nc * sizeof(*t->cells));
    if (!v) wb_fatal("out of memory for a table");
    t->cells = v;
    t->cap = nc;
  }
  memset(t->cells[t->nrows], 0, sizeof(*t->cells));
  return t->cells[t->nrows++];
}

static void table_print(FILE *f, wb_table *t) {
  size_t w[WB_MAX_COLS] = {0};
  for (unsigned r = 0; r < t->nrows; r++)
    for (unsigned c = 0; c < t->ncols; c++)
      if (strlen(t->cells[r][c]) > w[c]) w[c] = strlen(t->cells[r][c]);
  size_t total = 0;
  for (unsigned c = 0; c < t->ncols; c++) total += w[c] + (c + 1 < t->ncols ? 2 : 0);
  for (unsigned r = 0; r < t->nrows; r++) {
    for (unsigned c = 0; c < t->ncols; c++) {
      bool last = c + 1 == t->ncols;
      if (last && t->left[c])
        fputs(t->cells[r][c], f); /* no trailing blanks */
      else
        fprintf(f, t->left[c] ? "%-*s%s" : "%*s%s", (int)w[c], t->cells[r][c], last ? "" : "  ");
    }
    fputc('\n', f);
    if (r == 0) {
      for (size_t i = 0; i < total; i++) fputc('-', f);
      fputc('\n', f);
    }
  }
  free(t->cells);
  t->cells = NULL;
}

#define CELL(cell, ...) snprintf((cell), WB_CELL, __VA_ARGS__)

static void spread_cell(char *cell, const wb_pair *p) {
  if (p->rounds)
    CELL(cell, "%.2f..%.2f", p->min, p->max);
  else
    CELL(cell, "-");
}

static bool pair_timed(const wb_ctx *rs, const wb_ctx *r, const wb_pair *p) {
  return p->other >= 0 && !r->skipped && !rs[p->other].skipped && p->rounds;
}

static void print_main(FILE *f, const wb_config *cfg, const wb_host *h, const wb_ctx *rs,
                       size_t n) {
  fprintf(f, "weft-bench %s | %ld cpus (%d available) | %s %s | allocator %s | sanitize %s\n",
          weft_version(), h->cpus_online, h->cpus_available, h->have_uts ? h->uts.sysname : "?",
          h->have_uts ? h->uts.machine : "?", allocator_name(), sanitizers());
  fprintf(f, "reps %u, warm-up %u, scale %g%s; times are ns per operation (CLOCK_MONOTONIC)\n\n",
          cfg->reps, cfg->warmup, cfg->scale,
          cfg->quick ? " (--quick: 1/10 of the iterations)" : "");
  static const char *head[] = {"benchmark", "iterations", "min",   "median", "max",
                               "ops/s",     "baseline",   "ratio", "spread"};
  wb_table t;
  table_init(&t, 9);
  t.left[0] = t.left[6] = true;
  char(*row)[WB_CELL] = table_row(&t);
  for (unsigned c = 0; c < 9; c++) CELL(row[c], "%s", head[c]);
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    const wb_ctx *r = &rs[i];
    row = table_row(&t);
    CELL(row[0], "%s", r->bench->name);
    CELL(row[1], "%llu", (unsigned long long)r->iterations);
    if (r->skipped) {
      for (int c = 2; c <= 5; c++) CELL(row[c], "skipped");
    } else {
      CELL(row[2], "%.1f", r->min);
      CELL(row[3], "%.1f", r->median);
      CELL(row[4], "%.1f", r->max);
      CELL(row[5], "%.0f", r->ops_per_s);
    }
    const wb_pair *p = &r->paired_base;
    CELL(row[6], "%s", p->other >= 0 ? rs[p->other].bench->name : "-");
    if (pair_timed(rs, r, p)) {
      CELL(row[7], "%.2f", r->ratio);
      spread_cell(row[8], p);
      any = true;
    } else {
      CELL(row[7], "-");
      CELL(row[8], "-");
    }
  }
  table_print(f, &t);
  if (any)
    fputs("\nratio = median / baseline median, both measured in this run (< 1: faster than the "
          "baseline); spread = smallest..largest ratio of one round's runs\n",
          f);
}

/* Benchmarks with a target on their median. */
static void print_targets(FILE *f, const wb_ctx *rs, size_t n) {
  wb_table t;
  table_init(&t, 5);
  t.left[0] = t.left[4] = true;
  char(*row)[WB_CELL] = table_row(&t);
  CELL(row[0], "benchmark");
  CELL(row[1], "median ns");
  CELL(row[2], "target ns");
  CELL(row[3], "median/target");
  CELL(row[4], "verdict");
  for (size_t i = 0; i < n; i++) {
    const wb_ctx *r = &rs[i];
    if (r->bench->target_ns <= 0.0 || r->skipped) continue;
    row = table_row(&t);
    CELL(row[0], "%s", r->bench->name);
    CELL(row[1], "%.1f", r->median);
    CELL(row[2], "%.0f", r->bench->target_ns);
    CELL(row[3], "%.2fx", r->median / r->bench->target_ns);
    CELL(row[4], "%s", r->median <= r->bench->target_ns ? "met" : "NOT MET");
  }
  if (t.nrows > 1) {
    fputs("\ntargets: median ns per operation against the target (informational: a target never "
          "fails the run)\n\n",
          f);
    table_print(f, &t);
  } else {
    free(t.cells);
  }
}

static void pair_row(wb_table *t, const wb_ctx *rs, const wb_ctx *r, const wb_pair *p) {
  char(*row)[WB_CELL] = table_row(t);
  CELL(row[0], "%s", r->bench->name);
  CELL(row[1], "%s", rs[p->other].bench->name);
  CELL(row[2], "%u", p->rounds);
  CELL(row[3], "%.3f", p->median);
  spread_cell(row[4], p);
  CELL(row[5], "%.3f", p->cpu_median);
  CELL(row[6], "%.2f..%.2f", p->cpu_min, p->cpu_max);
  if (p->target > 0.0) {
    CELL(row[7], "<= %.2f", p->target);
    CELL(row[8], "wall %s, cpu %s", p->median <= p->target ? "met" : "NOT MET",
         p->cpu_median <= p->target ? "met" : "NOT MET");
  } else {
    CELL(row[7], "-");
    CELL(row[8], "-");
  }
}

/* The second comparisons, and every comparison with a target. */
static void print_pairs(FILE *f, const wb_ctx *rs, size_t n) {
  static const char *head[] = {"benchmark", "versus", "rounds", "wall",   "spread",
                               "cpu",       "spread", "target", "verdict"};
  wb_table t;
  table_init(&t, 9);
  t.left[0] = t.left[1] = t.left[8] = true;
  char(*row)[WB_CELL] = table_row(&t);
  for (unsigned c = 0; c < 9; c++) CELL(row[c], "%s", head[c]);
  for (size_t i = 0; i < n; i++) {
    const wb_ctx *r = &rs[i];
    if (pair_timed(rs, r, &r->paired_base) && r->paired_base.target > 0.0)
      pair_row(&t, rs, r, &r->paired_base);
    if (pair_timed(rs, r, &r->paired_versus)) pair_row(&t, rs, r, &r->paired_versus);
  }
  if (t.nrows > 1) {
    fputs("\npaired ratios: median over the measured rounds of run k / the other's run k (wall: "
          "ns per operation; cpu: process CPU time of the whole run, every thread); a target "
          "never fails the run\n\n",
          f);
    table_print(f, &t);
  } else {
    free(t.cells);
  }
}

/* A cell of a per-op figure, or "-" when not measured. */
static void figure_cell(char *cell, double v, int decimals) {
  if (isfinite(v))
    CELL(cell, "%.*f", decimals, v);
  else
    CELL(cell, "-");
}

/* The accounted benchmarks' CPU per thread class and system calls, for one pass. */
static void print_threads(FILE *f, const wb_config *cfg, const wb_ctx *rs, size_t n,
                          unsigned pass) {
  static const char *head[] = {"benchmark", "wall",  "cpu",         "client",      "sched",
                               "pool",      "other", "futex_waits", "futex_wakes", "ctx_sw"};
  wb_table t;
  table_init(&t, 10);
  t.left[0] = true;
  char(*row)[WB_CELL] = table_row(&t);
  for (unsigned c = 0; c < 10; c++) CELL(row[c], "%s", head[c]);
  for (size_t i = 0; i < n; i++) {
    const wb_ctx *r = &rs[i];
    const wb_pass *p = &r->pass[pass];
    if (r->bench->account == WB_ACCOUNT_NONE || p->skipped) continue;
    row = table_row(&t);
    CELL(row[0], "%s", r->bench->name);
    CELL(row[1], "%.1f", p->median);
    CELL(row[2], "%.1f", p->cpu_median);
    for (int c = 0; c < WB_NCLASS; c++) figure_cell(row[3 + c], p->cls_median[c], 1);
    figure_cell(row[7], p->fwait_median, 3);
    figure_cell(row[8], p->fwake_median, 3);
    figure_cell(row[9], p->ctx_median, 3);
  }
  if (t.nrows == 1) {
    free(t.cells);
    return;
  }
  unsigned nload = pass == 1 || !cfg->load_compare ? cfg->load : 0;
  fprintf(f,
          "\nthreads%s: per operation, medians over the measured runs: wall and CPU ns "
          "(CPU: every thread%s), CPU ns by thread class, weft's futex calls, context "
          "switches\n\n",
          nload ? " (loaded)" : "", nload ? " but the load's" : "");
  table_print(f, &t);
  fprintf(f,
          "client = the benchmark's threads (total less the classes beside it); sched = "
          "weft-sched, pool = weft-pool threads; other = any other thread (oneTBB's workers, the "
          "naive queue's); futex_* = weft__futex_counts (weft's own calls; '-' for other "
          "runtimes); ctx_sw = voluntary + involuntary (getrusage)\n");
  if (nload)
    fprintf(f,
            "beside %u busy \"load\" thread%s; their CPU time and context switches are left out\n",
            nload, nload == 1 ? "" : "s");
}

/* weft against its peer, per pass. */
static void print_peers(FILE *f, const wb_config *cfg, const wb_ctx *rs, size_t n) {
  static const char *head[] = {"benchmark", "peer", "load",   "rounds", "wall",
                               "spread",    "cpu",  "spread", "target", "verdict"};
  wb_table t;
  table_init(&t, 10);
  t.left[0] = t.left[1] = t.left[9] = true;
  char(*row)[WB_CELL] = table_row(&t);
  for (unsigned c = 0; c < 10; c++) CELL(row[c], "%s", head[c]);
  for (unsigned pass = 0; pass < cfg->passes; pass++)
    for (size_t i = 0; i < n; i++) {
      const wb_ctx *r = &rs[i];
      const wb_pair *p = &r->pass[pass].peer;
      if (p->other < 0 || !p->rounds) continue;
      row = table_row(&t);
      CELL(row[0], "%s", r->bench->name);
      CELL(row[1], "%s", rs[p->other].bench->name);
      CELL(row[2], "%u", pass == 1 || !cfg->load_compare ? cfg->load : 0);
      CELL(row[3], "%u", p->rounds);
      CELL(row[4], "%.3f", p->median);
      spread_cell(row[5], p);
      CELL(row[6], "%.3f", p->cpu_median);
      CELL(row[7], "%.2f..%.2f", p->cpu_min, p->cpu_max);
      if (p->target > 0.0 && p->cpu_target > 0.0) {
        CELL(row[8], "%.2f / %.2f", p->target, p->cpu_target);
        CELL(row[9], "wall %s, cpu %s", p->median <= p->target ? "met" : "NOT MET",
             p->cpu_median <= p->cpu_target ? "met" : "NOT MET");
      } else {
        CELL(row[8], "-");
        CELL(row[9], "-");
      }
    }
  if (t.nrows == 1) {
    free(t.cells);
    return;
  }
  fputs("\npeers: run k / the peer's run k of the same round, per operation (wall: ns; cpu: every "
        "thread but the load's), median and min..max over the rounds; load = busy threads beside "
        "the run; target = wall / cpu (informational: never fails the run)\n\n",
        f);
  table_print(f, &t);
}

/* --load-compare: unloaded against loaded, and the peers' rises side by side. */
static void print_load(FILE *f, const wb_config *cfg, const wb_ctx *rs, size_t n) {
  if (!cfg->load_compare) return;
  static const char *head[] = {"benchmark", "wall",   "loaded", "cpu",       "loaded",
                               "cpu rise",  "spread", "peer",   "peer rise", "verdict"};
  wb_table t;
  table_init(&t, 10);
  t.left[0] = t.left[7] = t.left[9] = true;
  char(*row)[WB_CELL] = table_row(&t);
  for (unsigned c = 0; c < 10; c++) CELL(row[c], "%s", head[c]);
  for (size_t i = 0; i < n; i++) {
    const wb_ctx *r = &rs[i];
    const wb_pair *q = &r->rise;
    if (r->skipped || !q->rounds) continue;
    row = table_row(&t);
    CELL(row[0], "%s", r->bench->name);
    CELL(row[1], "%.1f", r->pass[0].median);
    CELL(row[2], "%.1f", r->pass[1].median);
    CELL(row[3], "%.1f", r->pass[0].cpu_median);
    CELL(row[4], "%.1f", r->pass[1].cpu_median);
    CELL(row[5], "%.3f", q->cpu_median);
    CELL(row[6], "%.2f..%.2f", q->cpu_min, q->cpu_max);
    int o = r->pass[0].peer.other;
    if (o >= 0 && rs[o].rise.rounds) {
      CELL(row[7], "%s", rs[o].bench->name);
      CELL(row[8], "%.3f", rs[o].rise.cpu_median);
      CELL(row[9], "rise <= peer's: %s",
           q->cpu_median <= rs[o].rise.cpu_median ? "met" : "NOT MET");
    } else {
      CELL(row[7], "-");
      CELL(row[8], "-");
      CELL(row[9], "-");
    }
  }
  if (t.nrows == 1) {
    free(t.cells);
    return;
  }
  fprintf(f,
          "\nload: each round ran unloaded, then beside %u busy thread%s; ns per operation "
          "(CPU: every thread but the load's); cpu rise = loaded run k's CPU / unloaded run k's, "
          "median and min..max over the rounds (informational)\n\n",
          cfg->load, cfg->load == 1 ? "" : "s");
  table_print(f, &t);
}

static void print_notes(FILE *f, const wb_group *g) {
  for (size_t i = 0; i < nnotes; i++)
    if (notes[i].from->bench->group == g)
      fprintf(f, "%s%s\n", notes[i].warning ? "WARNING: " : "", notes[i].text);
}

static bool any_counter(const wb_ctx *r) {
  for (unsigned c = 0; c < WB_MAX_COUNTERS; c++)
    if (r->counters[c].have) return true;
  return false;
}

static double fold_value(const wb_ctx *r, unsigned c) {
  const wb_fold_state *s = &r->counters[c];
  switch (r->bench->group->counters[c].fold) {
  case WB_PER_OP:
    return r->ops ? s->sum / (double)r->ops : 0.0;
  case WB_TOTAL:
    return s->sum;
  case WB_LAST:
    return s->last;
  case WB_MAX:
    return s->max;
  case WB_MEDIAN: {
    double *v = wb_calloc(s->n, sizeof(double));
    double m = median_copy(s->vals, s->n, v);
    free(v);
    return m;
  }
  default: /* WB_RANGE: its two ends are printed apart */
    return s->min;
  }
}

/* The groups in the order their first benchmark was registered. */
static size_t groups_of(const wb_ctx *rs, size_t n, const wb_group **out) {
  size_t ng = 0;
  for (size_t i = 0; i < n; i++) {
    const wb_group *g = rs[i].bench->group;
    bool seen = !g;
    for (size_t k = 0; k < ng && !seen; k++) seen = out[k] == g;
    if (!seen) out[ng++] = g;
  }
  return ng;
}

/* A group's table when any of its benchmarks reported a counter, then its notes. */
static void print_group(FILE *f, const wb_group *g, const wb_ctx *rs, size_t n) {
  bool any_note = false;
  for (size_t i = 0; i < nnotes; i++) any_note |= notes[i].from->bench->group == g;
  unsigned nc = ncounters(g);
  wb_table t;
  table_init(&t, 3 + nc);
  t.left[0] = true;
  char(*row)[WB_CELL] = table_row(&t);
  CELL(row[0], "benchmark");
  CELL(row[1], "runs");
  CELL(row[2], "ops");
  for (unsigned c = 0; c < nc; c++) CELL(row[3 + c], "%s", g->counters[c].name);
  for (size_t i = 0; i < n; i++) {
    const wb_ctx *r = &rs[i];
    if (r->bench->group != g || !any_counter(r)) continue;
    row = table_row(&t);
    CELL(row[0], "%s", r->bench->name);
    CELL(row[1], "%llu", (unsigned long long)r->runs);
    CELL(row[2], "%llu", (unsigned long long)r->ops);
    for (unsigned c = 0; c < nc; c++) {
      const wb_counter *k = &g->counters[c];
      const wb_fold_state *s = &r->counters[c];
      if (!s->have)
        CELL(row[3 + c], "-");
      else if (k->fold == WB_RANGE)
        CELL(row[3 + c], "%.*f..%.*f", k->decimals, s->min, k->decimals, s->max);
      else
        CELL(row[3 + c], "%.*f", k->decimals, fold_value(r, c));
    }
  }
  if (!any_note && t.nrows == 1) {
    free(t.cells);
    return;
  }
  fputc('\n', f);
  if (t.nrows > 1) {
    fprintf(f, "%s\n\n", g->title);
    table_print(f, &t);
    if (g->legend) fprintf(f, "%s\n", g->legend);
  } else {
    free(t.cells);
  }
  print_notes(f, g);
}

/* ---- reports: JSON -------------------------------------------------------------------------- */

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

/* A number: integral values without decimals, small ones with six, "null"
 * when not finite. */
static void json_number(FILE *f, double v) {
  if (!isfinite(v))
    fputs("null", f);
  else if (v == floor(v) && fabs(v) < 1e15)
    fprintf(f, "%.0f", v);
  else
    fprintf(f, fabs(v) < 1.0 ? "%.6f" : "%.3f", v);
}

static void json_key(FILE *f, const char *key, const char *suffix) {
  fputs(", \"", f);
  fputs(key, f);
  fputs(suffix, f);
  fputs("\": ", f);
}

/* ", "<prefix>median": m, "<prefix>min": lo, "<prefix>max": hi" */
static void json_spread(FILE *f, const char *prefix, double median, double min, double max) {
  json_key(f, prefix, "median");
  json_number(f, median);
  json_key(f, prefix, "min");
  json_number(f, min);
  json_key(f, prefix, "max");
  json_number(f, max);
}

static void json_pair(FILE *f, const char *key, const wb_ctx *rs, const wb_ctx *r,
                      const wb_pair *p) {
  json_key(f, key, "");
  bool peer = p == &r->pass[0].peer || p == &r->pass[1].peer;
  if (!pair_timed(rs, r, p)) {
    fputs("null", f);
    return;
  }
  fputs("{\"with\": ", f);
  json_string(f, rs[p->other].bench->name);
  fprintf(f, ", \"rounds\": %u", p->rounds);
  json_spread(f, "", p->median, p->min, p->max);
  json_spread(f, "cpu_", p->cpu_median, p->cpu_min, p->cpu_max);
  fputs(", \"target\": ", f);
  if (p->target > 0.0) {
    json_number(f, p->target);
    fprintf(f, ", \"target_met\": %s", p->median <= p->target ? "true" : "false");
  } else {
    fputs("null, \"target_met\": null", f);
  }
  if (peer) {
    fputs(", \"cpu_target\": ", f);
    if (p->cpu_target > 0.0) {
      json_number(f, p->cpu_target);
      fprintf(f, ", \"cpu_target_met\": %s", p->cpu_median <= p->cpu_target ? "true" : "false");
    } else {
      fputs("null, \"cpu_target_met\": null", f);
    }
  }
  fputc('}', f);
}

/* A pass's thread accounting: medians per operation, null where not measured. */
static void json_accounting(FILE *f, const wb_pass *p) {
  for (int c = 0; c < WB_NCLASS; c++) {
    json_key(f, class_json[c], "");
    json_number(f, p->skipped ? NAN : p->cls_median[c]);
  }
  const double v[] = {p->fwait_median, p->fwake_median, p->ctx_median};
  const char *names[] = {"futex_waits", "futex_wakes", "ctx_switches"};
  for (int i = 0; i < 3; i++) {
    json_key(f, names[i], "");
    json_number(f, p->skipped ? NAN : v[i]);
  }
}

static void json_rise(FILE *f, const wb_pair *q) {
  json_key(f, "rise", "");
  if (!q->rounds) {
    fputs("null", f);
    return;
  }
  fprintf(f, "{\"rounds\": %u", q->rounds);
  json_spread(f, "cpu_", q->cpu_median, q->cpu_min, q->cpu_max);
  json_spread(f, "", q->median, q->min, q->max);
  fputc('}', f);
}

static void json_samples(FILE *f, const char *key, const double *v, unsigned n) {
  json_key(f, key, "");
  fputc('[', f);
  for (unsigned k = 0; k < n; k++) {
    if (k) fputs(", ", f);
    json_number(f, v[k]);
  }
  fputc(']', f);
}

static void json_result(FILE *f, const wb_config *cfg, const wb_ctx *rs, const wb_ctx *r) {
  fputs("{\"name\": ", f);
  json_string(f, r->bench->name);
  fprintf(f, ", \"unit\": \"ns/op\", \"iterations\": %llu", (unsigned long long)r->iterations);
  const double figures[] = {r->min, r->median, r->max, r->ops_per_s, r->cpu_median};
  const char *names[] = {"min", "median", "max", "ops_per_s", "cpu_median"};
  for (int i = 0; i < 5; i++) {
    json_key(f, names[i], "");
    json_number(f, r->skipped ? NAN : figures[i]);
  }
  bool timed = pair_timed(rs, r, &r->paired_base);
  json_key(f, "baseline", "");
  if (r->paired_base.other >= 0)
    json_string(f, rs[r->paired_base.other].bench->name);
  else
    fputs("null", f);
  json_key(f, "ratio", "");
  json_number(f, timed ? r->ratio : NAN);
  json_pair(f, "paired_baseline", rs, r, &r->paired_base);
  json_pair(f, "paired_versus", rs, r, &r->paired_versus);
  json_key(f, "target_ns", "");
  if (r->bench->target_ns > 0.0 && !r->skipped) {
    json_number(f, r->bench->target_ns);
    fprintf(f, ", \"target_met\": %s", r->median <= r->bench->target_ns ? "true" : "false");
  } else {
    fputs("null, \"target_met\": null", f);
  }
  json_samples(f, "samples", r->wall, cfg->reps);
  json_samples(f, "cpu_samples", r->cpu, cfg->reps);
  json_accounting(f, &r->pass[0]);
  json_key(f, "peer", "");
  if (r->pass[0].peer.other >= 0)
    json_string(f, rs[r->pass[0].peer.other].bench->name);
  else
    fputs("null", f);
  json_pair(f, "paired_peer", rs, r, &r->pass[0].peer);
  json_key(f, "loaded", "");
  if (cfg->passes < 2) {
    fputs("null}", f);
    return;
  }
  const wb_pass *p = &r->pass[1];
  fprintf(f, "{\"load\": %u", cfg->load);
  const double loaded[] = {p->min, p->median, p->max, p->cpu_median};
  const char *loaded_names[] = {"min", "median", "max", "cpu_median"};
  for (int i = 0; i < 4; i++) {
    json_key(f, loaded_names[i], "");
    json_number(f, p->skipped ? NAN : loaded[i]);
  }
  json_samples(f, "samples", p->wall, cfg->reps);
  json_samples(f, "cpu_samples", p->cpu, cfg->reps);
  json_accounting(f, p);
  json_pair(f, "paired_peer", rs, r, &p->peer);
  json_rise(f, &r->rise);
  fputs("}}", f);
}

static void json_group(FILE *f, const wb_group *g, const wb_ctx *rs, size_t n) {
  fputs(",\n  ", f);
  json_string(f, g->json_key);
  fputs(": [", f);
  bool first = true;
  unsigned nc = ncounters(g);
  for (size_t i = 0; i < n; i++) {
    const wb_ctx *r = &rs[i];
    if (r->bench->group != g || !any_counter(r)) continue;
    fputs(first ? "\n    {\"name\": " : ",\n    {\"name\": ", f);
    first = false;
    json_string(f, r->bench->name);
    fprintf(f, ", \"runs\": %llu, \"ops\": %llu", (unsigned long long)r->runs,
            (unsigned long long)r->ops);
    for (unsigned c = 0; c < nc; c++) {
      const wb_counter *k = &g->counters[c];
      const wb_fold_state *s = &r->counters[c];
      if (k->fold == WB_RANGE) {
        json_key(f, k->name, "_min");
        json_number(f, s->have ? s->min : NAN);
        json_key(f, k->name, "_max");
        json_number(f, s->have ? s->max : NAN);
        continue;
      }
      json_key(f, k->name, "");
      json_number(f, s->have ? fold_value(r, c) : NAN);
      if (k->fold == WB_PER_OP) {
        json_key(f, k->name, "_total");
        json_number(f, s->have ? s->sum : NAN);
      }
    }
    fputc('}', f);
  }
  fputs(first ? "]" : "\n  ]", f);
}

static void print_json(FILE *f, const wb_config *cfg, const wb_host *h, const wb_ctx *rs, size_t n,
                       const wb_group *const *groups, size_t ngroups) {
  char stamp[32] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  fputs("{\n  \"weft_version\": ", f);
  json_string(f, weft_version());
  fputs(",\n  \"timestamp\": ", f);
  json_string(f, stamp);
  fprintf(f, ",\n  \"host\": {\"cpus\": %ld, \"cpus_available\": %d", h->cpus_online,
          h->cpus_available);
  const char *host[][2] = {{"os", h->have_uts ? h->uts.sysname : ""},
                           {"release", h->have_uts ? h->uts.release : ""},
                           {"machine", h->have_uts ? h->uts.machine : ""},
                           {"hostname", h->have_uts ? h->uts.nodename : ""},
                           {"compiler", compiler_name()},
                           {"allocator", allocator_name()},
                           {"sanitize", sanitizers()}};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) {
    json_key(f, host[i][0], "");
    json_string(f, host[i][1]);
  }
  fprintf(f,
          "},\n  \"config\": {\"reps\": %u, \"warmup\": %u, \"scale\": %g, \"quick\": %s, "
          "\"peers\": %s, \"load\": %u, \"load_compare\": %s, \"filter\": ",
          cfg->reps, cfg->warmup, cfg->scale, cfg->quick ? "true" : "false",
          cfg->peers ? "true" : "false", cfg->load, cfg->load_compare ? "true" : "false");
  if (cfg->filter)
    json_string(f, cfg->filter);
  else
    fputs("null", f);
  fputs("},\n  \"results\": [", f);
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ",\n    " : "\n    ", f);
    json_result(f, cfg, rs, &rs[i]);
  }
  fputs(n ? "\n  ]" : "]", f);
  for (size_t i = 0; i < ngroups; i++) json_group(f, groups[i], rs, n);
  fputs(",\n  \"notes\": [", f);
  for (size_t i = 0; i < nnotes; i++) {
    fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", f);
    json_string(f, notes[i].from->bench->name);
    fputs(", \"text\": ", f);
    json_string(f, notes[i].text);
    fprintf(f, ", \"warning\": %s}", notes[i].warning ? "true" : "false");
  }
  fputs(nnotes ? "\n  ]\n}\n" : "]\n}\n", f);
}

/* The --report: the JSON document in memory, the timeline's trace (given,
 * or recorded now when the build has the trace API), the page. */
static int write_report(const wb_config *cfg, const wb_host *h, const wb_ctx *rs, size_t n,
                        const wb_group *const *groups, size_t ngroups) {
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) wb_fatal("--report: open_memstream: %s", strerror(errno));
  print_json(mem, cfg, h, rs, n, groups, ngroups);
  if (fclose(mem) != 0) wb_fatal("--report: the JSON document: %s", strerror(errno));
  const char *trace = cfg->report_trace, *title = "Timeline of the given trace";
  char recorded[4096];
  int rc = 0;
  if (!trace && wb_report_can_trace()) {
    snprintf(recorded, sizeof(recorded), "%s/trace.json", cfg->report_dir);
    fputs("weft-bench: recording the timeline's workload\n", stderr);
    if (wb_report_record_trace(recorded)) {
      trace = recorded;
      title = "Timeline: 6 layers of 4 launches over 4 streams, the 11th launch failing";
    } else {
      rc = 1;
    }
  }
  if (wb_report_write(cfg->report_dir, text, trace, title) != 0) rc = 1;
  free(text);
  if (rc == 0) fprintf(stderr, "weft-bench: the report is %s/index.html\n", cfg->report_dir);
  return rc;
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
    if (b->versus) printf(" [versus: %s]", b->versus);
    if (b->peer) printf(" [peer: %s]", b->peer);
    putchar('\n');
  }
}

/* ---- main ----------------------------------------------------------------------------------- */

/* Why bench/CMakeLists.txt built no peer (bench/peers/), for --peers. */
#ifndef WEFT_BENCH_NO_PEERS
#define WEFT_BENCH_NO_PEERS "no peer registered"
#endif

/* Whether some registered benchmark has a registered peer. */
static bool any_peer(void) {
  for (size_t i = 0; i < nregistered; i++)
    if (registry[i]->peer && find_bench(registry[i]->peer) >= 0) return true;
  return false;
}

/* The order the selected benchmarks run in, each round: registry order;
 * with --peers, each peer right after the benchmarks that name it, so that
 * weft and its peer alternate in time. */
static void order_selection(const wb_config *cfg, const bool *selected, size_t *order) {
  size_t n = 0;
  if (!cfg->peers) {
    for (size_t i = 0; i < nregistered; i++)
      if (selected[i]) order[n++] = i;
    return;
  }
  bool placed[WB_MAX_BENCHES] = {false};
  for (size_t i = 0; i < nregistered; i++) {
    if (!selected[i] || !registry[i]->peer || placed[i]) continue;
    int peer = find_bench(registry[i]->peer);
    for (size_t k = i; k < nregistered; k++)
      if (selected[k] && !placed[k] && registry[k]->peer &&
          strcmp(registry[k]->peer, registry[peer]->name) == 0) {
        order[n++] = k;
        placed[k] = true;
      }
    if (!placed[peer]) order[n++] = (size_t)peer;
    placed[peer] = true;
  }
  for (size_t i = 0; i < nregistered; i++) /* anything else selected (none, today) */
    if (selected[i] && !placed[i]) order[n++] = i;
}

int wb_main(int argc, char **argv) {
  wb_config cfg = {.reps = 5, .warmup = 1, .scale = 1.0};
  int rc = parse_args(argc, argv, &cfg);
  if (rc == -1) return 0;
  if (rc) return rc;

  for (size_t i = 0; i < nregistered; i++) {
    const wb_bench *b = registry[i];
    if (b->baseline && find_bench(b->baseline) < 0)
      wb_fatal("benchmark %s names an unknown baseline %s", b->name, b->baseline);
    if (b->versus && find_bench(b->versus) < 0)
      wb_fatal("benchmark %s names an unknown benchmark to compare with, %s", b->name, b->versus);
  }
  if (cfg.list) {
    list_benches();
    return 0;
  }
  if (cfg.peers && !any_peer()) {
    printf("weft-bench: built without oneTBB (%s): --peers has no peer to compare with; nothing "
           "was run\n",
           WEFT_BENCH_NO_PEERS);
    return 0;
  }

  /* Selection: the filtered benchmarks plus those they compare with (with
   * --peers: the benchmarks that have a peer, and their peers). */
  bool selected[WB_MAX_BENCHES] = {false};
  size_t nsel = 0;
  for (size_t i = 0; i < nregistered; i++) {
    const wb_bench *b = registry[i];
    int peer = b->peer ? find_bench(b->peer) : -1;
    if (cfg.peers && peer < 0) continue;
    if (cfg.filter && !strstr(b->name, cfg.filter) &&
        !(cfg.peers && strstr(registry[peer]->name, cfg.filter)))
      continue;
    if (cfg.quick && !cfg.filter && b->heavy) continue;
    selected[i] = true;
    if (b->baseline && !cfg.peers) selected[find_bench(b->baseline)] = true;
    if (b->versus && !cfg.peers) selected[find_bench(b->versus)] = true;
    if (peer >= 0) selected[peer] = true;
  }
  for (size_t i = 0; i < nregistered; i++) nsel += selected[i];
  if (nsel == 0)
    return bad_usage("no benchmark matches --filter '%s'%s (see --list)", cfg.filter,
                     cfg.peers ? " among those with a peer" : "");
  size_t order[WB_MAX_BENCHES];
  order_selection(&cfg, selected, order);

  /* Open the JSON file and the report's directory first: a bad path fails
   * now, not after the run. */
  if (cfg.report_dir && !wb_report_prepare(cfg.report_dir)) return 2;
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
  wb_ctx *rs = wb_calloc(nsel, sizeof(*rs));
  int index_of[WB_MAX_BENCHES]; /* registry index -> result index */
  bool progress = isatty(STDERR_FILENO) && table != stderr;
  for (size_t i = 0; i < nregistered; i++) index_of[i] = -1;
  for (size_t k = 0; k < nsel; k++) index_of[order[k]] = (int)k;
  /* --load without --load-compare: the load runs from the first setup to the last teardown. */
  bool whole_load = cfg.load && !cfg.load_compare;
  if (whole_load) load_start(cfg.load);
  for (size_t k = 0; k < nsel; k++) prepare(registry[order[k]], &cfg, &rs[k]);
  size_t n = nsel;
  run_rounds(&cfg, progress, cfg.report_dir != NULL, rs, n);
  for (size_t i = 0; i < n; i++) {
    if (rs[i].bench->teardown) rs[i].bench->teardown(rs[i].state, &rs[i]);
    summarize(&cfg, &rs[i]);
  }
  if (whole_load) load_stop();
  for (size_t i = 0; i < n; i++) {
    wb_ctx *r = &rs[i];
    const wb_bench *b = r->bench;
    int peer = b->peer ? find_bench(b->peer) : -1;
    if (peer >= 0 && index_of[peer] >= 0)
      for (unsigned k = 0; k < cfg.passes; k++) {
        wb_pair *p = &r->pass[k].peer;
        p->other = index_of[peer];
        p->target = b->peer_target;
        p->cpu_target = b->peer_cpu_target;
        pair_passes(&cfg, &r->pass[k], &rs[p->other].pass[k], p);
      }
    if (cfg.passes == 2) pair_passes(&cfg, &r->pass[1], &r->pass[0], &r->rise);
    if (b->baseline && index_of[find_bench(b->baseline)] >= 0) {
      r->paired_base.other = index_of[find_bench(b->baseline)];
      r->paired_base.target = b->target_ratio;
      const wb_ctx *base = &rs[r->paired_base.other];
      r->ratio = base->median > 0.0 ? r->median / base->median : INFINITY;
      pair_up(&cfg, rs, r, &r->paired_base);
    }
    if (b->versus && index_of[find_bench(b->versus)] >= 0) {
      r->paired_versus.other = index_of[find_bench(b->versus)];
      r->paired_versus.target = b->versus_target;
      pair_up(&cfg, rs, r, &r->paired_versus);
    }
  }

  const wb_group *groups[WB_MAX_BENCHES];
  size_t ngroups = groups_of(rs, n, groups);
  print_main(table, &cfg, &host, rs, n);
  print_targets(table, rs, n);
  print_pairs(table, rs, n);
  bool loose = false; /* notes of benchmarks without a group */
  for (size_t i = 0; i < nnotes; i++) loose |= !notes[i].from->bench->group;
  if (loose) {
    fputc('\n', table);
    print_notes(table, NULL);
  }
  for (size_t i = 0; i < ngroups; i++) print_group(table, groups[i], rs, n);
  for (unsigned k = 0; k < cfg.passes; k++) print_threads(table, &cfg, rs, n, k);
  print_peers(table, &cfg, rs, n);
  print_load(table, &cfg, rs, n);
  rc = 0;
  if (fflush(table) != 0) rc = 1;
  if (json) {
    print_json(json, &cfg, &host, rs, n, groups, ngroups);
    if (json_stdout ? fflush(json) != 0 : fclose(json) != 0) {
      fprintf(stderr, "weft-bench: writing the JSON report to '%s' failed: %s\n", cfg.json_path,
              strerror(errno));
      rc = 1;
    }
  }
  if (cfg.report_dir && write_report(&cfg, &host, rs, n, groups, ngroups) != 0) rc = 1;
  bool warned = false;
  for (size_t i = 0; i < nnotes; i++) warned |= notes[i].warning;
  if (warned) {
    fputs("weft-bench: a check of the report failed (see the WARNING lines above)\n", stderr);
    rc = 1;
  }
  for (size_t i = 0; i < n; i++) {
    for (unsigned k = 0; k < cfg.passes; k++) {
      wb_pass *p = &rs[i].pass[k];
      free(p->wall);
      free(p->cpu);
      for (int c = 0; c < WB_NCLASS; c++) free(p->cls[c]);
      free(p->fwait);
      free(p->fwake);
      free(p->ctx);
    }
    for (unsigned c = 0; c < WB_MAX_COUNTERS; c++) free(rs[i].counters[c].vals);
  }
  free(rs);
  for (size_t i = 0; i < nnotes; i++) free(notes[i].text);
  free(notes);
  return rc;
}
