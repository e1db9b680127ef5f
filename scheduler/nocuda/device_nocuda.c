/* Compiled when weft is built without the CUDA headers: opening a CUDA
 * device reports why it cannot, and the module calls say the same. No
 * device ever has dev->gpu set in such a build, so the scheduler never
 * reaches the other entry points; they answer the same error regardless. */
#include "scheduler/gpu.h"
#include "scheduler/inside.h"

static weft_status absent(void) {
  return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "weft was built without the CUDA loader (WEFT_WITH_CUDA=OFF or no cuda.h "
                         "at build time)");
}

weft_status weft__gpu_open(weft_device *dev, const weft_device_options *o) {
  (void)dev, (void)o;
  return absent();
}

void weft__gpu_enter(weft_device *dev) {
  (void)dev;
}

void weft__gpu_close(weft_device *dev) {
  (void)dev;
}

weft_status weft__gpu_stream_create(weft_device *dev, uint32_t slot, weft_stream **out) {
  (void)dev, (void)slot, (void)out;
  return absent();
}

bool weft__gpu_fail_call(weft_device *dev, uint64_t n, weft_error_kind kind) {
  (void)dev, (void)n, (void)kind;
  return false;
}

uint64_t weft__gpu_capacity(weft_device *dev) {
  (void)dev;
  return 0;
}

weft_status weft__gpu_check_launch(const weft_kernel_entry *k, size_t nb, size_t scalar_bytes) {
  (void)k, (void)nb, (void)scalar_bytes;
  return NULL;
}

weft_status weft__gpu_launch(weft_device *dev, cmd *c, weft_stream *on) {
  (void)dev, (void)c, (void)on;
  return absent();
}

weft_status weft__gpu_write(weft_device *dev, cmd *c, weft_stream *on) {
  (void)dev, (void)c, (void)on;
  return absent();
}

weft_status weft__gpu_read(weft_device *dev, cmd *c, weft_stream *on) {
  (void)dev, (void)c, (void)on;
  return absent();
}

void weft__gpu_staging_done(weft_device *dev, cmd *c, bool deliver) {
  (void)dev, (void)c, (void)deliver;
}

void weft__gpu_check_poison(weft_device *dev, bool poll) {
  (void)dev, (void)poll;
}

void weft__gpu_stats(weft_device *dev, weft_device_stats *out) {
  (void)dev, (void)out;
}

weft_status weft_module_load(weft_device *dev, const void *image, size_t bytes, weft_module *out) {
  (void)image, (void)bytes;
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  return st ? st : absent();
}

weft_status weft_kernel_cuda(weft_device *dev, weft_module module, const char *entry,
                             const char *params, weft_kernel *out) {
  (void)module, (void)entry, (void)params;
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  return st ? st : absent();
}

weft_status weft__gpu_capture(weft_device *dev, const cmd *rec, cmd **out) {
  (void)dev, (void)rec;
  *out = NULL;
  return absent();
}

void weft__gpu_capture_free(weft_device *dev, cmd *graph_launch) {
  (void)dev, (void)graph_launch;
}

void weft__gpu_sync_point(weft_device *dev, weft_stream *s) {
  (void)dev, (void)s;
}

void weft__gpu_progress(weft_device *dev) {
  (void)dev;
}

void weft__gpu_arm(weft_device *dev) {
  (void)dev;
}

void weft__gpu_info(weft_device *dev, weft_device_info *out) {
  (void)dev, (void)out;
}

uint32_t weft__gpu_graph_launches(const void *graph) {
  (void)graph;
  return 1;
}
