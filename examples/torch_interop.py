#!/usr/bin/env python3
"""weft from PyTorch, with ctypes only: a torch tensor goes to weft with no copy
(DLPack), a weft launch transforms it (a native kernel written in Python, then a host
kernel), and the result comes back to torch with no copy; a failed launch comes back
as a Python exception carrying weft's report.

    WEFT_LIBRARY=build/libweft.so /usr/bin/python3 examples/torch_interop.py

The library: $WEFT_LIBRARY, else the installed one (ctypes.util.find_library("weft")).
docs/embedding.md explains each step."""
import ctypes
import ctypes.util
import os
import sys

# ---- loading libweft.so ------------------------------------------------------------------
# libweft.so allocates from libc (its private jemalloc is the static library's), so
# ctypes loads it into any process (docs/embedding.md, "Loading libweft.so from Python").


def load_weft():
    path = os.environ.get("WEFT_LIBRARY") or ctypes.util.find_library("weft")
    if not path:
        sys.exit("torch_interop.py: no libweft.so: set WEFT_LIBRARY or install weft")
    return ctypes.CDLL(path)  # CDLL releases the GIL during each call


weft = load_weft()

import torch  # noqa: E402
import torch.utils.dlpack  # noqa: E402

# ---- the C declarations used here (include/weft/weft.h, include/weft/dlpack.h) ---------


class DLManagedTensor(ctypes.Structure):  # only its address travels; the layout is torch's
    pass


class Buffer(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64)]


class Kernel(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64)]


class Binding(ctypes.Structure):
    _fields_ = [("buffer", Buffer), ("offset", ctypes.c_uint64), ("size", ctypes.c_uint64),
                ("access", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class NativeCtx(ctypes.Structure):  # weft_native_ctx
    _fields_ = [("stream", ctypes.c_void_p), ("addresses", ctypes.POINTER(ctypes.c_uint64)),
                ("sizes", ctypes.POINTER(ctypes.c_uint64)), ("num_buffers", ctypes.c_size_t),
                ("scalars", ctypes.c_void_p), ("scalar_bytes", ctypes.c_size_t)]


class KernelCtx(ctypes.Structure):  # weft_kernel_ctx
    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3),
                ("block_idx", ctypes.c_uint32 * 3), ("buffers", ctypes.POINTER(ctypes.c_void_p)),
                ("sizes", ctypes.POINTER(ctypes.c_uint64)), ("num_buffers", ctypes.c_size_t),
                ("scalars", ctypes.c_void_p), ("scalar_bytes", ctypes.c_size_t)]


status = ctypes.c_void_p  # weft_status: NULL (None) is success
NATIVE_FN = ctypes.CFUNCTYPE(status, ctypes.POINTER(NativeCtx), ctypes.c_void_p)
HOST_FN = ctypes.CFUNCTYPE(status, ctypes.POINTER(KernelCtx), ctypes.c_void_p)
READ, WRITE, READ_WRITE = 1, 2, 3
WHOLE = 2**64 - 1
P, u64, vp = ctypes.POINTER, ctypes.c_uint64, ctypes.c_void_p
for name, res, args in [
    ("weft_device_open", status, [vp, P(vp)]),
    ("weft_device_close", None, [vp]),
    ("weft_buffer_from_dlpack", status, [vp, u64, vp, P(Buffer)]),
    ("weft_buffer_to_dlpack", status, [vp, u64, Buffer, u64, DLDataType, P(ctypes.c_int64),
                                       ctypes.c_int32, P(vp)]),
    ("weft_buffer_create", status, [vp, u64, u64, P(Buffer)]),
    ("weft_buffer_release", status, [vp, Buffer]),
    ("weft_kernel_native", status, [vp, ctypes.c_char_p, NATIVE_FN, vp, P(Kernel)]),
    ("weft_kernel_host", status, [vp, ctypes.c_char_p, HOST_FN, vp, P(Kernel)]),
    ("weft_launch", status, [vp, u64, Kernel, P(ctypes.c_uint32), P(ctypes.c_uint32),
                             P(Binding), ctypes.c_size_t, vp, ctypes.c_size_t]),
    ("weft_error_format", ctypes.c_size_t, [status, ctypes.c_char_p, ctypes.c_size_t]),
    ("weft_error_free", None, [status]),
]:
    getattr(weft, name).restype, getattr(weft, name).argtypes = res, args
weft.weft_error_make.restype = status


class WeftError(RuntimeError):
    pass


def check(call, st):
    """Raises weft's error as a Python exception, with weft_error_format's text."""
    if st:
        n = weft.weft_error_format(st, None, 0)
        text = ctypes.create_string_buffer(n + 1)
        weft.weft_error_format(st, text, n + 1)
        weft.weft_error_free(st)
        raise WeftError(f"{call}: {text.value.decode()}")


capi = ctypes.pythonapi
capi.PyCapsule_GetPointer.restype, capi.PyCapsule_GetPointer.argtypes = vp, [ctypes.py_object,
                                                                             ctypes.c_char_p]
capi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
capi.PyCapsule_New.restype = ctypes.py_object
capi.PyCapsule_New.argtypes = [vp, ctypes.c_char_p, vp]


