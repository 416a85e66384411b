"""Pipelines and the asynchronous ops they are scheduled into.

``pipeline`` is what a user writes (``tk.pipeline``): a loop over the tiles of one or more
tile streams, each tile handed to the body as a value. Its reference is the plain loop, so
it is the definition every schedule of it is tested against.

The schedule solver (``tilekit.sched``) replaces it with the ops below: rings of
shared-memory stages (``smem_alloc``), rings of mbarriers (``mbarrier_alloc``), copies that
complete on a barrier (``copy_g2s``: TMA, cp.async or plain loads and stores), waits with a
phase parity, arrivals, proxy fences, reads of a stage into registers, bulk stores
(``copy_s2g``, a token waited for with ``store_wait``) and warp roles. Their references drive
``tilekit.ir.async_protocol.ProtocolState`` (``ctx.protocol``), which moves the data and
raises ``ProtocolViolation`` on any broken rule, so a scheduled kernel also runs, checked,
in the interpreter. ``ctx.role`` names the role running (``"cta"`` outside warp roles).
"""

from __future__ import annotations

import math

import numpy as np

from tilekit.ir import numerics
from tilekit.ir.opdef import Effect, OpTypeError, Signature, define
from tilekit.ir.ops.common import barrier, int_scalar, shared, tensor, tile
from tilekit.ir.ops.memory import tile_coordinates
from tilekit.ir.types import (
    BarrierType,
    SharedType,
    TensorType,
    TileType,
    TokenType,
    Type,
    strip_layout,
)
from tilekit.record import Frozen

#: Copy engines, fastest first (``tilekit.sched`` chooses one per stream).
ENGINES = ("tma", "cp_async", "plain")

ASYNC = Effect.READ | Effect.WRITE  # never reordered, merged or removed by cleanups


class StreamSpec(Frozen):
    """One tile stream of a pipeline: tiles of ``shape`` of a tensor, stepping along
    ``axis`` (tile ``index[axis] + i`` on iteration ``i``); elements past the tensor's
    edge read ``padding``."""

    __slots__ = ("shape", "axis", "padding")
    shape: tuple[int, ...]
    axis: int
    padding: bool | int | float
    _field_defaults = {"padding": 0}

    def __str__(self) -> str:
        pad = f" padding {self.padding!r}" if self.padding != 0 else ""
        return f"{'x'.join(map(str, self.shape))} along {self.axis}{pad}"


def _gather_tile(binding, index: list, shape: tuple[int, ...], padding) -> np.ndarray | None:
    """The tile's elements as ``tile_load`` reads them; None for the checker's data-free
    tensors."""
    if not hasattr(binding, "gather"):
        return None
    offsets, inside = tile_coordinates(binding, index, shape)
    pad = numerics.cast(np.asarray(padding), binding.dtype)
    return binding.gather(offsets, inside, np.full(shape, pad, dtype=binding.dtype.np))


def _role(ctx) -> str:
    return getattr(ctx, "role", "cta")


# --- pipeline (what users write) ---------------------------------------------------------

def _streams(op_or_sig) -> tuple[StreamSpec, ...]:
    streams = op_or_sig.attrs["streams"]
    if not (isinstance(streams, tuple) and streams
            and all(isinstance(s, StreamSpec) for s in streams)):
        raise OpTypeError(f"streams must be a non-empty tuple of StreamSpec, got {streams!r}")
    return streams


