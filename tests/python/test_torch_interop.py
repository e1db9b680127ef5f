#!/usr/bin/env python3
"""A real framework as weft's client: torch drives libweft.so through ctypes only.

torch tensor -> torch.utils.dlpack.to_dlpack -> weft_buffer_from_dlpack (zero copy:
the buffer's address is tensor.data_ptr()) -> a native kernel (a ctypes callback) and a
host kernel transform it -> weft_buffer_to_dlpack -> torch.utils.dlpack.from_dlpack; the
result equals torch's own computation. A tainted export raises a Python error carrying
weft's message, and both deleters (torch's, called by weft; weft's, called by torch) run
exactly once.

Run by CTest (tests/python/CMakeLists.txt) with WEFT_LIBRARY set to the built libweft.so.
Exit status 77 (CTest: skipped) when torch cannot be imported."""
import ctypes
import gc
import os
import sys
import time
import weakref

LIB = os.environ.get("WEFT_LIBRARY")
if not LIB:
    print("test_torch_interop.py: set WEFT_LIBRARY to libweft.so", file=sys.stderr)
    sys.exit(2)
# No GLIBC_TUNABLES: libweft.so allocates from libc (-DWEFT_SHARED_JEMALLOC=OFF, the
# default), so ctypes loads it like any library (CTest sets no tunable either).
weft = ctypes.CDLL(LIB)  # CDLL releases the GIL around every call

try:
    import torch
    import torch.utils.dlpack
except ImportError as exc:  # CTest's SKIP_RETURN_CODE: reported as skipped, not passed
    print(f"SKIPPED: torch not installed ({exc})")
    sys.exit(77)

# ---- the C types this test uses ---------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class Buffer(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64)]


class Kernel(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64)]


class Binding(ctypes.Structure):
    _fields_ = [("buffer", Buffer), ("offset", ctypes.c_uint64), ("size", ctypes.c_uint64),
                ("access", ctypes.c_int)]


class NativeCtx(ctypes.Structure):
    _fields_ = [
        ("stream", ctypes.c_void_p),
        ("addresses", ctypes.POINTER(ctypes.c_uint64)),
        ("sizes", ctypes.POINTER(ctypes.c_uint64)),
        ("num_buffers", ctypes.c_size_t),
        ("scalars", ctypes.c_void_p),
        ("scalar_bytes", ctypes.c_size_t),
    ]


class KernelCtx(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("block_idx", ctypes.c_uint32 * 3),
        ("buffers", ctypes.POINTER(ctypes.c_void_p)),
        ("sizes", ctypes.POINTER(ctypes.c_uint64)),
        ("num_buffers", ctypes.c_size_t),
        ("scalars", ctypes.c_void_p),
        ("scalar_bytes", ctypes.c_size_t),
    ]


status = ctypes.c_void_p  # weft_status: NULL is success
NATIVE_FN = ctypes.CFUNCTYPE(status, ctypes.POINTER(NativeCtx), ctypes.c_void_p)
HOST_FN = ctypes.CFUNCTYPE(status, ctypes.POINTER(KernelCtx), ctypes.c_void_p)
WEFT_READ, WEFT_WRITE, WEFT_READ_WRITE = 1, 2, 3
WEFT_ERR_GENERIC = 14

P = ctypes.POINTER
sig = {
    "weft_device_open": (status, [ctypes.c_void_p, P(ctypes.c_void_p)]),
    "weft_device_close": (None, [ctypes.c_void_p]),
    "weft_device_set_failpoints": (status, [ctypes.c_void_p, ctypes.c_char_p]),
    "weft_buffer_from_dlpack": (status, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p,
                                         P(Buffer)]),
    "weft_buffer_to_dlpack": (status, [ctypes.c_void_p, ctypes.c_uint64, Buffer, ctypes.c_uint64,
                                       DLDataType, P(ctypes.c_int64), ctypes.c_int32,
                                       P(ctypes.c_void_p)]),
    "weft_buffer_address": (status, [ctypes.c_void_p, Buffer, P(ctypes.c_uint64)]),
    "weft_buffer_create": (status, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, P(Buffer)]),
    "weft_buffer_release": (status, [ctypes.c_void_p, Buffer]),
    "weft_kernel_native": (status, [ctypes.c_void_p, ctypes.c_char_p, NATIVE_FN, ctypes.c_void_p,
                                    P(Kernel)]),
    "weft_kernel_host": (status, [ctypes.c_void_p, ctypes.c_char_p, HOST_FN, ctypes.c_void_p,
                                  P(Kernel)]),
    "weft_launch": (status, [ctypes.c_void_p, ctypes.c_uint64, Kernel, P(ctypes.c_uint32),
                             P(ctypes.c_uint32), P(Binding), ctypes.c_size_t, ctypes.c_void_p,
                             ctypes.c_size_t]),
    "weft_sync": (status, [ctypes.c_void_p, ctypes.c_uint64]),
    "weft_error_format": (ctypes.c_size_t, [status, ctypes.c_char_p, ctypes.c_size_t]),
    "weft_error_kind_of": (ctypes.c_int, [status]),
    "weft_error_kind_name": (ctypes.c_char_p, [ctypes.c_int]),
    "weft_error_free": (None, [status]),
}
for name, (res, args) in sig.items():
    fn = getattr(weft, name)
    fn.restype, fn.argtypes = res, args
