// The test kernels of weft's CUDA backend, as real CUDA C. The fake driver
// (fake_cuda.c) emulates each of them by name on the CPU; a real driver loads
// the same module from kernels.ptx, generated from this file with
//   nvcc -ptx -arch=compute_75 kernels.cu -o kernels.ptx
// (checked in, so that building the tests needs no nvcc).
#include <stdint.h>

extern "C" __global__ void weft_fill_f32(float *out, float value, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

extern "C" __global__ void weft_vec_add_f32(const float *a, const float *b, float *out,
                                            unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

extern "C" __global__ void weft_axpy_f32(float a, const float *x, float *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void weft_noop() {}

// Simulates a kernel bug: a store to an unmapped address, which a real GPU
// reports as CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronisation, and which
// leaves the context unusable (a sticky error).
extern "C" __global__ void weft_fault() {
  volatile int *p = (volatile int *)(uintptr_t)0x10;
  *p = 1;
}

// Busy-waits for about `us` microseconds (every thread, in parallel): a slow
// producer for cross-stream ordering tests.
extern "C" __global__ void weft_spin_us(unsigned us) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < (uint64_t)us * 1000u);
}
