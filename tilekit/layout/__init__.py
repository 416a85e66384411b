"""tilekit.layout: where data lives, as algebra the compiler can reason with.

Pure math (numpy, sympy, islpy; no GPU library). Three kinds of layout, one
semantics:

- ``LinearLayout`` (``linear``): F2-linear maps for power-of-two tiles —
  composition, inversion, swizzles, in microseconds. Constructors for the
  hardware's layouts are in ``distributed`` (blocked, mma, wgmma, ldmatrix)
  and ``shared`` (XOR swizzles and the 32/64/128-byte hardware modes).
- ``Layout`` (``cute``): CuTe shape:stride layouts over the integers, for
  ragged and non-power-of-two shapes.
- ``PiecewiseLayout`` (``piecewise``): guarded affine pieces over integer
  sets; ``decompose_tiled`` splits a ragged grid into core and tail tiles.

``isl_lift`` lifts any of them to ISL and decides equality across kinds.

IR tiles of any shape get a ``TileLayout`` (``tile_layouts``: blocked, slice
and scalar encodings, repeated in registers until the shape is covered, with
owners and replicas; equal to ``blocked``/``slice_layout`` on power-of-two
shapes), assigned to every tile of a kernel by ``propagate.assign_layouts``,
the pass code generation runs first.
On top: ``vectorize`` (widest aligned access), ``banks`` and ``swizzle``
(bank models per target, swizzle synthesis), ``convert`` (costed
convert_layout plans), ``tma``/``wgmma``/``admissibility`` (hardware fast
paths as a first-class, costed answer), ``assign`` (a matmul tile's layouts),
``pictures`` (SVG pictures; ``tilekit layout`` on the command line).

Helper modules, each one idea split from the module it serves: ``f2``
(bit-matrix algebra over F2), ``cute_swizzle`` (CuTe's Swizzle and
ComposedLayout), ``specs`` (plain-data layout specs for ISL lifting),
``tiling`` (core/tail decomposition of ragged grids), ``vectorize_tables``
(vector widths of CuTe and tabulated thread layouts), ``swizzle_cost`` (the
per-side bank cost model), ``tma_plans`` (costed TMA alternatives),
``picture_output`` (SVG, text and PNG output).

Conventions (``linear``'s docstring has the details): the first dim is the
most minor; hardware in dims are ``register``, ``lane``, ``warp``, ``block``
and ``offset``; tensor dims are ``dim0``, ``dim1``...
"""

from tilekit.layout import (
    admissibility,
    assign,
    banks,
    convert,
    cute,
    distributed,
    isl_lift,
    linear,
    pictures,
    piecewise,
    propagate,
    shared,
    swizzle,
    tile_layouts,
    tma,
    vectorize,
    wgmma,
)
from tilekit.layout.admissibility import Rule, Verdict, Violation
from tilekit.layout.assign import MatmulTile, plan_matmul_tile
from tilekit.layout.banks import Access, AccessKind, Target, count_wavefronts
from tilekit.layout.banks import target as bank_target
from tilekit.layout.convert import ConversionKind, apply_plan, plan_conversion
from tilekit.layout.cute import ComposedLayout, Layout, Swizzle
from tilekit.layout.distributed import (
    MatrixCount,
    blocked,
    ldmatrix,
    mma_m16n8k16_a,
    mma_m16n8k16_acc,
    mma_m16n8k16_b,
    slice_layout,
    stmatrix,
    wgmma_a_regs,
    wgmma_acc,
)
from tilekit.layout.isl_lift import equal, lift
from tilekit.layout.linear import BLOCK, LANE, OFFSET, REGISTER, WARP, LinearLayout
from tilekit.layout.pictures import render, render_cute, render_distributed, render_shared
from tilekit.layout.piecewise import Domain, PiecewiseLayout, SymbolicExtent, decompose_tiled
from tilekit.layout.propagate import LayoutOptions, assign_layouts
from tilekit.layout.shared import (
    Major,
    Operand,
    SwizzleMode,
    nvidia_swizzle,
    swizzled_shared,
    unswizzled,
)
from tilekit.layout.swizzle import SharedAccess, synthesize_swizzle
from tilekit.layout.tile_layouts import (
    BlockedEncoding,
    SliceEncoding,
    TileLayout,
    default_blocked,
)
from tilekit.layout.tma import GlobalTensor, TmaRequest, tma_admissibility, tma_alternatives
from tilekit.layout.vectorize import TensorFacts, vector_width
from tilekit.layout.wgmma import wgmma_admissibility, wgmma_alternatives

show = render
"""``tk.layout.show(layout, "out.svg")``: draw any layout (distributed, shared or CuTe)."""

__all__ = [
    "BLOCK", "LANE", "OFFSET", "REGISTER", "WARP", "Access", "AccessKind", "BlockedEncoding",
    "ComposedLayout", "LayoutOptions", "SliceEncoding", "TileLayout", "assign_layouts",
    "default_blocked", "propagate", "tile_layouts",
    "ConversionKind", "Domain", "GlobalTensor", "Layout", "LinearLayout", "Major", "MatmulTile",
    "MatrixCount", "Operand", "PiecewiseLayout", "Rule", "SharedAccess", "Swizzle",
    "SwizzleMode", "SymbolicExtent", "Target", "TensorFacts", "TmaRequest", "Verdict",
    "Violation", "admissibility", "apply_plan", "assign", "bank_target", "banks", "blocked",
    "convert", "count_wavefronts", "cute", "decompose_tiled", "distributed", "equal",
    "isl_lift", "ldmatrix", "lift", "linear", "mma_m16n8k16_a", "mma_m16n8k16_acc",
    "mma_m16n8k16_b", "nvidia_swizzle", "pictures", "piecewise", "plan_conversion",
    "plan_matmul_tile", "render", "render_cute", "render_distributed", "render_shared",
    "shared", "show", "slice_layout", "stmatrix", "swizzle", "swizzled_shared",
    "synthesize_swizzle", "tma", "tma_admissibility", "tma_alternatives", "unswizzled",
    "vector_width", "vectorize", "wgmma", "wgmma_a_regs", "wgmma_acc", "wgmma_admissibility",
    "wgmma_alternatives",
]
