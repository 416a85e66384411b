"""A launch as an abstract call: the JSON that ``tilekit aot`` reads to know what to build.

    {"kernel": {"module": "examples/softmax.py", "name": "softmax"},
     "args": {"X": {"tensor": "bfloat16", "shape": [4096, 4097], "strides": [4097, 1],
                    "align": 16},
              "n_cols": {"scalar": "int32", "value": 4097},
              "BLOCK": {"constexpr": 8192}},
     "arch": "sm_90a"}

``module`` is the kernel's source file, relative to the current directory when it is
inside it; strides are in elements; ``align`` is the largest power of two (at most 256)
dividing the address of element (0, ..., 0) on the device (for a host array staged to the
GPU, in its staging buffer); ``arch`` is left out for a call on the interpreter.
``tilekit/aot/calls.py`` reads and writes the format; this module only specializes a
tuned launch's arguments for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tilekit.errors import SourceLoc


def describe_call(kern: Any, bound: Mapping[str, Any], arch: str | None,
                  loc: SourceLoc | None = None,
                  describe: Callable[[Any, str, SourceLoc | None], Any] | None = None,
                  ) -> dict[str, Any]:
    """The abstract call of launching ``kern`` with ``bound`` (every parameter bound,
    constexprs included) on ``arch`` (None: no GPU arch, the key is left out).
    ``describe`` turns an array into the backend's form (default: ``device_arrays``'
    for a GPU arch, else a host view). The JSON is written by
    ``tilekit.aot.calls.describe_runtime``: one writer for the tuner's log and for
    ``TILEKIT_RECORD``, which ``tilekit aot`` reads."""
    from tilekit.rt.launcher import specialize_arguments

    if describe is None:
        if arch is not None and arch.startswith("sm_"):
            from tilekit.rt.device_arrays import describe as describe_gpu

            describe = describe_gpu
        else:
            from tilekit.rt.arrays import to_host

            describe = to_host
    from tilekit.aot.calls import describe_runtime

    spec, runtime = specialize_arguments(kern, bound, loc, describe)
    return describe_runtime(kern, spec, runtime, arch)
