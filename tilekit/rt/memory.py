"""Checked access to a tensor's memory for the interpreter.

A tensor view is a base address plus strides; an element offset
``sum(i_k * stride_k)`` is valid only if it is the offset of an element of
the view. For dense views (contiguous in any order) that is the interval
``[lo, hi]``; for views with gaps (a column slice, a strided view) we build
the exact set once, so the interpreter catches an access that would land
between rows — memory the kernel does not own even though it is inside the
buffer.
"""

from __future__ import annotations

import itertools

import numpy as np

from tilekit.ir.dtypes import DType
from tilekit.ir.numerics import cast
from tilekit.rt.arrays import HostArray

_HINT_MASK = ("mask the access, e.g. tk.load(X, offs, mask=offs < n) — or use X.tile(shape, "
              "index), which guards edge tiles itself")
_HINT_SMALLER = ("run with a smaller grid or print offsets with tk.device_print to see where "
                 "it starts")


class OutOfBounds(IndexError):
    """An access outside a tensor; the interpreter adds the op, line and program id.
    ``hints`` say what to do, after the likely cause."""

    def __init__(self, tensor: str, offset: int, shape: tuple[int, ...],
                 index: tuple[int, ...] | None, position: tuple[int, ...],
                 strides: tuple[int, ...] | None = None) -> None:
        self.tensor = tensor
        self.offset = offset
        self.shape = shape
        self.index = index
        self.position = position
        where = f" (index {index})" if index is not None else ""
        # Strides explain why an offset below the element count can still be outside
        # (a column slice); shown only when they are not the row-major ones.
        strided = strides is not None and strides != _row_major(shape)
        super().__init__(f"element offset {offset}{where} is outside `{tensor}` of shape "
                         f"{shape}{f' and strides {strides}' if strided else ''}")
        self.hints = [_HINT_MASK, _HINT_SMALLER]
        if strided and strides is not None:
            if index is None:  # between two elements: offsets that ignore the strides
                self.hints = [_strides_hint(tensor, strides, offset), _HINT_SMALLER]
            elif 0 <= offset < int(np.prod(shape, dtype=np.int64)):
                self.hints.insert(1, "if the offsets count elements as if `" + tensor +
                                  "` were contiguous: " + _strides_hint(tensor, strides, offset))


def _strides_hint(tensor: str, strides: tuple[int, ...], offset: int) -> str:
    """What to write when element offsets ignore a strided view's strides."""
    if len(strides) == 1:
        return (f"`{tensor}` is a strided view (stride {strides[0]}): its element i is at "
                f"offset i * {tensor}.stride(0), so offset {offset} lands between elements; "
                f"write `i * {tensor}.stride(0)`, or use a tile view {tensor}.tile(shape, "
                "index), which follows the strides")
    names = list("ijkl"[:len(strides)]) if len(strides) <= 4 else \
        [f"i{d}" for d in range(len(strides))]
    terms = " + ".join(f"{n} * {tensor}.stride({d})" for d, n in enumerate(names))
    return (f"`{tensor}` is a strided view (strides {strides}): its element "
            f"({', '.join(names)}) is at offset {terms}; build offsets from "
            f"{tensor}.stride(d), or use a tile view {tensor}.tile(shape, index), which follows "
            "the strides")


