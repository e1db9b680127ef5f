/* struct_size of the structs weft writes into (stats, info, reports, usage,
 * task-graph node info). The caller sets struct_size to the sizeof it was
 * compiled with (0: this release's layout), and weft writes exactly that many
 * bytes, so a newer library never writes past an older caller's struct.
 * Accepted sizes are those the struct has had, at field boundaries; each of
 * these structs has had one layout so far, so only 0 and sizeof. */
#ifndef WEFT_SCHEDULER_STRUCT_SIZE_H
#define WEFT_SCHEDULER_STRUCT_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include <weft/weft.h>

/* Checks |given| (a caller's struct_size) against the struct |what| of
 * |full| bytes; on success *size is the number of bytes to write. */
static inline weft_status weft__out_struct_size(uint32_t given, size_t full, const char *what,
                                                uint32_t *size) {
  if (given == 0 || given == full) {
    *size = (uint32_t)full;
    return NULL;
  }
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "%s.struct_size is %u: set it to sizeof(%s) (%zu) or 0", what, given, what,
                         full);
}

#endif /* WEFT_SCHEDULER_STRUCT_SIZE_H */
