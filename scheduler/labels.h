/* Labels (labels.c): launch labels interned per device, and buffer labels
 * (weft_buffer_set_label), which the scheduler owns and reports print. */
#ifndef WEFT_SCHEDULER_LABELS_H
#define WEFT_SCHEDULER_LABELS_H

#include "scheduler/device_internal.h"

#define WEFT_MAX_LABELS    4096u /* distinct launch labels per device */
#define WEFT_MAX_LABEL_LEN 127u  /* bytes of a label, without its NUL */

/* The interned copy of |label| (NULL: none); InvalidArgument for an empty,
 * too long or unplaceable label, OutOfMemory when the copy fails. The
 * first sight of a label allocates its copy (and the table, the first
 * time); later ones allocate nothing and take no lock. Any thread. */
WEFT_MUST_USE_RESULT weft_status weft__label_intern(weft_device *dev, const char *label,
                                                    const char **out);
/* Frees the interned labels (close, once nothing reads them). */
void weft__labels_destroy(weft_device *dev);

/* CMD_LABEL: the buffer takes its new label (the old one is freed). */
void weft__label_process(weft_device *dev, cmd *c);
/* A buffer as a report names it: "buffer 'LABEL' (#N)" while the scheduler
 * still holds it with a label, else "buffer #N" (weft__buf_name). Scheduler
 * thread. */
void weft__buf_label_name(weft_device *dev, uint64_t id, char *buf, size_t cap);

#endif
