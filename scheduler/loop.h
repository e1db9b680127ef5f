/* The scheduler loop (loop.c): thread, combining role, park/wake, drain. */
#ifndef WEFT_SCHEDULER_LOOP_H
#define WEFT_SCHEDULER_LOOP_H

#include "scheduler/device_internal.h"

/* The scheduler thread's body (pthread_create's start routine). */
void *weft__scheduler_main(void *dev);
/* One command reaching the scheduler (through weft__cmd_ops). */
void weft__dev_process(weft_device *dev, cmd *c);
/* A combining client's pass: schedules what is queued while it can hold the role. */
void weft__combine(weft_device *dev);
/* Retires tasks until none is in flight; commands that arrive meanwhile join
 * the scheduler's queue, in order, for the main loop. Needed before bytes
 * move (relocation: workers hold addresses resolved at dispatch) and before
 * the scheduler touches execution views. It never waits for a kernel that
 * waits for the scheduler: a kernel's blocking call still queued is refused
 * (InvalidArgument), so that kernel can finish. */
void weft__dev_drain(weft_device *dev);

#endif
