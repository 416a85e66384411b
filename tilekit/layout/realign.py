"""Rotated runs: how a store realigns rows whose start moves from row to row.

A tile's store moves each thread's *vector group* (``w`` registers, consecutive along
the row) as one access, which needs the group's first element on a ``w``-element
boundary. In a row that starts ``k`` elements past such a boundary (``k`` known only at
run time, and different per row when the row pitch is not a multiple of 16 bytes, as in
a 8192 x 8191 bfloat16 matrix), no group is a chunk of memory.

Where the lanes of a warp step along the row one group apart, ``R`` lanes form a *run*
that covers ``R * w`` consecutive elements. The run is **rotated** by ``k``: lane ``i``
of the run assembles, as its *chunk*, the last ``k`` elements of the group of lane
``i - 1`` followed by the first ``w - k`` of its own, which is exactly the aligned chunk
of memory that starts ``k`` elements before its group. Lane 0 takes the last lane's tail
(the run wraps around), so its chunk holds the run's two partial chunks: elements
``[k, w)`` belong to the chunk before lane 1's (the run's *head*), elements ``[0, k)``
to the chunk just past the run (its *tail*). Every element of the run is in exactly one
chunk, so:

* lanes ``1..R-1`` store their chunk as one aligned ``w``-element access (so does lane 0
  when ``k == 0``, where every chunk is its own group);
* lane 0 stores the head and the tail as naturally aligned :class:`Piece` s, chosen by
  bit arithmetic on ``k``: no switch, so the lanes of a warp, whose runs lie on rows with
  different ``k``, never diverge.

Nothing outside the run is written. The chunk is bytes ``[funnel_byte(k), ... +
w * itemsize)`` of the pair (source lane's group, own group), taken by a funnel shift:
code generation moves the source lane's group with ``w * itemsize / 4`` shuffles.

Pure arithmetic (no GPU library): the plan is data, and ``writes`` spells out, per lane
and shift, every access it makes, which the tests check against the definition (every
element of the run written once, from the right register, each access aligned to its own
size, nothing outside).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilekit.layout.tile_layouts import BlockedEncoding, TileLayout

__all__ = ["Piece", "RotatedRun", "rotated_run"]

#: Chunk sizes a run can rotate: whole 32-bit words (shuffles move words), at most 16 bytes.
CHUNK_BYTES = (4, 8, 16)


@dataclass(frozen=True)
class Piece:
    """A naturally aligned part of ``size`` elements of a chunk of ``w`` elements, for a run
    shifted by ``k``: at element ``(k + addend) & mask`` of the chunk, present when bit
    ``size`` of ``k + addend`` is set. One rule for every ``k``, so code generation emits
    it as a few integer ops and one predicated store."""

    size: int
    addend: int
    mask: int

    def present(self, k: int) -> bool:
        return bool((k + self.addend) & self.size)

    def position(self, k: int) -> int:
        return (k + self.addend) & self.mask

    def positions(self, width: int) -> tuple[int, ...]:
        """Every position the piece takes over the shifts ``0..width-1`` (the candidates a
        run-time position selects among)."""
        return tuple(sorted({self.position(k) for k in range(width) if self.present(k)}))


def _head_pieces(width: int) -> tuple[Piece, ...]:
    # [k, w) upward: at each size s, the run so far ends at k rounded up to s; a piece of s
    # when that is an odd multiple of s.
    out, s = [], 1
    while s < width:
        out.append(Piece(s, s - 1, ~(s - 1) & (width - 1)))
        s *= 2
    return tuple(out)


def _tail_pieces(width: int) -> tuple[Piece, ...]:
    # [0, k) downward: a piece of s for each set bit s of k, after the larger ones.
    out, s = [], width // 2
    while s >= 1:
        out.append(Piece(s, 0, ~(2 * s - 1) & (width - 1)))
        s //= 2
    return tuple(out)


@dataclass(frozen=True)
class RotatedRun:
    """Runs of ``lanes`` lanes, lane ids ``lane_div`` apart, each holding one group of
    ``width`` elements, consecutive along the row: what a store rotates (module doc)."""

    width: int
    lanes: int
    lane_div: int

    def __post_init__(self) -> None:
        if self.width < 2 or self.width & (self.width - 1) or self.lanes < 2:
            raise ValueError(f"a rotated run needs a power-of-two width >= 2 and >= 2 "
                             f"lanes: {self}")

    @property
    def span(self) -> int:
        """Elements one run covers: the tail's chunk starts ``span`` after the head's."""
        return self.width * self.lanes

    def source(self, index: int, k: int) -> int:
        """The run index whose group lane ``index`` takes the tail of: the previous lane
        (lane 0: the last), or itself when ``k == 0``."""
        return index if k == 0 else (index - 1) % self.lanes

    def chunk(self, k: int) -> tuple[tuple[bool, int], ...]:
        """Per chunk element: (from the source lane, element of that group)."""
        return tuple((j < k, (j - k) % self.width) for j in range(self.width))

    @staticmethod
    def funnel_byte(k: int, width: int, itemsize: int) -> int:
        """The chunk's first byte within (source group ++ own group): the source's last
        ``k`` elements start there (0 when ``k == 0``: the source is the own group)."""
        return ((width - k) * itemsize) % (width * itemsize)

    def full(self, index: int, k: int) -> bool:
        """Whether lane ``index`` stores its chunk whole."""
        return index != 0 or k == 0

    @property
    def head(self) -> tuple[Piece, ...]:
        """Lane 0's pieces of chunk elements ``[k, w)``, in the chunk before lane 1's."""
        return _head_pieces(self.width)

    @property
    def tail(self) -> tuple[Piece, ...]:
        """Lane 0's pieces of chunk elements ``[0, k)``, ``span`` elements further on."""
        return _tail_pieces(self.width)

    def writes(self, index: int, k: int) -> list[tuple[int, int, int]]:
        """Lane ``index``'s accesses for shift ``k``: ``(address, first, count)``, with
        ``address`` in elements from the lane's chunk start (its group's first element
        minus ``k``) and chunk elements ``[first, first + count)`` written there."""
        if self.full(index, k):
            return [(0, 0, self.width)]
        out = [(p.position(k), p.position(k), p.size) for p in self.head if p.present(k)]
        out += [(self.span + p.position(k), p.position(k), p.size)
                for p in self.tail if p.present(k)]
        return out


def rotated_run(layout: TileLayout, width: int, itemsize: int) -> RotatedRun | None:
    """The runs of a blocked layout's vector groups of ``width`` registers along its most
    minor dim, when they rotate: each lane one group per repeat, neighbouring lanes (along
    the dim) neighbouring groups, at least two lanes, a run inside the tile, and chunks of
    whole 32-bit words. Lanes on the other dims (a warp over several rows, each with its
    own shift) are fine."""
    enc = layout.encoding
    if not isinstance(enc, BlockedEncoding) or width < 2 or width & (width - 1):
        return None
    minor = layout.dims[enc.order[0]]
    lane = minor.lane
    if lane.mod < 2 or lane.mult != width or width * itemsize not in CHUNK_BYTES:
        return None
    if lane.mod * width > minor.extent:  # a run past the tile's edge wraps (replicas)
        return None
    return RotatedRun(width, lane.mod, lane.div)
