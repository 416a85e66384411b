"""Nested integer tuples (CuTe's ``IntTuple``): the shapes, strides and coordinates of layouts.

An IntTuple is an ``int`` or a ``tuple`` of IntTuples, e.g. ``(4, (2, 3))``. Shapes and strides
of a :class:`~tilekit.layout.cute.Layout` are congruent IntTuples; coordinates are IntTuples
congruent to (a prefix of) the shape, or plain ints.

Conventions, all CuTe's:

* Coordinates are **colexicographic**: the first leaf varies fastest, so the 1-D index of the
  coordinate ``(c0, c1)`` in shape ``(s0, s1)`` is ``c0 + s0 * c1``.
* An integer index into a (sub)shape is split over its leaves; the **last leaf of size > 1 is
  open**: it takes whatever is left instead of wrapping. This extends every layout from its
  domain ``[0, size)`` to all naturals, which composition and the ragged divides rely on. (CuTe
  opens the last leaf even when it has size 1; opening the last *non-trivial* leaf instead makes
  the extension a property of the function, unchanged by ``coalesce``. A shape of size 1 has no
  open leaf and maps every index to coordinate 0.)

Plain tuples keep IntTuples hashable and immutable; these functions never mutate.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from itertools import product as cartesian_product
from typing import TypeAlias

from tilekit.errors import LayoutError

IntTuple: TypeAlias = int | tuple["IntTuple", ...]


def is_int(value: object) -> bool:
    """True for a Python/numpy integer (bool excluded)."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return not isinstance(value, (tuple, list))


def is_tuple(value: object) -> bool:
    return isinstance(value, tuple)


def as_int_tuple(value: object, what: str = "int tuple") -> IntTuple:
    """Canonical IntTuple: Python ints in nested tuples (lists and numpy ints are accepted)."""
    if isinstance(value, (tuple, list)):
        return tuple(as_int_tuple(v, what) for v in value)
    if isinstance(value, bool) or not is_int(value):
        raise LayoutError(
            f"{what}: expected an int or a (nested) tuple of ints, got {value!r}",
            hints=["write shapes and strides like (4, (2, 3))"],
        )
    return operator.index(value)  # type: ignore[arg-type]


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of ``t`` in order; an int is its own single leaf."""
    if is_tuple(t):
        return tuple(leaf for sub in t for leaf in flatten(sub))  # type: ignore[union-attr]
    return (t,)  # type: ignore[return-value]


def unflatten(leaves: Sequence[int], profile: IntTuple) -> IntTuple:
    """Arrange ``leaves`` in the nesting of ``profile`` (inverse of :func:`flatten`)."""
    flat_len = len(flatten(profile))
    if len(leaves) != flat_len:
        raise LayoutError(
            f"unflatten: {len(leaves)} leaves do not fit profile {format_int_tuple(profile)}"
        )
    it = iter(leaves)

    def build(p: IntTuple) -> IntTuple:
        if is_tuple(p):
            return tuple(build(sub) for sub in p)  # type: ignore[union-attr]
        return next(it)

    return build(profile)


def repeat_like(t: IntTuple, value: int) -> IntTuple:
    """An IntTuple congruent to ``t`` with every leaf ``value``."""
    if is_tuple(t):
        return tuple(repeat_like(sub, value) for sub in t)  # type: ignore[union-attr]
    return value


def transform_leaves(t: IntTuple, fn: Callable[[int], int]) -> IntTuple:
    if is_tuple(t):
        return tuple(transform_leaves(sub, fn) for sub in t)  # type: ignore[union-attr]
    return fn(t)  # type: ignore[arg-type]


def product(t: IntTuple) -> int:
    """Product of all leaves (1 for the empty tuple): the size of a shape."""
    result = 1
    for leaf in flatten(t):
        result *= leaf
    return result


size = product


def product_each(t: IntTuple) -> IntTuple:
    """The size of each top-level mode: ``(4, (2, 3)) -> (4, 6)``."""
    if is_tuple(t):
        return tuple(product(sub) for sub in t)  # type: ignore[union-attr]
    return t


def rank(t: IntTuple) -> int:
    """Number of top-level modes (an int has rank 1)."""
    return len(t) if is_tuple(t) else 1  # type: ignore[arg-type]


def depth(t: IntTuple) -> int:
    """Nesting depth: 0 for an int, 1 for a flat tuple (including ``()``)."""
    if is_tuple(t):
        return 1 + max((depth(sub) for sub in t), default=0)  # type: ignore[union-attr]
    return 0


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same nesting profile (leaf values ignored)."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b, strict=False))  # type: ignore
    return not is_tuple(a) and not is_tuple(b)


def weakly_congruent(a: IntTuple, b: IntTuple) -> bool:
    """``a``'s profile coarsens ``b``'s: every leaf of ``a`` sits over a subtree of ``b``."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(weakly_congruent(x, y) for x, y in zip(a, b, strict=False))  # type: ignore
    return not is_tuple(a)


