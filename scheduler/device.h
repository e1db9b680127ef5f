/* The device: one scheduler thread owning all mutable device state (buffers,
 * streams, storage, taint views), fed by a lock-free inbox of commands from
 * any client thread and of completions from the stream workers.
 *
 * A command is one allocation that travels: client -> scheduler inbox ->
 * (as a task) a stream's worker -> back to the scheduler inbox as its own
 * completion message, where it is freed. */
#ifndef WEFT_SCHEDULER_DEVICE_H
#define WEFT_SCHEDULER_DEVICE_H

#include "core/failure.h"
#include "core/handles.h"
#include "memory/storage.h"
#include "streams/stream.h"

typedef struct weft_kernel_entry {
  _Atomic uint32_t ready; /* release: the fields below are set */
  char *name;
  size_t name_cap;
  weft_host_kernel_fn fn;
  void *user;
} weft_kernel_entry;

/* A buffer, owned by the scheduler; its execution taint view is touched only
 * by tasks that bind it, which the wait rules order. */
typedef struct weft_buf {
  uint64_t id, size;
  weft_storage_handle mem;
  bool allocated, released;
  uint32_t pending;    /* dispatched tasks binding it, not yet completed */
  weft_taint exec;     /* execution view (workers) */
  weft_taint known;    /* scheduler view: completed work only */
  uint32_t lw_slot;    /* last writer: stream slot and sequence number */
  uint64_t lw_seq;     /* 0: never written */
  uint64_t *last_read; /* [max_streams]: last reader per slot since the last write */
} weft_buf;

typedef struct weft_batch {
  weft_task *head, *tail;
  uint32_t n;
} weft_batch;

#define WEFT_MAX_KERNELS 4096u

struct weft_device {
  weft_allocator alloc;
  uint32_t max_streams, max_tasks;
  uint32_t tag; /* distinguishes this device's kernel ids */
  weft_inbox inbox;
  pthread_t thread;
  _Atomic uint32_t closing;
  weft_handles buffers;
  weft_kernel_entry *kernels;
  _Atomic uint32_t nkernels;
  _Atomic uint64_t launches_submitted;
  _Atomic uint64_t failure_ids;
  /* ---- scheduler thread only ---- */
  weft_storage *storage;
  weft_stream **streams; /* [max_streams], created lazily */
  weft_batch *batches;   /* [max_streams] */
  uint64_t inflight;     /* tasks dispatched and not yet completed */
  bool shutdown;
  weft_device_stats stats;
};

#endif
