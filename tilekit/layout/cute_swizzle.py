"""CuTe's swizzles and composed layouts: ``outer(offset + inner(c))``.

A ``Swizzle`` is a bijection of offsets (an XOR of bit ranges), not a shape:stride layout, so
it and ``ComposedLayout`` (a swizzle or layout applied after a layout) are their own idea;
they live here, apart from ``cute``'s ``Layout`` algebra. ``cute`` re-exports both classes and
its operations still accept a ``ComposedLayout`` by acting on ``inner`` (they only reshape the
domain), so ``tilekit.layout.cute.Swizzle`` and ``.ComposedLayout`` are the same classes as
before the split, with the same checks, evaluation and printing.

``cute`` imports this module at its top; this module needs ``cute`` only when a
``ComposedLayout`` is built or evaluated, so it imports ``cute`` at its bottom and either
module can be imported first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout.inttuple import IntTuple, flatten, is_int

__all__ = ["ComposedLayout", "Swizzle"]


@dataclass(frozen=True)
class Swizzle:
    """CuTe's ``Swizzle<bits, base, shift>``: XOR ``bits`` bits at ``base+shift`` into ``base``.

    ``offset ^ ((offset & yyy_mask) >> shift)`` (a negative shift moves left). It is an
    involution, so a bijection of the naturals that maps each ``[0, 2**k)`` onto itself for
    ``k >= base + bits + |shift|``.
    """

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        for name in ("bits", "base", "shift"):
            if not is_int(getattr(self, name)):
                raise LayoutError(f"Swizzle {name} must be an int, got {getattr(self, name)!r}")
        if self.bits < 0 or self.base < 0:
            raise LayoutError(f"{self}: bits and base must be >= 0")
        if abs(self.shift) < self.bits:
            raise LayoutError(
                f"{self}: |shift| must be >= bits, or the XORed bit ranges overlap",
            )

    @property
    def yyy_mask(self) -> int:
        """The bits that are read (and left unchanged)."""
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_mask(self) -> int:
        """The bits that are flipped."""
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    def __call__(self, offset: int | np.ndarray) -> int | np.ndarray:
        moved = offset & self.yyy_mask
        moved = moved >> self.shift if self.shift >= 0 else moved << -self.shift
        return offset ^ moved

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"

    __repr__ = __str__


@dataclass(frozen=True, repr=False)
class ComposedLayout:
    """``outer(offset + inner(c))``: a swizzle (or layout) applied after a layout.

    The domain is ``inner``'s; divides and composition act on ``inner`` (they only reshape the
    domain), slicing moves the fixed part into ``offset``.
    """

    outer: Swizzle | cute.Layout
    offset: int
    inner: cute.Layout

    def __post_init__(self) -> None:
        if not isinstance(self.outer, (Swizzle, cute.Layout)):
            raise LayoutError(
                f"ComposedLayout: outer must be a Swizzle or Layout, got {self.outer!r}"
            )
        if not isinstance(self.inner, cute.Layout):
            raise LayoutError(f"ComposedLayout: inner must be a Layout, got {self.inner!r}")
        if not is_int(self.offset):
            raise LayoutError(f"ComposedLayout: offset must be an int, got {self.offset!r}")

    @property
    def shape(self) -> IntTuple:
        return self.inner.shape

    @property
    def size(self) -> int:
        return self.inner.size

    @property
    def rank(self) -> int:
        return self.inner.rank

    @property
    def depth(self) -> int:
        return self.inner.depth

    def __call__(self, *coord: object) -> int | ComposedLayout:
        crd: object = coord[0] if len(coord) == 1 else tuple(coord)
        if cute._has_none(crd):
            sliced, off = cute.slice_and_offset(self.inner, crd)
            return ComposedLayout(self.outer, self.offset + off, sliced)
        return int(self.outer(self.offset + self.inner(crd)))  # type: ignore[operator]

    def to_table(self, *, flat: bool = False) -> np.ndarray:
        inner = self.inner.to_table(flat=flat) + self.offset
        if isinstance(self.outer, Swizzle):
            return np.asarray(self.outer(inner))
        o = self.outer
        return cute._evaluate_indices(flatten(o.shape), flatten(o.stride), inner)

    def __str__(self) -> str:
        return f"{self.outer} o {self.offset} o {self.inner}"

    __repr__ = __str__


# The cycle with ``cute`` (which re-exports these classes) is closed last: by now both classes
# exist, so ``cute`` can import them whichever module was imported first.
from tilekit.layout import cute  # noqa: E402
