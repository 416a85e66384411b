"""Tile-view loads and stores: core vector groups, tail groups, and misaligned rows.

A tile view's registers come in *vector groups* (``lower_memory.vector_groups``: runs of
registers consecutive along the unit-stride dim). They split, statically, like a ragged
grid does (``tilekit.layout.tiling.decompose_tiled``):

* **core** groups, whose coordinates never pass the tile's extent: every element is a
  distinct in-tile element, consecutive in memory when the inner stride is 1. A row of
  4097 floats on 128 threads of 4 is 8 repeats of core groups (4096 elements) and one
  repeat of tail groups (the one element left, and the replicas that wrap to the start).
* **tail** groups, which may wrap: each is checked on its own (vector when its elements
  are consecutive, aligned and in bounds, else element by element), so a thread holding
  the tail does not drag its core groups onto the scalar path.

The core groups take one branch per access: when all of them are in bounds, they are
loaded or stored as vectors, else element by element. A row whose start is not 16-byte
aligned (row ``r`` of a 4096 x 4097 float32 matrix starts ``r % 4`` elements past a
16-byte boundary) is not the scalar case: its *shift* (the element address modulo the
group width) is read once per row of groups.

* **Loads** take the aligned chunk holding the group's first element and the next chunk,
  and pick the group's bytes out of the pair with selects and funnel shifts
  (``windowed``): one copy of the code for every shift, no branch on it, so lanes with
  different shifts never diverge.
* **Stores**, on NVIDIA, move each group as ONE aligned 16-byte chunk: when a warp's lanes
  lie along one row (one shift per warp), through warp shuffles on the arm of a switch
  on that shift (see the section below); when they span several rows, as rotated runs
  (predicated stores chosen by bit arithmetic, no branch). Elsewhere a store moves each
  group as a few naturally aligned pieces (shift 2 of a float4: two 8-byte halves;
  shift 1: 4, 8, 4 bytes). A warp that fails the shuffles' vote because the tensor
  ends inside its row (a transpose's last tile column) stores the groups of its lanes
  that lie inside as such pieces too, and only its last lanes element by element.

With the bucket's facts (16-byte aligned base, 16-byte row strides) the shift is 0 and
only the aligned case is emitted: unpredicated 128-bit accesses.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from tilekit.codegen import scalar_ops as S
from tilekit.codegen.lower import I32, I64, KernelLowering, TensorHandle, c32
from tilekit.codegen.lower_memory import (
    _aligned,
    _contiguous,
    _fast_condition,
    _to_i64,
    _two_paths,
    element_address,
    element_ptr,
    pack,
    unpack,
    vector_groups,
    vector_ptr,
)
from tilekit.layout.realign import Piece, RotatedRun, rotated_run
from tilekit.layout.tile_layouts import BlockedEncoding, ThreadTerm, TileLayout


def aligned_pieces(shift: int, width: int, length: int | None = None
                   ) -> list[tuple[int, int]]:
    """``(first, count)`` pieces of a run of ``length`` (default ``width``) elements whose
    first element address is ``shift`` modulo ``width`` (a power of two): each piece as
    long as the address alignment allows, so each is one naturally aligned access."""
    length = width if length is None else length
    pieces, i = [], 0
    while i < length:
        addr = (shift + i) % width
        count = width
        while count > 1 and (addr % count or count > length - i):
            count //= 2
        pieces.append((i, count))
        i += count
    return pieces


def split_groups(lay: TileLayout, groups: list[list[int]]) -> tuple[list[list[int]],
                                                                     list[list[int]]]:
    """(core, tail): vector groups none of whose registers may wrap past the extent, and
    the rest (single registers included)."""
    core, tail = [], []
    for g in groups:
        wraps = any(lay.may_wrap(r, d) for r in g for d in range(lay.rank))
        (tail if wraps or len(g) == 1 else core).append(g)
    if len({len(g) for g in core}) > 1:  # mixed widths: no shared shift; per group instead
        return [], groups
    return core, tail


def _shift_classes(lay: TileLayout, core: list[list[int]]) -> list[list[list[int]]]:
    """Core groups with the same coordinates on every dim but the minor one: one row of a
    thread's registers, whose groups share the row's shift."""
    minor = lay.encoding.order[0] if isinstance(lay.encoding, BlockedEncoding) else -1
    classes: dict[tuple[int, ...], list[list[int]]] = {}
    for g in core:
        key = tuple(d.offsets[g[0]] for k, d in enumerate(lay.dims) if k != minor)
        classes.setdefault(key, []).append(g)
    return list(classes.values())


def _element_shift(L: KernelLowering, t: TensorHandle, offset: ir.Value, width: int
                   ) -> ir.Value:
    """The element address of ``offset`` modulo ``width``, as i32."""
    b = L.b
    off = _to_i64(b, offset)
    if t.name not in L.aligned16:
        elem = b.lshr(t.base, ir.Constant(I64, t.dtype.itemsize.bit_length() - 1))
        off = b.add(off, elem)
    return b.trunc(b.and_(off, ir.Constant(I64, width - 1)), I32)


def _per_shift(L: KernelLowering, shift: ir.Value, width: int, case, nvalues: int
               ) -> list[ir.Value]:
    """``case(k)`` for the run-time ``shift`` == k, k in [0, width): a switch whose arms
    each return ``nvalues`` values (joined by phis)."""
    b = L.b
    done = L.func.append_basic_block("shift_done")
    arms = [L.func.append_basic_block(f"shift{k}") for k in range(width)]
    sw = b.switch(shift, arms[0])
    for k in range(1, width):
        sw.add_case(c32(k), arms[k])
    results = []
    for k, arm in enumerate(arms):
        b.position_at_end(arm)
        vals = case(k)
        results.append((vals, b.block))
        b.branch(done)
    b.position_at_end(done)
    out = []
    for i in range(nvalues):
        phi = b.phi(results[0][0][i].type)
        for vals, blk in results:
            phi.add_incoming(vals[i], blk)
        out.append(phi)
    return out


def _core_condition(L: KernelLowering, t: TensorHandle, classes, offsets, preds
                    ) -> tuple[ir.Value | None, list[ir.Value]]:
    """Whether every core group is consecutive, in bounds and (per class) shares its first
    group's shift; and each class's shift."""
    b = L.b
    conds: list[ir.Value | None] = []
    shifts = []
    for cls in classes:
        width = len(cls[0])
        first = _to_i64(b, offsets[cls[0][0]])
        for g in cls:
            conds.append(_contiguous(L, [offsets[r] for r in g]))
            conds.extend((preds[g[0]], preds[g[-1]]))
            if g is not cls[0]:
                delta = b.sub(_to_i64(b, offsets[g[0]]), first)
                conds.append(b.icmp_unsigned("==", b.and_(delta, ir.Constant(I64, width - 1)),
                                             ir.Constant(I64, 0)))
        shifts.append(_element_shift(L, t, offsets[cls[0][0]], width))
    return L.all_of(conds), shifts


# --- misaligned rows through warp shuffles (NVIDIA stores) -----------------------------------
#
# Pieces cost up to three accesses per group where one would do; on a warp whose lanes
# share a row (one shift), each lane can instead store one aligned 16-byte chunk: the
# chunk after its first element, from its own tail and the next lane's head (``shfl``),
# the run's first and last lanes adding the partial chunks at its two ends as pieces.
# Nothing outside the tile is written. Each shift is an arm of a switch, so that the
# shuffles' selections are constants. (Loads realigned this way too, until the windows
# measured faster on one-row tiles: 4096 x 4097 bf16 layer norm 0.748 -> 0.775x of copy
# on an H200, and a quarter less code to compile; docs/memory_bound.md.)


def _shuffle_run(L: KernelLowering, lay: TileLayout, core: list[list[int]],
                 itemsize: int) -> tuple[int, int] | None:
    """``(div, mod)`` of the lane term along the minor dim when shuffles can realign the
    core groups: NVIDIA, each lane one group per repeat, several lanes along the row."""
    enc = lay.encoding
    if not core or not hasattr(L.vendor, "vote_all") or not isinstance(enc, BlockedEncoding):
        return None
    width = len(core[0])
    lane = lay.dims[enc.order[0]].lane
    if lane.mod < 2 or lane.mult != width or width * itemsize not in (4, 8, 16):
        return None
    if any(d.lane.mod > 1 for k, d in enumerate(lay.dims) if k != enc.order[0]):
        return None  # lanes of a warp on several rows: shifts differ within the warp
    return lane.div, lane.mod


def _provably_aligned(L: KernelLowering, t: TensorHandle, lay: TileLayout, width: int,
                      zero_dims: frozenset[int]) -> bool:
    """Whether the bucket's facts make every core group's shift 0 (LLVM folds it): an
    aligned base, a unit inner stride, 16-byte strides on the other dims, and a tile start
    along the minor dim that is a multiple of the group width (an extent that is one, or
    the index 0: a norm's weight row of 4097). Such accesses keep the plain vector path:
    the shuffle path's warp vote would pin their loads in place."""
    enc = lay.encoding
    minor = enc.order[0] if isinstance(enc, BlockedEncoding) else lay.rank - 1
    return (rows_aligned(t.name, lay.rank, (L.aligned16, L.unit_inner, L.strides16))
            and (lay.shape[minor] % width == 0 or minor in zero_dims))


def rows_aligned(name: str, rank: int,
                 facts: tuple[frozenset[str], frozenset[str], frozenset[str]]) -> bool:
    """Whether the bucket's facts (``aligned16``, ``unit_inner``, ``strides16``) put every
    row of tensor ``name`` on a 16-byte boundary: an aligned base, a unit inner stride and
    16-byte strides on the other dims. ``occupancy`` asks it too, of tails that wrap
    whole."""
    aligned16, unit_inner, strides16 = facts
    return name in aligned16 and name in unit_inner and (rank == 1 or name in strides16)


def _words(L: KernelLowering, vec: ir.Value, nbytes: int) -> list[ir.Value]:
    b = L.b
    w = b.bitcast(vec, ir.VectorType(I32, nbytes // 4))
    return [b.extract_element(w, c32(i)) for i in range(nbytes // 4)]


def _from_words(L: KernelLowering, words: list[ir.Value], vty: ir.VectorType) -> ir.Value:
    b = L.b
    v = ir.Constant(ir.VectorType(I32, len(words)), None)
    for i, w in enumerate(words):
        v = b.insert_element(v, w, c32(i))
    return b.bitcast(v, vty)


def _from_next_lane(L: KernelLowering, vec: ir.Value, nbytes: int, src: ir.Value
                    ) -> ir.Value:
    return _from_words(L, [L.vendor.shuffle_idx(L.b, w, src) for w in _words(L, vec, nbytes)],
                       vec.type)


def _shuffle(L: KernelLowering, a: ir.Value, c: ir.Value, first: int, width: int
             ) -> ir.Value:
    """Elements ``[first, first + width)`` of ``a ++ c``."""
    return L.b.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, width),
                                                list(range(first, first + width))))


def _lane_roles(L: KernelLowering, run: tuple[int, int]) -> tuple[ir.Value, ir.Value,
                                                                  ir.Value]:
    """(source lane of the next group, is-first-in-run, is-last-in-run)."""
    from tilekit.layout.tile_layouts import ThreadTerm

    div, mod = run
    index = L.term("lane", ThreadTerm(div, mod, 1))
    b = L.pb
    last = b.icmp_unsigned("==", index, c32(mod - 1))
    first = b.icmp_unsigned("==", index, c32(0))
    src = b.select(last, L.lane, b.add(L.lane, c32(div)))
    return src, first, last


def _offset_plus(L: KernelLowering, offset: ir.Value, delta: int) -> ir.Value:
    return L.b.add(offset, ir.Constant(offset.type, delta)) if delta else offset


def _warp_uniform(L: KernelLowering, fast: ir.Value | None, shifts: list[ir.Value]
                  ) -> ir.Value:
    """``fast`` in every lane, with every class's shift equal to lane 0's: the shuffles
    run with the whole warp on one arm."""
    b = L.b
    conds = [fast] + [b.icmp_unsigned("==", k, L.vendor.shuffle_idx(b, k, c32(0)))
                      for k in shifts]
    return L.vendor.vote_all(b, L.all_of(conds))


def _minus(L: KernelLowering, offset: ir.Value, shift: ir.Value) -> ir.Value:
    """``offset - shift`` (an i32 shift, an offset of either index width)."""
    b = L.b
    return b.sub(offset, b.zext(shift, offset.type) if offset.type.width > 32 else shift)


def _funnel(L: KernelLowering, words: list[ir.Value], byte: ir.Value, count: int
            ) -> list[ir.Value]:
    """Words ``[byte, byte + 4 * count)`` (bytes, run time) of the little-endian words
    ``words`` (2 * count of them): a barrel of selects by whole words, then one funnel
    shift per word for the bytes left (constant 0, folded away, for 32-bit elements)."""
    b = L.b
    q = b.lshr(byte, c32(2))
    step, bit = 1, 0
    while step < count:
        take = b.trunc(b.lshr(q, c32(bit)), ir.IntType(1))
        words = [b.select(take, words[i + step], words[i]) for i in range(len(words) - step)]
        step, bit = step * 2, bit + 1
    bits = b.shl(b.and_(byte, c32(3)), c32(3))
    fshr = b.module.globals.get("llvm.fshr.i32") or ir.Function(
        b.module, ir.FunctionType(I32, [I32, I32, I32]), "llvm.fshr.i32")
    return [b.call(fshr, [words[j + 1], words[j], bits]) for j in range(count)]


def _tail_plan(L: KernelLowering, t: TensorHandle, lay: TileLayout, group: list[int],
               offsets: Sequence[ir.Value], preds: Sequence[ir.Value | None],
               zero_dims: frozenset[int]) -> tuple[ir.Value | None, bool]:
    """How a tail group moves: ``(condition, whole)``. It moves as one vector where the
    condition holds (None: always); ``whole``: where it fails, no element of the group is
    active either, so there is no element path to fall back to.

    A group that wraps whole along the tensor's unit-stride last dim
    (``TileLayout.wraps_whole``: a row of 1000 bf16 in groups of 8) has consecutive
    offsets by construction, so only its alignment and the masks of its ends are checked:
    a tile view's mask is its bounds, which hold for the last element only if they hold
    for every one before it, and (for stores) ownership, the same for the whole group.
    When the bucket also proves the alignment and the row's length is a multiple of the
    tile's (a size fact), the mask is one value for the whole group: all or nothing."""
    enc = lay.encoding
    minor = lay.rank - 1
    if not (t.name in L.unit_inner and isinstance(enc, BlockedEncoding)
            and enc.order[0] == minor and lay.wraps_whole(group, minor)):
        return _fast_condition(L, t, [group], offsets, preds, True), False
    width = len(group)
    if (_provably_aligned(L, t, lay, width, zero_dims)
            and (t.name, minor, lay.shape[minor]) in L.divisible):
        return preds[group[0]], True
    return L.all_of([_aligned(L, t, offsets[group[0]], width * t.dtype.itemsize, True),
                     preds[group[0]], preds[group[-1]]]), False


class _CorePlan:
    """What a tile access decides once for its core groups: the shift classes (rows of
    groups), whether this thread (or, with shuffles, its warp) takes the vector path, each
    class's shift, and the shuffle run with the lanes' roles (None: windows or pieces).
    ``shuffles``: whether the access may realign through a warp-uniform shift (stores;
    loads take windows, which need no agreement between lanes)."""

    def __init__(self, L: KernelLowering, t: TensorHandle, lay: TileLayout,
                 core: list[list[int]], offsets: Sequence[ir.Value],
                 preds: Sequence[ir.Value | None], zero_dims: frozenset[int],
                 shuffles: bool) -> None:
        self.classes = _shift_classes(lay, core)
        self.fast, self.shifts = _core_condition(L, t, self.classes, offsets, preds)
        self.width = len(core[0])
        self.aligned = _provably_aligned(L, t, lay, self.width, zero_dims)
        self.run = None if self.aligned or not shuffles else _shuffle_run(
            L, lay, core, t.dtype.itemsize)
        self.lane_fast = self.fast  # this lane's own condition, before a warp vote
        if self.run:
            self.src, self.first, self.last = _lane_roles(L, self.run)
            self.fast = _warp_uniform(L, self.fast, self.shifts)

    @property
    def registers(self) -> list[int]:
        return [r for cls in self.classes for g in cls for r in g]

    def windowed(self, itemsize: int) -> bool:
        """Whether loads realign through a two-chunk window (no switch, so no divergence
        and one copy of the code for every shift): a row not provably aligned, in groups
        of at least one 32-bit word."""
        return not self.aligned and self.width * itemsize >= 4

    def each_class(self, move) -> list[ir.Value]:
        """``move(group, shift)`` for every group with its class's run-time shift."""
        return [v for cls, shift in zip(self.classes, self.shifts) for g in cls
                for v in move(g, shift)]

    def per_class(self, L: KernelLowering, move, nvalues_of) -> list[ir.Value]:
        """``move(group, k)`` for every group on its class's shift-``k`` arm."""
        vals: list[ir.Value] = []
        for cls, shift in zip(self.classes, self.shifts):
            vals.extend(_per_shift(L, shift, self.width, lambda k, cls=cls: [
                v for g in cls for v in move(g, k)], nvalues_of(cls)))
        return vals


def tile_gather(L: KernelLowering, t: TensorHandle, lay: TileLayout,
                offsets: Sequence[ir.Value], preds: Sequence[ir.Value | None],
                pad: ir.Value, zero_dims: frozenset[int] = frozenset()) -> list[ir.Value]:
    """The tile's registers (``pad`` where ``preds`` fails); ``zero_dims``: the dims along
    which the tile's index is the constant 0 (``lower_memory.zero_index_dims``)."""
    b = L.b
    dt = t.dtype
    out: list[ir.Value] = [None] * len(offsets)  # type: ignore[list-item]

    def scalars(regs: Sequence[int]) -> list[ir.Value]:
        return L.guarded_loads([preds[r] for r in regs], [
            lambda r=r: S.from_memory(b, b.load(element_ptr(L, t, offsets[r])), dt)
            for r in regs], [pad] * len(regs))

    def pieces_of(g: list[int], k: int) -> list[ir.Value]:
        vals = []
        for first, count in aligned_pieces(k, len(g)):
            v = b.load(vector_ptr(L, t, offsets[g[first]], count), align=count * dt.itemsize)
            vals.extend(unpack(L, dt, v, count))
        return vals

    def windowed(g: list[int], shift: ir.Value) -> list[ir.Value]:
        """Group ``g`` whose first element lies ``shift`` elements (run time, per lane)
        past an aligned chunk: that chunk and, unless ``shift`` is 0, the next one, then
        the group's bytes taken from the pair by word selects and a funnel shift."""
        width = len(g)
        nbytes = width * dt.itemsize
        start = _minus(L, offsets[g[0]], shift)
        here = b.load(vector_ptr(L, t, start, width), align=nbytes)
        after = L.select_load(b.icmp_unsigned("!=", shift, c32(0)), lambda: b.load(
            vector_ptr(L, t, _offset_plus(L, start, width), width), align=nbytes),
            ir.Constant(here.type, None))
        byte = b.mul(shift, c32(dt.itemsize))
        words = _words(L, here, nbytes) + _words(L, after, nbytes)
        return unpack(L, dt, _from_words(L, _funnel(L, words, byte, nbytes // 4), here.type),
                      width)

    core, tail = split_groups(lay, vector_groups(L, lay, dt.itemsize))
    if core:
        plan = _CorePlan(L, t, lay, core, offsets, preds, zero_dims, shuffles=False)
        order = plan.registers
        if plan.windowed(dt.itemsize):
            def vector_path() -> list[ir.Value]:
                return plan.each_class(windowed)
        else:
            def vector_path() -> list[ir.Value]:
                return plan.per_class(L, pieces_of, lambda cls: sum(len(g) for g in cls))
        values = _two_paths(L, plan.fast, vector_path, lambda: scalars(order))
        for r, v in zip(order, values):
            out[r] = v
    for g in tail:
        if len(g) == 1:
            (out[g[0]],) = scalars(g)
            continue
        fast, whole = _tail_plan(L, t, lay, g, offsets, preds, zero_dims)
        values = _two_paths(L, fast, lambda g=g: pieces_of(g, 0),
                            (lambda g=g: [pad] * len(g)) if whole else (lambda g=g: scalars(g)))
        for r, v in zip(g, values):
            out[r] = v
    return out


def tile_scatter(L: KernelLowering, t: TensorHandle, lay: TileLayout,
                 offsets: Sequence[ir.Value], values: Sequence[ir.Value],
                 preds: Sequence[ir.Value | None], zero_dims: frozenset[int] = frozenset()
                 ) -> None:
    """Store the registers where ``preds`` holds; ``zero_dims`` as for ``tile_gather``."""
    b = L.b
    dt = t.dtype

    def part(g: list[int], first: int, count: int, shift: int) -> list[ir.Value]:
        """Elements ``first..first+count`` of group ``g`` (address shift ``shift``), as
        naturally aligned pieces."""
        for i, n in aligned_pieces(shift, len(g), count):
            regs = g[first + i:first + i + n]
            ptr = vector_ptr(L, t, offsets[regs[0]], n)
            b.store(pack(L, dt, [values[r] for r in regs]), ptr, align=n * dt.itemsize)
        return []

    def pieces_of(g: list[int], k: int) -> list[ir.Value]:
        return part(g, 0, len(g), k)

    def realigned(g: list[int], k: int) -> list[ir.Value]:
        if k == 0:
            return pieces_of(g, 0)
        width = len(g)
        mine = pack(L, dt, [values[r] for r in g])
        nxt = _from_next_lane(L, mine, width * dt.itemsize, plan.src)
        chunk = _shuffle(L, mine, nxt, width - k, width)
        ptr = vector_ptr(L, t, _offset_plus(L, offsets[g[0]], width - k), width)
        with b.if_else(plan.last) as (at_end, inside):
            with inside:
                b.store(chunk, ptr, align=width * dt.itemsize)
            with at_end:
                part(g, width - k, k, 0)
        with b.if_then(plan.first):
            part(g, 0, width - k, k)
        return []

    def scalars(regs: Sequence[int]) -> list[ir.Value]:
        L.guarded_stores([preds[r] for r in regs], [lambda r=r: b.store(
            S.to_memory(b, values[r], dt), element_ptr(L, t, offsets[r])) for r in regs])
        return []

    def core_scalars(groups: Sequence[list[int]]) -> list[ir.Value]:
        """Core groups element by element. Where the groups run along the tensor's last
        dim and its stride is 1 (a bucket fact), each element's address is its group's
        first plus a constant, an immediate offset of the store: not a 64-bit address of
        its own, which cost ptxas 30 registers on a 64 x 64 bf16 tile (94, not 64)."""
        enc = lay.encoding
        if not (t.name in L.unit_inner and isinstance(enc, BlockedEncoding)
                and enc.order[0] == lay.rank - 1):
            return scalars([r for g in groups for r in g])
        regs, stores = [], []
        for g in groups:
            first = element_ptr(L, t, offsets[g[0]])
            for i, r in enumerate(g):
                regs.append(r)
                stores.append(lambda r=r, i=i, first=first: b.store(
                    S.to_memory(b, values[r], dt), b.gep(first, [c32(i)]) if i else first))
        L.guarded_stores([preds[r] for r in regs], stores)
        return []

    core, tail = split_groups(lay, vector_groups(L, lay, dt.itemsize))
    if core:
        plan = _CorePlan(L, t, lay, core, offsets, preds, zero_dims, shuffles=True)
        rotation = _rotation(L, lay, plan, dt.itemsize)
        if rotation is not None:
            _two_paths(L, _in_every_lane(L, plan.fast),
                       lambda: _rotated_stores(L, t, plan, rotation, offsets, values),
                       lambda: core_scalars(core))
        else:
            def slow_path() -> list[ir.Value]:
                if plan.run is None or not _may_end_inside(L, t, lay):
                    return core_scalars(core)
                # A warp at the tensor's ragged edge (a transpose's last tile column):
                # the lanes with every group inside store them as pieces, not elements.
                return _two_paths(L, plan.lane_fast,
                                  lambda: plan.per_class(L, pieces_of, lambda cls: 0),
                                  lambda: core_scalars(core))

            _two_paths(L, plan.fast,
                       lambda: plan.per_class(L, realigned if plan.run else pieces_of,
                                              lambda cls: 0),
                       slow_path)
    for g in tail:
        if len(g) == 1:
            scalars(g)
            continue
        fast, whole = _tail_plan(L, t, lay, g, offsets, preds, zero_dims)
        _two_paths(L, fast, lambda g=g: pieces_of(g, 0),
                   (lambda: []) if whole else (lambda g=g: scalars(g)))


def _may_end_inside(L: KernelLowering, t: TensorHandle, lay: TileLayout) -> bool:
    """Whether the tensor may end inside the tile along the minor dim (its size not known
    to be a multiple of the tile's extent there): then a warp's run of groups can be cut
    short, and its vote for the shuffles fails in lanes that have all their data."""
    enc = lay.encoding
    minor = enc.order[0] if isinstance(enc, BlockedEncoding) else lay.rank - 1
    return (t.name, minor, lay.shape[minor]) not in L.divisible


# --- misaligned rows, several per warp: rotated runs (stores) ---------------------------------
#
# A warp whose lanes lie on several rows (a 64 x 64 bf16 tile: 8 lanes per row, 4 rows)
# has a shift per row, so neither a switch on a warp-uniform shift nor pieces behind a
# switch (which diverges 4 ways) suit it. The layout library's rotated run
# (``tilekit.layout.realign``) does without a branch on the shift: each lane takes the
# previous lane's group along the row (``shfl``, the source lane a run-time choice), cuts
# the aligned chunk before its own group out of the pair with the loads' funnel, and
# stores it whole; the run's first lane, whose chunk wraps around the run, stores the
# partial chunks at the run's two ends as predicated pieces. One 16-byte store per group,
# as on an aligned row, plus the pieces of one chunk per run.


def _rotation(L: KernelLowering, lay: TileLayout, plan: _CorePlan, itemsize: int
              ) -> RotatedRun | None:
    """The rotated run of a store's core groups: NVIDIA, rows not provably aligned, and
    not the one-row warps that the warp-uniform shuffles serve."""
    if plan.aligned or plan.run is not None or not hasattr(L.vendor, "store_if"):
        return None
    return rotated_run(lay, plan.width, itemsize)


def _in_every_lane(L: KernelLowering, fast: ir.Value | None) -> ir.Value | None:
    """``fast`` in every lane of the warp: the shuffles run with the whole warp on one
    path."""
    return None if fast is None else L.vendor.vote_all(L.b, fast)


def _run_roles(L: KernelLowering, run: RotatedRun) -> tuple[ir.Value, ir.Value]:
    """(the lane whose group starts this lane's chunk when the shift is not 0: the
    previous lane of its run, the last one for the run's first lane; whether this lane
    is its run's first), as ``RotatedRun.source`` and ``full`` say."""
    def make(pb: ir.IRBuilder) -> tuple[ir.Value, ir.Value]:
        index = L.term("lane", ThreadTerm(run.lane_div, run.lanes, 1))
        first = pb.icmp_unsigned("==", index, c32(0))
        prev = pb.select(first, pb.add(L.lane, c32((run.lanes - 1) * run.lane_div)),
                         pb.sub(L.lane, c32(run.lane_div)))
        return prev, first

    return L.in_prologue(("rotated_run", run.lanes, run.lane_div), make)


def _piece_value(L: KernelLowering, chunk: ir.Value, piece: Piece, position: ir.Value,
                 width: int) -> ir.Value:
    """Elements ``[position, position + piece.size)`` of ``chunk`` (a vector), the run-time
    ``position`` being one of the piece's few candidates: selects, no indexed access."""
    b = L.b
    value = None
    for p in piece.positions(width):
        if piece.size == 1:
            part = b.extract_element(chunk, c32(p))
        else:
            part = b.shuffle_vector(chunk, chunk, ir.Constant(ir.VectorType(I32, piece.size),
                                                              list(range(p, p + piece.size))))
        value = part if value is None else b.select(
            b.icmp_unsigned("==", position, c32(p)), part, value)
    return value


def _rotated_stores(L: KernelLowering, t: TensorHandle, plan: _CorePlan, run: RotatedRun,
                    offsets: Sequence[ir.Value], values: Sequence[ir.Value]) -> list[ir.Value]:
    """Every core group's chunk, stored whole, and each run's partial chunks, as the layout
    library's pieces: predicated stores (``store_if``), no branch."""
    b = L.b
    dt = t.dtype
    size = dt.itemsize
    width = plan.width
    nbytes = width * size
    prev_lane, first = _run_roles(L, run)

    def address(offset: ir.Value, extra: ir.Value | int = 0) -> ir.Value:
        """The byte address of element ``offset`` plus ``extra`` bytes (i64)."""
        addr = element_address(L, t, offset)
        if isinstance(extra, int):
            return b.add(addr, ir.Constant(I64, extra)) if extra else addr
        return b.add(addr, b.zext(extra, I64))

    def store(g: list[int], k: ir.Value) -> list[ir.Value]:
        mine = pack(L, dt, [values[r] for r in g])
        aligned = b.icmp_unsigned("==", k, c32(0))
        prev = _from_next_lane(L, mine, nbytes, b.select(aligned, L.lane, prev_lane))
        byte = b.and_(b.mul(b.sub(c32(width), k), c32(size)), c32(nbytes - 1))  # funnel_byte
        chunk = _from_words(L, _funnel(L, _words(L, prev, nbytes) + _words(L, mine, nbytes),
                                       byte, nbytes // 4), mine.type)
        start = _minus(L, offsets[g[0]], k)
        L.vendor.store_if(b, b.or_(b.not_(first), aligned), address(start), chunk, nbytes)
        for pieces, past in ((run.head, 0), (run.tail, run.span * size)):
            for piece in pieces:
                bits = b.add(k, c32(piece.addend)) if piece.addend else k
                present = b.and_(first, b.icmp_unsigned(
                    "!=", b.and_(bits, c32(piece.size)), c32(0)))
                candidates = piece.positions(width)
                if len(candidates) == 1:  # a constant: an immediate offset
                    position: ir.Value = c32(candidates[0])
                    at = address(start, past + candidates[0] * size)
                else:
                    position = b.and_(bits, c32(piece.mask))
                    at = address(start, b.add(b.mul(position, c32(size)), c32(past)))
                L.vendor.store_if(b, present, at, _piece_value(L, chunk, piece, position, width),
                                  piece.size * size)
        return []

    return plan.each_class(store)
