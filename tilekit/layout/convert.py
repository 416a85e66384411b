"""Layout conversion planning: how ``convert_layout(src, dst)`` moves a tile's elements.

Both layouts map ``(register, lane, warp)`` to the same tile. The conversion map
``C = src.invert_and_compose(dst)`` says which source hardware index holds the element each
destination index needs; ``src``'s kernel (broadcast copies) is the freedom in that choice.
The cheapest plan the data's movement allows is chosen, as in the Linear Layouts paper:

* ``NOOP``: the layouts are the same function (``equivalent``: then, and only then, every
  register already holds what dst wants there);
* ``REGISTER_PERMUTATION``: every element a thread needs is already in that thread (the map's
  lane and warp parts can be made the identity): registers are renamed, with ``select``s when
  the source register depends on the lane;
* ``WARP_SHUFFLE``: every element stays inside its warp: ``shfl.sync.idx`` rounds. Each round
  ``j`` (a destination word), lane ``d`` reads lane ``B(j) ^ G(d)`` and stores into word ``j ^
  T(d)``, and each lane sends the source word its readers need (``D(j) ^ H(d)``). ``T`` is
  chosen so that ``G`` is a bijection where possible; when readers of one lane would need
  different words, the round is split into sub-rounds. Elements narrower than 32 bits travel
  packed when a 32-bit word's elements stay together;
* ``SHARED_STAGING``: write through shared memory (the layout from ``tilekit.layout.swizzle``
  when that module is present, else unswizzled), barrier, read.

Every plan has a :class:`Cost` (per warp) so that a later pass can choose, and
:func:`apply_plan` runs a plan on a numpy array of per-(warp, lane, register) values: the test
oracle that every element ends where ``dst`` wants it.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout import banks
from tilekit.layout.banks import Access, AccessKind, Target
from tilekit.layout.linear import BLOCK, LANE, OFFSET, REGISTER, WARP, LinearLayout
from tilekit.layout.shared import unswizzled

__all__ = [
    "BARRIER_ISSUES",
    "SHUFFLE_ISSUES",
    "WAVEFRONT_ISSUES",
    "ConversionKind",
    "ConversionPlan",
    "Cost",
    "RegisterPermutation",
    "SharedStaging",
    "ShufflePlan",
    "ShuffleRound",
    "apply_plan",
    "plan_conversion",
]

# Cost weights, in ALU warp-instruction equivalents (moves and selects weigh 1). CUDA C++
# Programming Guide, "Arithmetic Instructions" throughput table, cc 8.x / 9.0: 64 results per
# clock per SM for 32-bit integer compare/select, 32 for warp shuffles; shared memory serves
# one 128-byte wavefront per clock per SM, also half the ALU rate.
#: A ``shfl.sync`` costs two ALU issues (half the throughput).
SHUFFLE_ISSUES = 2
#: A shared-memory wavefront costs two ALU issues (one wavefront per clock per SM).
WAVEFRONT_ISSUES = 2
#: A barrier is charged like this many issues (a judgement: a ``bar.sync`` costs tens of
#: cycles and serializes the CTA's warps).
BARRIER_ISSUES = 16

_HW_DIMS = (REGISTER, LANE, WARP)


class ConversionKind(enum.Enum):
    """How far the data moves, cheapest first."""

    NOOP = 0
    REGISTER_PERMUTATION = 1
    WARP_SHUFFLE = 2
    SHARED_STAGING = 3


@dataclass(frozen=True)
class Cost:
    """What a conversion costs one warp: instruction issues, shared-memory traffic, barriers.

    ``moves`` are register copies (an upper bound: the register allocator often coalesces a
    renaming away); ``shared_wavefronts`` counts the bank-conflict-aware wavefronts of the
    stores and loads; ``rounds`` the shuffle rounds (or the write/read phases of a staging);
    ``score`` folds it all into instruction-issue equivalents.
    """

    moves: int = 0
    shuffles: int = 0
    selects: int = 0
    shared_stores: int = 0
    shared_loads: int = 0
    shared_wavefronts: int = 0
    shared_bytes: int = 0
    rounds: int = 0
    barriers: int = 0

    @property
    def instructions(self) -> int:
        return (self.moves + self.shuffles + self.selects + self.shared_stores
                + self.shared_loads)

    @property
    def score(self) -> int:
        """ALU-issue equivalents: moves and selects, shuffles and shared-memory wavefronts (at
        least one per shared instruction) at their throughput, barriers (module constants)."""
        wavefronts = max(self.shared_wavefronts, self.shared_stores + self.shared_loads)
        return (self.moves + self.selects + SHUFFLE_ISSUES * self.shuffles
                + WAVEFRONT_ISSUES * wavefronts + BARRIER_ISSUES * self.barriers)


@dataclass(frozen=True)
class RegisterPermutation:
    """Which source register each destination register is, per thread: ``source`` maps
    (register, lane, warp) of ``dst`` to a ``src`` register (linear over F2). Static when
    ``lane_dependent`` is False: a pure renaming."""

    source: LinearLayout
    lane_dependent: bool


@dataclass(frozen=True)
class ShuffleRound:
    """One round of ``shfl.sync.idx``, per warp and lane (tuples indexed ``[warp][lane]``).

    Lane ``l`` sends its source word ``send_word[w][l]``; lane ``d`` reads the value of lane
    ``source_lane[w][d]`` and, when ``active[w][d]``, stores it into destination word
    ``dest_word[w][d]``. A ``local`` round reads every active lane's own value: register moves.
    """

    source_lane: tuple[tuple[int, ...], ...]
    send_word: tuple[tuple[int, ...], ...]
    dest_word: tuple[tuple[int, ...], ...]
    active: tuple[tuple[bool, ...], ...]
    local: bool


@dataclass(frozen=True)
class ShufflePlan:
    """Shuffle rounds inside each warp; a word is ``pack`` elements (consecutive registers).

    The linear description (``G``, ``H``, ``T``, ``B``, ``D`` as F2 columns over lane bits and
    destination word bits) is what codegen turns into lane-index arithmetic; ``rounds`` is the
    same schedule written out.
    """

    pack: int
    words_per_element: int
    lane_to_source_lane: tuple[int, ...]  # G
    lane_to_source_word: tuple[int, ...]  # H
    lane_to_dest_word: tuple[int, ...]  # T
    word_to_source_lane: tuple[int, ...]  # B
    word_to_source_word: tuple[int, ...]  # D
    sub_rounds: int
    rounds: tuple[ShuffleRound, ...]


@dataclass(frozen=True)
class SharedStaging:
    """Write through shared memory: ``store`` and ``load`` map (register, lane, warp) to element
    offsets of ``shared`` (offset -> tile); stores and loads move ``*_vector_bytes`` per lane."""

    shared: LinearLayout
    store: LinearLayout
    load: LinearLayout
    store_vector_bytes: int
    load_vector_bytes: int
    layout_source: str


@dataclass(frozen=True)
class ConversionPlan:
    """A costed plan for ``convert_layout(src, dst)``; exactly the field of its kind is set."""

    kind: ConversionKind
    src: LinearLayout
    dst: LinearLayout
    elem_bytes: int
    target: Target
    cost: Cost
    explanation: str
    permutation: RegisterPermutation | None = None
    shuffle: ShufflePlan | None = None
    staging: SharedStaging | None = None


# --------------------------------------------------------------------------------------------
# F2 helpers on ints (bit sets)


class _Span:
    """An echelon basis of F2 vectors, each remembering a payload (XOR-combined on reduction)."""

    def __init__(self) -> None:
        self.pivots: dict[int, tuple[int, int]] = {}

    def reduce(self, vector: int, payload: int = 0) -> tuple[int, int]:
        while vector:
            pivot = self.pivots.get(vector.bit_length() - 1)
            if pivot is None:
                break
            vector ^= pivot[0]
            payload ^= pivot[1]
        return vector, payload

    def add(self, vector: int, payload: int = 0) -> bool:
        rest, combo = self.reduce(vector, payload)
        if rest:
            self.pivots[rest.bit_length() - 1] = (rest, combo)
        return bool(rest)

    def solve(self, vector: int) -> int | None:
        """The payload of a combination equal to ``vector``, or None outside the span."""
        rest, combo = self.reduce(vector)
        return None if rest else combo

    def __contains__(self, vector: int) -> bool:
        return not self.reduce(vector)[0]

    @property
    def rank(self) -> int:
        return len(self.pivots)


def _xor_selected(mask: int, columns: Sequence[int]) -> int:
    acc = 0
    for i, column in enumerate(columns):
        if mask >> i & 1:
            acc ^= column
    return acc


def _kernel(columns: Sequence[int]) -> list[int]:
    """A basis of the inputs mapped to zero (as input bit masks)."""
    span = _Span()
    kernel = []
    for i, column in enumerate(columns):
        rest, combo = span.reduce(column, 1 << i)
        if rest:
            span.pivots[rest.bit_length() - 1] = (rest, combo)
        else:
            kernel.append(combo)
    return kernel


def _rank(vectors: Sequence[int]) -> int:
    span = _Span()
    for v in vectors:
        span.add(v)
    return span.rank


# --------------------------------------------------------------------------------------------
# Canonical hardware layouts


def _canonical(layout: LinearLayout, what: str) -> LinearLayout:
    """``(register, lane, warp)`` ins in that order (missing ones of size 1), outs sorted."""
    if not isinstance(layout, LinearLayout):
        raise LayoutError(f"{what} must be a LinearLayout, got {type(layout).__name__}")
    bases = layout.bases
    unknown = [n for n in layout.in_dims if n not in (*_HW_DIMS, BLOCK)]
    if unknown:
        raise LayoutError(
            f"{what} has in dims {unknown}; a distributed layout has register, lane and warp"
        )
    if len(bases.get(BLOCK, ())) > 0:
        raise LayoutError(
            f"{what} spans {layout.in_dim_size(BLOCK)} CTAs; convert_layout works inside one CTA",
            hints=["plan the conversion of one CTA's sub-layout (sublayout without 'block')"],
        )
    outs = sorted(layout.out_dims, key=lambda n: (len(n), n))
    layout = layout.transpose_outs(outs)
    full = {name: list(layout.bases.get(name, ())) for name in _HW_DIMS}
    return LinearLayout(full, [(n, layout.out_dim_size(n)) for n in outs])


class _Conversion:
    """The conversion map and the source kernel as flat ints over (register | lane | warp)."""

    def __init__(self, src: LinearLayout, dst: LinearLayout) -> None:
        if src.out_dim_sizes != dst.out_dim_sizes:
            raise LayoutError(
                f"convert_layout needs the same tile: src covers {src.out_dim_sizes}, dst "
                f"{dst.out_dim_sizes}"
            )
        for name in (LANE, WARP):
            if src.in_dim_size(name) != dst.in_dim_size(name):
                raise LayoutError(
                    f"src has {src.in_dim_size(name)} {name}s, dst {dst.in_dim_size(name)}",
                    hints=["both layouts must describe the same CTA (resize_in_dim)"],
                )
        self.src, self.dst = src, dst
        self.rs = src.in_dim_size_log2(REGISTER)
        self.rd = dst.in_dim_size_log2(REGISTER)
        self.nl = src.in_dim_size_log2(LANE)
        self.nw = src.in_dim_size_log2(WARP)
        try:
            mapping = src.invert_and_compose(dst)
        except LayoutError as error:
            raise LayoutError(
                f"dst holds elements src does not: {error.message}",
                hints=["convert_layout moves elements; it cannot create them"],
            ) from error
        self.columns = list(mapping.flat_columns)  # one src index per dst input bit
        self.kernel = _kernel(src.flat_columns)

    # bit fields of a src flat index
    def src_register(self, x: int) -> int:
        return x & ((1 << self.rs) - 1)

    def src_lane(self, x: int) -> int:
        return (x >> self.rs) & ((1 << self.nl) - 1)

    def src_warp(self, x: int) -> int:
        return x >> (self.rs + self.nl)

    def dst_lane_bits(self) -> range:
        return range(self.rd, self.rd + self.nl)

    def dst_warp_bits(self) -> range:
        return range(self.rd + self.nl, self.rd + self.nl + self.nw)

    def identity_part(self, bit: int, fields: int) -> int:
        """The src flat index equal to dst input bit ``bit`` in the lane/warp ``fields`` mask."""
        if bit < self.rd:
            return 0
        moved = 1 << (bit - self.rd + self.rs)
        return moved & fields

    def localize(self, fields: int) -> list[int] | None:
        """Columns adjusted by kernel vectors so that the ``fields`` part is the identity.

        ``fields`` masks src index bits (lanes and/or warps). None if some element must leave
        its thread (or warp): then no choice of broadcast copy keeps it inside.
        """
        span = _Span()
        for k in self.kernel:
            span.add(k & fields, k)
        adjusted = []
        for bit, column in enumerate(self.columns):
            want = self.identity_part(bit, fields)
            fix = span.solve((column & fields) ^ want)
            if fix is None:
                return None
            adjusted.append(column ^ fix)
        return adjusted

    def reduce_by_kernel(
        self, columns: list[int], fixed: int, only: range | None = None
    ) -> list[int]:
        """Simplify thread-index columns (or the ``only`` ones) with kernel vectors that leave
        the ``fixed`` fields alone: the same elements, from lower registers and lanes."""
        free = _Span()
        for k in self.kernel:
            if not k & fixed:
                free.add(k)
        chosen = range(self.rd, len(columns)) if only is None else only
        return [free.reduce(c)[0] if bit in chosen else c for bit, c in enumerate(columns)]


# --------------------------------------------------------------------------------------------
# Planning


def plan_conversion(
    src: LinearLayout,
    dst: LinearLayout,
    elem_bytes: int,
    target: Target,
    kind: ConversionKind | None = None,
) -> ConversionPlan:
    """The cheapest kind of plan that moves a tile from ``src`` to ``dst`` (module docstring).

    ``kind`` asks for a more general plan instead (a shuffle or a staging where registers
    would do), so that a later pass can compare costs; a kind the data's movement does not
    allow raises a ``LayoutError`` naming what leaves the thread or warp.
    """
    if elem_bytes not in (1, 2, 4, 8):
        raise LayoutError(f"elements of {elem_bytes} bytes: expected 1, 2, 4 or 8")
    if not isinstance(target, Target):
        raise LayoutError(f"target must be a banks.Target, got {type(target).__name__}")
    src_c, dst_c = _canonical(src, "src"), _canonical(dst, "dst")
    conversion = _Conversion(src_c, dst_c)

    def plan(kind: ConversionKind, cost: Cost, why: str, **parts: object) -> ConversionPlan:
        return ConversionPlan(kind, src_c, dst_c, elem_bytes, target, cost, why,
                              **parts)  # type: ignore[arg-type]

    def allowed(candidate: ConversionKind) -> bool:
        return kind is None or kind is candidate

    lane_mask = ((1 << conversion.nl) - 1) << conversion.rs
    warp_mask = ((1 << conversion.nw) - 1) << (conversion.rs + conversion.nl)
    equal = src_c.equivalent(dst_c)
    local = conversion.localize(lane_mask | warp_mask)
    in_warp = conversion.localize(warp_mask)
    needed = (ConversionKind.NOOP if equal
              else ConversionKind.REGISTER_PERMUTATION if local is not None
              else ConversionKind.WARP_SHUFFLE if in_warp is not None
              else ConversionKind.SHARED_STAGING)
    if kind is not None and kind.value < needed.value:
        raise LayoutError(
            f"a {kind.name} plan cannot do this conversion: it needs {needed.name}",
            hints=["elements leave their thread" if needed.value >= 2 else
                   "the layouts differ, so registers must be renamed"],
        )
    if equal and allowed(ConversionKind.NOOP):
        return plan(ConversionKind.NOOP, Cost(), "src and dst are the same function")
    if local is not None and allowed(ConversionKind.REGISTER_PERMUTATION):
        permutation, cost = _plan_permutation(conversion, local, lane_mask | warp_mask)
        why = ("every thread already holds what it needs: "
               + ("a lane-dependent register choice" if permutation.lane_dependent
                  else "a renaming of registers"))
        return plan(ConversionKind.REGISTER_PERMUTATION, cost, why, permutation=permutation)
    if src_c.in_dim_size(LANE) != target.lanes:
        raise LayoutError(
            f"the layouts have {src_c.in_dim_size(LANE)} lanes, a {target.name} warp has "
            f"{target.lanes}",
            hints=["resize_in_dim the lane dim (extra lanes broadcast)"],
        )
    if in_warp is not None and allowed(ConversionKind.WARP_SHUFFLE):
        shuffle, cost = _plan_shuffle(conversion, in_warp, warp_mask, elem_bytes)
        why = (f"every element stays in its warp: {cost.rounds} shuffle round(s), "
               f"{shuffle.pack} element(s) per 32-bit word")
        return plan(ConversionKind.WARP_SHUFFLE, cost, why, shuffle=shuffle)
    staging, cost = _plan_staging(src_c, dst_c, elem_bytes, target)
    return plan(ConversionKind.SHARED_STAGING, cost,
                f"elements cross warps: staged through shared memory ({staging.layout_source})",
                staging=staging)


def _plan_permutation(
    conversion: _Conversion, columns: list[int], fixed: int
) -> tuple[RegisterPermutation, Cost]:
    columns = conversion.reduce_by_kernel(columns, fixed)
    registers = [conversion.src_register(c) for c in columns]
    dependent = registers[conversion.rd:]
    rank = _rank(dependent)
    dst = conversion.dst
    bases = {}
    position = 0
    for name in _HW_DIMS:
        bits = dst.in_dim_size_log2(name)
        bases[name] = [(r,) for r in registers[position:position + bits]]
        position += bits
    source = LinearLayout(bases, [(REGISTER, conversion.src.in_dim_size(REGISTER))])
    selects = ((1 << rank) - 1) * (1 << conversion.rd)
    moves = sum(1 for r in range(1 << conversion.rd)
                if _xor_selected(r, registers[:conversion.rd]) != r)
    return RegisterPermutation(source, rank > 0), Cost(moves=moves, selects=selects)


def _pack_bits(conversion: _Conversion, columns: list[int], elem_bytes: int) -> int:
    """How many low register bits travel together in one 32-bit word (log2 of the pack)."""
    bits = max(0, (4 // elem_bytes).bit_length() - 1) if elem_bytes < 4 else 0
    while bits:
        low = (1 << bits) - 1
        pairs = bits <= min(conversion.rs, conversion.rd) and all(
            columns[j] == 1 << j for j in range(bits)
        )
        rest = all(conversion.src_register(c) & low == 0 for c in columns[bits:])
        if pairs and rest:
            return bits
        bits -= 1
    return 0


def _plan_shuffle(
    conversion: _Conversion, columns: list[int], warp_mask: int, elem_bytes: int
) -> tuple[ShufflePlan, Cost]:
    columns = conversion.reduce_by_kernel(columns, warp_mask, only=conversion.dst_warp_bits())
    pack_bits = _pack_bits(conversion, columns, elem_bytes)
    nl, rd = conversion.nl, conversion.rd
    lane_of, word_of = conversion.src_lane, lambda x: conversion.src_register(x) >> pack_bits
    words_d = rd - pack_bits
    word_columns = columns[pack_bits:rd]
    lane_columns = columns[rd:rd + nl]
    warp_columns = columns[rd + nl:]
    # the freedom: kernel vectors inside a warp that keep the packing
    low = (1 << pack_bits) - 1
    generators: list[tuple[int, int, int]] = []  # (source lane, source word, dest word)
    for k in conversion.kernel:
        if not k & warp_mask and not conversion.src_register(k) & low:
            generators.append((lane_of(k), word_of(k), 0))
    for j, column in enumerate(word_columns):
        generators.append((lane_of(column), word_of(column), 1 << j))
    g_cols, h_cols, t_cols = _choose_lane_columns(
        [(lane_of(c), word_of(c)) for c in lane_columns], generators, nl
    )
    b_cols = [lane_of(c) for c in word_columns]
    d_cols = [word_of(c) for c in word_columns]
    # receivers of one lane needing different words: split rounds by a projection P
    splitters, agreeing = _split_readers(_kernel(g_cols), h_cols)
    sub_bits = len(splitters)
    projection = _projection(splitters, agreeing, nl)
    warp_offsets = [(lane_of(c), word_of(c)) for c in warp_columns]
    rounds = _schedule(conversion, g_cols, h_cols, t_cols, b_cols, d_cols, projection,
                       sub_bits, warp_offsets, words_d)
    shuffle = ShufflePlan(
        pack=1 << pack_bits,
        words_per_element=max(1, elem_bytes // 4),
        lane_to_source_lane=tuple(g_cols),
        lane_to_source_word=tuple(h_cols),
        lane_to_dest_word=tuple(t_cols),
        word_to_source_lane=tuple(b_cols),
        word_to_source_word=tuple(d_cols),
        sub_rounds=1 << sub_bits,
        rounds=rounds,
    )
    return shuffle, _shuffle_cost(shuffle, words_d)


def _choose_lane_columns(
    lanes: list[tuple[int, int]], generators: list[tuple[int, int, int]], nl: int
) -> tuple[list[int], list[int], list[int]]:
    """Per lane bit: (source lane G, source word H, dest word T), greedily made consistent.

    A column is acceptable when its source lane is new (independent of the chosen ones) or
    the whole (lane, word) pair is already implied by them; kernel generators (free) are tried
    before destination-word ones (they cost selects on the receiving side).
    """
    g_span = _Span()
    gamma = _Span()
    g_cols, h_cols, t_cols = [], [], []

    def pair(g: int, h: int) -> int:
        return g | (h << nl)

    def acceptable(g: int, h: int) -> bool:
        return g not in g_span or pair(g, h) in gamma

    for a, c in lanes:
        choice = (a, c, 0)
        if not acceptable(a, c):
            options = [(a ^ ga, c ^ gh, gt) for ga, gh, gt in generators]
            found = next((o for o in options if acceptable(o[0], o[1])), None)
            if found is None:
                # a combination of generators landing inside the implied pairs
                extended = _Span()
                for vector, _ in gamma.pivots.values():
                    extended.add(vector, 0)
                for index, (ga, gh, _) in enumerate(generators):
                    extended.add(pair(ga, gh), 1 << index)
                combo = extended.solve(pair(a, c))
                if combo is not None:
                    ga = gh = gt = 0
                    for index, (xa, xh, xt) in enumerate(generators):
                        if combo >> index & 1:
                            ga, gh, gt = ga ^ xa, gh ^ xh, gt ^ xt
                    found = (a ^ ga, c ^ gh, gt)
            if found is not None:
                choice = found
        g, h, t = choice
        g_span.add(g)
        gamma.add(pair(g, h))
        g_cols.append(g)
        h_cols.append(h)
        t_cols.append(t)
    return g_cols, h_cols, t_cols


def _split_readers(kernel_g: list[int], h_cols: list[int]) -> tuple[list[int], list[int]]:
    """Split ``ker G`` (lanes reading the same lane) into splitters, whose words differ, and
    a basis of the rest, whose readers need the same word (``H`` is zero on them)."""
    words = _Span()  # H values of the splitters, payload: the splitter combination
    splitters: list[int] = []
    agreeing: list[int] = []
    for z in kernel_g:
        rest, combo = words.reduce(_xor_selected(z, h_cols), z)
        if rest:
            words.pivots[rest.bit_length() - 1] = (rest, z)
            splitters.append(z)
        else:
            agreeing.append(combo)  # z XOR splitters with the same word: H is zero on it
    return splitters, agreeing


def _projection(splitters: list[int], agreeing: list[int], nl: int) -> list[int]:
    """Lane -> sub-round bits: splitter ``m`` to bit ``m``, agreeing readers and a complement
    of ``ker G`` to 0, so that readers of one lane in one sub-round need the same word."""
    basis = _Span()
    for m, z in enumerate(splitters):
        basis.add(z, 1 << m)
    for z in agreeing:
        basis.add(z, 0)
    for bit in range(nl):
        basis.add(1 << bit, 0)
    columns = []
    for bit in range(nl):
        rest, payload = basis.reduce(1 << bit)
        assert not rest
        columns.append(payload)
    return columns


def _schedule(
    conversion: _Conversion,
    g_cols: list[int],
    h_cols: list[int],
    t_cols: list[int],
    b_cols: list[int],
    d_cols: list[int],
    projection: list[int],
    sub_bits: int,
    warp_offsets: list[tuple[int, int]],
    words_d: int,
) -> tuple[ShuffleRound, ...]:
    """Write the rounds out per warp and lane (the tables codegen would compute per lane)."""
    lanes = 1 << conversion.nl
    warps = 1 << conversion.nw
    lane_ids = range(lanes)
    g = [_xor_selected(d, g_cols) for d in lane_ids]
    h = [_xor_selected(d, h_cols) for d in lane_ids]
    t = [_xor_selected(d, t_cols) for d in lane_ids]
    p = [_xor_selected(d, projection) for d in lane_ids]
    offsets = [
        (_xor_selected(w, [o[0] for o in warp_offsets]),
         _xor_selected(w, [o[1] for o in warp_offsets]))
        for w in range(warps)
    ]
    rounds = []
    for j in range(1 << words_d):
        b_j, d_j = _xor_selected(j, b_cols), _xor_selected(j, d_cols)
        for s in range(1 << sub_bits):
            source_lane, send_word, dest_word, active = [], [], [], []
            local = True
            for w in range(warps):
                lane_off, word_off = offsets[w]
                src_l = [b_j ^ g[d] ^ lane_off for d in lane_ids]
                act = [p[d] == s for d in lane_ids]
                sends: list[int | None] = [None] * lanes
                for d in lane_ids:
                    if act[d]:
                        word = d_j ^ h[d] ^ word_off
                        assert sends[src_l[d]] in (None, word), "readers of a lane disagree"
                        sends[src_l[d]] = word
                        local = local and src_l[d] == d
                source_lane.append(tuple(src_l))
                send_word.append(tuple(0 if x is None else x for x in sends))
                dest_word.append(tuple(j ^ t[d] for d in lane_ids))
                active.append(tuple(act))
            rounds.append(ShuffleRound(tuple(source_lane), tuple(send_word), tuple(dest_word),
                                       tuple(active), local))
    return tuple(rounds)


def _shuffle_cost(shuffle: ShufflePlan, words_d: int) -> Cost:
    moving = [r for r in shuffle.rounds if not r.local]
    shuffles = len(moving) * shuffle.words_per_element
    # a lane-dependent send register or destination word is a select among its candidates
    selects = 0
    deliveries: dict[int, set[int]] = {}
    for index, r in enumerate(shuffle.rounds):
        sent = set()
        for warp_send, warp_src, warp_dest, warp_act in zip(
            r.send_word, r.source_lane, r.dest_word, r.active, strict=True
        ):
            for lane, on in enumerate(warp_act):
                if on:
                    sent.add(warp_send[warp_src[lane]])
                    deliveries.setdefault(warp_dest[lane], set()).add(index)
        selects += len(sent) - 1
    selects += sum(len(rounds) - 1 for rounds in deliveries.values())
    selects *= shuffle.words_per_element
    moves = (len(shuffle.rounds) - len(moving)) * shuffle.words_per_element
    return Cost(moves=moves, shuffles=shuffles, selects=selects, rounds=len(moving))


def _swizzle_module() -> ModuleType | None:
    """``tilekit.layout.swizzle`` when it is there (it is written alongside this module)."""
    try:
        return importlib.import_module("tilekit.layout.swizzle")
    except ImportError:
        return None


def _plan_staging(
    src: LinearLayout, dst: LinearLayout, elem_bytes: int, target: Target
) -> tuple[SharedStaging, Cost]:
    shape = [src.out_dim_size(n) for n in src.out_dims]
    tile_bytes = int(np.prod(shape)) * elem_bytes
    warps = src.in_dim_size(WARP)
    swizzle = _swizzle_module()
    shared = None
    if swizzle is not None:
        try:
            sides = [swizzle.SharedAccess(src, AccessKind.WRITE, label="src"),
                     swizzle.SharedAccess(dst, AccessKind.READ, label="dst")]
            chosen = swizzle.synthesize_swizzle(sides, elem_bytes, target)
            shared = chosen.shared.transpose_outs(src.out_dims)
            source = f"swizzle: {chosen.candidate.describe()}"
            store_cost, load_cost = chosen.sides
            stores, loads = store_cost.instructions, load_cost.instructions
            wavefronts = store_cost.wavefronts + load_cost.wavefronts
            widths = (store_cost.vector_bytes, load_cost.vector_bytes)
        except LayoutError:
            shared = None
    if shared is None:
        shared = unswizzled(shape).transpose_outs(src.out_dims)
        source = "unswizzled, row-major"
        store = _transactions(target, AccessKind.WRITE, shared, src, elem_bytes)
        load = _transactions(target, AccessKind.READ, shared, dst, elem_bytes)
        stores = store.instructions_per_warp * warps
        loads = load.instructions_per_warp * warps
        wavefronts = store.wavefronts + load.wavefronts
        widths = (store.vector_bytes, load.vector_bytes)
    staging = SharedStaging(
        shared=shared,
        store=shared.invert_and_compose(src),
        load=shared.invert_and_compose(dst),
        store_vector_bytes=widths[0],
        load_vector_bytes=widths[1],
        layout_source=source,
    )
    cost = Cost(
        shared_stores=-(-stores // warps),
        shared_loads=-(-loads // warps),
        shared_wavefronts=-(-wavefronts // warps),
        shared_bytes=tile_bytes,
        rounds=2,
        barriers=1,
    )
    return staging, cost


def _transactions(
    target: Target, kind: AccessKind, shared: LinearLayout, layout: LinearLayout, elem_bytes: int
) -> banks.Transactions:
    """The widest access ``layout`` can make to ``shared``, and its wavefronts."""
    width = 16
    while True:
        try:
            return banks.count_layout_transactions(
                target, Access(kind, width), shared, layout, elem_bytes
            )
        except LayoutError:
            if width <= elem_bytes:
                raise
            width //= 2


# --------------------------------------------------------------------------------------------
# Simulation


def apply_plan(plan: ConversionPlan, values: np.ndarray) -> np.ndarray:
    """Run ``plan`` on ``values[warp, lane, register]`` (src's registers); returns dst's.

    The simulation follows the plan's own tables (renaming, shuffle rounds, shared offsets),
    not the layouts, so it checks that the plan moves every element where ``dst`` wants it.
    """
    src, dst = plan.src, plan.dst
    warps, lanes = src.in_dim_size(WARP), src.in_dim_size(LANE)
    expected = (warps, lanes, src.in_dim_size(REGISTER))
    values = np.asarray(values)
    if values.shape[:3] != expected:
        raise LayoutError(f"values must be indexed [warp, lane, register] {expected}, got "
                          f"{values.shape}")
    w_idx, l_idx, r_idx = np.meshgrid(np.arange(warps), np.arange(lanes),
                                      np.arange(dst.in_dim_size(REGISTER)), indexing="ij")
    if plan.kind is ConversionKind.NOOP:
        return values.copy()
    if plan.kind is ConversionKind.REGISTER_PERMUTATION:
        assert plan.permutation is not None
        source = plan.permutation.source.apply_array(
            {REGISTER: r_idx, LANE: l_idx, WARP: w_idx})[REGISTER]
        return values[w_idx, l_idx, source]
    if plan.kind is ConversionKind.WARP_SHUFFLE:
        assert plan.shuffle is not None
        return _run_shuffles(plan.shuffle, values, dst.in_dim_size(REGISTER))
    assert plan.staging is not None
    staging = plan.staging
    memory = np.zeros(staging.shared.in_dim_size(OFFSET), dtype=values.dtype)
    sw, sl, sr = np.meshgrid(np.arange(warps), np.arange(lanes),
                             np.arange(src.in_dim_size(REGISTER)), indexing="ij")
    store = staging.store.apply_array({REGISTER: sr, LANE: sl, WARP: sw})[OFFSET]
    memory[store] = values[sw, sl, sr]
    load = staging.load.apply_array({REGISTER: r_idx, LANE: l_idx, WARP: w_idx})[OFFSET]
    return memory[load]


def _run_shuffles(shuffle: ShufflePlan, values: np.ndarray, dst_registers: int) -> np.ndarray:
    warps, lanes, registers = values.shape[:3]
    pack = shuffle.pack
    words = values.reshape(warps, lanes, registers // pack, pack)
    out = np.zeros((warps, lanes, dst_registers // pack, pack), dtype=values.dtype)
    lane_ids = np.arange(lanes)
    for r in shuffle.rounds:
        for w in range(warps):
            sent = words[w, lane_ids, np.asarray(r.send_word[w])]  # each lane's outgoing word
            received = sent[np.asarray(r.source_lane[w])]  # shfl.sync.idx
            active = np.asarray(r.active[w])
            out[w, lane_ids[active], np.asarray(r.dest_word[w])[active]] = received[active]
    return out.reshape(warps, lanes, dst_registers)
