/* DLPack in and out (include/weft/dlpack.h). Built only when
 * <dlpack/dlpack.h> is found (CMakeLists.txt, WEFT_WITH_DLPACK).
 *
 * In: the tensor's bytes are imported (weft_buffer_import) with a release
 * callback that calls the tensor's deleter, so the deleter runs exactly once,
 * after the buffer is released and its work retired, or at once on a failed
 * import. Out: an export pin (export.h) keeps the range alive past release
 * and close; the DLManagedTensor wraps it and its deleter drops the pin. */
#include <inttypes.h>
#include <string.h>

#include <weft/dlpack.h>

#include "core/alloc.h"
#include "scheduler/device_internal.h"
#include "scheduler/export.h"
#include "scheduler/inside.h"

#define DLPACK_MAX_NDIM 32 /* to_dlpack: extents copied into the export */

/* The bytes of a compact tensor of |dtype| and |shape|: product(shape) *
 * ceil(bits * lanes / 8) (DLPack's GetDataSize); ndim 0 is one element.
 * |what| names the tensor in messages. */
static weft_status tensor_bytes(DLDataType dtype, const int64_t *shape, int32_t ndim,
                                const char *what, uint64_t *out) {
  if (ndim < 0)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s: ndim is %" PRId32 "", what, ndim);
  if (ndim > 0 && !shape)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s: shape is NULL with ndim %" PRId32, what,
                           ndim);
  if (dtype.bits == 0 || dtype.lanes == 0)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "%s: dtype has %u bits and %u lanes (neither may be 0)", what,
                           (unsigned)dtype.bits, (unsigned)dtype.lanes);
  uint64_t n = ((uint64_t)dtype.bits * dtype.lanes + 7) / 8;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "%s: shape[%" PRId32 "] is %" PRId64 " (negative)", what, i, shape[i]);
    if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n))
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "%s: its size overflows 64 bits at shape[%" PRId32 "]", what, i);
  }
  if (n == 0)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "%s: an extent is 0 (an empty tensor: weft has no 0-byte buffers)",
                           what);
  if (n > WEFT_MAX_BUFFER_SIZE)
    return weft_error_make_sized(WEFT_ERR_INVALID_ARGUMENT, n,
                                 "%s: %" PRIu64 " bytes, above WEFT_MAX_BUFFER_SIZE", what, n);
  *out = n;
  return NULL;
}

/* NULL strides are compact; given strides must be those of a row-major
 * compact tensor, except where the extent is 1 (any stride addresses the
 * same single element). */
static bool strides_compact(const DLTensor *t) {
  if (!t->strides) return true;
  int64_t want = 1;
  for (int32_t i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != want) return false;
    want *= t->shape[i];
  }
  return true;
}

/* Where the device's tensors live: its DLPack device type and ordinal. */
static weft_status device_of(weft_device *dev, DLDevice *out) {
  weft_device_info info = {0};
  weft_status st = weft_device_info_get(dev, &info);
  if (st) return st;
  if (info.backend == WEFT_BACKEND_CUDA)
    *out = (DLDevice){.device_type = kDLCUDA, .device_id = info.ordinal};
  else
    *out = (DLDevice){.device_type = kDLCPU, .device_id = 0};
  return NULL;
}

static const char *device_type_name(DLDeviceType t) {
  static const char *const names[] = {
      [kDLCPU] = "kDLCPU",
      [kDLCUDA] = "kDLCUDA",
      [kDLCUDAHost] = "kDLCUDAHost",
      [kDLOpenCL] = "kDLOpenCL",
      [kDLVulkan] = "kDLVulkan",
      [kDLMetal] = "kDLMetal",
      [kDLVPI] = "kDLVPI",
      [kDLROCM] = "kDLROCM",
      [kDLROCMHost] = "kDLROCMHost",
      [kDLExtDev] = "kDLExtDev",
      [kDLCUDAManaged] = "kDLCUDAManaged",
  };
  unsigned i = (unsigned)t;
  if (i < sizeof(names) / sizeof(names[0]) && names[i]) return names[i];
  return "a device type DLPack 0.6 does not name";
}

/* ---- from_dlpack --------------------------------------------------------------------------- */

/* The imported buffer's release callback: the tensor is the producer's
 * again. Runs once: on weft's scheduler thread, the closing thread, the
 * thread of the export deleter that finishes a closed device's teardown, or
 * this call's thread when the tensor is refused. */
static void release_tensor(void *user) {
  DLManagedTensor *t = user;
  if (t->deleter) t->deleter(t);
}

