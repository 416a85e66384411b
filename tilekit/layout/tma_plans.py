"""Costed alternatives for a TMA request the driver would refuse.

``tma`` answers whether ``cuTensorMapEncodeTiled`` accepts a request; this module answers what
to do when it does not: split the box into several copies per tile, change the swizzle, fold or
drop element strides, move odd-width elements as raw words, transpose the box, merge contiguous
dimensions, or repack the tensor once, each as a :class:`TmaPlan` with its cost, ranked together
with the per-thread copies. Split out of ``tma`` (the rules and the driver's vocabulary) because
the search is its own idea; ``tma`` re-exports :class:`TmaPlan` and :func:`tma_alternatives`,
which behave exactly as before the split.

What is preserved: every TMA plan returned is itself admissible, and its ``axis_groups`` and
``sub_box_origins`` say how the loaded tiles map back to the requested elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import product

from tilekit.layout.admissibility import (
    Alternative,
    AlternativeKind,
    Cost,
    ThreadCopyPlan,
    ceil_div,
    rank_alternatives,
    thread_copy_alternatives,
)

__all__ = ["TmaPlan", "tma_alternatives"]


@dataclass(frozen=True)
class TmaPlan:
    """A TMA plan: encode ``request`` and issue ``len(sub_box_origins)`` copies per tile.

    ``axis_groups[i]`` lists the requested axes (outermost first) that the loaded
    tile's axis ``i`` covers: the residual is ``loaded.reshape(...)`` of those
    groups, then a transpose back to the requested order. Identity groups mean
    the tile arrives in the requested order; an empty group is the raw words of
    one element. ``sub_box_origins`` are offsets of
    each copy from the tile origin, in the encoded view's (outermost-first) axes.
    """

    request: TmaRequest
    descriptor: TmaDescriptorParams
    sub_box_origins: tuple[tuple[int, ...], ...]
    axis_groups: tuple[tuple[int, ...], ...]
    repacked_from: GlobalTensor | None = None

    @property
    def copies_per_tile(self) -> int:
        return len(self.sub_box_origins)

    @property
    def residual_permutation(self) -> tuple[int, ...]:
        """Requested axes in the loaded tile's order (flattened groups)."""
        return tuple(a for g in self.axis_groups for a in g)


@dataclass(frozen=True)
class _Candidate:
    request: TmaRequest
    origins: tuple[tuple[int, ...], ...]
    note: str
    changes_shared_layout: bool = False
    groups: tuple[tuple[int, ...], ...] = field(default=())


def _granule(elem_bytes: int) -> int:
    """The least inner box (elements) whose bytes are a multiple of 16."""
    return 16 // math.gcd(16, elem_bytes)


def _best_piece(length: int, limit: int, multiple: int) -> int | None:
    """Sub-box length covering ``length``: fewest pieces, then least overfetch, then longest."""
    best: tuple[int, int, int] | None = None
    for s in range(multiple, limit + 1, multiple):
        pieces = ceil_div(length, s)
        key = (pieces, pieces * s - length, -s)
        if best is None or key < best:
            best = key
    return None if best is None else -best[2]


