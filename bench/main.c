/* weft-bench: registers every benchmark file's benchmarks and runs the
 * harness (see docs/benchmarks.md). */
#include "bench/harness.h"

int main(int argc, char **argv) {
  wb_register_launch();
  wb_register_memory();
  return wb_main(argc, argv);
}
