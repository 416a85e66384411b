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
On top: ``vectorize`` (widest aligned access), ``realign`` (rotated runs: aligned
16-byte stores into rows whose start moves from row to row), ``banks`` and ``swizzle``
(bank models per target, swizzle synthesis), ``convert`` (costed
convert_layout plans), ``tma``/``wgmma``/``admissibility`` (hardware fast
paths as a first-class, costed answer), ``assign`` (a matmul tile's layouts),
``pictures`` (SVG pictures; ``tilekit layout`` on the command line), ``mma_sync``
(whether a dot fits mma.sync.m16n8k16, its warp grid, its operands' shared tiles and
ldmatrix reads).

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

import importlib
from typing import Any

# Names are loaded on first use (PEP 562): code generation imports `propagate` and
# `tile_layouts` without paying for ISL, sympy and the pictures (about 0.5 s).
_SUBMODULES = frozenset({
    "admissibility", "assign", "banks", "convert", "cute", "distributed", "isl_lift",
    "linear", "mma_sync", "pictures", "piecewise", "propagate", "shared", "swizzle",
    "tile_convert",
    "tile_layouts", "tma", "vectorize", "wgmma",
})
_NAMES: dict[str, tuple[str, str]] = {
    **{n: ("admissibility", n) for n in ("Rule", "Verdict", "Violation")},
    **{n: ("assign", n) for n in ("MatmulTile", "plan_matmul_tile")},
    **{n: ("banks", n) for n in ("Access", "AccessKind", "Target", "count_wavefronts")},
    "bank_target": ("banks", "target"),
    **{n: ("convert", n) for n in ("ConversionKind", "apply_plan", "plan_conversion")},
    **{n: ("cute", n) for n in ("ComposedLayout", "Layout", "Swizzle")},
    **{n: ("distributed", n) for n in (
        "MatrixCount", "blocked", "ldmatrix", "mma_m16n8k16_a", "mma_m16n8k16_acc",
        "mma_m16n8k16_b", "slice_layout", "stmatrix", "wgmma_a_regs", "wgmma_acc")},
    **{n: ("isl_lift", n) for n in ("equal", "lift")},
    **{n: ("linear", n) for n in ("BLOCK", "LANE", "OFFSET", "REGISTER", "WARP",
                                  "LinearLayout")},
    **{n: ("pictures", n) for n in ("render", "render_cute", "render_distributed",
                                    "render_shared")},
    "show": ("pictures", "render"),
    **{n: ("piecewise", n) for n in ("Domain", "PiecewiseLayout", "SymbolicExtent",
                                     "decompose_tiled")},
    **{n: ("propagate", n) for n in ("LayoutOptions", "assign_layouts")},
    **{n: ("shared", n) for n in ("Major", "Operand", "SwizzleMode", "nvidia_swizzle",
                                  "swizzled_shared", "unswizzled")},
    **{n: ("swizzle", n) for n in ("SharedAccess", "synthesize_swizzle")},
    **{n: ("tile_layouts", n) for n in ("BlockedEncoding", "MmaEncoding", "MmaOperand",
                                        "SliceEncoding", "TileLayout", "default_blocked")},
    **{n: ("tma", n) for n in ("GlobalTensor", "TmaRequest", "tma_admissibility",
                               "tma_alternatives")},
    **{n: ("vectorize", n) for n in ("TensorFacts", "vector_width")},
    **{n: ("wgmma", n) for n in ("wgmma_admissibility", "wgmma_alternatives")},
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"tilekit.layout.{name}")
    if name in _NAMES:
        module, attr = _NAMES[name]
        value = getattr(importlib.import_module(f"tilekit.layout.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tilekit.layout' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBMODULES | set(_NAMES))


__all__ = [
    "BLOCK", "LANE", "OFFSET", "REGISTER", "WARP", "Access", "AccessKind", "BlockedEncoding",
    "ComposedLayout", "LayoutOptions", "MmaEncoding", "MmaOperand", "SliceEncoding",
    "TileLayout", "assign_layouts",
    "default_blocked", "propagate", "tile_convert", "tile_layouts",
    "ConversionKind", "Domain", "GlobalTensor", "Layout", "LinearLayout", "Major", "MatmulTile",
    "MatrixCount", "Operand", "PiecewiseLayout", "Rule", "SharedAccess", "Swizzle",
    "SwizzleMode", "SymbolicExtent", "Target", "TensorFacts", "TmaRequest", "Verdict",
    "Violation", "admissibility", "apply_plan", "assign", "bank_target", "banks", "blocked",
    "convert", "count_wavefronts", "cute", "decompose_tiled", "distributed", "equal",
    "isl_lift", "ldmatrix", "lift", "linear", "mma_m16n8k16_a", "mma_m16n8k16_acc", "mma_sync",
    "mma_m16n8k16_b", "nvidia_swizzle", "pictures", "piecewise", "plan_conversion",
    "plan_matmul_tile", "render", "render_cute", "render_distributed", "render_shared",
    "shared", "show", "slice_layout", "stmatrix", "swizzle", "swizzled_shared",
    "synthesize_swizzle", "tma", "tma_admissibility", "tma_alternatives", "unswizzled",
    "vector_width", "vectorize", "wgmma", "wgmma_a_regs", "wgmma_acc", "wgmma_admissibility",
    "wgmma_alternatives",
]