def _split_box(req: TmaRequest) -> _Candidate | None:
    """Shrink box dimensions to their admissible limits and issue several copies per tile.

    Each dimension is cut to its own limit (256 elements; the inner row also to a
    multiple of 16 bytes and, without interleave, to the swizzle span); then, while
    the box still exceeds MAX_BOX_BYTES, the outermost dimension that can shrink is halved.
    """
    t = req.tensor
    es = req.element_strides
    inner = t.rank - 1
    pieces = []  # (piece length, count) per dimension
    for d, b in enumerate(req.box):
        if d == inner:
            multiple = _granule(t.elem_bytes)
            span = req.swizzle.span_bytes if req.interleave is Interleave.NONE else None
            limit_bytes = MAX_BOX_DIM * t.elem_bytes if span is None else span
            limit = min(MAX_BOX_DIM, limit_bytes // t.elem_bytes) // multiple * multiple
        else:
            multiple = max(1, es[d])  # keep each piece on the element-stride phase
            limit = MAX_BOX_DIM // multiple * multiple
        if b <= limit and b % multiple == 0:
            pieces.append((b, 1))
            continue
        piece = _best_piece(b, limit, multiple)
        if piece is None:
            return None
        pieces.append((piece, ceil_div(b, piece)))

    def loaded_bytes() -> int:
        pairs = zip(pieces, es, strict=True)
        return math.prod(ceil_div(p, max(e, 1)) for (p, _), e in pairs) * t.elem_bytes

    for d in range(t.rank):
        floor = _granule(t.elem_bytes) if d == inner else max(1, es[d])
        while loaded_bytes() > MAX_BOX_BYTES and pieces[d][0] > floor:
            half = max(floor, ceil_div(pieces[d][0] // 2, floor) * floor)
            pieces[d] = (half, ceil_div(req.box[d], half))
    new_box = tuple(p for p, _ in pieces)
    if new_box == req.box or loaded_bytes() > MAX_BOX_BYTES:
        return None
    origins = tuple(
        tuple(i * new_box[d] for d, i in enumerate(idx))
        for idx in product(*(range(c) for _, c in pieces))
    )
    split = ", ".join(
        f"{req.box[d]}->{pieces[d][1]}x{new_box[d]}"
        for d in range(t.rank) if new_box[d] != req.box[d]
    )
    return _Candidate(replace(req, box=new_box), origins, f"resize the box ({split})")


def _other_swizzles(req: TmaRequest) -> list[_Candidate]:
    """Keep one copy per tile by changing the swizzle mode (changes the shared layout)."""
    t = req.tensor
    inner_bytes = req.box[-1] * t.elem_bytes
    out = []
    if req.interleave is Interleave.B32:
        if req.swizzle is not Swizzle.B32:
            out.append(Swizzle.B32)
    else:
        span = req.swizzle.span_bytes
        if span is not None and inner_bytes > span:
            wider = [s for s in (Swizzle.B32, Swizzle.B64, Swizzle.B128)
                     if (s.span_bytes or 0) >= inner_bytes]
            out.append(wider[0] if wider else Swizzle.NONE)
    return [
        _Candidate(replace(req, swizzle=s), ((0,) * t.rank,),
                   f"change swizzle {req.swizzle.name} -> {s.name}", changes_shared_layout=True)
        for s in out
    ]


def _dense_inner(req: TmaRequest) -> _Candidate | None:
    """Load the inner run densely when an inner element stride would be ignored."""
    es = req.element_strides
    if req.interleave is not Interleave.NONE or not es or es[-1] == 1:
        return None
    new_es = es[:-1] + (1,)
    return _Candidate(replace(req, element_strides=new_es), ((0,) * req.tensor.rank,),
                      f"load the inner run densely and drop every {es[-1]}-th element on use",
                      changes_shared_layout=True)


def _fold_element_strides(req: TmaRequest) -> _Candidate | None:
    """Outer element strides > 8 become a strided view with element stride 1."""
    t = req.tensor
    es = req.element_strides
    if all(1 <= e <= MAX_ELEMENT_STRIDE for e in es[:-1]):
        return None
    shape, strides, box, new_es = list(t.shape), list(t.strides), list(req.box), list(es)
    for d in range(t.rank - 1):
        if es[d] > MAX_ELEMENT_STRIDE:
            shape[d] = ceil_div(shape[d], es[d])
            strides[d] *= es[d]
            box[d] = ceil_div(box[d], es[d])
            new_es[d] = 1
    tensor = replace(t, shape=tuple(shape), strides=tuple(strides))
    return _Candidate(
        replace(req, tensor=tensor, box=tuple(box), element_strides=tuple(new_es)),
        ((0,) * t.rank,), "fold element strides > 8 into the global strides",
        groups=tuple((d,) for d in range(t.rank)),
    )


def _raw_words(req: TmaRequest) -> _Candidate | None:
    """Elements of a width TMA has no type for, moved as raw words (TMA copies bits).

    A new innermost dimension walks the words of one element; merging usually
    folds it back into the row. Its axis group is empty: it is inside an element.
    """
    t = req.tensor
    if t.data_type is not None or TmaDataType.raw(t.elem_bytes) is not None or t.rank == 0:
        return None
    if req.oob_fill is not OobFill.ZERO:
        return None  # NaN fill needs a float type; raw words cannot ask for it
    word = math.gcd(t.elem_bytes, 8)
    f = t.elem_bytes // word
    tensor = replace(t, elem_bytes=word, shape=t.shape + (f,),
                     strides=tuple(s * f for s in t.strides) + (1,))
    new = replace(req, tensor=tensor, box=req.box + (f,),
                  element_strides=req.element_strides + (1,))
    groups = tuple((d,) for d in range(t.rank)) + ((),)
    return _Candidate(new, ((0,) * (t.rank + 1),),
                      f"move each {t.elem_bytes}-byte element as {f} raw {word}-byte words",
                      groups=groups)


def _permute_contiguous_inner(req: TmaRequest) -> _Candidate | None:
    """A strided innermost dimension with a unit-stride dimension elsewhere: transpose the box."""
    t = req.tensor
    if t.rank < 2 or t.shape[-1] == 1 or t.strides[-1] == 1:
        return None
    unit = [d for d in range(t.rank - 1) if t.strides[d] == 1 and t.shape[d] > 1]
    if not unit:
        return None
    j = unit[0]
    order = [d for d in range(t.rank) if d != j] + [j]
    es = req.element_strides
    tensor = replace(t, shape=tuple(t.shape[d] for d in order),
                     strides=tuple(t.strides[d] for d in order))
    new = replace(req, tensor=tensor, box=tuple(req.box[d] for d in order),
                  element_strides=tuple(es[d] for d in order))
    return _Candidate(new, ((0,) * t.rank,),
                      f"load the transposed tile (axis {j} innermost) and permute it back",
                      groups=tuple((d,) for d in order))


@dataclass(frozen=True)
class _Dim:
    """One dimension of a view being merged: extent, stride, box, element stride, axes."""

    shape: int
    stride: int
    box: int
    es: int
    axes: tuple[int, ...]

    def absorbs(self, outer: _Dim) -> bool:
        """Can ``outer`` merge into this (inner) dimension without changing the elements?"""
        return (outer.stride == self.shape * self.stride and self.box == self.shape
                and self.es == 1 and outer.es == 1)

    def merged_under(self, outer: _Dim) -> _Dim:
        return _Dim(outer.shape * self.shape, self.stride, outer.box * self.shape, 1,
                    outer.axes + self.axes)


def _merge_dims(
    req: TmaRequest, groups: tuple[tuple[int, ...], ...], arch: int
) -> _Candidate | None:
    """Drop size-1 dimensions and merge runs of contiguous, fully boxed dimensions.

    Merging dimension ``d`` into its inner neighbour is exact when
    ``stride[d] == shape[d+1] * stride[d+1]`` and the box covers the whole inner
    neighbour. Every admissible choice of merges is tried (there are at most
    ``2 ** (rank - 1)``); the fewest copies per tile wins, then the fewest merges.
    """
    t = req.tensor
    dims = [
        _Dim(t.shape[d], t.strides[d], req.box[d], req.element_strides[d], groups[d])
        for d in range(t.rank)
        if not (t.shape[d] == 1 and req.box[d] == 1)
    ]
    if not dims:
        return None
    options = [k for k in range(len(dims) - 1) if dims[k + 1].absorbs(dims[k])]
    options = options[-_MAX_MERGE_SEARCH:]
    best: tuple[tuple[int, int], _Candidate] | None = None
    for mask in range(1 << len(options)):
        chosen = {options[i] for i in range(len(options)) if mask >> i & 1}
        merged = [dims[-1]]
        for k in range(len(dims) - 2, -1, -1):
            if k in chosen:
                merged[0] = merged[0].merged_under(dims[k])
            else:
                merged.insert(0, dims[k])
        if len(merged) == t.rank:
            continue
        tensor = replace(t, shape=tuple(m.shape for m in merged),
                         strides=tuple(m.stride for m in merged))
        new = replace(req, tensor=tensor, box=tuple(m.box for m in merged),
                      element_strides=tuple(m.es for m in merged))
        cand = _complete(
            _Candidate(new, ((0,) * len(merged),), f"merge dimensions into rank {len(merged)}",
                       groups=tuple(m.axes for m in merged)),
            arch,
        )
        if cand is None:
            continue
        key = (len(cand.origins), len(chosen))
        if best is None or key < best[0]:
            best = (key, cand)
    return None if best is None else best[1]


_MAX_MERGE_SEARCH = 10


def _repacked(req: TmaRequest) -> tuple[TmaRequest, GlobalTensor] | None:
    """A fresh row-major copy whose row pitch is padded to the stride granule."""
    t = req.tensor
    if t.elem_bytes > 16 or 16 % t.elem_bytes:
        return None
    from tilekit.layout.pitch import padded_strides

    unit = 32 if req.interleave is Interleave.B32 else 16
    name = f"{t.label}(repacked)"
    tensor = replace(t, strides=padded_strides(t.shape, t.elem_bytes, unit),
                     base_align=FRESH_ALLOCATION_ALIGN, name=name)
    return replace(req, tensor=tensor), tensor


def _complete(cand: _Candidate, arch: int) -> _Candidate | None:
    """The candidate if admissible, else the candidate with its box split, else None."""
    if tma_admissibility(cand.request, arch=arch).admissible:
        return cand
    split = _split_box(cand.request)
    if split is None or not tma_admissibility(split.request, arch=arch).admissible:
        return None
    # Origins compose: each of the candidate's copies is split further.
    origins = tuple(
        tuple(a + b for a, b in zip(o1, o2, strict=True))
        for o1 in cand.origins
        for o2 in split.origins
    )
    return _Candidate(split.request, origins, f"{cand.note}; {split.note}",
                      cand.changes_shared_layout, cand.groups)


def tma_alternatives(
    request: TmaRequest, *, arch: int, passes: int = 1
) -> tuple[Alternative[TmaPlan | ThreadCopyPlan], ...]:
    """Ranked plans for an inadmissible request (empty when the request is admissible).

    ``passes`` is how many times the tensor is read by tiles; a one-time repack
    is amortized over them. Every TMA plan returned is itself admissible.
    """
    if tma_admissibility(request, arch=arch).admissible:
        return ()
    t = request.tensor
    identity = tuple((d,) for d in range(t.rank))
    tiles = request.tiles()
    found: list[tuple[AlternativeKind, _Candidate, GlobalTensor | None, int]] = []

    if arch >= TMA_MIN_ARCH and t.rank >= 1:
        box_like = [c for c in (_split_box(request), _dense_inner(request)) if c is not None]
        box_like += _other_swizzles(request)
        for c in box_like:
            done = _complete(replace(c, groups=identity), arch)
            if done is not None:
                found.append((AlternativeKind.DIFFERENT_BOX, done, None, 0))

        starts = [c for c in (_fold_element_strides(request), _raw_words(request),
                              _permute_contiguous_inner(request)) if c is not None]
        views = list(starts)
        for c in starts:  # each view change, then merged where that helps
            merged = _merge_dims(c.request, c.groups, arch)
            if merged is not None:
                views.append(replace(merged, note=f"{c.note}; {merged.note}"))
        merged = _merge_dims(request, identity, arch)
        if merged is not None:
            views.append(merged)
        for c in views:
            done = _complete(c, arch)
            if done is not None:
                found.append((AlternativeKind.FACTORIZE, done, None, 0))

        repacked = _repacked(request)
        if repacked is not None:
            new_req, new_tensor = repacked
            pitch = new_tensor.strides[-2] if t.rank >= 2 else 1
            cand = _Candidate(new_req, ((0,) * t.rank,),
                              f"repack {t.label} once into a row-major copy"
                              + (f" with row pitch {pitch} elements" if t.rank >= 2 else ""),
                              groups=identity)
            done = _complete(cand, arch)
            if done is None:
                merged = _merge_dims(new_req, identity, arch)
                done = None if merged is None else replace(
                    merged, note=cand.note + "; " + merged.note)
            if done is not None:
                found.append((AlternativeKind.REPACK, done, t, 2 * t.numel * t.elem_bytes))

    alts: list[Alternative[TmaPlan | ThreadCopyPlan]] = []
    seen: set[tuple[AlternativeKind, TmaRequest, tuple[tuple[int, ...], ...]]] = set()
    for kind, cand, original, one_time in found:
        key = (kind, cand.request, cand.origins)
        if key in seen:
            continue
        seen.add(key)
        verdict = tma_admissibility(cand.request, arch=arch)
        assert verdict.params is not None
        plan = TmaPlan(cand.request, verdict.params, cand.origins, cand.groups or identity,
                       original)
        copies = plan.copies_per_tile
        tile_bytes = copies * cand.request.tile_bytes()
        cost = Cost(tiles * tile_bytes, tiles * copies, copies, one_time, passes)
        where = f"{copies} TMA cop{'y' if copies == 1 else 'ies'} per tile"
        if one_time:
            where += f", {one_time} bytes once (read + write) amortized over {passes} pass(es)"
        alts.append(Alternative(kind, plan, cost, f"{cand.note}: {where}",
                                cand.changes_shared_layout))

    alts += thread_copy_alternatives(
        elem_bytes=t.elem_bytes, base_align=t.base_align, shape=t.shape, strides=t.strides,
        box=request.box, element_strides=request.element_strides, tiles=tiles, arch=arch)
    return rank_alternatives(alts)


# ``tma`` re-exports TmaPlan and tma_alternatives, so each module imports the other at its
# bottom, once its own names exist: either can be imported first. Used at call time only.
from tilekit.layout.tma import (  # noqa: E402
    FRESH_ALLOCATION_ALIGN,
    MAX_BOX_BYTES,
    MAX_BOX_DIM,
    MAX_ELEMENT_STRIDE,
    TMA_MIN_ARCH,
    GlobalTensor,
    Interleave,
    OobFill,
    Swizzle,
    TmaDataType,
    TmaDescriptorParams,
    TmaRequest,
    tma_admissibility,
)
