"""Element types: one enum, never strings.

Each ``DType`` knows its width, kind and numpy spelling (bfloat16 through
``ml_dtypes``). ``promote`` is the one place that decides the result type of
a binary op between two tiles; ``weak_promote`` handles Python scalars, which
adopt the tile's type the way JAX's weakly typed literals do (``x * 2`` keeps
``x``'s float16). The README's "Types of mixed operands" states both rules.
"""

from __future__ import annotations

import enum
from functools import cached_property

import numpy as np


class DType(enum.Enum):
    BOOL = ("i1", "bool", 1)
    INT8 = ("i8", "int8", 8)
    INT16 = ("i16", "int16", 16)
    INT32 = ("i32", "int32", 32)
    INT64 = ("i64", "int64", 64)
    UINT8 = ("u8", "uint8", 8)
    UINT16 = ("u16", "uint16", 16)
    UINT32 = ("u32", "uint32", 32)
    UINT64 = ("u64", "uint64", 64)
    FLOAT16 = ("f16", "float16", 16)
    BFLOAT16 = ("bf16", "bfloat16", 16)
    FLOAT32 = ("f32", "float32", 32)
    FLOAT64 = ("f64", "float64", 64)

    def __init__(self, short: str, long: str, bits: int) -> None:
        self.short = short
        self.long = long
        self.bits = bits

    def __repr__(self) -> str:
        return f"tk.{self.long}"

    __str__ = __repr__

    @property
    def itemsize(self) -> int:
        """Bytes per element as stored in memory (bool takes one byte)."""
        return max(1, self.bits // 8)

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        """Integer types, bool excluded."""
        return self in _SIGNED or self in _UNSIGNED

    @property
    def is_signed(self) -> bool:
        return self in _SIGNED or self.is_float

    @property
    def is_unsigned(self) -> bool:
        return self in _UNSIGNED

    @property
    def max_finite(self) -> float:
        """The largest finite value of a float type (bfloat16: float32's exponent, 8 bits
        of precision)."""
        if not self.is_float:
            raise TypeError(f"{self} is not a float type")
        return _MAX_FINITE[self]

    @cached_property
    def np(self) -> np.dtype:
        """The numpy dtype that holds this type's values."""
        if self is DType.BFLOAT16:
            import ml_dtypes  # only for bfloat16 host arrays (5-10 ms to import)

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.long)

    @property
    def compute_np(self) -> np.dtype:
        """The numpy type arithmetic runs in: 16-bit floats compute in float32
        and round once per op, as the GPU does (exact for + - * /)."""
        if self in (DType.FLOAT16, DType.BFLOAT16):
            return np.dtype(np.float32)
        return self.np

    @staticmethod
    def from_numpy(dtype: object) -> DType:
        key = np.dtype(dtype)  # type: ignore[call-overload]
        found = _FROM_NUMPY.get(key)
        if found is None and key.name == "bfloat16" and key == DType.BFLOAT16.np:
            found = DType.BFLOAT16  # ml_dtypes' (imported by whoever made the array)
        if found is None:
            raise TypeError(f"unsupported element type {key}; tilekit supports "
                            + ", ".join(d.long for d in DType))
        return found

    @staticmethod
    def parse(name: str) -> DType:
        for d in DType:
            if name in (d.short, d.long):
                return d
        raise ValueError(f"unknown dtype {name!r}")


_FLOATS = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})
_SIGNED = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
_UNSIGNED = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
_MAX_FINITE = {DType.FLOAT16: 65504.0, DType.BFLOAT16: (2 - 2**-7) * 2.0**127,
               DType.FLOAT32: (2 - 2**-23) * 2.0**127, DType.FLOAT64: (2 - 2**-52) * 2.0**1023}
_FROM_NUMPY = {d.np: d for d in DType if d is not DType.BFLOAT16}  # no ml_dtypes import

bool_ = DType.BOOL
int8, int16, int32, int64 = DType.INT8, DType.INT16, DType.INT32, DType.INT64
uint8, uint16, uint32, uint64 = DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64
float16, bfloat16, float32, float64 = DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64


def _int_of(bits: int, signed: bool) -> DType:
    table = {8: (DType.INT8, DType.UINT8), 16: (DType.INT16, DType.UINT16),
             32: (DType.INT32, DType.UINT32), 64: (DType.INT64, DType.UINT64)}
    return table[bits][0 if signed else 1]


def promote(a: DType, b: DType) -> DType:
    """The common type of two tile operands.

    bool < integers < floats. Between floats the wider wins; float16 with
    bfloat16 gives float32 (neither holds the other). Between integers the
    wider wins; a signed and an unsigned integer of the same width give the
    signed type of twice the width, up to int64 (as numpy does, short of
    going to float). Integers with a float give the float, whatever their
    widths (int32 with float16 is float16), as PyTorch, JAX and Triton do.
    """
    if a is b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float or b.is_float:
        if not a.is_float:
            return b
        if not b.is_float:
            return a
        if {a, b} == {DType.FLOAT16, DType.BFLOAT16}:
            return DType.FLOAT32
        return a if a.bits > b.bits else b
    if a.is_signed == b.is_signed:
        return a if a.bits > b.bits else b
    signed, unsigned = (a, b) if a.is_signed else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    return _int_of(min(64, unsigned.bits * 2), True)


def weak_promote(tile: DType, scalar: object) -> DType:
    """The type of ``tile op scalar`` where ``scalar`` is a Python value.

    The tile's type wins unless the scalar's kind is higher: a float literal
    with an integer tile gives float32; an int literal with a bool tile gives
    int32.
    """
    if isinstance(scalar, bool):
        return tile
    if isinstance(scalar, int):
        return DType.INT32 if tile.is_bool else tile
    if isinstance(scalar, float):
        return tile if tile.is_float else DType.FLOAT32
    raise TypeError(f"unsupported scalar {scalar!r}")


def python_scalar_dtype(value: object) -> DType:
    """The type of a Python scalar standing alone (as a runtime argument)."""
    if isinstance(value, bool):
        return DType.BOOL
    if isinstance(value, int):
        return DType.INT32 if -(2**31) <= value < 2**31 else DType.INT64
    if isinstance(value, float):
        return DType.FLOAT32
    if isinstance(value, np.generic):
        return DType.from_numpy(value.dtype)
    raise TypeError(f"unsupported scalar {value!r}")
