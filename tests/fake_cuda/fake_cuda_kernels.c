/* The fake driver's kernels (C emulations of kernels.cu, by name) and its
 * module image parser. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cuda_internal.h"

/* Every thread of the grid in turn; i = blockIdx.x * blockDim.x + threadIdx.x
 * (unsigned, wrapping like the device's arithmetic). */
#define FOR_EACH_THREAD(g, b, i)                                                                   \
  for (unsigned bz_ = 0; bz_ < (g).z; bz_++)                                                       \
    for (unsigned by_ = 0; by_ < (g).y; by_++)                                                     \
      for (unsigned bx_ = 0; bx_ < (g).x; bx_++)                                                   \
        for (unsigned tz_ = 0; tz_ < (b).z; tz_++)                                                 \
          for (unsigned ty_ = 0; ty_ < (b).y; ty_++)                                               \
            for (unsigned tx_ = 0; tx_ < (b).x; tx_++)                                             \
              for (unsigned i = bx_ * (b).x + tx_, once_ = 1; once_; once_ = 0)

/* Number of indices 0..n-1 that some thread touches (x dimension only). */
static size_t touched(unsigned n, fc_dim g, fc_dim b) {
  uint64_t threads = (uint64_t)g.x * b.x;
  return threads < n ? (size_t)threads : (size_t)n;
}

#define ARG(params, i, var) memcpy(&(var), (params)[i], sizeof(var))

/* A device-side access outside every live allocation is what a real GPU
 * reports as an illegal address. */
#define CHECK_RANGE(p, elems)                                                                      \
  do {                                                                                             \
    if ((elems) && !fc_device_range_ok((p), (elems) * sizeof(*(p))))                               \
      return CUDA_ERROR_ILLEGAL_ADDRESS;                                                           \
  } while (0)

static CUresult k_fill_f32(void **params, fc_dim g, fc_dim b) {
  float *out, value;
  unsigned n;
  ARG(params, 0, out);
  ARG(params, 1, value);
  ARG(params, 2, n);
  CHECK_RANGE(out, touched(n, g, b));
  FOR_EACH_THREAD(g, b, i) {
    if (i < n) out[i] = value;
  }
  return CUDA_SUCCESS;
}

static CUresult k_vec_add_f32(void **params, fc_dim g, fc_dim b) {
  const float *x, *y;
  float *out;
  unsigned n;
  ARG(params, 0, x);
  ARG(params, 1, y);
  ARG(params, 2, out);
  ARG(params, 3, n);
  size_t t = touched(n, g, b);
  CHECK_RANGE(x, t);
  CHECK_RANGE(y, t);
  CHECK_RANGE(out, t);
  FOR_EACH_THREAD(g, b, i) {
    if (i < n) out[i] = x[i] + y[i];
  }
  return CUDA_SUCCESS;
}

static CUresult k_axpy_f32(void **params, fc_dim g, fc_dim b) {
  float a;
  const float *x;
  float *y;
  unsigned n;
  ARG(params, 0, a);
  ARG(params, 1, x);
  ARG(params, 2, y);
  ARG(params, 3, n);
  size_t t = touched(n, g, b);
  CHECK_RANGE(x, t);
  CHECK_RANGE(y, t);
  FOR_EACH_THREAD(g, b, i) {
    if (i < n) y[i] = a * x[i] + y[i];
  }
  return CUDA_SUCCESS;
}

static CUresult k_noop(void **params, fc_dim g, fc_dim b) {
  (void)params, (void)g, (void)b;
  return CUDA_SUCCESS;
}

