/* The weft-bench harness. It owns everything a benchmark does not have to
 * know: the registry, the command line, warm-up and repetitions, the rounds
 * that alternate a benchmark with its baseline (A B A B ...), samples,
 * medians and spreads, ratios, targets, and every line of output (the
 * tables and the JSON document). See docs/benchmarks.md.
 *
 * A benchmark is a wb_bench registered from its file's registration
 * function (bench/main.c calls them):
 *
 *   static const wb_bench noop = {.name = "launch_noop_1stream",
 *                                 .description = "...",
 *                                 .baseline = "baseline_mutex_condvar_1stream",
 *                                 .iterations = 200000,
 *                                 .setup = noop_setup, .run = noop_run,
 *                                 .teardown = noop_teardown};
 *   void wb_register_launch(void) { wb_register(&noop); }
 *
 * The harness calls setup once, then run (warm-up + repetitions times) with
 * the same iteration count, then teardown. run performs |iterations|
 * operations and returns the nanoseconds they took, timed by the benchmark
 * itself with wb_now_ns (per-run preparation and checks stay outside the
 * measure): that is the run's sample, ns/op = returned ns / iterations. A
 * run that returns 0 skipped itself (e.g. cuda_* without a driver).
 *
 * Everything else a benchmark measures goes through its wb_ctx, from setup,
 * run or teardown: counters (wb_report) folded by the harness as the
 * benchmark's group declares, notes (wb_note) and failed checks (wb_warn,
 * which make the program exit 1 once every report is written).
 *
 * A benchmark that sets |account| also gets, per run, the CPU time of each
 * class of the process's threads (the client, weft's scheduler and pool,
 * any other), weft's futex calls and the context switches (see wb_account);
 * one that names a |peer| (the same workload on another runtime, e.g.
 * bench/peers/'s oneTBB flow graph) is compared with it run by run.
 *
 * Failures inside a benchmark are not recoverable: wb_check and wb_fatal
 * print the reason to stderr and exit the program with status 1. */
#ifndef WEFT_BENCH_HARNESS_H
#define WEFT_BENCH_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include <weft/weft.h>

#define WB_MAX_COUNTERS 10

/* How the harness folds the values reported for one counter. */
typedef enum wb_fold {
  WB_PER_OP, /* summed; shown divided by the operations of every run (JSON: also the total) */
  WB_TOTAL,  /* summed; shown as the total */
  WB_LAST,   /* the latest value */
  WB_MAX,    /* the largest value */
  WB_MEDIAN, /* the median of the values (e.g. one per run) */
  WB_RANGE,  /* smallest..largest value */
} wb_fold;

typedef struct wb_counter {
  const char *name; /* column heading and JSON key: [a-z0-9_] */
  wb_fold fold;
  int decimals; /* digits after the point in the table */
} wb_counter;

/* A table of counters shared by the benchmarks that name it: one row per
 * benchmark that ran, printed after the main table, and a JSON member. */
typedef struct wb_group {
  const char *title;    /* the table's heading line */
  const char *json_key; /* the top-level JSON member: one object per row */
  const char *legend;   /* printed under the table, or NULL */
  wb_counter counters[WB_MAX_COUNTERS];
} wb_group;

/* What the harness measures around each run besides its wall time and the
 * process's CPU time. Threads are classed by /proc/self/task/<tid>/comm:
 * "weft-sched" (weft's scheduler), "weft-pool" (weft's host pool), and any
 * other thread but the client's (TBB's workers, the naive baseline's);
 * "client" is the rest of the process's CPU time: the thread that runs the
 * benchmark and the threads it starts (wb_run_threads, named "client"). */
typedef enum wb_account {
  WB_ACCOUNT_NONE,    /* wall and process CPU only */
  WB_ACCOUNT_THREADS, /* + CPU per thread class (schedstat) and context switches (getrusage) */
  WB_ACCOUNT_WEFT,    /* + weft's futex calls (weft__futex_counts: weft's own calls only) */
} wb_account;

/* The harness's side of one selected benchmark (opaque). */
typedef struct wb_ctx wb_ctx;

