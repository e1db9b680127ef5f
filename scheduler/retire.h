/* Retirement (retire.c): the scheduler takes back completed work, in order. */
#ifndef WEFT_SCHEDULER_RETIRE_H
#define WEFT_SCHEDULER_RETIRE_H

#include "scheduler/device_internal.h"

/* Retires everything the workers completed; true if anything was. */
bool weft__retire_all(weft_device *dev);
/* A stream's oldest unretired task has completed. */
bool weft__completions_ready(weft_device *dev);
/* Completed work the scheduler was owed a wake-up for (host streams only). */
bool weft__completions_owed(weft_device *dev);

#endif
