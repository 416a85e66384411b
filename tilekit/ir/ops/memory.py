"""Ops that touch global memory, and the debugging effects (print, assert).

Two ways in: ``load``/``store``/``atomic`` take a tile of element offsets
into a tensor (gathers, odd patterns), and ``tile_load``/``tile_store`` take a
tile index and a static tile shape, guarding the edge tiles of ragged
tensors by themselves. The second form is what later stages specialize
(core tiles lose their guards; admissible boxes become TMA copies), so front
ends should prefer it whenever the access is a box.

References receive tensors as bindings with ``gather``/``scatter``/
``atomic``/``shape``/``strides`` (see ``tilekit.rt.memory``), which check
every access against the tensor's bounds.
"""

from __future__ import annotations

import enum

import numpy as np

from tilekit.ir import numerics
from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import Effect, OpTypeError, Signature, define
from tilekit.ir.ops.common import int_scalar, tensor, tile
from tilekit.ir.types import TileType


def _infer_tensor_scalar(sig: Signature) -> list[TileType]:
    t = tensor(sig, "tensor")
    axis = sig.attr("axis")
    if not isinstance(axis, int) or not 0 <= axis < t.rank:
        raise OpTypeError(f"axis {axis!r} out of range for a rank-{t.rank} tensor")
    return [TileType((), t.index)]


define(
    "dim", ["tensor"], _infer_tensor_scalar,
    lambda ctx, op, args: [np.asarray(args[0].shape[op.attrs["axis"]],
                                      dtype=op.result.type.dtype.np)],
    doc="a tensor's size along an axis",
)
define(
    "stride", ["tensor"], _infer_tensor_scalar,
    lambda ctx, op, args: [np.asarray(args[0].strides[op.attrs["axis"]],
                                      dtype=op.result.type.dtype.np)],
    doc="a tensor's stride (in elements) along an axis",
)


def _check_offsets(sig: Signature) -> TileType:
    offsets = tile(sig, "offsets")
    if not offsets.dtype.is_int:
        raise OpTypeError(f"offsets must be integers, got {offsets.dtype}")
    mask = sig.get("mask")
    if mask is not None and (not isinstance(mask, TileType) or not mask.dtype.is_bool
                             or mask.shape != offsets.shape):
        raise OpTypeError(f"mask must be a bool tile of shape {offsets.shape}, got {mask}")
    return offsets


def _infer_load(sig: Signature) -> list[TileType]:
    t = tensor(sig, "tensor")
    offsets = _check_offsets(sig)
    result = TileType(offsets.shape, t.dtype)
    other = sig.get("other")
    if other is not None and other != result:
        raise OpTypeError(f"other must be {result}, got {other}")
    return [result]


def _load_ref(ctx: object, op, args: list) -> list[np.ndarray]:
    binding, offsets, *rest = args
    mask = op.operand("mask")
    mask_v = rest.pop(0) if mask is not None else None
    other_v = rest.pop(0) if op.operand("other") is not None else None
    return [binding.gather(offsets, mask_v, other_v)]


define("load", ["tensor", "offsets", "mask?", "other?"], _infer_load, _load_ref,
       effects=Effect.READ,
       doc="gather tensor elements at offsets; masked-off lanes read `other` (default 0)")


def _infer_store(sig: Signature) -> list[TileType]:
    t = tensor(sig, "tensor")
    offsets = _check_offsets(sig)
    value = tile(sig, "value")
    if value.shape != offsets.shape or value.dtype is not t.dtype:
        raise OpTypeError(f"stored value must be tile<{offsets.shape}x{t.dtype.short}>, "
                          f"got {value}")
    return []


def _store_ref(ctx: object, op, args: list) -> list:
    binding, offsets, value, *rest = args
    binding.scatter(offsets, value, rest[0] if rest else None)
    return []


define("store", ["tensor", "offsets", "value", "mask?"], _infer_store, _store_ref,
       effects=Effect.WRITE, doc="scatter a tile to tensor elements at offsets, where mask")


class AtomicKind(enum.Enum):
    ADD = "add"
    MAX = "max"
    MIN = "min"
    XCHG = "xchg"

    def __str__(self) -> str:
        return self.value


_ATOMIC_TYPES = frozenset({DType.INT32, DType.UINT32, DType.INT64, DType.UINT64,
                           DType.FLOAT32, DType.FLOAT64})
_ATOMIC_ADD_ONLY = frozenset({DType.FLOAT16, DType.BFLOAT16})


def _infer_atomic(sig: Signature) -> list[TileType]:
    _infer_store(sig)
    if not isinstance(sig.attr("kind"), AtomicKind):
        raise OpTypeError(f"unknown atomic {sig.attr('kind')!r}")
    t = tensor(sig, "tensor")
    kind = sig.attr("kind")
    add_only = t.dtype in _ATOMIC_ADD_ONLY and kind is AtomicKind.ADD
    if t.dtype not in _ATOMIC_TYPES and not add_only:
        raise OpTypeError(f"atomic {kind} on {t.dtype} is not supported by the hardware; "
                          "use int32, uint32, int64, uint64, float32 or float64 "
                          "(float16/bfloat16 for add)")
    return [TileType(tile(sig, "offsets").shape, t.dtype)]


