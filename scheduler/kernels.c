/* The kernel table (host kernels, and kernels of a backend's modules with
 * the backend's payload), the module calls, and the kernel a pool thread
 * runs: a blocking call it makes must not wait for it. */
#include "scheduler/kernels.h"

#include <inttypes.h>
#include <string.h>

#include "core/alloc.h"
#include "scheduler/inside.h"

/* The launch whose host kernel this thread is running: a blocking call the
 * kernel makes must not wait for it. */
_Thread_local const cmd *weft__kernel_running = NULL;

const cmd *weft__running_kernel(const weft_device *dev) {
  const cmd *k = weft__kernel_running;
  return k && k->dev == dev ? k : NULL;
}

weft_status weft__kernel_refusal(const weft_device *dev, const cmd *k, const char *call,
                                 const char *why) {
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "%s from kernel '%s' (launch %" PRIu64 ") would wait for that kernel: %s",
                         call, dev->kernels[k->kernel].k.name, k->launch_no, why);
}

weft_status weft__refuse_in_kernel(const weft_device *dev, const char *call, const char *why) {
  const cmd *k = weft__running_kernel(dev);
  return k ? weft__kernel_refusal(dev, k, call, why) : NULL;
}

weft_status weft__kernel_register(weft_device *dev, const char *name, const weft_kernel_entry *e,
                                  weft_kernel *out) {
  if (!name) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "kernel name is NULL");
  size_t len = strnlen(name, 256);
  if (len == 0 || len > 255)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "kernel name must be 1..255 bytes");
  char *copy = weft__alloc(&dev->alloc, len + 1, 1);
  if (!copy) return weft__oom(len + 1, "a kernel name");
  memcpy(copy, name, len + 1);
  uint32_t idx = atomic_fetch_add_explicit(&dev->nkernels, 1, memory_order_relaxed);
  if (idx >= WEFT_MAX_KERNELS) {
    atomic_fetch_sub_explicit(&dev->nkernels, 1, memory_order_relaxed);
    weft__free(&dev->alloc, copy, len + 1, 1);
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many kernels (at most %u per device)",
                           WEFT_MAX_KERNELS);
  }
  weft_kernel_entry *k = &dev->kernels[idx];
  memcpy(k, e, sizeof(*k));
  atomic_init(&k->ready, 0);
  k->k.name = copy;
  k->name_cap = len + 1;
  k->gate = k->k.builtin != WEFT_BUILTIN_NONE ? (const void *)k : k->k.impl;
  /* release: a thread that sees ready sees the entry. */
  atomic_store_explicit(&k->ready, 1, memory_order_release);
  out->id = ((uint64_t)dev->tag << 32) | (idx + 1u);
  return NULL;
}

weft_status weft_kernel_host(weft_device *dev, const char *name, weft_host_kernel_fn fn, void *user,
                             weft_kernel *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if ((st = dev->backend->vt->host_kernels(dev->backend))) return st;
  if (!fn) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "kernel function is NULL");
  weft_kernel_entry e;
  memset(&e, 0, sizeof(e));
  e.k.fn = fn;
  e.k.user = user;
  return weft__kernel_register(dev, name, &e, out);
}

weft_status weft_kernel_native(weft_device *dev, const char *name, weft_native_fn fn, void *user,
                               weft_kernel *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (!fn) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "native function is NULL");
  weft_kernel_entry e;
  memset(&e, 0, sizeof(e));
  e.k.builtin = WEFT_BUILTIN_NATIVE;
  e.k.native = fn;
  e.k.user = user;
  return weft__kernel_register(dev, name, &e, out);
}

/* The built-in kernels, first in the table (WEFT_KERNEL_COPY, WEFT_KERNEL_FILL). */
weft_status weft__kernels_builtin(weft_device *dev) {
  static const struct {
    const char *name;
    weft_builtin kind;
  } builtins[] = {{"copy", WEFT_BUILTIN_COPY}, {"fill", WEFT_BUILTIN_FILL}};
  for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
    weft_kernel_entry e;
    memset(&e, 0, sizeof(e));
    e.k.builtin = builtins[i].kind;
    weft_kernel k;
    weft_status st = weft__kernel_register(dev, builtins[i].name, &e, &k);
    if (st) return st;
  }
  return NULL;
}

/* ---- modules and their kernels (the backend's payload) ------------------------------------- */

weft_status weft_module_load(weft_device *dev, const void *image, size_t bytes, weft_module *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  return dev->backend->vt->module_load(dev->backend, image, bytes, out);
}

weft_status weft_kernel_cuda(weft_device *dev, weft_module module, const char *entry,
                             const char *params, weft_kernel *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  weft_kernel_entry e;
  memset(&e, 0, sizeof(e));
  if ((st = dev->backend->vt->kernel_resolve(dev->backend, module, entry, params, &e.k.impl)))
    return st;
  st = weft__kernel_register(dev, entry, &e, out);
  if (st) dev->backend->vt->kernel_free(dev->backend, e.k.impl);
  return st;
}
