"""On a GPU: a fresh process's first launch from a portfolio, timed, and checked against
the JIT path. Run by ``test_aot.test_on_the_gpu_a_portfolio_launch_matches_the_jit``.

    TILEKIT_CACHE_DIR=EMPTY python3 -m tests.aot.gpu_child PORTFOLIO

Before the clock starts, as a torch program would have: numpy is imported, the CUDA
context is current and the input is in device memory (``__cuda_array_interface__``).
The clock runs from ``import tilekit`` through ``load_portfolio`` to the first launch
having completed (synchronized). Then the registry is cleared and the same launch is
compiled (the JIT path) into a second buffer; prints ``RESULT {json}`` with the time,
``portfolio_hits``, whether llvmlite had been imported before the JIT ran, and whether
both outputs are equal bit for bit.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

import numpy as np

ROWS, COLS = 1000, 4097


class Buffer:
    """Device memory described by ``__cuda_array_interface__`` (float32, row-major)."""

    def __init__(self, cuda: ctypes.CDLL, shape: tuple[int, int]) -> None:
        self.cuda = cuda
        self.shape = shape
        self.nbytes = shape[0] * shape[1] * 4
        ptr = ctypes.c_uint64()
        assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(self.nbytes)) == 0
        self.ptr = ptr.value
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4",
                                         "data": (self.ptr, False), "version": 3,
                                         "strides": None}

    def upload(self, host: np.ndarray) -> None:
        assert self.cuda.cuMemcpyHtoD_v2(ctypes.c_uint64(self.ptr), host.ctypes.data_as(
            ctypes.c_void_p), ctypes.c_size_t(self.nbytes)) == 0

    def download(self) -> np.ndarray:
        host = np.empty(self.shape, np.float32)
        assert self.cuda.cuMemcpyDtoH_v2(host.ctypes.data_as(ctypes.c_void_p),
                                         ctypes.c_uint64(self.ptr),
                                         ctypes.c_size_t(self.nbytes)) == 0
        return host


def main(path: str) -> dict[str, object]:
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    x = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    dx, dy, dz = (Buffer(cuda, (ROWS, COLS)) for _ in range(3))
    dx.upload(x)

    t0 = time.perf_counter()
    import tilekit

    tilekit.load_portfolio(path, strict=True)
    from examples.softmax import softmax

    softmax[ROWS](dx, dy, N=COLS)
    assert cuda.cuCtxSynchronize() == 0
    elapsed = (time.perf_counter() - t0) * 1e3

    from tilekit.aot import registry
    from tilekit.rt import cache

    hits = cache.stats()["portfolio_hits"]
    llvmlite_before = "llvmlite" in sys.modules
    registry.clear()
    softmax._loaded.clear()
    softmax[ROWS](dx, dz, N=COLS)  # the JIT path: traced, compiled, linked, loaded
    assert cuda.cuCtxSynchronize() == 0
    y, z = dy.download(), dz.download()
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    return {"import_to_launch_ms": elapsed, "portfolio_hits": hits,
            "llvmlite_before_jit": llvmlite_before, "compiles": cache.stats()["compiles"],
            "equal": bool(np.array_equal(y, z)),
            "max_error": float(np.abs(y - ref).max())}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])))
