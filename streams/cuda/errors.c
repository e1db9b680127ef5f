#include "streams/cuda/errors.h"

#include <stdarg.h>
#include <stdio.h>

#define ROW(n, kind, flags)                                                                        \
  {                                                                                                \
    CUDA_ERROR_##n, "CUDA_ERROR_" #n, WEFT_ERR_##kind, ((flags)&STICKY) != 0,                      \
        ((flags)&LAUNCH) != 0                                                                      \
  }
#define STICKY 1
#define LAUNCH 2

/* Generated from cuda.h's enum cudaError_enum (CUDA 13.0; the fake driver's
 * fake_cuda_errors.inc lists the same values), kinds assigned by hand. */
static const weft_cuda_error_row rows[] = {
    ROW(INVALID_VALUE, UNKNOWN, LAUNCH),
    ROW(OUT_OF_MEMORY, OUT_OF_MEMORY, 0),
    ROW(NOT_INITIALIZED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(DEINITIALIZED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(PROFILER_DISABLED, UNKNOWN, 0),
    ROW(PROFILER_NOT_INITIALIZED, UNKNOWN, 0),
    ROW(PROFILER_ALREADY_STARTED, UNKNOWN, 0),
    ROW(PROFILER_ALREADY_STOPPED, UNKNOWN, 0),
    ROW(STUB_LIBRARY, UNSUPPORTED_IO_OPERATION, 0),
    ROW(CALL_REQUIRES_NEWER_DRIVER, UNSUPPORTED_IO_OPERATION, 0),
    ROW(DEVICE_UNAVAILABLE, UNSUPPORTED_IO_OPERATION, 0),
    ROW(NO_DEVICE, UNSUPPORTED_IO_OPERATION, 0),
    ROW(INVALID_DEVICE, UNSUPPORTED_IO_OPERATION, 0),
    ROW(DEVICE_NOT_LICENSED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(INVALID_IMAGE, LAUNCH_COMPILATION, 0),
    ROW(INVALID_CONTEXT, UNKNOWN, 0),
    ROW(CONTEXT_ALREADY_CURRENT, UNKNOWN, 0),
    ROW(MAP_FAILED, STORAGE_MAPPING_FAILED, 0),
    ROW(UNMAP_FAILED, STORAGE_MAPPING_FAILED, 0),
    ROW(ARRAY_IS_MAPPED, UNKNOWN, 0),
    ROW(ALREADY_MAPPED, UNKNOWN, 0),
    ROW(NO_BINARY_FOR_GPU, LAUNCH_COMPILATION, 0),
    ROW(ALREADY_ACQUIRED, UNKNOWN, 0),
    ROW(NOT_MAPPED, UNKNOWN, 0),
    ROW(NOT_MAPPED_AS_ARRAY, UNKNOWN, 0),
    ROW(NOT_MAPPED_AS_POINTER, UNKNOWN, 0),
    ROW(ECC_UNCORRECTABLE, DEVICE_POISONED, STICKY),
    ROW(UNSUPPORTED_LIMIT, UNKNOWN, 0),
    ROW(CONTEXT_ALREADY_IN_USE, UNKNOWN, 0),
    ROW(PEER_ACCESS_UNSUPPORTED, UNKNOWN, 0),
    ROW(INVALID_PTX, LAUNCH_COMPILATION, 0),
    ROW(INVALID_GRAPHICS_CONTEXT, UNKNOWN, 0),
    ROW(NVLINK_UNCORRECTABLE, DEVICE_POISONED, STICKY),
    ROW(JIT_COMPILER_NOT_FOUND, LAUNCH_COMPILATION, 0),
    ROW(UNSUPPORTED_PTX_VERSION, LAUNCH_COMPILATION, 0),
    ROW(JIT_COMPILATION_DISABLED, LAUNCH_COMPILATION, 0),
    ROW(UNSUPPORTED_EXEC_AFFINITY, UNKNOWN, 0),
    ROW(UNSUPPORTED_DEVSIDE_SYNC, LAUNCH_COMPILATION, 0),
    ROW(CONTAINED, DEVICE_POISONED, STICKY),
    ROW(INVALID_SOURCE, LAUNCH_COMPILATION, 0),
    ROW(FILE_NOT_FOUND, NOT_FOUND, 0),
    ROW(SHARED_OBJECT_SYMBOL_NOT_FOUND, LAUNCH_COMPILATION, 0),
    ROW(SHARED_OBJECT_INIT_FAILED, LAUNCH_COMPILATION, 0),
    ROW(OPERATING_SYSTEM, UNKNOWN, 0),
    ROW(INVALID_HANDLE, UNKNOWN, 0),
    ROW(ILLEGAL_STATE, UNKNOWN, 0),
    ROW(LOSSY_QUERY, UNKNOWN, 0),
    ROW(NOT_FOUND, NOT_FOUND, 0),
    ROW(NOT_READY, UNKNOWN, 0),
    ROW(ILLEGAL_ADDRESS, DEVICE_POISONED, STICKY),
    ROW(LAUNCH_OUT_OF_RESOURCES, LAUNCH_TOO_MANY_RESOURCES, 0),
    ROW(LAUNCH_TIMEOUT, DEVICE_POISONED, STICKY),
    ROW(LAUNCH_INCOMPATIBLE_TEXTURING, LAUNCH_COMPILATION, 0),
    ROW(PEER_ACCESS_ALREADY_ENABLED, UNKNOWN, 0),
    ROW(PEER_ACCESS_NOT_ENABLED, UNKNOWN, 0),
    ROW(PRIMARY_CONTEXT_ACTIVE, UNKNOWN, 0),
    ROW(CONTEXT_IS_DESTROYED, UNKNOWN, 0),
    ROW(ASSERT, DEVICE_POISONED, STICKY),
    ROW(TOO_MANY_PEERS, UNKNOWN, 0),
    ROW(HOST_MEMORY_ALREADY_REGISTERED, UNKNOWN, 0),
    ROW(HOST_MEMORY_NOT_REGISTERED, UNKNOWN, 0),
    ROW(HARDWARE_STACK_ERROR, DEVICE_POISONED, STICKY),
    ROW(ILLEGAL_INSTRUCTION, DEVICE_POISONED, STICKY),
    ROW(MISALIGNED_ADDRESS, DEVICE_POISONED, STICKY),
    ROW(INVALID_ADDRESS_SPACE, DEVICE_POISONED, STICKY),
    ROW(INVALID_PC, DEVICE_POISONED, STICKY),
    ROW(LAUNCH_FAILED, DEVICE_POISONED, STICKY),
    ROW(COOPERATIVE_LAUNCH_TOO_LARGE, LAUNCH_TOO_MANY_RESOURCES, 0),
    ROW(TENSOR_MEMORY_LEAK, DEVICE_POISONED, STICKY),
    ROW(NOT_PERMITTED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(NOT_SUPPORTED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(SYSTEM_NOT_READY, UNSUPPORTED_IO_OPERATION, 0),
    ROW(SYSTEM_DRIVER_MISMATCH, UNSUPPORTED_IO_OPERATION, 0),
    ROW(COMPAT_NOT_SUPPORTED_ON_DEVICE, UNSUPPORTED_IO_OPERATION, 0),
    ROW(MPS_CONNECTION_FAILED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(MPS_RPC_FAILURE, UNSUPPORTED_IO_OPERATION, 0),
    ROW(MPS_SERVER_NOT_READY, UNSUPPORTED_IO_OPERATION, 0),
    ROW(MPS_MAX_CLIENTS_REACHED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(MPS_MAX_CONNECTIONS_REACHED, UNSUPPORTED_IO_OPERATION, 0),
    ROW(MPS_CLIENT_TERMINATED, DEVICE_POISONED, STICKY),
    ROW(CDP_NOT_SUPPORTED, LAUNCH_COMPILATION, 0),
    ROW(CDP_VERSION_MISMATCH, LAUNCH_COMPILATION, 0),
    ROW(STREAM_CAPTURE_UNSUPPORTED, GENERIC, 0),
    ROW(STREAM_CAPTURE_INVALIDATED, GENERIC, 0),
    ROW(STREAM_CAPTURE_MERGE, GENERIC, 0),
    ROW(STREAM_CAPTURE_UNMATCHED, GENERIC, 0),
    ROW(STREAM_CAPTURE_UNJOINED, GENERIC, 0),
    ROW(STREAM_CAPTURE_ISOLATION, GENERIC, 0),
    ROW(STREAM_CAPTURE_IMPLICIT, GENERIC, 0),
    ROW(CAPTURED_EVENT, GENERIC, 0),
    ROW(STREAM_CAPTURE_WRONG_THREAD, GENERIC, 0),
    ROW(TIMEOUT, UNKNOWN, 0),
    ROW(GRAPH_EXEC_UPDATE_FAILURE, GENERIC, 0),
    ROW(EXTERNAL_DEVICE, DEVICE_POISONED, STICKY),
    ROW(INVALID_CLUSTER_SIZE, LAUNCH_TOO_MANY_RESOURCES, 0),
    ROW(FUNCTION_NOT_LOADED, LAUNCH_COMPILATION, 0),
    ROW(INVALID_RESOURCE_TYPE, UNKNOWN, 0),
    ROW(INVALID_RESOURCE_CONFIGURATION, UNKNOWN, 0),
    ROW(KEY_ROTATION, UNKNOWN, 0),
    ROW(UNKNOWN, UNKNOWN, 0),
};

const weft_cuda_error_row *weft_cuda_error_table(size_t *count) {
  *count = sizeof(rows) / sizeof(rows[0]);
  return rows;
}

static const weft_cuda_error_row *find(CUresult r) {
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    if (rows[i].code == r) return &rows[i];
  return NULL;
}

const char *weft_cuda_result_name(CUresult r) {
  if (r == CUDA_SUCCESS) return "CUDA_SUCCESS";
  const weft_cuda_error_row *row = find(r);
  return row ? row->name : NULL;
}

weft_error_kind weft_cuda_error_kind(CUresult r, weft_cuda_op op) {
  if (r == CUDA_SUCCESS) return WEFT_OK;
  const weft_cuda_error_row *row = find(r);
  if (!row) return WEFT_ERR_UNKNOWN;
  if (op == WEFT_CUDA_OP_LAUNCH && row->launch_refusal) return WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES;
  return row->kind;
}

bool weft_cuda_is_sticky(CUresult r) {
  const weft_cuda_error_row *row = r == CUDA_SUCCESS ? NULL : find(r);
  return row && row->sticky;
}

void weft_cuda_poison_record(weft_cuda_poison *p, weft_status st) {
  if (!p || !st || atomic_load_explicit(&p->first, memory_order_acquire)) return;
  weft_status copy = weft_error_clone(st);
  struct weft_error *expected = NULL;
  if (!atomic_compare_exchange_strong_explicit(&p->first, &expected, copy, memory_order_acq_rel,
                                               memory_order_acquire))
    weft_error_free(copy);
}

weft_status weft_cuda_poison_get(weft_cuda_poison *p) {
  weft_status st = p ? atomic_load_explicit(&p->first, memory_order_acquire) : NULL;
  return st ? weft_error_clone(st) : NULL;
}

void weft_cuda_poison_clear(weft_cuda_poison *p) {
  if (p) weft_error_free(atomic_exchange_explicit(&p->first, NULL, memory_order_acq_rel));
}

static weft_status verror(const weft_cuda_driver *d, weft_cuda_poison *poison, weft_cuda_op op,
                          CUresult r, uint64_t size, const char *fmt, va_list ap) {
  if (r == CUDA_SUCCESS) return NULL;
  char what[512], why[512];
  vsnprintf(what, sizeof(what), fmt, ap);
  weft_cuda_describe(d, r, why, sizeof(why));
  weft_status st = weft_error_make_sized(weft_cuda_error_kind(r, op), size, "%s: %s", what, why);
  if (weft_cuda_is_sticky(r)) weft_cuda_poison_record(poison, st);
  return st;
}

weft_status weft_cuda_error(const weft_cuda_driver *d, CUresult r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft_status st = verror(d, NULL, WEFT_CUDA_OP_ANY, r, 0, fmt, ap);
  va_end(ap);
  return st;
}

weft_status weft_cuda_error_ex(const weft_cuda_driver *d, weft_cuda_poison *poison, weft_cuda_op op,
                               CUresult r, uint64_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft_status st = verror(d, poison, op, r, size, fmt, ap);
  va_end(ap);
  return st;
}

void weft_cuda_describe(const weft_cuda_driver *d, CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *desc = NULL;
  if (d && d->cuGetErrorName && d->cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (d && d->cuGetErrorString && d->cuGetErrorString(r, &desc) != CUDA_SUCCESS) desc = NULL;
  if (!name) name = weft_cuda_result_name(r);
  snprintf(buf, cap, "%s (%d)%s%s", name ? name : "CUresult", (int)r, desc ? ": " : "",
           desc ? desc : "");
}
