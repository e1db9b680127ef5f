#include "streams/cuda/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

static const weft_cuda_driver_symbol symbols[] = {
#define WEFT_CU_SYM(name, version, exported)                                                       \
  {#name, version, exported, offsetof(weft_cuda_driver, name), false},
#define WEFT_CU_OPT(name, version, exported)                                                       \
  {#name, version, exported, offsetof(weft_cuda_driver, name), true},
#include "streams/cuda/driver_symbols.inc"
#undef WEFT_CU_SYM
#undef WEFT_CU_OPT
};

const weft_cuda_driver_symbol *weft_cuda_driver_symbols(size_t *count) {
  *count = sizeof(symbols) / sizeof(symbols[0]);
  return symbols;
}

/* Resolves one row: cuGetProcAddress_v2 first, else dlsym of the exported name. */
static void *resolve(weft_cuda_driver *d, get_proc_fn gpa, const weft_cuda_driver_symbol *s) {
  void *fn = NULL;
  if (gpa) {
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (gpa(s->name, &fn, s->version, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS &&
        q == CU_GET_PROC_ADDRESS_SUCCESS && fn) {
      d->resolved_gpa++;
      return fn;
    }
  }
  fn = dlsym(d->lib, s->exported);
  if (fn) d->resolved_dlsym++;
  return fn;
}

const char *weft_cuda_driver_path(const char *path) {
  if (!path || !*path) path = weft_config_cuda_driver();
  /* Never libcuda.so: that name is the development symlink, or the toolkit's
   * link-time library (stubs/libcuda.so), which holds no driver. */
  return path && *path ? path : "libcuda.so.1";
}

weft_status weft_cuda_driver_open(weft_cuda_driver *d, const char *path, unsigned flags) {
  memset(d, 0, sizeof(*d));
  path = weft_cuda_driver_path(path);
  snprintf(d->path, sizeof(d->path), "%s", path);
  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib)
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "no CUDA driver: dlopen(\"%s\") failed: %s", path, dlerror());
  get_proc_fn gpa = NULL;
  if (!(flags & WEFT_CUDA_LOAD_DLSYM_ONLY)) {
    void *g = dlsym(d->lib, "cuGetProcAddress_v2");
    memcpy(&gpa, &g, sizeof(g));
  }
  for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
    void *p = resolve(d, gpa, &symbols[i]);
    if (!p && !symbols[i].optional) {
      weft_status st =
          weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                          "CUDA driver %s lacks %s (ABI %d, exported as %s): not a usable libcuda",
                          d->path, symbols[i].name, symbols[i].version, symbols[i].exported);
      weft_cuda_driver_unload(d);
      return st;
    }
    memcpy((char *)d + symbols[i].offset, &p, sizeof(p));
  }
  return NULL;
}

weft_status weft_cuda_driver_load(weft_cuda_driver *d) {
  return weft_cuda_driver_open(d, NULL, 0);
}

void weft_cuda_driver_unload(weft_cuda_driver *d) {
  if (!d) return;
  if (d->lib) dlclose(d->lib);
  memset(d, 0, sizeof(*d));
}
