/* The baseline weft's launch benchmarks are compared to: a naive executor, as
 * a program would write it without weft. A FIFO linked list of heap-allocated
 * task nodes (one malloc per task) behind one pthread mutex, a condition
 * variable the submitter signals on every push, and one worker thread that
 * pops one task at a time and calls it. bq_sync waits on a second condition
 * variable until the worker has drained everything.
 *
 * A task has the signature of a weft host kernel, so both sides call the very
 * same function: the worker passes a one-block context (grid 1,1,1) and no
 * bindings, as weft does for a no-op launch.
 *
 *   bq_queue *q = bq_create();
 *   for (...) bq_submit(q, fn, user);   // any thread
 *   bq_sync(q);                         // any thread
 *   bq_destroy(q);                      // runs what is left, joins the worker
 *
 * Failures (out of memory, a pthread error) exit the program through
 * wb_fatal: the baseline has no error path to measure. */
#ifndef WEFT_BENCH_BASELINE_QUEUE_H
#define WEFT_BENCH_BASELINE_QUEUE_H

#include <stdint.h>

#include <weft/weft.h>

typedef struct bq_queue bq_queue;

/* Starts a queue and its worker thread. */
bq_queue *bq_create(void);
/* Any thread: appends fn(ctx, user) to the queue (one malloc) and wakes the worker. */
void bq_submit(bq_queue *q, weft_host_kernel_fn fn, void *user);
/* Any thread: returns once the queue is empty and every task submitted so
 * far has run. */
void bq_sync(bq_queue *q);
/* Tasks run so far, and how many of them returned an error (freed). */
uint64_t bq_completed(bq_queue *q);
uint64_t bq_failed(bq_queue *q);
/* Runs every task still queued, stops the worker and frees the queue. NULL: no-op. */
void bq_destroy(bq_queue *q);

#endif
