"""F2-linear layouts: where every element of a power-of-two tile lives.

A ``LinearLayout`` maps named *input* dims (hardware indices: ``register``,
``lane``, ``warp``, ``block``; or ``offset`` for memory) to named *output*
dims (tensor coordinates ``dim0``, ``dim1``, ...) by a linear map over F2,
the field of bits. Every size is a power of two, so an index is a bit
vector, and the map is stored as **bases**: ``bases[in_dim][i]`` is the image
(one int per out dim, in out-dim order) of input bit ``i`` of ``in_dim``. An
input is evaluated by XOR-ing the images of its set bits, per out dim.

Conventions, used everywhere in ``tilekit.layout``:

* **The first dim is the most minor.** When dims are flattened into one
  index (``flatten_ins``, ``flatten_outs``, ``reshape_*``, ``to_matrix``,
  the flat bit encoding below), the first listed dim occupies the low bits.
  So ``(register, lane, warp)`` flattens to ``register + R * (lane + L *
  warp)``, and outs ``(dim0, dim1)`` flatten *column-major*: ``dim0 +
  size(dim0) * dim1``; call ``transpose_outs(["dim1", "dim0"])`` first to
  get a row-major index. This is Triton's convention.
* In a product ``a * b`` the left factor is minor: same-named dims multiply,
  with ``a``'s bits low and ``b``'s bits high.
* The flat bit encoding of an output is the concatenation of the out dims'
  bits, first out dim lowest; the same for inputs. ``flat_columns`` is the
  matrix in this encoding: one int (a column) per input bit.

Every question (rank, injectivity, inverse, composition) is answered by
Gaussian elimination over F2 on ints used as bit sets (the machinery is in
``f2``; ``log2_exact`` is re-exported from there): microseconds for real
layouts, never enumeration, never ISL (DESIGN.md, "What ISL costs").
Layouts are immutable, hashable and compared structurally (dim order
included); ``equivalent`` compares functions regardless of dim order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout import f2
from tilekit.layout.f2 import log2_exact

__all__ = [
    "BLOCK",
    "LANE",
    "LinearLayout",
    "OFFSET",
    "REGISTER",
    "WARP",
    "log2_exact",
    "standard_out_dims",
]

# The hardware input dims every tilekit layout uses (names, not kinds).
REGISTER = "register"
LANE = "lane"
WARP = "warp"
BLOCK = "block"
OFFSET = "offset"

DimSizes = Mapping[str, int] | Sequence[tuple[str, int]]
Basis = tuple[int, ...]


def standard_out_dims(rank: int) -> tuple[str, ...]:
    """The tensor-dim names of a rank-``rank`` tile: ``dim0`` .. ``dim{rank-1}``."""
    return tuple(f"dim{i}" for i in range(rank))


def _dim_items(dims: DimSizes, what: str) -> tuple[tuple[str, int], ...]:
    items = list(dims.items()) if isinstance(dims, Mapping) else list(dims)
    seen: set[str] = set()
    result = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise LayoutError(f"{what}s must be (name, size) pairs, got {item!r}")
        name, size = item
        if not isinstance(name, str):
            raise LayoutError(f"{what} names must be strings, got {name!r}")
        if name in seen:
            raise LayoutError(f"{what} {name!r} is listed twice")
        seen.add(name)
        log2_exact(size, f"size of {what} {name!r}")
        result.append((name, int(size)))
    return tuple(result)


def _merge_orders(first: Sequence[str], second: Sequence[str]) -> tuple[str, ...]:
    """The shortest order containing both sequences as subsequences.

    A layout product needs one order of dims consistent with both factors;
    if the factors order two shared dims differently, there is none.
    """
    merged: list[str] = []
    i = j = 0
    while i < len(first) or j < len(second):
        if i < len(first) and j < len(second) and first[i] == second[j]:
            merged.append(first[i])
            i += 1
            j += 1
        elif i < len(first) and first[i] not in second[j:]:
            merged.append(first[i])
            i += 1
        elif j < len(second) and second[j] not in first[i:]:
            merged.append(second[j])
            j += 1
        else:
            raise LayoutError(
                f"dims {first[i]!r} and {second[j]!r} appear in opposite orders in the two "
                f"factors ({list(first)} vs {list(second)})",
                hints=["transpose one factor (transpose_ins / transpose_outs) so shared dims "
                       "come in the same relative order"],
            )
    return tuple(merged)


@dataclass(frozen=True, init=False, repr=False)
class LinearLayout:
    """A linear map over F2 from named input dims to named output dims.

    Immutable and hashable; equality is structural (same dims in the same
    order, same bases). See the module docstring for the conventions.
    """

    _ins: tuple[tuple[str, tuple[Basis, ...]], ...]
    _outs: tuple[tuple[str, int], ...]

    def __init__(
        self,
        bases: Mapping[str, Sequence[Sequence[int]]],
        out_dims: DimSizes,
    ) -> None:
        outs = _dim_items(out_dims, "out dim")
        if not isinstance(bases, Mapping):
            raise LayoutError(f"bases must be a mapping from in-dim names, got {bases!r}")
        ins = []
        for name, vectors in bases.items():
            if not isinstance(name, str):
                raise LayoutError(f"in dim names must be strings, got {name!r}")
            checked = []
            for i, vector in enumerate(vectors):
                image = tuple(int(x) for x in vector)
                if len(image) != len(outs):
                    raise LayoutError(
                        f"basis {name}[{i}] = {list(image)} has {len(image)} components but "
                        f"the layout has {len(outs)} out dims {[n for n, _ in outs]}"
                    )
                for (out_name, size), x in zip(outs, image, strict=True):
                    if not 0 <= x < size:
                        raise LayoutError(
                            f"basis {name}[{i}] = {list(image)}: {out_name} component {x} is "
                            f"outside [0, {size})",
                            hints=[f"enlarge out dim {out_name!r} or fix the basis"],
                        )
                checked.append(image)
            ins.append((name, tuple(checked)))
        object.__setattr__(self, "_ins", tuple(ins))
        object.__setattr__(self, "_outs", outs)

    @classmethod
    def _make(
        cls,
        ins: tuple[tuple[str, tuple[Basis, ...]], ...],
        outs: tuple[tuple[str, int], ...],
    ) -> LinearLayout:
        """Build without validation, for operations whose results are valid by construction."""
        layout = object.__new__(cls)
        object.__setattr__(layout, "_ins", ins)
        object.__setattr__(layout, "_outs", outs)
        return layout

    @classmethod
    def _from_columns(
        cls,
        in_bits: Sequence[tuple[str, int]],
        outs: tuple[tuple[str, int], ...],
        columns: Sequence[int],
    ) -> LinearLayout:
        """Build from flat columns; ``in_bits`` gives each in dim's number of bits."""
        shifts = f2.field_shifts(size for _, size in outs)
        ins = []
        position = 0
        for name, bits in in_bits:
            images = tuple(
                tuple((column >> shift) & mask for shift, mask in shifts)
                for column in columns[position:position + bits]
            )
            ins.append((name, images))
            position += bits
        return cls._make(tuple(ins), outs)

    # ----------------------------------------------------------------- constructors

    @classmethod
    def empty(cls) -> LinearLayout:
        """The layout with no dims: the unit of ``*``."""
        return cls._make((), ())

    @classmethod
    def identity_1d(cls, size: int, in_dim: str, out_dim: str) -> LinearLayout:
        """``in_dim`` -> ``out_dim``, x -> x, over ``size`` values."""
        bits = log2_exact(size, "identity size")
        return cls._make(((in_dim, tuple((1 << i,) for i in range(bits))),), ((out_dim, size),))

    @classmethod
    def zeros_1d(cls, size: int, in_dim: str, out_dim: str, out_size: int = 1) -> LinearLayout:
        """``in_dim`` -> ``out_dim``, everything to 0: ``size`` copies (a broadcast)."""
        bits = log2_exact(size, "zeros size")
        log2_exact(out_size, "zeros out size")
        return cls._make(((in_dim, ((0,),) * bits),), ((out_dim, out_size),))

    @classmethod
    def strided_1d(
        cls, size: int, stride: int, in_dim: str, out_dim: str, out_size: int | None = None
    ) -> LinearLayout:
        """``in_dim`` -> ``out_dim``, x -> x * stride (``stride`` a power of two)."""
        bits = log2_exact(size, "strided size")
        log2_exact(stride, "stride")
        out_size = size * stride if out_size is None else out_size
        return cls({in_dim: [(stride << i,) for i in range(bits)]}, [(out_dim, out_size)])

    @classmethod
    def identity(cls, dims: DimSizes) -> LinearLayout:
        """Each dim to the same-named out dim, unchanged (ins and outs in the given order)."""
        items = _dim_items(dims, "dim")
        n = len(items)
        ins = []
        for k, (name, size) in enumerate(items):
            images = tuple(
                tuple((1 << i) if j == k else 0 for j in range(n))
                for i in range(size.bit_length() - 1)
            )
            ins.append((name, images))
        return cls._make(tuple(ins), items)

    @classmethod
    def zeros(cls, in_dims: DimSizes, out_dims: DimSizes) -> LinearLayout:
        """Every input to the zero output."""
        ins_items = _dim_items(in_dims, "in dim")
        outs = _dim_items(out_dims, "out dim")
        zero = (0,) * len(outs)
        return cls._make(
            tuple((name, (zero,) * (size.bit_length() - 1)) for name, size in ins_items), outs
        )

    @classmethod
    def from_matrix(
        cls, matrix: np.ndarray | Sequence[Sequence[int]], in_dims: DimSizes, out_dims: DimSizes
    ) -> LinearLayout:
        """Inverse of ``to_matrix``: rows are output bits, columns input bits (first dim low)."""
        ins_items = _dim_items(in_dims, "in dim")
        outs = _dim_items(out_dims, "out dim")
        array = np.asarray(matrix)
        in_bits = [(name, size.bit_length() - 1) for name, size in ins_items]
        n_in = sum(bits for _, bits in in_bits)
        n_out = sum(size.bit_length() - 1 for _, size in outs)
        if array.shape != (n_out, n_in):
            raise LayoutError(
                f"matrix of shape {array.shape} does not fit {n_in} input bits and "
                f"{n_out} output bits (expected shape {(n_out, n_in)})"
            )
        return cls._from_columns(in_bits, outs, f2.matrix_to_columns(array))

    # ----------------------------------------------------------------- dims and bases

    @property
    def in_dims(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._ins)

    @property
    def out_dims(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._outs)

    @property
    def in_dim_sizes(self) -> dict[str, int]:
        return {name: 1 << len(images) for name, images in self._ins}

    @property
    def out_dim_sizes(self) -> dict[str, int]:
        return dict(self._outs)

    @cached_property
    def _in_index(self) -> dict[str, tuple[Basis, ...]]:
        return dict(self._ins)

    @cached_property
    def _out_index(self) -> dict[str, int]:
        return {name: k for k, (name, _) in enumerate(self._outs)}

    def _images(self, in_dim: str) -> tuple[Basis, ...]:
        try:
            return self._in_index[in_dim]
        except KeyError:
            raise LayoutError(
                f"{in_dim!r} is not an in dim of this layout (in dims: {list(self.in_dims)})"
            ) from None

    def _out_position(self, out_dim: str) -> int:
        try:
            return self._out_index[out_dim]
        except KeyError:
            raise LayoutError(
                f"{out_dim!r} is not an out dim of this layout (out dims: {list(self.out_dims)})"
            ) from None

    def has_in_dim(self, name: str) -> bool:
        return name in self._in_index

    def has_out_dim(self, name: str) -> bool:
        return name in self._out_index

    def in_dim_size_log2(self, name: str) -> int:
        return len(self._images(name))

    def in_dim_size(self, name: str) -> int:
        return 1 << self.in_dim_size_log2(name)

    def out_dim_size(self, name: str) -> int:
        return self._outs[self._out_position(name)][1]

    def out_dim_size_log2(self, name: str) -> int:
        return self.out_dim_size(name).bit_length() - 1

    @property
    def total_in_bits(self) -> int:
        return sum(len(images) for _, images in self._ins)

    @property
    def total_out_bits(self) -> int:
        return sum(size.bit_length() - 1 for _, size in self._outs)

    @property
    def total_in_size(self) -> int:
        return 1 << self.total_in_bits

    @property
    def total_out_size(self) -> int:
        return 1 << self.total_out_bits

    def basis(self, in_dim: str, i: int) -> Basis:
        """The image of bit ``i`` of ``in_dim`` (one int per out dim)."""
        images = self._images(in_dim)
        if not 0 <= i < len(images):
            raise LayoutError(f"{in_dim!r} has {len(images)} bases; there is no basis {i}")
        return images[i]

    @property
    def bases(self) -> dict[str, tuple[Basis, ...]]:
        """All bases, per in dim in order (a fresh dict of tuples)."""
        return dict(self._ins)

    # ----------------------------------------------------------------- flat encoding

    @cached_property
    def _shifts(self) -> tuple[tuple[int, int], ...]:
        return f2.field_shifts(size for _, size in self._outs)

    def _join(self, image: Basis) -> int:
        flat = 0
        for (shift, _), x in zip(self._shifts, image, strict=True):
            flat |= x << shift
        return flat

    def _split(self, flat: int) -> Basis:
        return tuple((flat >> shift) & mask for shift, mask in self._shifts)

    @cached_property
    def flat_columns(self) -> tuple[int, ...]:
        """The matrix, one flat output int per input bit (in-dim order, first dim low)."""
        return tuple(self._join(image) for _, images in self._ins for image in images)

    @cached_property
    def _in_bits(self) -> tuple[tuple[str, int], ...]:
        return tuple((name, len(images)) for name, images in self._ins)

    @cached_property
    def _echelon(self) -> f2.Echelon:
        return f2.Echelon(self.flat_columns)

    # ----------------------------------------------------------------- evaluation

    def _check_inputs(self, keys: Iterable[str]) -> None:
        given = set(keys)
        if given != set(self.in_dims):
            missing = [d for d in self.in_dims if d not in given]
            unknown = sorted(given - set(self.in_dims))
            parts = [f"missing {missing}"] * bool(missing) + [f"unknown {unknown}"] * bool(unknown)
            raise LayoutError(
                f"inputs must name exactly the in dims {list(self.in_dims)}: " + ", ".join(parts)
            )

    def apply(self, inputs: Mapping[str, int]) -> dict[str, int]:
        """The output coordinates of one input point (every in dim named)."""
        self._check_inputs(inputs)
        flat = 0
        position = 0
        columns = self.flat_columns
        for name, images in self._ins:
            value = inputs[name]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise LayoutError(f"input {name}={value!r} is not an int")
            value = int(value)
            if not 0 <= value < (1 << len(images)):
                raise LayoutError(f"input {name}={value} is outside [0, {1 << len(images)})")
            flat ^= f2.xor_selected(value, columns, position)
            position += len(images)
        return dict(zip(self.out_dims, self._split(flat), strict=True))

    def apply_flat(self, index: int) -> int:
        """The flat output of a flat input index (both in the first-dim-minor encoding)."""
        if not 0 <= index < self.total_in_size:
            raise LayoutError(f"flat input {index} is outside [0, {self.total_in_size})")
        return f2.xor_selected(index, self.flat_columns)

    def apply_array(self, inputs: Mapping[str, np.ndarray | int]) -> dict[str, np.ndarray]:
        """``apply`` over broadcastable integer arrays, vectorized (int64 results)."""
        self._check_inputs(inputs)
        names = self.in_dims
        arrays = np.broadcast_arrays(*(np.asarray(inputs[n], dtype=np.int64) for n in names))
        shape = arrays[0].shape if arrays else ()
        for name, array in zip(names, arrays, strict=True):
            size = self.in_dim_size(name)
            if array.size and (array.min() < 0 or array.max() >= size):
                raise LayoutError(f"input {name} has values outside [0, {size})")
        bit_arrays: list[np.ndarray] = []
        for array, (_, images) in zip(arrays, self._ins, strict=True):
            bit_arrays.extend((array >> i) & 1 for i in range(len(images)))
        return self._xor_columns(bit_arrays, shape)

    def apply_all(self) -> dict[str, np.ndarray]:
        """The outputs of every input, indexed by flat input index (first in dim minor)."""
        flat = np.arange(self.total_in_size, dtype=np.int64)
        bits = [(flat >> i) & 1 for i in range(self.total_in_bits)]
        return self._xor_columns(bits, flat.shape)

    def _xor_columns(self, bits: Sequence[np.ndarray], shape: tuple[int, ...]) -> dict[str, Any]:
        if self.total_out_bits > 62:
            raise LayoutError(f"{self.total_out_bits} output bits do not fit numpy's int64")
        acc = f2.xor_columns(bits, self.flat_columns, shape)
        return {name: (acc >> shift) & mask
                for name, (shift, mask) in zip(self.out_dims, self._shifts, strict=True)}

    # ----------------------------------------------------------------- algebra

    def __mul__(self, other: LinearLayout) -> LinearLayout:
        """The product: dims of both; same-named dims multiply, ``self`` minor.

        On disjoint dims it is the pair of maps; on a shared in dim, its low
        bits run ``self`` and its high bits run ``other`` (shifted past
        ``self``'s extent in every shared out dim).
        """
        if not isinstance(other, LinearLayout):
            return NotImplemented
        in_names = _merge_orders(self.in_dims, other.in_dims)
        out_names = _merge_orders(self.out_dims, other.out_dims)
        left_sizes, right_sizes = self.out_dim_sizes, other.out_dim_sizes
        outs = tuple((n, left_sizes.get(n, 1) * right_sizes.get(n, 1)) for n in out_names)
        shift = [left_sizes.get(n, 1).bit_length() - 1 for n in out_names]

        def spread(layout: LinearLayout, images: tuple[Basis, ...], shifted: bool) -> list[Basis]:
            lookup = [layout._out_index.get(n) for n in out_names]
            return [
                tuple(
                    0 if k is None else (image[k] << shift[j] if shifted else image[k])
                    for j, k in enumerate(lookup)
                )
                for image in images
            ]

        ins = []
        for name in in_names:
            images = spread(self, self._in_index.get(name, ()), False)
            images += spread(other, other._in_index.get(name, ()), True)
            ins.append((name, tuple(images)))
        return LinearLayout._make(tuple(ins), outs)

    def compose(self, outer: LinearLayout) -> LinearLayout:
        """``outer`` after ``self``: self's outs feed outer's same-named ins.

        Every out dim of ``self`` must be an in dim of ``outer`` at least as
        large; outer's other in dims are held at 0. Result: self's ins ->
        outer's outs.
        """
        for name, size in self._outs:
            if not outer.has_in_dim(name):
                raise LayoutError(
                    f"cannot compose: out dim {name!r} of the inner layout is not an in dim of "
                    f"the outer layout (outer in dims: {list(outer.in_dims)})"
                )
            if outer.in_dim_size(name) < size:
                raise LayoutError(
                    f"cannot compose: inner out dim {name!r} has size {size} but outer in dim "
                    f"{name!r} has size {outer.in_dim_size(name)}",
                    hints=["resize_in_dim the outer layout, or resize_out_dim the inner one"],
                )
        outer_columns = [[outer._join(image) for image in outer._images(name)]
                         for name, _ in self._outs]
        columns = []
        for _, images in self._ins:
            for image in images:
                flat = 0
                for value, table in zip(image, outer_columns, strict=True):
                    flat ^= f2.xor_selected(value, table)
                columns.append(flat)
        return LinearLayout._from_columns(self._in_bits, outer._outs, columns)

    def rank(self) -> int:
        """The rank of the matrix: log2 of the number of distinct outputs."""
        return self._echelon.rank

    def is_injective(self) -> bool:
        return self._echelon.rank == self.total_in_bits

    def is_surjective(self) -> bool:
        """Whether every point of the declared out space is reached."""
        return self._echelon.rank == self.total_out_bits

    def is_bijective(self) -> bool:
        return self.is_injective() and self.is_surjective()

    def _describe_bit(self, flat_bit: int) -> str:
        for name, images in self._ins:
            if flat_bit < len(images):
                return f"{name} bit {flat_bit} (basis {list(images[flat_bit])})"
            flat_bit -= len(images)
        raise AssertionError("bit out of range")

    def _not_surjective_reason(self) -> str:
        echelon = self._echelon
        missing = next(b for b in range(self.total_out_bits) if echelon.solve(1 << b) is None)
        point = dict(zip(self.out_dims, self._split(1 << missing), strict=True))
        return (f"it is not surjective: rank {echelon.rank} < {self.total_out_bits} output bits; "
                f"e.g. no input reaches {point}")

    def _not_injective_reason(self) -> str:
        echelon = self._echelon
        index = min(echelon.dependent)
        if echelon.dependent[index] == 0:
            return f"it is not injective: {self._describe_bit(index)} maps to zero (a broadcast)"
        others = [self._describe_bit(b) for b in range(index) if echelon.dependent[index] >> b & 1]
        return (f"it is not injective: {self._describe_bit(index)} equals the XOR of "
                + ", ".join(others))

    def invert(self) -> LinearLayout:
        """The inverse of a bijective layout: outs -> ins, two-sided."""
        if not self.is_bijective():
            reasons = []
            if not self.is_injective():
                reasons.append(self._not_injective_reason())
            if not self.is_surjective():
                reasons.append(self._not_surjective_reason())
            raise LayoutError(
                "cannot invert the layout: " + "; ".join(reasons),
                hints=["pseudo_invert() gives a right inverse of a surjective layout"],
            )
        return self.pseudo_invert()

    def pseudo_invert(self) -> LinearLayout:
        """A right inverse of a surjective layout: outs -> ins with ``self(R(y)) == y``.

        Deterministic and minimal: ``R(y)`` is the numerically smallest input
        (flat index, first in dim minor) that ``self`` maps to ``y``; it uses
        only the earliest independent input bits, so broadcast bits stay 0.
        """
        if not self.is_surjective():
            raise LayoutError(
                "cannot pseudo-invert the layout: " + self._not_surjective_reason(),
                hints=["a right inverse exists only for surjective layouts; shrink the out "
                       "dims (resize_out_dim) or use invert_and_compose for partial images"],
            )
        columns = self._echelon.right_inverse(self.total_out_bits)
        in_bits = tuple((name, size.bit_length() - 1) for name, size in self._outs)
        outs = tuple((name, 1 << len(images)) for name, images in self._ins)
        return LinearLayout._from_columns(in_bits, outs, columns)

    def invert_and_compose(self, other: LinearLayout) -> LinearLayout:
        """The map ``C`` from other's ins to self's ins with ``self(C(x)) == other(x)``.

        This is how a layout conversion is planned: ``other`` says where the
        source values live, ``C`` says which of ``self``'s hardware indices
        must receive each of them. Both layouts must have the same out-dim
        names; every image of ``other`` must be reachable by ``self``. When
        ``self`` is not injective, the smallest preimage is chosen (as in
        ``pseudo_invert``).
        """
        if set(self.out_dims) != set(other.out_dims):
            raise LayoutError(
                f"invert_and_compose needs the same out dims, got {list(self.out_dims)} and "
                f"{list(other.out_dims)}"
            )
        echelon = self._echelon
        sizes = self.out_dim_sizes
        columns = []
        for name, images in other._ins:
            for i, image in enumerate(images):
                point = dict(zip(other.out_dims, image, strict=True))
                outside = [d for d, v in point.items() if v >= sizes[d]]
                combo = None
                if not outside:
                    combo = echelon.solve(self._join(tuple(point[d] for d in self.out_dims)))
                if combo is None:
                    raise LayoutError(
                        f"invert_and_compose: basis {name}[{i}] of the other layout maps to "
                        f"{point}, which this layout never reaches",
                        hints=["the target layout must cover every element the source holds"],
                    )
                columns.append(combo)
        outs = tuple((name, 1 << len(images)) for name, images in self._ins)
        return LinearLayout._from_columns(other._in_bits, outs, columns)

    def equivalent(self, other: LinearLayout) -> bool:
        """The same function, whatever the order of dims (names and sizes must agree)."""
        if set(self._outs) != set(other._outs) or self.in_dim_sizes != other.in_dim_sizes:
            return False
        aligned = other.transpose_ins(self.in_dims).transpose_outs(self.out_dims)
        return aligned == self

    # ----------------------------------------------------------------- sub-layouts and masks

    def sublayout(self, in_dims: Iterable[str], out_dims: Iterable[str]) -> LinearLayout:
        """Only ``in_dims`` (others held at 0), projected onto ``out_dims``; orders kept."""
        keep_in = set(in_dims)
        keep_out = set(out_dims)
        for name in keep_in:
            self._images(name)
        for name in keep_out:
            self._out_position(name)
        positions = [k for k, (name, _) in enumerate(self._outs) if name in keep_out]
        ins = tuple(
            (name, tuple(tuple(image[k] for k in positions) for image in images))
            for name, images in self._ins if name in keep_in
        )
        outs = tuple(self._outs[k] for k in positions)
        return LinearLayout._make(ins, outs)

    def sublayout_is_zero(self, in_dims: Iterable[str], out_dims: Iterable[str]) -> bool:
        """Whether ``in_dims`` never move the ``out_dims`` coordinates."""
        sub = self.sublayout(in_dims, out_dims)
        return all(not any(image) for _, images in sub._ins for image in images)

    def free_bases(self) -> dict[str, int]:
        """Per in dim, a mask of the bits whose basis is zero: broadcast bits.

        Inputs differing only in these bits hold the same element.
        """
        return {
            name: sum(1 << i for i, image in enumerate(images) if not any(image))
            for name, images in self._ins
        }

    def redundant_bases(self) -> dict[str, int]:
        """Per in dim, a mask of the bits whose basis is a XOR of earlier bases.

        A superset of ``free_bases``: dropping these bits loses no element
        (the earlier bits already reach them). Earlier means flat order.
        """
        kept = self._echelon.kept_mask
        masks = {}
        position = 0
        for name, images in self._ins:
            bits = len(images)
            masks[name] = ~(kept >> position) & ((1 << bits) - 1)
            position += bits
        return masks

    def remove_zero_bases(self, in_dims: Iterable[str] | None = None) -> LinearLayout:
        """Drop zero bases of ``in_dims`` (all in dims by default), shrinking those dims.

        Re-indexes the affected dims (remaining bits close ranks); used to
        de-duplicate registers after a slice.
        """
        targets = set(self.in_dims if in_dims is None else in_dims)
        for name in targets:
            self._images(name)
        ins = tuple(
            (name, tuple(im for im in images if any(im)) if name in targets else images)
            for name, images in self._ins
        )
        return LinearLayout._make(ins, self._outs)

    # ----------------------------------------------------------------- reshaping

    def transpose_ins(self, order: Sequence[str]) -> LinearLayout:
        """Reorder in dims; the function is unchanged, the flat input order changes."""
        _check_permutation(order, self.in_dims, "in")
        return LinearLayout._make(tuple((n, self._in_index[n]) for n in order), self._outs)

    def transpose_outs(self, order: Sequence[str]) -> LinearLayout:
        """Reorder out dims (and every basis' components); the function is unchanged."""
        _check_permutation(order, self.out_dims, "out")
        positions = [self._out_index[n] for n in order]
        ins = tuple(
            (name, tuple(tuple(image[k] for k in positions) for image in images))
            for name, images in self._ins
        )
        return LinearLayout._make(ins, tuple(self._outs[k] for k in positions))

    def reshape_ins(self, new_in_dims: DimSizes) -> LinearLayout:
        """Flatten the ins (first dim minor) and split them into ``new_in_dims`` (first minor)."""
        items = _dim_items(new_in_dims, "in dim")
        total = math.prod(size for _, size in items)
        if total != self.total_in_size:
            raise LayoutError(
                f"reshape_ins: new in dims {dict(items)} have {total} points, the layout has "
                f"{self.total_in_size}"
            )
        in_bits = [(name, size.bit_length() - 1) for name, size in items]
        return LinearLayout._from_columns(in_bits, self._outs, self.flat_columns)

    def reshape_outs(self, new_out_dims: DimSizes) -> LinearLayout:
        """Flatten the outs (first dim minor) and split them into ``new_out_dims``."""
        items = _dim_items(new_out_dims, "out dim")
        total = math.prod(size for _, size in items)
        if total != self.total_out_size:
            raise LayoutError(
                f"reshape_outs: new out dims {dict(items)} have {total} points, the layout has "
                f"{self.total_out_size}"
            )
        return LinearLayout._from_columns(self._in_bits, items, self.flat_columns)

    def flatten_ins(self, name: str | None = None) -> LinearLayout:
        """One in dim (named ``name`` or after the first in dim), first dim minor."""
        if not self._ins:
            return self
        return self.reshape_ins([(name or self.in_dims[0], self.total_in_size)])

    def flatten_outs(self, name: str | None = None) -> LinearLayout:
        """One out dim (named ``name`` or after the first out dim), first dim minor."""
        if not self._outs:
            return self
        return self.reshape_outs([(name or self.out_dims[0], self.total_out_size)])

    def rename_ins(self, names: Mapping[str, str]) -> LinearLayout:
        """Rename in dims (unlisted dims keep their names)."""
        new = [names.get(n, n) for n in self.in_dims]
        if len(set(new)) != len(new):
            raise LayoutError(f"renaming in dims to {new} repeats a name")
        return LinearLayout._make(
            tuple((n, images) for n, (_, images) in zip(new, self._ins, strict=True)), self._outs
        )

    def rename_outs(self, names: Mapping[str, str]) -> LinearLayout:
        """Rename out dims (unlisted dims keep their names)."""
        new = [names.get(n, n) for n in self.out_dims]
        if len(set(new)) != len(new):
            raise LayoutError(f"renaming out dims to {new} repeats a name")
        return LinearLayout._make(
            self._ins, tuple((n, size) for n, (_, size) in zip(new, self._outs, strict=True))
        )

    def resize_in_dim(self, name: str, size: int) -> LinearLayout:
        """Grow (new high bits map to 0) or shrink (high bits dropped) one in dim."""
        images = self._images(name)
        bits = log2_exact(size, f"new size of in dim {name!r}")
        zero = (0,) * len(self._outs)
        resized = images[:bits] + (zero,) * max(0, bits - len(images))
        return LinearLayout._make(
            tuple((n, resized if n == name else ims) for n, ims in self._ins), self._outs
        )

    def resize_out_dim(self, name: str, size: int) -> LinearLayout:
        """Change the declared size of one out dim; shrinking must keep every image inside."""
        k = self._out_position(name)
        log2_exact(size, f"new size of out dim {name!r}")
        for in_name, images in self._ins:
            for i, image in enumerate(images):
                if image[k] >= size:
                    raise LayoutError(
                        f"cannot shrink out dim {name!r} to {size}: basis {in_name}[{i}] = "
                        f"{list(image)} reaches {image[k]}"
                    )
        outs = tuple((n, size if n == name else s) for n, s in self._outs)
        return LinearLayout._make(self._ins, outs)

    def concat_ins(self, other: LinearLayout) -> LinearLayout:
        """Both layouts' in dims side by side (disjoint), over the same out dims.

        The result maps ``x ∪ y`` to ``self(x) XOR other(y)``.
        """
        shared = set(self.in_dims) & set(other.in_dims)
        if shared:
            raise LayoutError(f"concat_ins needs disjoint in dims; both have {sorted(shared)}")
        if set(self._outs) != set(other._outs):
            raise LayoutError(
                f"concat_ins needs the same out dims and sizes, got {dict(self._outs)} and "
                f"{dict(other._outs)}"
            )
        aligned = other.transpose_outs(self.out_dims)
        return LinearLayout._make(self._ins + aligned._ins, self._outs)

    def concat_outs(self, other: LinearLayout) -> LinearLayout:
        """Both layouts' out dims side by side (disjoint), over the same in dims."""
        shared = set(self.out_dims) & set(other.out_dims)
        if shared:
            raise LayoutError(f"concat_outs needs disjoint out dims; both have {sorted(shared)}")
        if self.in_dim_sizes != other.in_dim_sizes:
            raise LayoutError(
                f"concat_outs needs the same in dims and sizes, got {self.in_dim_sizes} and "
                f"{other.in_dim_sizes}"
            )
        ins = tuple(
            (name, tuple(a + b for a, b in zip(images, other._in_index[name], strict=True)))
            for name, images in self._ins
        )
        return LinearLayout._make(ins, self._outs + other._outs)

    # ----------------------------------------------------------------- matrices and printing

    def to_matrix(self) -> np.ndarray:
        """The 0/1 matrix (uint8): rows are output bits, columns input bits, first dims low."""
        return f2.columns_to_matrix(self.flat_columns, self.total_out_bits)

    def __repr__(self) -> str:
        bases = {name: [list(image) for image in images] for name, images in self._ins}
        return f"LinearLayout({bases!r}, {list(self._outs)!r})"

    def __str__(self) -> str:
        lines = ["LinearLayout"]
        for name, images in self._ins:
            if not images:
                lines.append(f" - {name} is a size 1 dimension")
                continue
            for i, image in enumerate(images):
                lead = " - " if i == 0 else "   "
                lines.append(f"{lead}{name}={1 << i} -> ({', '.join(map(str, image))})")
        outs = ", ".join(f"{name} (size {size})" for name, size in self._outs)
        lines.append(f"where out dims are: [{outs}]")
        return "\n".join(lines)


def _check_permutation(order: Sequence[str], names: Sequence[str], kind: str) -> None:
    if sorted(order) != sorted(names) or len(set(order)) != len(order):
        raise LayoutError(
            f"{list(order)} is not a permutation of the {kind} dims {list(names)}"
        )
