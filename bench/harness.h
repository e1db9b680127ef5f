/* The weft-bench harness: a registry of named benchmarks, run with warm-up
 * and repetitions, reported as min/median/max nanoseconds per operation, as
 * an aligned table and as JSON.
 *
 * A benchmark file defines its benchmarks and registers them from a
 * registration function that bench/main.c calls:
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
 * itself with wb_now_ns (so per-run preparation, such as starting client
 * threads, stays outside the measure). Per-op time = returned ns / iterations.
 *
 * A benchmark may name a baseline (another registered benchmark): the report
 * then gives ratio = median / baseline median, both measured in the same run.
 *
 * Failures inside a benchmark are not recoverable: wb_check and wb_fatal
 * print the reason to stderr and exit the program with status 1. */
#ifndef WEFT_BENCH_HARNESS_H
#define WEFT_BENCH_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <weft/weft.h>

typedef struct wb_bench {
  const char *name;        /* unique; [a-z0-9_] */
  const char *description; /* one line */
  const char *baseline;    /* name of the benchmark this one is compared to, or NULL */
  uint64_t iterations;     /* operations per run at --scale 1 */
  /* Too slow or memory-hungry for --quick (hundreds of MiB per operation): skipped there
   * unless --filter names it. */
  bool heavy;
  /* Prepares the benchmark's state (*state may be left NULL). */
  void (*setup)(void **state);
  /* Performs |iterations| operations; returns the nanoseconds they took. */
  uint64_t (*run)(void *state, uint64_t iterations);
  /* Checks what the runs did and frees the state; may be NULL. */
  void (*teardown)(void *state);
} wb_bench;

/* Adds |b| (borrowed: it must outlive the program's run, e.g. static const).
 * A duplicate name exits with status 1. */
void wb_register(const wb_bench *b);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t wb_now_ns(void);

/* If |st| is an error: prints "weft-bench: <what>: <formatted error>" and
 * its backtrace to stderr, frees it, and exits with status 1. */
void wb_check(weft_status st, const char *what);

/* Prints "weft-bench: <message>" to stderr and exits with status 1. */
void wb_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Exits with status 1 when a pthread call returned |rc| != 0. */
void wb_check_pthread(int rc, const char *what);

/* Runs |body| on |nthreads| new threads (1..64) released together from a
 * barrier; thread |idx| performs |count| of the |total| operations (split as
 * evenly as possible). Returns the nanoseconds from the first thread's start
 * to the last thread's end (thread creation and join are not counted). */
uint64_t wb_run_threads(unsigned nthreads, uint64_t total,
                        void (*body)(void *state, unsigned idx, uint64_t count), void *state);

/* A report section: results that are not times per operation (e.g. the
 * memory benchmarks' peaks and storage-call counts), printed after the main
 * table and written to the JSON document as one more top-level member. */
typedef struct wb_section {
  const char *json_key; /* the top-level JSON member; must not clash with the harness's */
  /* Prints the section's table to |f| (nothing when none of its benchmarks
   * ran). Returns false when it reports a failed check: the program then
   * exits with status 1 once every report is written. */
  bool (*print_table)(FILE *f);
  /* Writes the member's value (e.g. an array, [] when nothing ran). */
  void (*print_json)(FILE *f);
} wb_section;

/* Adds |s| (borrowed, like a wb_bench); sections print in registration order. */
void wb_register_section(const wb_section *s);

/* JSON helpers for sections: a quoted, escaped string; a number ("null" when
 * not finite). */
void wb_json_string(FILE *f, const char *s);
void wb_json_number(FILE *f, double v);

/* Runs the program: parses |argv|, runs the selected benchmarks and prints
 * the report. Returns the process exit status (0, 1 on a failed write of the
 * report, 2 on bad command-line input). */
int wb_main(int argc, char **argv);

/* Registration functions of the benchmark files (called by bench/main.c). */
void wb_register_launch(void);
void wb_register_memory(void);

#endif