def _infer_pipeline(sig: Signature) -> list[Type]:
    int_scalar(sig["count"], "pipeline trip count")
    streams = _streams(sig)
    tensors = sig.variadic("tensors")
    index = sig.variadic("index")
    if len(tensors) != len(streams):
        raise OpTypeError(f"{len(streams)} streams but {len(tensors)} tensors")
    if len(index) != sum(t.rank for t in tensors if isinstance(t, TensorType)):
        raise OpTypeError("pipeline needs one tile coordinate per dim of each stream's tensor")
    for t, s in zip(tensors, streams):
        if not isinstance(t, TensorType):
            raise OpTypeError(f"a pipeline stream must read a tensor, got {t}")
        if len(s.shape) != t.rank or not 0 <= s.axis < t.rank or min(s.shape) < 1:
            raise OpTypeError(f"stream {s} does not fit a rank-{t.rank} tensor")
    for i in index:
        int_scalar(i, "a tile coordinate")
    stages = sig.attr("stages")
    if not isinstance(stages, int) or stages < 1:
        raise OpTypeError(f"stages must be a positive int, got {stages!r}")
    roles = sig.attrs.get("roles")
    if roles not in (None, "uniform", "specialized"):
        raise OpTypeError(f"roles must be None, 'uniform' or 'specialized', got {roles!r}")
    engine = sig.attrs.get("engine")
    if engine is not None and engine not in ENGINES:
        raise OpTypeError(f"unknown copy engine {engine!r}; use one of {', '.join(ENGINES)}")
    return list(sig.variadic("inits"))


def pipeline_tile_types(op) -> list[TileType]:
    return [TileType(s.shape, t.type.dtype)
            for s, t in zip(_streams(op), op.variadic("tensors"))]


def _verify_pipeline(op) -> None:
    body = op.regions[0].block
    inits = [strip_layout(v.type) for v in op.variadic("inits")]
    want = [strip_layout(op.operand("count").type), *pipeline_tile_types(op), *inits]
    got = [a.type for a in body.args]
    if [strip_layout(t) for t in got] != want:
        raise OpTypeError(f"pipeline body arguments {list(map(str, got))} do not match the "
                          f"iteration, the streams' tiles and the carried values")
    term = body.terminator
    if term is None or term.name != "yield":
        raise OpTypeError("the body of `pipeline` must end with `yield`")
    if [strip_layout(v.type) for v in term.operands] != inits:
        raise OpTypeError("pipeline body yields do not match its carried values")


def stream_indices(op) -> list[list]:
    """Per stream, the operands that are its tile coordinates."""
    index = op.variadic("index")
    out, at = [], 0
    for t in op.variadic("tensors"):
        out.append(index[at:at + t.type.rank])
        at += t.type.rank
    return out


def _pipeline_ref(ctx, op, args: list) -> list:
    streams = _streams(op)
    n_t = len(streams)
    count, rest = int(args[0]), args[1:]
    bindings, rest = rest[:n_t], rest[n_t:]
    ranks = [len(s.shape) for s in streams]
    index, carried = rest[:sum(ranks)], list(rest[sum(ranks):])
    starts, at = [], 0
    for r in ranks:
        starts.append([int(i) for i in index[at:at + r]])
        at += r
    body = op.regions[0].block
    dtype = args[0].dtype
    for i in range(count):
        tiles = []
        for s, b, start in zip(streams, bindings, starts):
            coords = list(start)
            coords[s.axis] += i
            tiles.append(_gather_tile(b, [np.asarray(c) for c in coords], s.shape, s.padding))
        carried = ctx.run_block(body, [np.asarray(i, dtype=dtype), *tiles, *carried])
    return carried


def _print_pipeline(p, op, indent: str) -> str:
    body = op.regions[0].block
    iv, *args = body.args
    n = len(_streams(op))
    tiles, carried = args[:n], args[n:]
    streams = ", ".join(
        f"{p.name(t)} = {p.name(x)}[{', '.join(p.name(i) for i in idx)}] {s} : {t.type}"
        for t, x, idx, s in zip(tiles, op.variadic("tensors"), stream_indices(op), _streams(op)))
    head = (f"pipeline {p.name(iv)} < {p.name(op.operand('count'))} stages={op.attrs['stages']}"
            f" engine={op.attrs.get('engine') or 'auto'} roles={op.attrs.get('roles') or 'auto'}"
            f" ({streams})")
    inits = op.variadic("inits")
    if inits:
        pairs = ", ".join(f"{p.name(a)} = {p.name(v)}" for a, v in zip(carried, inits))
        head += f" iter_args({pairs})"
    return head + " " + p.block_text(body, indent)


