/* Internal interface between the parts of the fake CUDA driver (not installed,
 * not used by tests: they see only cuda.h and fake_cuda_control.h). */
#ifndef FAKE_CUDA_INTERNAL_H
#define FAKE_CUDA_INTERNAL_H

#include <stddef.h>

#include <cuda.h>

#define FC_EXPORT     __attribute__((visibility("default")))
#define FC_MAX_PARAMS 8
#define FC_MAX_PARAM  32 /* bytes per kernel parameter (weft_struct_probe's struct: 24) */

typedef struct fc_dim {
  unsigned x, y, z;
} fc_dim;

/* An emulated kernel: runs the whole grid on the calling (stream worker)
 * thread. params is exactly what cuLaunchKernel passes (params[i] points to
 * the value of argument i; here, to the launch's private copy). Returns
 * CUDA_SUCCESS, or the error a real GPU would report asynchronously (the
 * context then turns sticky-faulted). */
typedef CUresult (*fc_emu_fn)(void **params, fc_dim grid, fc_dim block);

typedef struct fc_kernel {
  const char *name;
  fc_emu_fn run;
  unsigned nparams;
  unsigned char param_size[FC_MAX_PARAMS];
} fc_kernel;

typedef struct fc_entry {
  char *name;         /* malloc'd */
  const fc_kernel *k; /* NULL: the image has the entry but the fake has no emulation */
} fc_entry;

/* fake_cuda_kernels.c */
const fc_kernel *fc_kernel_find(const char *name, size_t len);
/* Parses a module image (NUL-terminated PTX text, or an ELF cubin / fatbin
 * whose string tables are scanned for the emulated kernels' names). On success
 * *entries is a malloc'd array of *n entries (free with fc_entries_free). */
CUresult fc_parse_image(const void *image, fc_entry **entries, size_t *n);
void fc_entries_free(fc_entry *entries, size_t n);

/* fake_cuda.c: whether [p, p + bytes) lies inside one live device allocation
 * (locks the driver's mutex: never call it with the mutex held). */
int fc_device_range_ok(const void *p, size_t bytes);

#endif
