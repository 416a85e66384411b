"""Shadow memory for an interpreter launch: a failed launch leaves the caller's arrays as
they were.

The interpreter runs a kernel one program at a time, so a fault (an out-of-bounds access,
a failed ``tk.device_assert``, an integer division by zero, a deadlock, Ctrl-C) comes
after the earlier programs' stores. To undo nothing, the launch writes into a copy: every
argument whose memory overlaps memory the kernel writes is rebound to a private buffer
that mirrors the caller's bytes (same offsets, strides and dtype), and the written
arguments are copied back once the whole grid ran.

What is preserved: running on the shadow is running in place. Arguments whose memory
overlaps (two views of one buffer, a transposed or reinterpreted view, a column of a
bigger array next to another column) share one shadow buffer laid out like the caller's,
so a store through one is seen by a load through the other, in the same order as in
place. Only the elements of the views are copied (not the gaps of a strided view), and
arguments that overlap nothing written are used in place. Arrays that are already the
launch's own copies (device arrays staged to the host, which are copied back only on
success) are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tilekit.rt.arrays import HostArray

try:  # numpy >= 2.0
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # pragma: no cover  (numpy 1.x)
    from numpy import byte_bounds  # type: ignore[attr-defined,no-redef]

# A shadow buffer starts at the caller's address modulo this, so every view keeps its
# alignment (numpy's aligned flag, and the 16-byte alignment a specialization read).
_ALIGN = 64


class Shadows:
    """The arguments of one launch, rebound to shadow memory where the kernel writes
    (``hosts``: in argument order), and how to publish the result (``commit``)."""

    def __init__(self, hosts: Sequence[HostArray], written: Sequence[bool]) -> None:
        self.hosts = list(hosts)
        self._copy_back: list[tuple[np.ndarray, np.ndarray]] = []  # (caller's, shadow)
        for group in _overlapping(hosts):
            if any(written[i] for i in group):
                self._shadow(group, written)

    def _shadow(self, group: list[int], written: Sequence[bool]) -> None:
        arrays = [self.hosts[i].array for i in group]
        bounds = [byte_bounds(a) for a in arrays]
        lo = min(b[0] for b in bounds)
        hi = max(b[1] for b in bounds)
        raw = np.empty(hi - lo + _ALIGN, dtype=np.uint8)
        skip = (lo - raw.ctypes.data) % _ALIGN
        buffer = raw[skip:skip + hi - lo]
        for i, a in zip(group, arrays):
            view = np.ndarray(a.shape, a.dtype, buffer=buffer,
                              offset=a.__array_interface__["data"][0] - lo, strides=a.strides)
            view[...] = a
            view.flags.writeable = a.flags.writeable
            self.hosts[i] = self.hosts[i]._replace(array=view)
            if written[i]:
                self._copy_back.append((a, view))

    def commit(self) -> None:
        """Copy what the kernel wrote into the caller's arrays (the launch succeeded).
        Overlapping written views write the same bytes: they read one shadow buffer."""
        for caller, view in self._copy_back:
            caller[...] = view


def _overlapping(hosts: Sequence[HostArray]) -> list[list[int]]:
    """The indices of the in-place arrays, grouped by overlapping byte ranges (arrays with
    no elements, and the launch's own copies, in no group)."""
    spans = sorted((*byte_bounds(h.array), i) for i, h in enumerate(hosts)
                   if h.writeback is None and h.span > 0)
    groups: list[list[int]] = []
    end = -1
    for lo, hi, i in spans:
        if lo < end:
            groups[-1].append(i)
            end = max(end, hi)
        else:
            groups.append([i])
            end = hi
    return groups