def index_of(offset: int, shape: tuple[int, ...],
             strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The tensor index an element offset would address, for messages (the interpreter's,
    and the GPU's check mode's).

    Decomposed along the strides from the largest down, so an offset past the
    end reads as e.g. index (1000, 3) of a (1000, 37) tensor: the row that is
    one too far. None when the offset is not on the view's grid at all.
    """
    if not shape or any(n == 0 for n in shape):
        return None
    order = sorted(range(len(shape)), key=lambda d: -abs(strides[d]))
    rest = offset
    idx = [0] * len(shape)
    for d in order:
        st = strides[d]
        if st == 0:
            continue
        idx[d] = rest // st
        rest -= idx[d] * st
    return tuple(idx) if rest == 0 else None


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


class TensorBinding:
    """One tensor argument during one launch: its memory, checked."""

    def __init__(self, name: str, host: HostArray) -> None:
        self.name = name
        self.host = host
        self.dtype: DType = host.dtype
        self.shape = host.shape
        self.strides = host.strides
        self._flat, self._base = self._flatten(host)
        self._valid: np.ndarray | None = None
        dense = host.span == int(np.prod(self.shape, dtype=np.int64)) if self.shape else True
        self._dense = dense

    @staticmethod
    def _flatten(host: HostArray) -> tuple[np.ndarray, int]:
        """A 1-D view over every element's memory, and the element offset of index 0 in it."""
        arr = host.array
        if arr.ndim == 0:
            return arr.reshape(1), 0
        if host.span == 0:
            return np.empty(0, dtype=arr.dtype), 0
        # Start at the lowest addressed element (the last index along negative strides).
        low = tuple(slice(n - 1, n) if st < 0 else slice(0, 1)
                    for n, st in zip(arr.shape, host.strides))
        corner = arr[low]
        flat = np.lib.stride_tricks.as_strided(corner, shape=(host.span,),
                                               strides=(arr.dtype.itemsize,),
                                               writeable=arr.flags.writeable)
        base = -sum(st * (n - 1) for n, st in zip(arr.shape, host.strides) if st < 0)
        return flat, base

    def _valid_mask(self) -> np.ndarray:
        if self._valid is None:
            valid = np.zeros(self._flat.shape[0], dtype=bool)
            grids = np.indices(self.shape, dtype=np.int64) if self.shape else np.zeros((0,))
            offs = self._base + sum(g * st for g, st in zip(grids, self.strides))
            valid[np.asarray(offs).ravel()] = True
            self._valid = valid
        return self._valid

    def _check(self, offsets: np.ndarray, active: np.ndarray | None) -> np.ndarray:
        """Positions in the flat buffer for the active offsets; raises on a bad one."""
        offs = np.asarray(offsets, dtype=np.int64)
        pos = offs + self._base
        inside = (pos >= 0) & (pos < self._flat.shape[0])
        if not self._dense:
            ok = np.zeros(pos.shape, dtype=bool)
            ok[inside] = self._valid_mask()[pos[inside]]
            inside = ok
        bad = ~inside if active is None else (~inside & active)
        if np.any(bad):
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            off = int(offs[where]) if offs.ndim else int(offs)
            raise OutOfBounds(self.name, off, self.shape,
                              index_of(off, self.shape, self.strides), where, self.strides)
        return pos

    def gather(self, offsets: np.ndarray, mask: np.ndarray | None,
               other: np.ndarray | None) -> np.ndarray:
        pos = self._check(offsets, mask)
        if mask is None:
            return self._flat[pos].copy()
        fill = other if other is not None else np.zeros(np.shape(pos), dtype=self.dtype.np)
        out = np.array(fill, dtype=self.dtype.np, copy=True)
        m = np.asarray(mask, dtype=bool)
        out[m] = self._flat[pos[m]]
        return out

    def _writable(self) -> None:
        if not self._flat.flags.writeable:
            raise ValueError(f"`{self.name}` is read-only")

    def scatter(self, offsets: np.ndarray, values: np.ndarray, mask: np.ndarray | None) -> None:
        pos = self._check(offsets, mask)
        self._writable()
        vals = np.broadcast_to(values, np.shape(pos))
        if mask is None:
            self._flat[pos.ravel()] = vals.ravel()
        else:
            m = np.asarray(mask, dtype=bool)
            self._flat[pos[m]] = vals[m]

    def atomic(self, kind: str, offsets: np.ndarray, values: np.ndarray,
               mask: np.ndarray | None) -> np.ndarray:
        """Apply element by element in row-major order, so duplicates all take effect."""
        pos = self._check(offsets, mask)
        self._writable()
        vals = np.broadcast_to(values, np.shape(pos))
        old = np.zeros(np.shape(pos), dtype=self.dtype.np)
        m = np.ones(np.shape(pos), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        flat = self._flat
        compute = self.dtype.compute_np
        for where in itertools.product(*(range(n) for n in np.shape(pos))):
            if not m[where]:
                continue
            p = pos[where]
            before = flat[p]
            old[where] = before
            a, b = np.asarray(before).astype(compute), np.asarray(vals[where]).astype(compute)
            with np.errstate(all="ignore"):
                if kind == "add":
                    new = a + b
                elif kind == "max":
                    new = np.maximum(a, b)
                elif kind == "min":
                    new = np.minimum(a, b)
                else:
                    new = b
            flat[p] = cast(np.asarray(new), self.dtype)
        return old
