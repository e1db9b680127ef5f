/* weft-bench: registers every benchmark file's benchmarks and runs the
 * harness (see docs/benchmarks.md). */
#include "bench/harness.h"

int main(int argc, char **argv) {
  wb_register_launch();
  wb_register_memory();
  wb_register_failures();
  wb_register_workloads();
  wb_register_graph();
  wb_register_cuda();
  wb_register_io();
#ifdef WEFT_BENCH_PEERS
  wb_register_peers(); /* bench/peers/: built with oneTBB */
#endif
  return wb_main(argc, argv);
}
