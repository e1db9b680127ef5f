/* The oneTBB flow-graph peers of weft's W1-W3 (bench/peers/tbb_flow.cpp),
 * seen from C: bench/peers/peers.c registers them with the harness and
 * checks what they computed. Nothing of C++ crosses this interface: every
 * exception is caught and returned as a message. */
#ifndef WEFT_BENCH_PEERS_TBB_FLOW_H
#define WEFT_BENCH_PEERS_TBB_FLOW_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wp_workload {
  WP_W1_CHAIN = 1,   /* 2 buffers: task k reads bufs[k % 2], writes bufs[(k + 1) % 2] */
  WP_W2_INDEPENDENT, /* NSTREAMS buffers: task i increments bufs[i % NSTREAMS] */
  WP_W3_FAN,         /* 2 * FAN_WIDTH buffers: set s's buffer j is bufs[s * FAN_WIDTH + j] */
} wp_workload;

typedef struct wp_tbb wp_tbb;

/* Builds |w|'s flow graph over |bufs| (8-byte buffers, borrowed until
 * wp_tbb_close). NULL, with a message in |err|, on failure. */
wp_tbb *wp_tbb_open(wp_workload w, uint64_t *const *bufs, char *err, size_t errlen);

/* Submits the workload's next |n| tasks from the calling thread and waits
 * for them to finish (submit to completion). 0, or -1 with a message in |err|. */
int wp_tbb_run(wp_tbb *t, uint64_t n, char *err, size_t errlen);

void wp_tbb_close(wp_tbb *t);

/* oneTBB's runtime version string and its default concurrency (threads,
 * the calling one included). */
const char *wp_tbb_version(void);
int wp_tbb_concurrency(void);

#ifdef __cplusplus
}
#endif

#endif
