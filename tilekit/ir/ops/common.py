"""Small checks shared by the op definitions' ``infer`` functions."""

from __future__ import annotations

from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import OpTypeError, Signature
from tilekit.ir.types import TensorType, TileType, Type


def tile(sig: Signature, slot: str) -> TileType:
    t = sig[slot]
    if not isinstance(t, TileType):
        raise OpTypeError(f"operand {slot!r} must be a tile or scalar, got {t}")
    return t


def tensor(sig: Signature, slot: str) -> TensorType:
    t = sig[slot]
    if not isinstance(t, TensorType):
        raise OpTypeError(f"operand {slot!r} must be a tensor, got {t}")
    return t


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