static CUresult k_fault(void **params, fc_dim g, fc_dim b) {
  (void)params, (void)g, (void)b;
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* Every thread of a real GPU spins in parallel; here one sleep of the same
 * length stands for the whole grid (no CPU burnt). */
static CUresult k_spin_us(void **params, fc_dim g, fc_dim b) {
  unsigned us;
  (void)g, (void)b;
  ARG(params, 0, us);
  struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
  return CUDA_SUCCESS;
}

/* weft_struct_probe(unsigned char *out, struct { 24 bytes, 8-aligned } s,
 * unsigned tail): out[0..24) = s's bytes, out[24..28) = tail's: what a
 * by-value struct parameter delivered, byte for byte. */
static CUresult k_struct_probe(void **params, fc_dim g, fc_dim b) {
  unsigned char *out;
  (void)g, (void)b;
  ARG(params, 0, out);
  CHECK_RANGE(out, 28);
  memcpy(out, params[1], 24);
  memcpy(out + 24, params[2], 4);
  return CUDA_SUCCESS;
}

#define PTR sizeof(void *)
static const fc_kernel kernels[] = {
    {"weft_fill_f32", k_fill_f32, 3, {PTR, 4, 4}},
    {"weft_vec_add_f32", k_vec_add_f32, 4, {PTR, PTR, PTR, 4}},
    {"weft_axpy_f32", k_axpy_f32, 4, {4, PTR, PTR, 4}},
    {"weft_noop", k_noop, 0, {0}},
    {"weft_fault", k_fault, 0, {0}},
    {"weft_spin_us", k_spin_us, 1, {4}},
    {"weft_struct_probe", k_struct_probe, 3, {PTR, 24, 4}},
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

const fc_kernel *fc_kernel_find(const char *name, size_t len) {
  for (size_t i = 0; i < NKERNELS; i++)
    if (strlen(kernels[i].name) == len && memcmp(kernels[i].name, name, len) == 0)
      return &kernels[i];
  return NULL;
}

void fc_entries_free(fc_entry *entries, size_t n) {
  for (size_t i = 0; i < n; i++) free(entries[i].name);
  free(entries);
}

static int add_entry(fc_entry **entries, size_t *n, const char *name, size_t len) {
  for (size_t i = 0; i < *n; i++) /* a name twice (fatbin: PTX + cubin) is one entry */
    if (strlen((*entries)[i].name) == len && memcmp((*entries)[i].name, name, len) == 0) return 1;
  fc_entry *grown = realloc(*entries, (*n + 1) * sizeof **entries);
  if (!grown) return 0;
  *entries = grown;
  char *copy = malloc(len + 1);
  if (!copy) return 0;
  memcpy(copy, name, len);
  copy[len] = '\0';
  grown[*n].name = copy;
  grown[*n].k = fc_kernel_find(name, len);
  (*n)++;
  return 1;
}

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$';
}

/* PTX text: `.version MAJOR.MINOR` is required; every `.entry NAME(` is an
 * entry point. */
static CUresult parse_ptx(const char *text, fc_entry **entries, size_t *n) {
  const char *v = strstr(text, ".version");
  if (!v) return CUDA_ERROR_INVALID_IMAGE;
  v += strlen(".version");
  while (is_space(*v)) v++;
  if (*v < '0' || *v > '9') return CUDA_ERROR_INVALID_PTX;
  if (strtoul(v, NULL, 10) > 9) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION; /* CUDA 13: PTX 9.x */
  for (const char *p = text; (p = strstr(p, ".entry")) != NULL;) {
    int starts = p == text || is_space(p[-1]);
    p += strlen(".entry");
    if (!starts || !is_space(*p)) continue;
    while (is_space(*p)) p++;
    const char *name = p;
    while (is_ident(*p)) p++;
    size_t len = (size_t)(p - name);
    while (is_space(*p)) p++;
    if (len == 0 || *p != '(') return CUDA_ERROR_INVALID_PTX;
    if (!add_entry(entries, n, name, len)) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

static uint64_t rd(const unsigned char *p, unsigned bytes) {
  uint64_t v = 0;
  for (unsigned i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i); /* little endian */
  return v;
}

/* Binary images: the entries are the emulated kernels whose names appear as
 * NUL-delimited strings (the symbol string table) in the image's extent. */
static CUresult scan_binary(const unsigned char *img, size_t size, fc_entry **entries, size_t *n) {
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
    size_t len = strlen(kernels[i].name);
    char pat[64];
    pat[0] = '\0';
    memcpy(pat + 1, kernels[i].name, len + 1);
    if (memmem(img, size, pat, len + 2) && !add_entry(entries, n, kernels[i].name, len))
      return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

#define MAX_IMAGE ((uint64_t)1 << 30)

static CUresult parse_elf(const unsigned char *img, fc_entry **entries, size_t *n) {
  if (img[4] != 2 /* ELFCLASS64 */ || img[5] != 1 /* little endian */)
    return CUDA_ERROR_INVALID_IMAGE;
  uint64_t phoff = rd(img + 0x20, 8), shoff = rd(img + 0x28, 8);
  uint64_t phentsize = rd(img + 0x36, 2), phnum = rd(img + 0x38, 2);
  uint64_t shentsize = rd(img + 0x3a, 2), shnum = rd(img + 0x3c, 2);
  if (phoff > MAX_IMAGE || shoff > MAX_IMAGE) return CUDA_ERROR_INVALID_IMAGE;
  uint64_t size = 64;
  if (phnum && phoff + phnum * phentsize > size) size = phoff + phnum * phentsize;
  if (shnum) {
    if (shentsize < 0x28) return CUDA_ERROR_INVALID_IMAGE;
    if (shoff + shnum * shentsize > size) size = shoff + shnum * shentsize;
    for (uint64_t i = 0; i < shnum; i++) {
      const unsigned char *sh = img + shoff + i * shentsize;
      uint64_t type = rd(sh + 4, 4), off = rd(sh + 0x18, 8), sz = rd(sh + 0x20, 8);
      if (off > MAX_IMAGE || sz > MAX_IMAGE) return CUDA_ERROR_INVALID_IMAGE;
      if (type != 8 /* SHT_NOBITS */ && off + sz > size) size = off + sz;
    }
  }
  if (size > MAX_IMAGE) return CUDA_ERROR_INVALID_IMAGE;
  return scan_binary(img, (size_t)size, entries, n);
}

CUresult fc_parse_image(const void *image, fc_entry **entries, size_t *n) {
  const unsigned char *img = image;
  CUresult r;
  *entries = NULL;
  *n = 0;
  if (img[0] == 0x7f && img[1] == 'E' && img[2] == 'L' && img[3] == 'F') {
    r = parse_elf(img, entries, n);
  } else if (rd(img, 4) == 0xBA55ED50u) { /* fatbin: magic, u16 version, u16 header, u64 size */
    uint64_t size = rd(img + 6, 2) + rd(img + 8, 8);
    r = size > MAX_IMAGE ? CUDA_ERROR_INVALID_IMAGE : scan_binary(img, (size_t)size, entries, n);
  } else {
    r = parse_ptx(image, entries, n);
  }
  if (r != CUDA_SUCCESS) {
    fc_entries_free(*entries, *n);
    *entries = NULL;
    *n = 0;
  }
  return r;
}