define("pipeline", ["count", "tensors*", "index*", "inits*"], _infer_pipeline, _pipeline_ref,
       effects=Effect.CONTROL | Effect.READ, num_regions=1, verify=_verify_pipeline,
       printer=_print_pipeline,
       doc="loop over the tiles of tile streams, `stages` of them in flight (scheduled by "
           "tilekit.sched)")


# --- shared memory and barriers ----------------------------------------------------------

def _infer_smem_alloc(sig: Signature) -> list[Type]:
    shape, dtype, stages = sig.attr("shape"), sig.attr("dtype"), sig.attr("stages")
    if not (isinstance(shape, tuple) and shape and all(isinstance(s, int) and s > 0
                                                       for s in shape)):
        raise OpTypeError(f"smem_alloc shape must be positive ints, got {shape!r}")
    if not isinstance(stages, int) or stages < 1:
        raise OpTypeError(f"smem_alloc stages must be a positive int, got {stages!r}")
    return [SharedType(shape, dtype, stages, sig.attrs.get("layout"))]


def _ring_span(op) -> tuple[int, int] | None:
    """The ring's bytes of shared memory, once placed (stages start 128-byte aligned)."""
    offset = op.attrs.get("offset")
    if offset is None:
        return None
    ring = op.result.type
    return offset, offset + ring.stages * (-(-ring.slot_bytes // 128) * 128)


define("smem_alloc", [], _infer_smem_alloc,
       lambda ctx, op, args: [ctx.protocol.alloc_ring(op.attrs.get("name", "smem"),
                                                      op.attrs["stages"], _ring_span(op))],
       effects=ASYNC, doc="a ring of shared-memory stages (`offset`: bytes, set by the planner)")


def _infer_mbarrier_alloc(sig: Signature) -> list[Type]:
    count, arrivals = sig.attr("count"), sig.attr("arrivals")
    if not (isinstance(count, int) and count >= 1 and isinstance(arrivals, int)
            and arrivals >= 1):
        raise OpTypeError(f"mbarrier_alloc needs count >= 1 and arrivals >= 1, got "
                          f"{count!r}, {arrivals!r}")
    return [BarrierType(count, arrivals)]


define("mbarrier_alloc", [], _infer_mbarrier_alloc,
       lambda ctx, op, args: [ctx.protocol.alloc_barrier(
           op.attrs.get("name", "bar"), op.attrs["count"], op.attrs["arrivals"], _role(ctx))],
       effects=ASYNC,
       doc="a ring of mbarriers, initialized by one thread to expect `arrivals` per phase")


def _infer_barrier_slot(sig: Signature) -> list[Type]:
    barrier(sig)
    int_scalar(sig["slot"], "a barrier index")
    if "parity" in sig.slots:
        int_scalar(sig["parity"], "a phase parity")
    if "bytes" in sig.attrs and not (isinstance(sig.attrs["bytes"], int)
                                     and sig.attrs["bytes"] > 0):
        raise OpTypeError(f"expected bytes must be a positive int, got {sig.attrs['bytes']!r}")
    return []


def _infer_nothing(sig: Signature) -> list[Type]:
    return []


define("mbarrier_inval", ["bar"], lambda sig: (barrier(sig), [])[1],
       lambda ctx, op, args: (ctx.protocol.inval_barrier(args[0], _role(ctx)), [])[1],
       effects=ASYNC, doc="invalidate a barrier ring (every phase must be complete)")
define("mbarrier_arrive", ["bar", "slot"], _infer_barrier_slot,
       lambda ctx, op, args: (ctx.protocol.arrive(args[0], int(args[1]), _role(ctx)), [])[1],
       effects=ASYNC,
       doc="every thread of the role arrives on barrier `slot` (one arrival of the role); the "
           "role's cp.async and plain copies completing on it complete with it")
define("mbarrier_expect_tx", ["bar", "slot"], _infer_barrier_slot,
       lambda ctx, op, args: (ctx.protocol.expect_tx(args[0], int(args[1]), op.attrs["bytes"],
                                                     _role(ctx)), [])[1],
       effects=ASYNC, doc="one thread arrives and expects `bytes` of TMA transactions")
define("mbarrier_wait", ["bar", "slot", "parity"], _infer_barrier_slot,
       lambda ctx, op, args: (ctx.protocol.wait(args[0], int(args[1]), int(args[2]),
                                                _role(ctx)), [])[1],
       effects=ASYNC, doc="wait until the phase of barrier `slot` with this parity completed")
define("fence_mbarrier_init", [], _infer_nothing,
       lambda ctx, op, args: (ctx.protocol.fence_mbarrier_init(_role(ctx)), [])[1],
       effects=ASYNC, doc="make barrier initialization visible to the async proxy")
define("fence_proxy_async", [], _infer_nothing,
       lambda ctx, op, args: (ctx.protocol.fence_proxy_async(_role(ctx)), [])[1],
       effects=ASYNC,
       doc="order this role's generic-proxy shared-memory writes before later async-proxy ops")
define("cta_barrier", [], _infer_nothing,
       lambda ctx, op, args: (ctx.cta_barrier(), [])[1],
       effects=ASYNC, doc="every thread of the program meets (bar.sync 0)")


# --- copies --------------------------------------------------------------------------------

def _copy_shape(sig: Signature, t: TensorType, ring: SharedType, n_index: int) -> None:
    shape = sig.attr("shape")
    if n_index != t.rank:
        raise OpTypeError(f"a rank-{t.rank} tensor needs {t.rank} tile indices, got {n_index}")
    if shape != ring.shape or t.dtype is not ring.dtype:
        raise OpTypeError(f"a {shape} tile of {t.dtype} does not fit stages of {ring}")


def _infer_copy_g2s(sig: Signature) -> list[Type]:
    t = tensor(sig, "tensor")
    ring = shared(sig, "dst")
    index = sig.variadic("index")
    for i in index:
        int_scalar(i, "a tile index")
    _copy_shape(sig, t, ring, len(index))
    int_scalar(sig["slot"], "a stage index")
    barrier(sig)
    int_scalar(sig["bslot"], "a barrier index")
    if sig.attr("engine") not in ENGINES:
        raise OpTypeError(f"unknown copy engine {sig.attr('engine')!r}")
    return []


def _copy_g2s_ref(ctx, op, args: list) -> list:
    binding, *rest = args
    index, (ring, slot, bar, bslot) = rest[:-4], rest[-4:]
    shape = op.attrs["shape"]
    data = _gather_tile(binding, index, shape, op.attrs.get("padding", 0))
    nbytes = math.prod(shape) * op.operand("tensor").type.dtype.itemsize
    ctx.protocol.copy_g2s(ring, int(slot), bar, int(bslot), op.attrs["engine"], nbytes,
                          _role(ctx), data)
    return []


define("copy_g2s", ["tensor", "index*", "dst", "slot", "bar", "bslot"], _infer_copy_g2s,
       _copy_g2s_ref, effects=ASYNC,
       doc="copy tile `index` of a tensor into stage `slot`, completing on barrier `bslot` "
           "(engine: tma by transaction bytes; cp_async and plain at the role's next arrival)")


def _infer_smem_read(sig: Signature) -> list[Type]:
    ring = shared(sig, "src")
    int_scalar(sig["slot"], "a stage index")
    return [ring.tile]


def _read_proxy(op) -> str:  # noqa: ANN001  (an Operation)
    """A stage laid out for an async-proxy reader (wgmma) is read through the async proxy."""
    layout = op.operand("src").type.layout
    return "async" if getattr(layout, "read_by_async_proxy", False) else "generic"


define("smem_read", ["src", "slot"], _infer_smem_read,
       lambda ctx, op, args: [np.array(ctx.protocol.read(args[0], int(args[1]), _role(ctx),
                                                         _read_proxy(op)))],
       effects=ASYNC, doc="a stage's tile, read from shared memory into registers (or, for a "
                          "wgmma stage, by the dot itself through the async proxy)")


def _infer_smem_write(sig: Signature) -> list[Type]:
    ring = shared(sig, "dst")
    int_scalar(sig["slot"], "a stage index")
    v = tile(sig, "value")
    if v.without_layout() != ring.tile:
        raise OpTypeError(f"cannot write {v} into stages of {ring}")
    return []


define("smem_write", ["dst", "slot", "value"], _infer_smem_write,
       lambda ctx, op, args: (ctx.protocol.write(args[0], int(args[1]), _role(ctx),
                                                 np.array(args[2])), [])[1],
       effects=ASYNC, doc="store a tile into a stage (generic proxy)")


def _infer_copy_s2g(sig: Signature) -> list[Type]:
    ring = shared(sig, "src")
    int_scalar(sig["slot"], "a stage index")
    t = tensor(sig, "tensor")
    index = sig.variadic("index")
    for i in index:
        int_scalar(i, "a tile index")
    _copy_shape(sig, t, ring, len(index))
    return [TokenType()]


def _copy_s2g_ref(ctx, op, args: list) -> list:
    ring, slot, binding, *index = args
    store, data = ctx.protocol.bulk_store(ring, int(slot), _role(ctx))
    if hasattr(binding, "scatter") and data is not None:
        offsets, inside = tile_coordinates(binding, index, op.attrs["shape"])
        binding.scatter(offsets, data, inside)
    return [store]


define("copy_s2g", ["src", "slot", "tensor", "index*"], _infer_copy_s2g, _copy_s2g_ref,
       effects=ASYNC,
       doc="bulk store of a stage to tile `index` of a tensor (TMA; edges clipped); the token "
           "is waited for with store_wait before the stage is rewritten")


def _infer_store_wait(sig: Signature) -> list[Type]:
    if not isinstance(sig["token"], TokenType):
        raise OpTypeError(f"store_wait needs a token, got {sig['token']}")
    return []


define("store_wait", ["token"], _infer_store_wait,
       lambda ctx, op, args: (ctx.protocol.store_wait(args[0], op.attrs.get("pending", 0)),
                              [])[1],
       effects=ASYNC, doc="wait until a bulk store has read its stage (attribute `pending`: "
                          "until all but the newest `pending` bulk stores of the thread have)")

define("store_drain", [], lambda sig: [],
       lambda ctx, op, args: (ctx.protocol.store_drain(_role(ctx)), [])[1],
       effects=ASYNC, doc="wait until every bulk store of the role has read its stage")


define("trip_count", ["n"], lambda sig: [int_scalar(sig["n"], "a trip count")],
       lambda ctx, op, args: [ctx.trip_count(op, args[0])],
       effects=ASYNC,
       doc="a scheduled pipeline's trip count (the checker substitutes the counts it tries)")


# --- warp roles ------------------------------------------------------------------------------

def _infer_warp_roles(sig: Signature) -> list[Type]:
    for key in ("producer_warps", "consumer_warps"):
        v = sig.attr(key)
        if not isinstance(v, int) or v < 1:
            raise OpTypeError(f"{key} must be a positive int, got {v!r}")
    return list(sig.variadic("inits"))


def _verify_warp_roles(op) -> None:
    producer, consumer = (r.block for r in op.regions)
    if producer.args or (producer.terminator and producer.terminator.operands):
        raise OpTypeError("the producer role takes and yields nothing")
    inits = [v.type for v in op.variadic("inits")]
    if [a.type for a in consumer.args] != inits:
        raise OpTypeError("the consumer role's arguments must be the carried values")
    term = consumer.terminator
    if term is None or term.name != "yield" or [v.type for v in term.operands] != inits:
        raise OpTypeError("the consumer role must yield the carried values")


define("warp_roles", ["inits*"], _infer_warp_roles,
       lambda ctx, op, args: ctx.run_roles(op, args),
       effects=Effect.CONTROL | ASYNC, num_regions=2, verify=_verify_warp_roles,
       doc="a producer role (region 0, `producer_warps` warps, `producer_regs` registers) and a "
           "consumer role (region 1, carrying `inits`) running side by side")