def compatible(a: IntTuple, b: IntTuple) -> bool:
    """Every coordinate of shape ``a`` is one of shape ``b`` (sizes agree at ``a``'s leaves)."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(compatible(x, y) for x, y in zip(a, b, strict=False))  # type: ignore
    if is_tuple(a):
        return False
    return a == product(b)


def inner_product(a: IntTuple, b: IntTuple) -> int:
    if is_tuple(a) and is_tuple(b) and len(a) == len(b):  # type: ignore[arg-type]
        return sum(inner_product(x, y) for x, y in zip(a, b, strict=False))  # type: ignore[arg-type]
    if not is_tuple(a) and not is_tuple(b):
        return a * b  # type: ignore[operator]
    raise LayoutError(
        f"inner_product: {format_int_tuple(a)} and {format_int_tuple(b)} are not congruent"
    )


def prefix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive prefix products of the leaves: the compact column-major strides of shape ``t``."""
    leaves = flatten(t)
    out: list[int] = []
    running = init
    for leaf in leaves:
        out.append(running)
        running *= leaf
    return unflatten(out, t)


def suffix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive suffix products over the leaves: the compact row-major strides of shape ``t``."""
    leaves = flatten(t)
    out = [0] * len(leaves)
    running = init
    for i in range(len(leaves) - 1, -1, -1):
        out[i] = running
        running *= leaves[i]
    return unflatten(out, t)


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """CuTe's shape division: ``a / b`` leaf by leaf, folding an int ``b`` through a tuple ``a``.

    ``shape_div((4, 5, 6), 40) == (1, 1, 3)``: 40 consumes the 4, then the 5, then 2 of the 6.
    Each step needs one side to divide the other; otherwise no shape can represent the quotient.
    """
    if is_tuple(a):
        if is_tuple(b):
            if len(a) != len(b):  # type: ignore[arg-type]
                raise LayoutError(
                    f"shape_div: ranks differ: {format_int_tuple(a)} / {format_int_tuple(b)}"
                )
            return tuple(shape_div(x, y) for x, y in zip(a, b, strict=False))  # type: ignore[arg-type]
        out: list[IntTuple] = []
        rest: IntTuple = b
        for x in a:  # type: ignore[union-attr]
            out.append(shape_div(x, rest))
            rest = shape_div(rest, product(x))
        return tuple(out)
    if is_tuple(b):
        return shape_div(a, product(b))
    x, y = int(a), int(b)  # type: ignore[arg-type]
    if y == 0:
        raise LayoutError("shape_div: division by a zero size")
    if x % y == 0:
        return x // y
    if y % x == 0:
        return 1
    raise LayoutError(
        f"shape_div: neither of {x} and {y} divides the other",
        hints=["pick tile sizes that divide the layout's modes (or are multiples of them)"],
    )


def ceil_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """Round-up division; an int ``b`` folds through a tuple ``a`` like :func:`shape_div`."""
    if is_tuple(a):
        if is_tuple(b):
            if len(b) > len(a):  # type: ignore[arg-type]
                raise LayoutError("ceil_div: divisor has more modes than the dividend")
            padded = tuple(b) + (1,) * (len(a) - len(b))  # type: ignore[arg-type]
            return tuple(ceil_div(x, y) for x, y in zip(a, padded, strict=False))  # type: ignore[arg-type]
        out: list[IntTuple] = []
        rest: int = b  # type: ignore[assignment]
        for x in a:  # type: ignore[union-attr]
            px = product(x)
            out.append(ceil_div(x, rest))
            rest = -(-rest // px)
        return tuple(out)
    if is_tuple(b):
        return ceil_div(a, product(b))
    return -(-int(a) // int(b))  # type: ignore[arg-type]


def _open_leaf(leaves: Sequence[int]) -> int:
    """Index of the last leaf of size > 1 (the one an overflowing index runs into), or -1."""
    for i in range(len(leaves) - 1, -1, -1):
        if leaves[i] > 1:
            return i
    return -1


def idx2crd(idx: IntTuple, shape: IntTuple) -> IntTuple:
    """The natural (leaf-congruent) coordinate of a 1-D colexicographic index within ``shape``.

    Tuple indices are split mode by mode. See the module docstring for indices past the size.
    """
    if is_tuple(idx):
        if not is_tuple(shape) or len(idx) != len(shape):  # type: ignore[arg-type]
            raise LayoutError(
                f"coordinate {format_int_tuple(idx)} does not match shape {format_int_tuple(shape)}"
            )
        return tuple(idx2crd(i, s) for i, s in zip(idx, shape, strict=False))  # type: ignore[arg-type]
    rest = int(idx)  # type: ignore[arg-type]
    if rest < 0:
        raise LayoutError(f"negative index {rest} into shape {format_int_tuple(shape)}")
    leaves = flatten(shape)
    open_at = _open_leaf(leaves)
    coords: list[int] = []
    for i, extent in enumerate(leaves):
        if i == open_at:
            coords.append(rest)
            rest = 0
        elif extent == 1:
            coords.append(0)
        else:
            coords.append(rest % extent)
            rest //= extent
    return unflatten(coords, shape)


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple | None = None) -> int:
    """Inner product of a coordinate with ``stride`` (default: compact column-major).

    ``crd`` may be a natural coordinate, or an int (or partly int) coordinate that is first split
    by :func:`idx2crd` within the corresponding (sub)shape.
    """
    if stride is None:
        stride = prefix_product(shape)
    if is_tuple(crd):
        if not is_tuple(shape) or len(crd) != len(shape):  # type: ignore[arg-type]
            raise LayoutError(
                f"coordinate {format_int_tuple(crd)} does not match shape "
                f"{format_int_tuple(shape)}",
                hints=["give one coordinate per mode, or a single int index"],
            )
        return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride, strict=False))  # type: ignore
    natural = idx2crd(crd, shape)
    return sum(c * d for c, d in zip(flatten(natural), flatten(stride), strict=False))


def iter_coords(shape: IntTuple) -> Iterator[IntTuple]:
    """All natural coordinates of ``shape`` in colexicographic order (index 0, 1, 2, ...)."""
    leaves = flatten(shape)
    for reversed_coord in cartesian_product(*(range(n) for n in reversed(leaves))):
        yield unflatten(tuple(reversed(reversed_coord)), shape)


def format_int_tuple(t: IntTuple) -> str:
    """CuTe's spelling: ``(4,(2,3))``; a 1-tuple prints as ``(4)``."""
    if is_tuple(t):
        return "(" + ",".join(format_int_tuple(sub) for sub in t) + ")"  # type: ignore[union-attr]
    return str(t)