static weft_status check_tensor(weft_device *dev, const DLManagedTensor *mt, uint64_t *address,
                                uint64_t *size) {
  const DLTensor *t = &mt->dl_tensor;
  DLDevice here;
  weft_status st = device_of(dev, &here);
  if (st) return st;
  if (t->device.device_type != here.device_type ||
      (here.device_type == kDLCUDA && t->device.device_id != here.device_id))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "tensor: it is on %s device %d; this device takes %s device %d",
                           device_type_name(t->device.device_type), t->device.device_id,
                           device_type_name(here.device_type), here.device_id);
  if (!t->data) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "tensor: data is NULL");
  if ((st = tensor_bytes(t->dtype, t->shape, t->ndim, "tensor", size))) return st;
  if (!strides_compact(t))
    return weft_error_make(WEFT_ERR_UNSUPPORTED_STRIDES,
                           "tensor: its strides are not those of a compact row-major tensor "
                           "(make it contiguous first)");
  uint64_t base = (uint64_t)(uintptr_t)t->data;
  if (__builtin_add_overflow(base, t->byte_offset, address))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "tensor: data + byte_offset (%" PRIu64 ") overflows", t->byte_offset);
  uint64_t end;
  if (__builtin_add_overflow(*address, *size, &end))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "tensor: its bytes run past the address space");
  return NULL;
}

weft_status weft_buffer_from_dlpack(weft_device *dev, weft_stream_id stream, DLManagedTensor *t,
                                    weft_buffer *out) {
  if (out) *out = (weft_buffer){0};
  if (!t) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "t (the tensor) is NULL");
  /* Inside the device for the whole call (the calls below enter again): a
   * close that starts meanwhile waits for it. */
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_open(dev, &in);
  uint64_t address = 0, size = 0;
  if (!st && !out)
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  else if (!st)
    st = check_tensor(dev, t, &address, &size);
  if (st) { /* the tensor is weft's from the call on: refused, it goes back at once */
    release_tensor(t);
    return st;
  }
  /* From here weft_buffer_import calls release_tensor on every path. */
  return weft_buffer_import(dev, stream, address, size, release_tensor, t, out);
}

/* ---- to_dlpack ----------------------------------------------------------------------------- */

/* One allocation per export: the tensor, what its deleter needs, the
 * shape. The allocator is a copy, so the deleter frees it after the device
 * is gone (close left exported memory to the last unexport). */
typedef struct weft_dl_export {
  DLManagedTensor t; /* first: the deleter's argument is the block */
  weft_allocator alloc;
  struct weft_export *pin;
  size_t bytes;
  int64_t shape[];
} weft_dl_export;

static void export_deleter(DLManagedTensor *t) {
  if (!t) return;
  weft_dl_export *x = (weft_dl_export *)t;
  weft_allocator alloc = x->alloc; /* the unexport may free the device */
  weft__buffer_unexport(x->pin);
  weft__free(&alloc, x, x->bytes, 16);
}

weft_status weft_buffer_to_dlpack(weft_device *dev, weft_stream_id stream, weft_buffer buf,
                                  uint64_t offset, DLDataType dtype, const int64_t *shape,
                                  int32_t ndim, DLManagedTensor **out) {
  if (out) *out = NULL;
  WEFT_INSIDE in = {0}; /* dev->alloc stays valid to the end (see from_dlpack) */
  weft_status st = weft__enter_open(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (ndim > DLPACK_MAX_NDIM)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "ndim is %" PRId32 "; at most %d", ndim,
                           DLPACK_MAX_NDIM);
  uint64_t len;
  st = tensor_bytes(dtype, shape, ndim, "the export", &len);
  if (st) return st;
  DLDevice where;
  if ((st = device_of(dev, &where))) return st;
  size_t bytes = sizeof(weft_dl_export) + sizeof(int64_t) * (size_t)ndim;
  weft_dl_export *x = weft__alloc(&dev->alloc, bytes, 16);
  if (!x) return weft__oom(bytes, "a DLPack export");
  memset(x, 0, bytes);
  x->alloc = dev->alloc;
  x->bytes = bytes;
  uint64_t address = 0;
  if ((st = weft__buffer_export(dev, stream, buf, offset, len, &address, &x->pin))) {
    weft__free(&x->alloc, x, bytes, 16);
    return st;
  }
  if (ndim > 0) memcpy(x->shape, shape, sizeof(int64_t) * (size_t)ndim);
  x->t.dl_tensor = (DLTensor){
      .data = (void *)(uintptr_t)address,
      .device = where,
      .ndim = ndim,
      .dtype = dtype,
      .shape = x->shape, /* ndim 0: never read */
      .strides = NULL,   /* compact */
      .byte_offset = 0,
  };
  x->t.manager_ctx = x;
  x->t.deleter = export_deleter;
  *out = &x->t;
  return NULL;
}
