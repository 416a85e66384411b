"""Small checks shared by the op definitions' ``infer`` functions."""

from __future__ import annotations

from typing import TypeVar

from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import OpTypeError, Signature
from tilekit.ir.types import BarrierType, SharedType, TensorType, TileType, Type

T = TypeVar("T")


def operand_of(sig: Signature, slot: str, kind: type[T], what: str) -> T:
    """The type of operand ``slot``, which must be a ``kind`` (``what`` names it)."""
    t = sig[slot]
    if not isinstance(t, kind):
        raise OpTypeError(f"operand {slot!r} must be {what}, got {t}")
    return t


def tile(sig: Signature, slot: str) -> TileType:
    return operand_of(sig, slot, TileType, "a tile or scalar")


def tensor(sig: Signature, slot: str) -> TensorType:
    return operand_of(sig, slot, TensorType, "a tensor")


def barrier(sig: Signature, slot: str = "bar") -> BarrierType:
    return operand_of(sig, slot, BarrierType, "an mbarrier ring")


def shared(sig: Signature, slot: str) -> SharedType:
    return operand_of(sig, slot, SharedType, "a shared-memory ring")


def same(a: TileType, b: TileType, what: str) -> None:
    if a.shape != b.shape or a.dtype is not b.dtype:
        raise OpTypeError(f"{what}: operand types differ: {a} vs {b}")


def int_scalar(t: Type, what: str) -> TileType:
    if not (isinstance(t, TileType) and t.is_scalar and (t.dtype.is_int)):
        raise OpTypeError(f"{what} must be an integer scalar, got {t}")
    return t


def check_axis(axis: object, rank: int) -> int:
    if not isinstance(axis, int) or not 0 <= axis < rank:
        raise OpTypeError(f"axis {axis!r} out of range for rank {rank}")
    return axis


def float_only(dtype: DType, what: str) -> None:
    if not dtype.is_float:
        raise OpTypeError(f"{what} needs a floating-point operand, got {dtype}")
