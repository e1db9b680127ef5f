/* The kernel table and the kernel a thread runs (kernels.c). */
#ifndef WEFT_SCHEDULER_KERNELS_H
#define WEFT_SCHEDULER_KERNELS_H

#include "scheduler/device_internal.h"

/* Adds a kernel: |name| is copied, |e|'s other fields taken as they are. */
WEFT_MUST_USE_RESULT weft_status weft__kernel_register(weft_device *dev, const char *name,
                                                       const weft_kernel_entry *e,
                                                       weft_kernel *out);
/* The built-in kernels' indices in the table (weft__kernels_builtin makes
 * them at open, before any other kernel). */
#define WEFT_KERNEL_COPY 0u
#define WEFT_KERNEL_FILL 1u
WEFT_MUST_USE_RESULT weft_status weft__kernels_builtin(weft_device *dev);
/* The launch whose host kernel this thread is running (set around the
 * kernel by launch.c), or NULL. */
extern _Thread_local const cmd *weft__kernel_running;
/* The launch whose host kernel the calling thread runs on |dev|, or NULL. */
const cmd *weft__running_kernel(const weft_device *dev);
/* InvalidArgument: |call|, made from kernel |k|, would wait for it (|why|). */
WEFT_MUST_USE_RESULT weft_status weft__kernel_refusal(const weft_device *dev, const cmd *k,
                                                      const char *call, const char *why);
/* weft__kernel_refusal for the kernel the calling thread runs on |dev|;
 * NULL when it runs none. */
WEFT_MUST_USE_RESULT weft_status weft__refuse_in_kernel(const weft_device *dev, const char *call,
                                                        const char *why);

#endif
