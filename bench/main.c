/* weft-bench: registers every benchmark file's benchmarks and runs the
 * harness (see docs/benchmarks.md). */
#include "bench/harness.h"

int main(int argc, char **argv) {
  wb_register_launch();
  return wb_main(argc, argv);
}
