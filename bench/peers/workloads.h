/* The scheduler workloads' shapes, task bodies and host models, shared by
 * weft's sched_w* and the naive baselines (bench/bench_workloads.c) and by
 * the oneTBB peers (bench/peers/tbb_flow.cpp): every runtime runs the same
 * arithmetic on the same buffers and is checked against the same model.
 * Plain C99 that also compiles as C++17 (static inline, no C-only syntax). */
#ifndef WEFT_BENCH_PEERS_WORKLOADS_H
#define WEFT_BENCH_PEERS_WORKLOADS_H

#include <stdint.h>
#include <string.h>

#define NSTREAMS  4u /* W2: independent streams; W3: the streams a layer is spread over */
#define FAN_WIDTH 8u /* W3: launches per layer */

/* Operations per run at --scale 1. */
#define ITERS_CHAIN       1000000u
#define ITERS_INDEPENDENT 1000000u
#define ITERS_FAN         200000u /* scaled down: the naive baseline's layer barrier, ~6 us a task */

/* W1: out = in + 1 (8-byte buffers). */
static inline void chain_step(const void *in, void *out) {
  uint64_t v;
  memcpy(&v, in, sizeof(v));
  v++;
  memcpy(out, &v, sizeof(v));
}

/* W2: ++*p. */
static inline void indep_step(void *p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  v++;
  memcpy(p, &v, sizeof(v));
}

static inline uint64_t fan_value(uint64_t a, uint64_t b) {
  return a + 2u * b + 1u; /* wraps: order-sensitive and cheap */
}

/* W3: out = a + 2b + 1. */
static inline void fan_step(const void *a, const void *b, void *out) {
  uint64_t x, y;
  memcpy(&x, a, sizeof(x));
  memcpy(&y, b, sizeof(y));
  uint64_t v = fan_value(x, y);
  memcpy(out, &v, sizeof(v));
}

/* The host model of W3: model[set][j]; layer L writes set L % 2 from set
 * (L - 1) % 2, launch j reading j and j + 1 (mod FAN_WIDTH). */
typedef struct fan_pos {
  uint64_t layer; /* the layer being launched (1-based: layer 0 is the initial values) */
  uint32_t j;     /* the next launch in it */
} fan_pos;

/* weft's stream (the baseline's queue) of launch j of layer L: both inputs
 * were written on other streams. */
static inline uint32_t fan_stream(uint64_t layer, uint32_t j) {
  return (uint32_t)((j + 2u * layer) % NSTREAMS);
}

static inline void fan_model_step(uint64_t model[2][FAN_WIDTH], fan_pos *p) {
  uint32_t cur = (uint32_t)(p->layer % 2u), prev = cur ^ 1u;
  model[cur][p->j] = fan_value(model[prev][p->j], model[prev][(p->j + 1u) % FAN_WIDTH]);
  if (++p->j == FAN_WIDTH) {
    p->j = 0;
    p->layer++;
  }
}

static inline void fan_model_init(uint64_t model[2][FAN_WIDTH]) {
  for (uint32_t j = 0; j < FAN_WIDTH; j++) {
    model[0][j] = 1000u + j; /* layer 0 */
    model[1][j] = 0;
  }
}

/* Of the |n| launches round-robin over NSTREAMS from index |first|, how many go to |k|. */
static inline uint64_t rr_share(uint64_t first, uint64_t n, uint32_t k) {
  uint64_t ahead = (k + NSTREAMS - first % NSTREAMS) % NSTREAMS; /* k's first slot in the run */
  return n / NSTREAMS + (ahead < n % NSTREAMS);
}

#endif
