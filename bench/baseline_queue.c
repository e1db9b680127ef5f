/* The naive mutex + condvar executor (see baseline_queue.h). Deliberately
 * plain: this is what weft must beat, not a tuned competitor. */
#include "bench/baseline_queue.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "bench/harness.h"

typedef struct bq_node {
  struct bq_node *next;
  weft_host_kernel_fn fn;
  void *user;
} bq_node;

struct bq_queue {
  pthread_mutex_t mu;
  pthread_cond_t nonempty;               /* signalled on every push and on stop */
  pthread_cond_t drained;                /* broadcast when the queue is empty and everything ran */
  bq_node *head, *tail;                  /* guarded by mu */
  uint64_t submitted, completed, failed; /* guarded by mu */
  unsigned sync_waiters;                 /* guarded by mu */
  bool stop;                             /* guarded by mu */
  pthread_t worker;
};

static void *worker_main(void *arg) {
  bq_queue *q = arg;
  for (;;) {
    wb_check_pthread(pthread_mutex_lock(&q->mu), "baseline: lock");
    while (!q->head && !q->stop)
      wb_check_pthread(pthread_cond_wait(&q->nonempty, &q->mu), "baseline: wait");
    bq_node *n = q->head;
    if (!n) { /* stopped and empty */
      wb_check_pthread(pthread_mutex_unlock(&q->mu), "baseline: unlock");
      return NULL;
    }
    q->head = n->next;
    if (!q->head) q->tail = NULL;
    wb_check_pthread(pthread_mutex_unlock(&q->mu), "baseline: unlock");

    weft_kernel_ctx ctx = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
    weft_status st = n->fn(&ctx, n->user);
    free(n);

    wb_check_pthread(pthread_mutex_lock(&q->mu), "baseline: lock");
    q->completed++;
    if (st) q->failed++;
    if (q->sync_waiters && !q->head && q->completed == q->submitted)
      wb_check_pthread(pthread_cond_broadcast(&q->drained), "baseline: broadcast");
    wb_check_pthread(pthread_mutex_unlock(&q->mu), "baseline: unlock");
    weft_error_free(st);
  }
}

bq_queue *bq_create(void) {
  bq_queue *q = calloc(1, sizeof(*q));
  if (!q) wb_fatal("baseline: out of memory for a queue");
  wb_check_pthread(pthread_mutex_init(&q->mu, NULL), "baseline: mutex init");
  wb_check_pthread(pthread_cond_init(&q->nonempty, NULL), "baseline: cond init");
  wb_check_pthread(pthread_cond_init(&q->drained, NULL), "baseline: cond init");
  wb_check_pthread(pthread_create(&q->worker, NULL, worker_main, q), "baseline: worker");
  return q;
}

void bq_submit(bq_queue *q, weft_host_kernel_fn fn, void *user) {
  bq_node *n = malloc(sizeof(*n));
  if (!n) wb_fatal("baseline: out of memory for a task");
  n->next = NULL;
  n->fn = fn;
  n->user = user;
  wb_check_pthread(pthread_mutex_lock(&q->mu), "baseline: lock");
  if (q->tail)
    q->tail->next = n;
  else
    q->head = n;
  q->tail = n;
  q->submitted++;
  wb_check_pthread(pthread_cond_signal(&q->nonempty), "baseline: signal");
  wb_check_pthread(pthread_mutex_unlock(&q->mu), "baseline: unlock");
}

void bq_sync(bq_queue *q) {
  wb_check_pthread(pthread_mutex_lock(&q->mu), "baseline: lock");
  q->sync_waiters++;
  while (q->head || q->completed != q->submitted)
    wb_check_pthread(pthread_cond_wait(&q->drained, &q->mu), "baseline: wait");
  q->sync_waiters--;
  wb_check_pthread(pthread_mutex_unlock(&q->mu), "baseline: unlock");
}

static uint64_t read_guarded(bq_queue *q, const uint64_t *field) {
  wb_check_pthread(pthread_mutex_lock(&q->mu), "baseline: lock");
  uint64_t v = *field;
  wb_check_pthread(pthread_mutex_unlock(&q->mu), "baseline: unlock");
  return v;
}

uint64_t bq_completed(bq_queue *q) {
  return read_guarded(q, &q->completed);
}

uint64_t bq_failed(bq_queue *q) {
  return read_guarded(q, &q->failed);
}

void bq_destroy(bq_queue *q) {
  if (!q) return;
  wb_check_pthread(pthread_mutex_lock(&q->mu), "baseline: lock");
  q->stop = true;
  wb_check_pthread(pthread_cond_signal(&q->nonempty), "baseline: signal");
  wb_check_pthread(pthread_mutex_unlock(&q->mu), "baseline: unlock");
  wb_check_pthread(pthread_join(q->worker, NULL), "baseline: join");
  wb_check_pthread(pthread_cond_destroy(&q->drained), "baseline: cond destroy");
  wb_check_pthread(pthread_cond_destroy(&q->nonempty), "baseline: cond destroy");
  wb_check_pthread(pthread_mutex_destroy(&q->mu), "baseline: mutex destroy");
  free(q);
}