typedef struct wb_bench {
  const char *name;        /* unique; [a-z0-9_] */
  const char *description; /* one line */
  /* The benchmark this one is compared to (ratio = median / its median, and
   * the spread of the per-round ratios), or NULL; target_ratio > 0: the
   * ratio should be at most that (informational). */
  const char *baseline;
  double target_ratio;
  /* A second comparison, shown in the paired-ratio table only, or NULL. */
  const char *versus;
  double versus_target;
  /* The same workload on another runtime (a benchmark of bench/peers/), or
   * NULL: when both run, the ratios of their runs k (wall and CPU per
   * operation) are reported against peer_target / peer_cpu_target (> 0;
   * informational). A peer that is not registered (built without it) is
   * ignored. */
  const char *peer;
  double peer_target, peer_cpu_target;
  wb_account account;
  double target_ns;    /* > 0: the median should be at most that (informational) */
  uint64_t iterations; /* operations per run at --scale 1 */
  /* Too slow or memory-hungry for --quick (hundreds of MiB per operation): skipped there
   * unless --filter names it. */
  bool heavy;
  const wb_group *group; /* where its counters and notes are shown, or NULL */
  int arg;               /* for the benchmark's own use (wb_arg): e.g. which variant it is */
  /* Prepares the benchmark's state (*state may be left NULL). */
  void (*setup)(void **state, wb_ctx *c);
  /* Performs |iterations| operations; returns the nanoseconds they took. */
  uint64_t (*run)(void *state, uint64_t iterations, wb_ctx *c);
  /* Checks what the runs did and frees the state; may be NULL. */
  void (*teardown)(void *state, wb_ctx *c);
} wb_bench;

/* Adds |b| (borrowed: it must outlive the program's run, e.g. static const).
 * A duplicate name exits with status 1. */
void wb_register(const wb_bench *b);

/* The benchmark's name (for messages) and its arg. */
const char *wb_name(const wb_ctx *c);
int wb_arg(const wb_ctx *c);

/* Reports |value| for counter |counter| (an index into the group's
 * counters). Exits with status 1 when the benchmark has no such counter.
 * Like wb_note and wb_warn, call it from the thread that runs setup, run or
 * teardown (not from wb_run_threads' bodies): the harness does not lock. */
void wb_report(wb_ctx *c, unsigned counter, double value);

/* A line of text shown with the benchmark's group (its notes come first,
 * then the table) and in the JSON document's "notes". */
void wb_note(wb_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A failed check: shown as a "WARNING: " note; the program exits with status
 * 1 once every report is written. */
void wb_warn(wb_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t wb_now_ns(void);

/* If |st| is an error: prints "weft-bench: <what>: <formatted error>" and
 * its backtrace to stderr, frees it, and exits with status 1. */
void wb_check(weft_status st, const char *what);

/* Prints "weft-bench: <message>" to stderr and exits with status 1. */
void wb_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Exits with status 1 when a pthread call returned |rc| != 0. */
void wb_check_pthread(int rc, const char *what);

/* calloc that exits with status 1 when memory runs out. */
void *wb_calloc(size_t n, size_t size);

/* Runs |body| on |nthreads| new threads (1..64, named "client") released together from a
 * barrier; thread |idx| performs |count| of the |total| operations (split as
 * evenly as possible). Returns the nanoseconds from the first thread's start
 * to the last thread's end (thread creation and join are not counted). */
uint64_t wb_run_threads(unsigned nthreads, uint64_t total,
                        void (*body)(void *state, unsigned idx, uint64_t count), void *state);

/* Runs the program: parses |argv|, runs the selected benchmarks and prints
 * the report. Returns the process exit status (0; 1 on a failed check or a
 * failed write of the report; 2 on bad command-line input). */
int wb_main(int argc, char **argv);

/* Registration functions of the benchmark files (called by bench/main.c). */
void wb_register_launch(void);
void wb_register_memory(void);
void wb_register_failures(void);
void wb_register_workloads(void);
void wb_register_graph(void);
void wb_register_cuda(void);
void wb_register_io(void);
void wb_register_peers(void); /* bench/peers/peers.c, in a build with oneTBB */

#endif