def tensor_to_weft(dev, stream, tensor):
    """A torch tensor as a weft buffer, sharing its bytes. weft owns the DLPack capsule
    from here on: it calls torch's deleter once the buffer is released and its work is
    done. The tensor must be contiguous (anything else: UnsupportedStrides)."""
    capsule = torch.utils.dlpack.to_dlpack(tensor)
    ptr = capi.PyCapsule_GetPointer(capsule, b"dltensor")
    capi.PyCapsule_SetName(capsule, b"used_dltensor")  # consumed: torch won't delete it
    buf = Buffer()
    check("weft_buffer_from_dlpack", weft.weft_buffer_from_dlpack(dev, stream, ptr,
                                                                  ctypes.byref(buf)))
    return buf


def weft_to_tensor(dev, stream, buf, shape, dtype=DLDataType(2, 32, 1)):
    """A weft buffer as a torch tensor (float32 by default), sharing its bytes, after the
    work submitted on |stream| before it. Raises WeftError when that work failed."""
    extents = (ctypes.c_int64 * len(shape))(*shape)
    out = ctypes.c_void_p()
    check("weft_buffer_to_dlpack", weft.weft_buffer_to_dlpack(dev, stream, buf, 0, dtype,
                                                              extents, len(shape),
                                                              ctypes.byref(out)))
    return torch.utils.dlpack.from_dlpack(capi.PyCapsule_New(out.value, b"dltensor", None))


# ---- kernels: a "library call" (native) and a host kernel, both in Python ----------------
def scale_shift(ctx_p, user):
    """out = 3 x - 1: stands for the embedder's library call (cuBLAS, CBLAS, ...)."""
    ctx = ctx_p.contents
    n = ctx.sizes[0] // 4
    x = (ctypes.c_float * n).from_address(ctx.addresses[0])
    out = (ctypes.c_float * n).from_address(ctx.addresses[1])
    for i in range(n):
        out[i] = 3.0 * x[i] - 1.0
    return None


def clamp_positive(ctx_p, user):
    ctx = ctx_p.contents
    n = ctx.sizes[0] // 4
    y = (ctypes.c_float * n).from_address(ctx.buffers[0])
    for i in range(n):
        y[i] = max(y[i], 0.0)
    return None


def refuses(ctx_p, user):
    return weft.weft_error_make(14, b"%s", b"cuBLAS said CUBLAS_STATUS_EXECUTION_FAILED")  # Generic


def main():
    dev = ctypes.c_void_p()
    check("weft_device_open", weft.weft_device_open(None, ctypes.byref(dev)))
    callbacks = [NATIVE_FN(scale_shift), HOST_FN(clamp_positive), NATIVE_FN(refuses)]  # kept
    k_affine, k_clamp, k_refuses = Kernel(), Kernel(), Kernel()
    check("native", weft.weft_kernel_native(dev, b"scale_shift", callbacks[0], None,
                                            ctypes.byref(k_affine)))
    check("host", weft.weft_kernel_host(dev, b"clamp_positive", callbacks[1], None,
                                        ctypes.byref(k_clamp)))
    check("native", weft.weft_kernel_native(dev, b"refuses", callbacks[2], None,
                                            ctypes.byref(k_refuses)))
    one = (ctypes.c_uint32 * 3)(1, 1, 1)

    def launch(kernel, *bindings):
        arr = (Binding * len(bindings))(*bindings)
        check("weft_launch", weft.weft_launch(dev, 0, kernel, one, one, arr, len(bindings),
                                              None, 0))

    x = torch.linspace(-1.0, 1.0, 1000)
    bx = tensor_to_weft(dev, 0, x)
    by = Buffer()
    check("weft_buffer_create", weft.weft_buffer_create(dev, 0, 1000 * 4, ctypes.byref(by)))
    launch(k_affine, Binding(bx, 0, WHOLE, READ), Binding(by, 0, WHOLE, WRITE))
    launch(k_clamp, Binding(by, 0, WHOLE, READ_WRITE))
    y = weft_to_tensor(dev, 0, by, [1000])
    agrees = torch.allclose(y, torch.clamp(3.0 * x - 1.0, min=0.0), rtol=1e-6, atol=1e-6)
    print("weft computed clamp(3x - 1, min=0); torch agrees:", agrees)
    if not agrees:
        sys.exit(1)

    bz = Buffer()
    check("weft_buffer_create", weft.weft_buffer_create(dev, 0, 1000 * 4, ctypes.byref(bz)))
    launch(k_refuses, Binding(bx, 0, WHOLE, READ), Binding(bz, 0, WHOLE, WRITE))
    launch(k_clamp, Binding(bz, 0, WHOLE, READ_WRITE))  # skipped: its input is tainted
    try:
        weft_to_tensor(dev, 0, bz, [1000])
        sys.exit("a tainted export succeeded")
    except WeftError as err:
        print("a failed launch reaches Python as an exception:\n ", err)

    for b in (bx, by, bz):
        check("weft_buffer_release", weft.weft_buffer_release(dev, b))
    weft.weft_device_close(dev)  # y stays valid: its export keeps the memory until torch lets go
    print("after close, y[-1] =", y[-1].item())
    del y


if __name__ == "__main__":
    main()