def _atomic_ref(ctx: object, op, args: list) -> list[np.ndarray]:
    binding, offsets, value, *rest = args
    return [binding.atomic(op.attrs["kind"].value, offsets, value, rest[0] if rest else None)]


define("atomic", ["tensor", "offsets", "value", "mask?"], _infer_atomic, _atomic_ref,
       effects=Effect.READ | Effect.WRITE,
       doc="read-modify-write each element atomically; returns the old values")


def _tile_index_check(sig: Signature) -> tuple:
    t = tensor(sig, "tensor")
    index = sig.variadic("index")
    if len(index) != t.rank:
        raise OpTypeError(f"a rank-{t.rank} tensor needs {t.rank} tile indices, got {len(index)}")
    for i in index:
        int_scalar(i, "a tile index")
    shape = sig.attr("shape")
    if not (isinstance(shape, tuple) and len(shape) == t.rank
            and all(isinstance(s, int) and s > 0 for s in shape)):
        raise OpTypeError(f"tile shape must be {t.rank} positive ints, got {shape!r}")
    return t, shape


def _infer_tile_load(sig: Signature) -> list[TileType]:
    t, shape = _tile_index_check(sig)
    return [TileType(shape, t.dtype)]


def tile_coordinates(binding, index: list[np.ndarray], shape: tuple[int, ...]):
    """Element offsets of tile ``index`` of ``shape`` in a tensor, and which are in bounds."""
    offsets = np.zeros(shape, dtype=np.int64)
    inside = np.ones(shape, dtype=bool)
    for d, (i, n) in enumerate(zip(index, shape)):
        coord = int(i) * n + np.arange(n, dtype=np.int64)
        view = [1] * len(shape)
        view[d] = n
        coord = coord.reshape(view)
        inside &= (coord >= 0) & (coord < binding.shape[d])
        offsets = offsets + coord * binding.strides[d]
    return offsets, inside


def _tile_load_ref(ctx: object, op, args: list) -> list[np.ndarray]:
    binding, *index = args
    offsets, inside = tile_coordinates(binding, index, op.attrs["shape"])
    dtype = binding.dtype
    # Converted like a constant (exact for int64; not through float64).
    pad = numerics.cast(np.asarray(op.attrs.get("padding", 0)), dtype)
    other = np.full(op.attrs["shape"], pad, dtype=dtype.np)
    return [binding.gather(offsets, inside, other)]


define("tile_load", ["tensor", "index*"], _infer_tile_load, _tile_load_ref, effects=Effect.READ,
       doc="load tile `index` of a static shape; elements past the tensor's edge read `padding`")


def _infer_tile_store(sig: Signature) -> list[TileType]:
    t, shape = _tile_index_check(sig)
    value = tile(sig, "value")
    if value.shape != shape or value.dtype is not t.dtype:
        raise OpTypeError(f"stored tile must be tile<{'x'.join(map(str, shape))}x{t.dtype.short}>,"
                          f" got {value}")
    return []


def _tile_store_ref(ctx: object, op, args: list) -> list:
    binding, *index, value = args
    offsets, inside = tile_coordinates(binding, index, op.attrs["shape"])
    binding.scatter(offsets, value, inside)
    return []


define("tile_store", ["tensor", "index*", "value"], _infer_tile_store, _tile_store_ref,
       effects=Effect.WRITE, doc="store tile `index`; elements past the tensor's edge are dropped")


# --- debugging effects ----------------------------------------------------------------------

def _infer_print(sig: Signature) -> list[TileType]:
    if not isinstance(sig.attr("prefix"), str):
        raise OpTypeError("print prefix must be a string")
    return []


def _print_ref(ctx, op, args: list) -> list:
    ctx.print(op.attrs["prefix"], args)
    return []


define("print", ["values*"], _infer_print, _print_ref, effects=Effect.WRITE,
       doc="print values with the program id (interpreter: to stdout)")


def _infer_assert(sig: Signature) -> list[TileType]:
    cond = tile(sig, "cond")
    if not cond.dtype.is_bool:
        raise OpTypeError(f"assert condition must be bool, got {cond.dtype}")
    if not isinstance(sig.attr("message"), str):
        raise OpTypeError("assert message must be a string")
    return []


class DeviceAssertionError(AssertionError):
    """Raised by the assert reference; the interpreter adds the source line."""


def _assert_ref(ctx, op, args: list) -> list:
    (cond,) = args
    if not np.all(cond):
        bad = np.argwhere(~np.asarray(cond))
        where = f" at element {tuple(int(i) for i in bad[0])}" if np.ndim(cond) else ""
        raise DeviceAssertionError(f"device assertion failed{where}: {op.attrs['message']}")
    return []


define("assert", ["cond"], _infer_assert, _assert_ref, effects=Effect.WRITE,
       doc="fail the launch if any element of cond is false")
