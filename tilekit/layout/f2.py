"""Bit-matrix algebra over F2, on Python ints used as bit sets.

Every question ``linear`` asks of a layout (rank, injectivity, a preimage,
a composition) reduces to the few operations here; they live apart from
``LinearLayout`` because they know nothing of dim names, only of columns. A
matrix is a sequence of columns, one int per input bit; bit ``r`` of a
column is row ``r``, the first column is the lowest input bit.

Split out of ``linear`` unchanged: the same elimination order, so the same
pivots, the same (numerically smallest) preimages and the same error
messages. ``linear`` re-exports ``log2_exact``. ``Span``, ``rank`` and
``invert`` (no bookkeeping of combinations, for the swizzle search's inner
loops) come unchanged from ``swizzle``, whose ``_xor_bits`` was
``xor_selected``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tilekit.errors import LayoutError

__all__ = [
    "Echelon",
    "Span",
    "columns_to_matrix",
    "field_shifts",
    "invert",
    "log2_exact",
    "matrix_to_columns",
    "rank",
    "xor_columns",
    "xor_selected",
]


def log2_exact(value: int, what: str) -> int:
    """log2 of a positive power of two; a ``LayoutError`` naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise LayoutError(f"{what} must be an int, got {value!r}")
    value = int(value)
    if value < 1 or value & (value - 1):
        raise LayoutError(
            f"{what} must be a positive power of two, got {value}",
            hints=["F2-linear layouts cover power-of-two sizes only; use the integer "
                   "(shape:stride / piecewise) layouts for other sizes"],
        )
    return value.bit_length() - 1


class Echelon:
    """The span of a sequence of F2 columns in echelon form.

    Each pivot (keyed by its leading bit) remembers which input columns XOR
    to it. Columns are taken in order, so the kept (pivot-making) columns are
    the earliest independent ones; a solution built from pivots uses kept
    columns only, which makes it the numerically smallest preimage.
    """

    __slots__ = ("pivots", "kept_mask", "dependent")

    def __init__(self, columns: Iterable[int]) -> None:
        self.pivots: dict[int, tuple[int, int]] = {}
        self.kept_mask = 0
        # For each dependent column index: the combination of kept columns equal to it.
        self.dependent: dict[int, int] = {}
        for index, column in enumerate(columns):
            remainder, combo = self._reduce(column)
            if remainder:
                self.pivots[remainder.bit_length() - 1] = (remainder, combo | (1 << index))
                self.kept_mask |= 1 << index
            else:
                self.dependent[index] = combo

    def _reduce(self, vector: int) -> tuple[int, int]:
        combo = 0
        pivots = self.pivots
        while vector:
            pivot = pivots.get(vector.bit_length() - 1)
            if pivot is None:
                break
            vector ^= pivot[0]
            combo ^= pivot[1]
        return vector, combo

    @property
    def rank(self) -> int:
        return len(self.pivots)

    def solve(self, target: int) -> int | None:
        """A set of columns (as a bit mask) XOR-ing to ``target``, or None if none does."""
        remainder, combo = self._reduce(target)
        return None if remainder else combo

    def right_inverse(self, rows: int) -> list[int]:
        """Columns of a right inverse of a full-row-rank matrix with ``rows`` rows.

        Column ``r`` is ``solve(1 << r)``: the smallest preimage of each unit
        vector. The caller has checked that the span has every row.
        """
        columns = []
        for bit in range(rows):
            combo = self.solve(1 << bit)
            assert combo is not None  # surjective: every output bit is reached
            columns.append(combo)
        return columns


def xor_selected(mask: int, table: Sequence[int], start: int = 0) -> int:
    """XOR of ``table[start + i]`` over the set bits ``i`` of ``mask``: a matrix-vector product."""
    acc = 0
    while mask:
        low = mask & -mask
        acc ^= table[start + low.bit_length() - 1]
        mask ^= low
    return acc


def field_shifts(sizes: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """``(shift, mask)`` of each power-of-two field packed into one int, first field lowest."""
    shifts = []
    position = 0
    for size in sizes:
        shifts.append((position, size - 1))
        position += size.bit_length() - 1
    return tuple(shifts)


def xor_columns(
    bits: Sequence[np.ndarray], columns: Sequence[int], shape: tuple[int, ...]
) -> np.ndarray:
    """The matrix-vector product over arrays: XOR of ``columns[i]`` where ``bits[i]`` is 1."""
    acc = np.zeros(shape, dtype=np.int64)
    for bit, column in zip(bits, columns, strict=True):
        if column:
            acc ^= bit * column
    return acc


def columns_to_matrix(columns: Sequence[int], rows: int) -> np.ndarray:
    """The 0/1 matrix (uint8) of ``columns``, ``rows`` rows, row ``r`` is bit ``r``."""
    matrix = np.zeros((rows, len(columns)), dtype=np.uint8)
    for col, column in enumerate(columns):
        for row in range(rows):
            matrix[row, col] = column >> row & 1
    return matrix


def matrix_to_columns(array: np.ndarray) -> list[int]:
    """Inverse of ``columns_to_matrix`` for a 2-d array; a ``LayoutError`` if not 0/1."""
    if array.size and not np.isin(array, (0, 1)).all():
        raise LayoutError("an F2 matrix holds only 0 and 1")
    rows, cols = array.shape
    return [sum(1 << row for row in range(rows) if array[row, col]) for col in range(cols)]


# ------------------------------------------------------ spans and square inverses (swizzle search)


class Span:
    """A subspace of F2^n as an echelon basis of ints: membership and growth in O(rank)."""

    __slots__ = ("pivots",)

    def __init__(self, vectors: Sequence[int] = ()) -> None:
        self.pivots: dict[int, int] = {}
        for vector in vectors:
            self.add(vector)

    def reduce(self, vector: int) -> int:
        pivots = self.pivots
        while vector:
            pivot = pivots.get(vector.bit_length() - 1)
            if pivot is None:
                return vector
            vector ^= pivot
        return 0

    def add(self, vector: int) -> bool:
        rest = self.reduce(vector)
        if rest:
            self.pivots[rest.bit_length() - 1] = rest
        return bool(rest)

    def __contains__(self, vector: int) -> bool:
        return not self.reduce(vector)

    def copy(self) -> Span:
        clone = Span()
        clone.pivots = dict(self.pivots)
        return clone


def rank(vectors: Sequence[int]) -> int:
    """The dimension of the span of ``vectors``."""
    return len(Span(vectors).pivots)


def invert(columns: Sequence[int]) -> list[int] | None:
    """The inverse of a square F2 matrix given by columns (image of each input bit), or None."""
    pivots: dict[int, tuple[int, int]] = {}
    for index, column in enumerate(columns):
        vector, combo = column, 1 << index
        while vector:
            top = vector.bit_length() - 1
            if top not in pivots:
                pivots[top] = (vector, combo)
                break
            pivot, pivot_combo = pivots[top]
            vector ^= pivot
            combo ^= pivot_combo
        else:
            return None
    inverse = []
    for bit in range(len(columns)):
        vector, combo = 1 << bit, 0
        while vector:
            pivot, pivot_combo = pivots[vector.bit_length() - 1]
            vector ^= pivot
            combo ^= pivot_combo
        inverse.append(combo)
    return inverse
