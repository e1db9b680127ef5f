/* CUresult -> weft error: one table for every CUresult of CUDA 13's cuda.h.
 *
 * A message reads "<what weft was doing>: <NAME> (<code>): <description>",
 * e.g. "cuMemAlloc(1048576 bytes): CUDA_ERROR_OUT_OF_MEMORY (2): out of
 * memory". The name and description come from cuGetErrorName /
 * cuGetErrorString when the driver answers, else from the table (the toolkit
 * stub names nothing). Kinds (see docs/cuda.md for the whole table):
 *   OUT_OF_MEMORY                                   -> OutOfMemory (sized)
 *   ILLEGAL_ADDRESS, LAUNCH_FAILED, ECC, ... sticky -> DevicePoisoned
 *   LAUNCH_OUT_OF_RESOURCES, COOPERATIVE_LAUNCH_TOO_LARGE, INVALID_CLUSTER_SIZE,
 *   and INVALID_VALUE on a launch                  -> LaunchTooManyResources
 *   image / PTX / JIT errors                        -> LaunchCompilation
 *   NOT_FOUND, FILE_NOT_FOUND                       -> NotFound
 *   no driver / device / licence / MPS server       -> UnsupportedIoOperation
 *   STREAM_CAPTURE_*, CAPTURED_EVENT                -> Generic
 *   everything else (and values outside the table)  -> Unknown */
#ifndef WEFT_STREAMS_CUDA_ERRORS_H
#define WEFT_STREAMS_CUDA_ERRORS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "streams/cuda/driver.h"

/* What the failing call was: a launch reads INVALID_VALUE as a refused
 * launch configuration. */
typedef enum weft_cuda_op {
  WEFT_CUDA_OP_ANY = 0,
  WEFT_CUDA_OP_LAUNCH,
} weft_cuda_op;

/* One row of the table. */
typedef struct weft_cuda_error_row {
  CUresult code;
  const char *name;     /* "CUDA_ERROR_..." */
  weft_error_kind kind; /* for any call */
  bool sticky;          /* corrupts the context: every later call fails */
  bool launch_refusal;  /* on a launch: LaunchTooManyResources */
} weft_cuda_error_row;

/* The table (|*count| rows, CUDA_SUCCESS excluded), in cuda.h's order. */
const weft_cuda_error_row *weft_cuda_error_table(size_t *count);
/* "CUDA_ERROR_..." for a value in the table, else NULL. */
const char *weft_cuda_result_name(CUresult r);
/* The kind |r| maps to for |op|; WEFT_OK for CUDA_SUCCESS. */
weft_error_kind weft_cuda_error_kind(CUresult r, weft_cuda_op op);
/* true for the context-corrupting faults (the process must restart to use
 * the device again): the device poisons itself on the first one. */
bool weft_cuda_is_sticky(CUresult r);
/* "NAME (code): description" of a CUresult, through the driver when it can
 * (the toolkit stub names nothing: the name then comes from weft's table). */
void weft_cuda_describe(const weft_cuda_driver *d, CUresult r, char *buf, size_t cap);

/* The first sticky error seen, shared by everything that uses one context.
 * Zero-initialised is empty. Lock-free: any thread may record or read. */
typedef struct weft_cuda_poison {
  _Atomic(struct weft_error *) first;
} weft_cuda_poison;

/* Keeps a clone of |st| when nothing is recorded yet (|st| stays the caller's). */
void weft_cuda_poison_record(weft_cuda_poison *p, weft_status st);
/* A clone of the first sticky error, or NULL. */
weft_status weft_cuda_poison_get(weft_cuda_poison *p);
/* Frees the recorded error (teardown). */
void weft_cuda_poison_clear(weft_cuda_poison *p);

/* The error for |r| (NULL for CUDA_SUCCESS); the message starts with the
 * printf-formatted context. */
weft_status weft_cuda_error(const weft_cuda_driver *d, CUresult r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As weft_cuda_error, with the call's kind, the size of an allocation (kept
 * by the kinds with a size field: OutOfMemory), and a poison sink that
 * records a sticky error (NULL: none). */
weft_status weft_cuda_error_ex(const weft_cuda_driver *d, weft_cuda_poison *poison, weft_cuda_op op,
                               CUresult r, uint64_t size, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#endif