def parse_int_tuple(text: str) -> IntTuple:
    """Parse :func:`format_int_tuple`'s spelling; CuTe's static ``_4`` is read as ``4``."""
    parser = _Parser(text)
    value = parser.int_tuple()
    parser.expect_end()
    return value


class _Parser:
    """Recursive descent over ``int | '(' [int_tuple (',' int_tuple)*] ')'``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def _fail(self, what: str) -> LayoutError:
        return LayoutError(
            f"cannot parse {self.text!r}: expected {what} at column {self.pos + 1}",
            hints=["write layouts like (4,(2,3)):(1,(4,8))"],
        )

    def peek(self) -> str:
        self._skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def int_tuple(self) -> IntTuple:
        if self.peek() == "(":
            self.pos += 1
            items: list[IntTuple] = []
            if self.peek() == ")":
                self.pos += 1
                return ()
            while True:
                items.append(self.int_tuple())
                ch = self.peek()
                self.pos += 1
                if ch == ")":
                    return tuple(items)
                if ch != ",":
                    self.pos -= 1
                    raise self._fail("',' or ')'")
        return self.integer()

    def integer(self) -> int:
        self._skip_space()
        start = self.pos
        if self.pos < len(self.text) and self.text[self.pos] == "_":
            self.pos += 1
        if self.pos < len(self.text) and self.text[self.pos] in "+-":
            self.pos += 1
        digits_start = self.pos
        while self.pos < len(self.text) and self.text[self.pos].isdigit():
            self.pos += 1
        if self.pos == digits_start:
            self.pos = start
            raise self._fail("an integer or '('")
        return int(self.text[start : self.pos].lstrip("_"))

    def expect_end(self) -> None:
        if self.peek() != "":
            raise self._fail("end of input")
