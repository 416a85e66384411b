"""How configs are timed: the ``Timer`` protocol and the default, CUDA events.

A timer gets a config and a ``run`` that launches it once on the user's arguments, and
returns the milliseconds of each timed repetition; the tuner takes the median. The
default, ``CudaEventTimer``, brackets each repetition with a pair of CUDA events on the
launch's stream (torch's events when torch tensors are passed, else the driver's) and
writes a scratch buffer larger than the L2 cache before each one, outside the events, so
that every repetition reads its inputs from memory as a fresh call would. Tests pass a
timer that returns scripted numbers, so the whole flow runs without a GPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tilekit.tune.config import Config

# Bytes written between repetitions: more than the L2 of an H100 (50 MB) or A100 (40 MB).
FLUSH_BYTES = 128 << 20


class Timer(Protocol):
    def measure(self, config: Config, run: Callable[[], None], warmup: int,
                rep: int) -> Sequence[float]:
        """Run ``run`` ``warmup`` times untimed, then ``rep`` times timed; milliseconds."""
        ...


class CudaEventTimer:
    """CUDA-event timings on the stream the launches go to (see the module's docstring)."""

    def __init__(self, values: Sequence[Any], device: int, flush_bytes: int = FLUSH_BYTES):
        from tilekit.rt import device_arrays

        self.torch = any(device_arrays._is_torch(v) and v.device.type == "cuda"
                         for v in values)
        self.device = device
        self.flush_bytes = flush_bytes
        self.stream = 0 if self.torch else device_arrays.current_stream([], list(values),
                                                                        device)

    def measure(self, config: Config, run: Callable[[], None], warmup: int,
                rep: int) -> list[float]:
        clock: _TorchClock | _DriverClock = (_TorchClock(self.device, self.flush_bytes)
                                             if self.torch else
                                             _DriverClock(self.device, self.stream,
                                                          self.flush_bytes))
        try:
            for _ in range(warmup):
                run()
            times = []
            for _ in range(rep):
                clock.flush()
                times.append(clock.time(run))
            return times
        finally:
            clock.close()


class _TorchClock:
    def __init__(self, device: int, flush_bytes: int) -> None:
        import torch

        self.torch = torch
        self.scratch = torch.empty(flush_bytes, dtype=torch.int8, device=f"cuda:{device}")
        self.device = device

    def flush(self) -> None:
        self.scratch.zero_()

    def time(self, run: Callable[[], None]) -> float:
        torch = self.torch
        with torch.cuda.device(self.device):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))

    def close(self) -> None:
        del self.scratch


class _DriverClock:
    """Events and a scratch buffer through libcuda (``tilekit.rt.driver`` does not wrap
    events; the calls are made here on its library)."""

    def __init__(self, device: int, stream: int, flush_bytes: int) -> None:
        from tilekit.rt import driver

        self.driver = driver
        driver.use_device(device)
        lib = driver.library()
        self.stream = stream
        self.words = flush_bytes // 4
        self.scratch = driver.alloc(self.words * 4)
        handle = ctypes.c_void_p
        self.create = _proto(lib, ("cuEventCreate",), (ctypes.POINTER(handle), ctypes.c_uint))
        self.record = _proto(lib, ("cuEventRecord",), (handle, handle))
        self.sync = _proto(lib, ("cuEventSynchronize",), (handle,))
        self.elapsed = _proto(lib, ("cuEventElapsedTime_v2", "cuEventElapsedTime"),
                              (ctypes.POINTER(ctypes.c_float), handle, handle))
        self.destroy = _proto(lib, ("cuEventDestroy_v2", "cuEventDestroy"), (handle,))
        self.events = []
        for _ in range(2):
            event = handle()
            self._check(self.create(ctypes.byref(event), 0), "cuEventCreate")
            self.events.append(event)

    def _check(self, code: int, what: str) -> None:
        self.driver.check(code, what, running=True)

    def flush(self) -> None:
        self.driver.memset32(self.scratch, 0, self.words, self.stream)

    def time(self, run: Callable[[], None]) -> float:
        start, end = self.events
        stream = ctypes.c_void_p(self.stream or None)
        self._check(self.record(start, stream), "cuEventRecord")
        run()
        self._check(self.record(end, stream), "cuEventRecord")
        self._check(self.sync(end), "cuEventSynchronize")
        ms = ctypes.c_float()
        self._check(self.elapsed(ctypes.byref(ms), start, end), "cuEventElapsedTime")
        return float(ms.value)

    def close(self) -> None:
        for event in self.events:
            self.destroy(event)
        self.driver.synchronize(self.stream)
        self.driver.free(self.scratch)


def _proto(lib: Any, symbols: Sequence[str], argtypes: tuple[Any, ...]) -> Any:
    for symbol in symbols:
        fn = getattr(lib, symbol, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            return fn
    from tilekit.errors import LaunchError

    raise LaunchError(f"the CUDA driver has no {symbols[0]}", hints=["update the NVIDIA driver"])
