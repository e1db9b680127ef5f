/* DLPack under concurrency (plain main, run under TSan): four producer
 * threads import tensors (their deleters run on weft's threads), launch on
 * them, export buffers and hand the exports to a deleter thread that drops
 * them while the device keeps running; at the end the device closes while
 * the deleter thread still drops the last exports (the last one finishes
 * the teardown). Every import's deleter runs exactly once, every exported
 * byte reads what the launches wrote, and every block of the device's
 * allocator comes back. Exit 0 on success, 1 with a message otherwise. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/dlpack.h>
#include <weft/weft.h>

enum { PRODUCERS = 4, ROUNDS = 150, N = 64, QUEUE = PRODUCERS * ROUNDS };

static weft_device *dev;
static weft_kernel add_one;
static _Atomic int imports_deleted, failed;
static const uint32_t one[3] = {1, 1, 1};
static const DLDataType f32 = {.code = kDLFloat, .bits = 32, .lanes = 1};

/* The deleter thread's queue: exports to drop, in order of arrival. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static DLManagedTensor *queue[QUEUE];
static size_t queued, dropped;
static bool producers_done;

static void fail(const char *what, weft_status st) {
  char text[1024] = "";
  if (st) weft_error_format(st, text, sizeof(text));
  fprintf(stderr, "stress_dlpack: %s %s\n", what, text);
  weft_error_free(st);
  atomic_store(&failed, 1);
}

static weft_status add_one_fn(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  float *x = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0] / sizeof(float); i++) x[i] += 1.0f;
  return NULL;
}

typedef struct tensor {
  DLManagedTensor mt;
  int64_t shape[1];
  float data[N];
} tensor;

static void tensor_deleter(DLManagedTensor *self) {
  atomic_fetch_add(&imports_deleted, 1);
  free(self->manager_ctx);
}

static void *producer(void *arg) {
  weft_stream_id s = (weft_stream_id)(uintptr_t)arg;
  const weft_binding whole = {.offset = 0, .size = WEFT_WHOLE, .access = WEFT_READ_WRITE};
  for (int r = 0; r < ROUNDS && !atomic_load(&failed); r++) {
    /* In: a tensor of the producer's, imported, launched on, released. */
    tensor *t = calloc(1, sizeof(*t));
    for (int i = 0; i < N; i++) t->data[i] = (float)i;
    t->shape[0] = N;
    t->mt = (DLManagedTensor){.dl_tensor = {.data = t->data,
                                            .device = {kDLCPU, 0},
                                            .ndim = 1,
                                            .dtype = f32,
                                            .shape = t->shape},
                              .manager_ctx = t,
                              .deleter = tensor_deleter};
    weft_buffer in;
    weft_status st = weft_buffer_from_dlpack(dev, s, &t->mt, &in);
    if (st) return fail("from_dlpack", st), NULL;
    weft_binding b = whole;
    b.buffer = in;
    if ((st = weft_launch(dev, s, add_one, one, one, &b, 1, NULL, 0)))
      return fail("launch", st), NULL;
    /* Out: the imported buffer itself, exported after the launch. */
    DLManagedTensor *x = NULL;
    const int64_t shape[1] = {N};
    if ((st = weft_buffer_to_dlpack(dev, s, in, 0, f32, shape, 1, &x)))
      return fail("to_dlpack", st), NULL;
    const float *v = x->dl_tensor.data;
    for (int i = 0; i < N; i++)
      if (v[i] != (float)i + 1.0f) return fail("exported bytes are wrong", NULL), NULL;
    if ((st = weft_buffer_release(dev, in))) return fail("release", st), NULL;
    pthread_mutex_lock(&mu);
    queue[queued++] = x;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

/* Drops exports as they come, with a lag, and the rest after close began. */
static void *deleter(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (dropped + 8 < queued || (producers_done && dropped < queued)) {
      DLManagedTensor *x = queue[dropped++];
      pthread_mutex_unlock(&mu);
      x->deleter(x);
      pthread_mutex_lock(&mu);
    }
    if (producers_done && dropped == queued) break;
    pthread_cond_wait(&cv, &mu);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(void) {
  weft_counting_allocator *ca = NULL;
  weft_status st = weft_counting_allocator_create(&ca);
  if (st) return fail("counting allocator", st), 1;
  weft_allocator alloc = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &alloc;
  if ((st = weft_device_open(&o, &dev))) return fail("open", st), 1;
  if ((st = weft_kernel_host(dev, "add_one", add_one_fn, NULL, &add_one)))
    return fail("kernel", st), 1;
  pthread_t p[PRODUCERS], d;
  pthread_create(&d, NULL, deleter, NULL);
  for (uintptr_t i = 0; i < PRODUCERS; i++) pthread_create(&p[i], NULL, producer, (void *)i);
  for (int i = 0; i < PRODUCERS; i++) pthread_join(p[i], NULL);
  /* Close while the deleter thread drops the exports it held back. */
  pthread_mutex_lock(&mu);
  producers_done = true;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  weft_device_close(dev);
  pthread_join(d, NULL);
  size_t made = queued;
  int deleted = atomic_load(&imports_deleted);
  if (!atomic_load(&failed) && (size_t)deleted != made) {
    fprintf(stderr, "stress_dlpack: %d import deleters ran for %zu imports\n", deleted, made);
    atomic_store(&failed, 1);
  }
  weft_alloc_counts c = weft_counting_allocator_counts(ca);
  if (c.live_blocks != 0) {
    fprintf(stderr, "stress_dlpack: %llu blocks of the device never came back\n",
            (unsigned long long)c.live_blocks);
    atomic_store(&failed, 1);
  }
  weft_counting_allocator_destroy(ca);
  if (atomic_load(&failed)) return 1;
  printf("stress_dlpack: %zu imports and exports from %d threads, every deleter once, nothing "
         "left\n",
         made, PRODUCERS);
  return 0;
}
