"""Row-major strides whose rows start on a pitch: the layout of a repacked copy.

One idea, shared by the layout library's REPACK plan (``tma_plans``: which copy would be
admissible) and the runtime that makes that copy (``tilekit.rt.repack``), so both agree on
it by construction. Imports nothing: the runtime loads it on the launch path."""

from __future__ import annotations

from collections.abc import Sequence


def padded_strides(shape: Sequence[int], itemsize: int, pitch_bytes: int) -> tuple[int, ...]:
    """Row-major strides (elements) of ``shape`` whose rows (the second-to-last dim) start
    every multiple of ``pitch_bytes``; the outer dims stack whole padded matrices."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        extent = shape[d + 1] * strides[d + 1] * itemsize
        if d == len(shape) - 2:
            extent = -(-extent // pitch_bytes) * pitch_bytes
        strides[d] = extent // itemsize
    return tuple(strides)