weft.weft_error_make.restype = status  # variadic: arguments typed per call


class WeftError(RuntimeError):
    """A weft error: its kind name and weft_error_format's text."""

    def __init__(self, call, st):
        n = weft.weft_error_format(st, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        weft.weft_error_format(st, buf, n + 1)
        self.kind = weft.weft_error_kind_name(weft.weft_error_kind_of(st)).decode()
        self.text = buf.value.decode()
        weft.weft_error_free(st)
        super().__init__(f"{call}: {self.text}")


def check(call, st):
    if st:
        raise WeftError(call, st)


# ---- DLPack capsules, as the Python array API exchanges them ----------------------------
capi = ctypes.pythonapi
capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
capi.PyCapsule_SetName.restype = ctypes.c_int
capi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
capi.PyCapsule_New.restype = ctypes.py_object
capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

counts = {"torch": 0, "weft": 0}
keep = []  # ctypes callbacks must outlive every call through them


def counted_deleter(mt, who):
    """Wraps |mt|'s deleter so that its calls are counted under |who|."""
    # A copy of the function pointer: the field itself is about to be overwritten.
    original = DELETER(ctypes.cast(mt.deleter, ctypes.c_void_p).value)

    def deleter(p):
        counts[who] += 1
        original(p)

    wrapper = DELETER(deleter)
    keep.append(wrapper)
    mt.deleter = wrapper


def to_weft(dev, stream, tensor):
    """A torch tensor as a weft buffer, no copy; the capsule is consumed (weft calls
    torch's deleter, counted)."""
    cap = torch.utils.dlpack.to_dlpack(tensor)
    ptr = capi.PyCapsule_GetPointer(cap, b"dltensor")
    capi.PyCapsule_SetName(cap, b"used_dltensor")  # DLPack: the consumer owns it now
    counted_deleter(DLManagedTensor.from_address(ptr), "torch")
    buf = Buffer()
    check("weft_buffer_from_dlpack", weft.weft_buffer_from_dlpack(dev, stream, ptr,
                                                                  ctypes.byref(buf)))
    return buf


def from_weft(dev, stream, buf, shape, dtype=DLDataType(2, 32, 1)):
    """A weft buffer as a torch tensor, no copy (torch calls weft's deleter, counted)."""
    ext = (ctypes.c_int64 * len(shape))(*shape)
    out = ctypes.c_void_p()
    check("weft_buffer_to_dlpack", weft.weft_buffer_to_dlpack(dev, stream, buf, 0, dtype, ext,
                                                              len(shape), ctypes.byref(out)))
    counted_deleter(DLManagedTensor.from_address(out.value), "weft")
    return torch.utils.dlpack.from_dlpack(capi.PyCapsule_New(out.value, b"dltensor", None))


# ---- the kernels -------------------------------------------------------------------------
N = 4096


def native_affine(ctx_p, user):
    """y = 2 x + 1 (binding 0 read, 1 written): the embedder's library call."""
    ctx = ctx_p.contents
    n = ctx.sizes[0] // 4
    x = (ctypes.c_float * n).from_address(ctx.addresses[0])
    y = (ctypes.c_float * n).from_address(ctx.addresses[1])
    for i in range(n):
        y[i] = 2.0 * x[i] + 1.0
    return None


def host_square(ctx_p, user):
    """y = y * y, in place (binding 0 read-write), once per block."""
    ctx = ctx_p.contents
    n = ctx.sizes[0] // 4
    y = (ctypes.c_float * n).from_address(ctx.buffers[0])
    for i in range(n):
        y[i] = y[i] * y[i]
    return None


def native_failing(ctx_p, user):
    return weft.weft_error_make(WEFT_ERR_GENERIC, b"%s", b"the embedder's call said no")


ONE = (ctypes.c_uint32 * 3)(1, 1, 1)


def launch(dev, stream, kernel, *bindings):
    arr = (Binding * len(bindings))(*bindings)
    check("weft_launch", weft.weft_launch(dev, stream, kernel, ONE, ONE, arr, len(bindings),
                                          None, 0))


def bd(buf, access):
    return Binding(buf, 0, 2**64 - 1, access)


def wait_for(cond, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.001)


def main():
    dev = ctypes.c_void_p()
    check("weft_device_open", weft.weft_device_open(None, ctypes.byref(dev)))
    stream = 0
    fns = [NATIVE_FN(native_affine), HOST_FN(host_square), NATIVE_FN(native_failing)]
    affine, square, failing = Kernel(), Kernel(), Kernel()
    check("weft_kernel_native", weft.weft_kernel_native(dev, b"affine", fns[0], None,
                                                        ctypes.byref(affine)))
    check("weft_kernel_host", weft.weft_kernel_host(dev, b"square", fns[1], None,
                                                    ctypes.byref(square)))
    check("weft_kernel_native", weft.weft_kernel_native(dev, b"refuses", fns[2], None,
                                                        ctypes.byref(failing)))

    # torch -> weft, zero copy.
    x = torch.linspace(-3.0, 5.0, N, dtype=torch.float32)
    y = torch.zeros(N, dtype=torch.float32)
    expected = (2.0 * x + 1.0) ** 2  # torch's own computation
    x_alive = weakref.ref(x)
    bx, by = to_weft(dev, stream, x), to_weft(dev, stream, y)
    addr = ctypes.c_uint64()
    check("weft_buffer_address", weft.weft_buffer_address(dev, bx, ctypes.byref(addr)))
    assert addr.value == x.data_ptr(), f"copied: {addr.value:#x} != {x.data_ptr():#x}"
    check("weft_buffer_address", weft.weft_buffer_address(dev, by, ctypes.byref(addr)))
    assert addr.value == y.data_ptr()
    print(f"zero copy: weft's buffers are the tensors' bytes (x at {x.data_ptr():#x})")

    # A native kernel and a host kernel transform it, in weft's order.
    launch(dev, stream, affine, bd(bx, WEFT_READ), bd(by, WEFT_WRITE))
    launch(dev, stream, square, bd(by, WEFT_READ_WRITE))

    # weft -> torch, zero copy, after that work.
    z = from_weft(dev, stream, by, [N])
    assert z.data_ptr() == y.data_ptr(), "the export must alias the imported tensor"
    assert torch.equal(z, expected), f"max error {(z - expected).abs().max().item()}"
    assert torch.equal(y, expected), "the caller's tensor holds the result in place"
    print(f"native + host kernels match torch: z[:4] = {z[:4].tolist()}")

    # An export of a weft-created buffer, 2-D.
    bw = Buffer()
    check("weft_buffer_create", weft.weft_buffer_create(dev, stream, N * 4, ctypes.byref(bw)))
    launch(dev, stream, affine, bd(bx, WEFT_READ), bd(bw, WEFT_WRITE))
    w = from_weft(dev, stream, bw, [64, 64])
    assert w.shape == (64, 64) and torch.equal(w.flatten(), 2.0 * x + 1.0)

    # A tainted export raises, with weft's message.
    bt = Buffer()
    check("weft_buffer_create", weft.weft_buffer_create(dev, stream, N * 4, ctypes.byref(bt)))
    launch(dev, stream, failing, bd(bx, WEFT_READ), bd(bt, WEFT_WRITE))
    try:
        from_weft(dev, stream, bt, [N])
        raise AssertionError("a tainted export succeeded")
    except WeftError as err:
        assert err.kind == "Several", err.kind
        assert "Unwritten" in err.text and "refuses" in err.text, err.text
        assert "the embedder's call said no" in err.text, err.text
        print(f"tainted export raised: {err}")
    # ... and so does one whose kernel fails through a failpoint.
    check("weft_device_set_failpoints", weft.weft_device_set_failpoints(dev,
                                                                        b"kernel:square=Generic"))
    launch(dev, stream, square, bd(bw, WEFT_READ_WRITE))
    try:
        from_weft(dev, stream, bw, [N])
        raise AssertionError("an export of a failpoint's output succeeded")
    except WeftError as err:
        assert "Unwritten" in err.text and "square" in err.text and "Generic" in err.text, err.text
        print(f"failpoint export raised: {err}")
    check("weft_device_set_failpoints", weft.weft_device_set_failpoints(dev, None))

    # Deleters. x's (torch's) runs once its buffer is released and its work retired;
    # y's waits for z, the export that pins y's bytes past the release of by.
    for b in (bx, by, bw, bt):
        check("weft_buffer_release", weft.weft_buffer_release(dev, b))
    check("weft_sync", weft.weft_sync(dev, stream))
    wait_for(lambda: counts["torch"] >= 1)  # the scheduler frees the buffer as it retires
    assert counts["torch"] == 1, f"torch's deleter ran {counts['torch']} times, not 1 (x only)"
    del x
    gc.collect()
    assert x_alive() is None, "torch frees x once weft gave it back"
    # The exports outlive their buffers' release and the device's close.
    weft.weft_device_close(dev)
    assert counts == {"torch": 1, "weft": 0}, counts
    assert torch.equal(w.flatten(), 2.0 * torch.linspace(-3.0, 5.0, N) + 1.0)
    assert torch.equal(z, expected)
    del z, w
    gc.collect()
    assert counts["weft"] == 2, f"weft's deleter ran {counts['weft']} times, not 2 (z and w)"
    assert counts["torch"] == 2, f"torch's deleter ran {counts['torch']} times, not 2 (x and y)"
    print(f"deleters: torch's ran {counts['torch']} times (x, y), weft's {counts['weft']} times "
          "(z, w): each exactly once, the last ones after weft_device_close")
    print("test_torch_interop: OK")


if __name__ == "__main__":
    main()
