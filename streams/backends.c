/* The backend table: one line per backend. A backend built without what it
 * needs (CUDA without cuda.h) still has its line: its open says why. */
#include "streams/backend.h"

static const struct {
  weft_backend kind;
  weft_backend_open_fn open;
} backends[] = {
    {WEFT_BACKEND_HOST, weft_backend_host_open},
    {WEFT_BACKEND_CUDA, weft_backend_cuda_open},
};

static weft_backend_open_fn find(weft_backend kind) {
  for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
    if (backends[i].kind == kind) return backends[i].open;
  return NULL;
}

bool weft_backend_known(weft_backend kind) {
  return find(kind) != NULL;
}

weft_status weft_backend_open(weft_backend kind, const weft_backend_config *cfg,
                              weft_backend_base **out) {
  *out = NULL;
  weft_backend_open_fn open = find(kind);
  if (!open) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)kind);
  return open(cfg, out);
}
