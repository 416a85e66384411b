"""``tk.dot`` on ``wgmma.mma_async`` (sm_90a): the stages TMA fills, their descriptors, the
accumulator's layout and the instructions. Pure layout math; ``tilekit.codegen.lower_wgmma``
emits what a plan says and decides nothing.

* **Stages** (``wgmma_stage``). A pipeline stream whose tiles only feed dots is copied by
  TMA in boxes whose rows are one swizzle span (32, 64 or 128 bytes, the widest that
  divides the tile's row), with the matching swizzle mode: the tile's row-major columns
  are cut into column blocks of one box each, box after box in the stage. Where TMA puts
  each element is ``tilekit.layout.tma``'s model of the copy (``shared_offsets``), and the
  descriptor that reads each instruction's slice is ``tilekit.layout.wgmma``'s
  (``wgmma_admissibility`` of that slice's offsets): this module invents neither. A is
  M x K row-major (K-major for wgmma), B is K x N row-major (MN-major: ``imm-trans-b``).
* **Fit** (``wgmma_misfit``): f16 or bf16 operands, a float32 accumulator, whole
  warpgroups (a power of two of 4 warps or more), M a multiple of 16 per warp (each
  warpgroup takes whole 64-row blocks), N one wgmma shape (a multiple of 8 up to 256),
  K a multiple of 16, and at most 128 accumulator registers per thread.
* **Accumulator.** ``wgmma.m64nNk16``'s D fragment of warp ``w`` of a warpgroup is
  ``mma.sync.m16n8``'s accumulator fragment repeated over N / 8 column blocks on rows
  ``16 w ..``: the library's ``MmaEncoding(ACC, (num_warps, 1))``, whose register ``r`` of
  M repeat ``i`` is D register ``r`` of the instruction for 64-row block ``i * warpgroups
  + warpgroup`` (checked in the tests against the PTX ISA's fragment table).
* **Descriptors.** Each (M block, k step) of A and each k step of B has one descriptor,
  relative to a stage that starts on the 1024-byte swizzle repeat (``STAGE_ALIGN``); the
  code adds the stage's shared address. A warpgroup's A descriptors differ from warpgroup
  0's by a constant (``a_warpgroup_step``), checked when the plan is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tilekit.errors import LayoutError
from tilekit.ir.dtypes import DType
from tilekit.layout import tma
from tilekit.layout.shared import Major, Operand
from tilekit.layout.tile_layouts import MmaEncoding, MmaOperand, TileLayout
from tilekit.layout.wgmma import (
    WgmmaDescriptor,
    WgmmaOperandSpec,
    WgmmaType,
    wgmma_admissibility,
)

__all__ = ["STAGE_ALIGN", "WgmmaPlan", "WgmmaStage", "plan_wgmma", "wgmma_misfit",
           "wgmma_stage"]

#: A wgmma stage starts on the swizzle pattern's repeat (8 rows of 128 bytes), so every
#: descriptor has base offset 0.
STAGE_ALIGN = 1024
WARPGROUP_WARPS = 4
INSTRUCTION_M = 64
INSTRUCTION_K = 16
MAX_ACC_REGISTERS = 128
_SWIZZLES = ((128, tma.Swizzle.B128), (64, tma.Swizzle.B64), (32, tma.Swizzle.B32))
_TYPES = {DType.BFLOAT16: WgmmaType.BF16, DType.FLOAT16: WgmmaType.F16}


@dataclass(frozen=True)
class WgmmaStage:
    """A stage of a ``rows x cols`` row-major tile of ``operand`` that TMA fills in
    ``(rows, box_cols)`` boxes with ``swizzle``, box ``j`` (columns ``j * box_cols ..``)
    at byte ``j * box_bytes`` of the stage."""

    operand: Operand
    shape: tuple[int, int]
    elem_bytes: int
    box_cols: int
    swizzle: tma.Swizzle

    #: wgmma reads the stage through the async proxy, as TMA writes it: a refill needs no
    #: proxy fence after it (``tilekit.ir.async_protocol``).
    read_by_async_proxy = True

    @property
    def box(self) -> tuple[int, int]:
        """The TMA box, outermost first."""
        return (self.shape[0], self.box_cols)

    @property
    def box_bytes(self) -> int:
        return self.shape[0] * self.box_cols * self.elem_bytes

    @property
    def bytes(self) -> int:
        return self.box_bytes * (self.shape[1] // self.box_cols)

    @property
    def major(self) -> Major:
        return Major.K if self.operand is Operand.A else Major.MN

    def pieces(self) -> list[tuple[tuple[int, int], int]]:
        """``(origin, byte offset in the stage)`` of each box."""
        return [((0, j * self.box_cols), j * self.box_bytes)
                for j in range(self.shape[1] // self.box_cols)]

    def offsets(self) -> np.ndarray:
        """Byte offset in the stage of every element ``(row, col)``: TMA's placement of
        each box (``TmaDescriptorParams.shared_offsets``) at its place."""
        one = _box_offsets(self.shape[0], self.box_cols, self.elem_bytes, self.swizzle)
        return np.concatenate([one + off for _, off in self.pieces()], axis=1)

    def describe(self) -> str:
        return (f"wgmma operand {self.operand.name} ({self.major.name}-major): TMA boxes "
                f"{self.box[0]}x{self.box[1]} with {self.swizzle.name} swizzle, "
                f"{self.shape[1] // self.box_cols} per stage")

    def __repr__(self) -> str:
        return self.describe()


@lru_cache(maxsize=64)
def _box_offsets(rows: int, cols: int, elem: int, swizzle: tma.Swizzle) -> np.ndarray:
    kind = tma.TmaDataType.raw(elem)
    witness = tma.GlobalTensor(elem, (rows, cols), (cols, 1), STAGE_ALIGN, kind)
    verdict = tma.tma_admissibility(tma.TmaRequest(witness, (rows, cols), swizzle=swizzle),
                                    arch=90)
    if verdict.params is None:
        raise LayoutError(f"no TMA box {rows}x{cols} with {swizzle.name} swizzle: "
                          + "; ".join(str(v) for v in verdict.violations))
    out = verdict.params.shared_offsets(0)
    out.setflags(write=False)
    return out


def wgmma_stage(operand: Operand, shape: tuple[int, int], dtype: DType) -> WgmmaStage:
    """The stage of a row-major ``shape`` tile of ``operand`` (A: M x K, B: K x N): boxes of
    the widest swizzle span that divides the row, all rows at once (``LayoutError`` when
    the row is not a multiple of 32 bytes or there are over 256 rows)."""
    rows, cols = shape
    elem = dtype.itemsize
    if rows > 256:
        raise LayoutError(f"a TMA box has at most 256 rows; the tile has {rows}")
    for span, swizzle in _SWIZZLES:
        per = span // elem
        if cols % per == 0:
            return WgmmaStage(operand, (rows, cols), elem, per, swizzle)
    raise LayoutError(f"rows of {cols} {dtype.short} ({cols * elem} bytes) are not a multiple "
                      "of a 32-byte swizzle span")


def wgmma_misfit(m: int, n: int, k: int, inputs: DType, acc: DType, num_warps: int,
                 arch: int | None) -> str | None:
    """None when ``acc[m, n] += a[m, k] @ b[k, n]`` fits wgmma with ``num_warps`` warps,
    else why not (module docstring)."""
    if arch != 90:
        target = f"sm_{arch}" if arch else "not NVIDIA"
        return f"wgmma needs sm_90a, the target is {target}"
    if inputs not in _TYPES:
        return f"operands are {inputs.short}, wgmma here takes f16 or bf16"
    if acc is not DType.FLOAT32:
        return f"the accumulator is {acc.short}, wgmma here accumulates in f32"
    if num_warps % WARPGROUP_WARPS or num_warps & (num_warps - 1):
        return f"{num_warps} warps are not a power of two of whole warpgroups"
    if m % (16 * num_warps):
        return f"M={m} is not a multiple of {16 * num_warps} (16 rows per warp)"
    if not _TYPES[inputs].valid_n(n):
        return f"N={n} is not a wgmma shape (a multiple of 8 up to 256)"
    if k % INSTRUCTION_K:
        return f"K={k} is not a multiple of {INSTRUCTION_K}"
    regs = m // (16 * num_warps) * n // 2
    if regs > MAX_ACC_REGISTERS:
        return (f"the accumulator needs {regs} registers per thread (over "
                f"{MAX_ACC_REGISTERS}); use more warps or a smaller tile")
    return None


@dataclass(frozen=True)
class WgmmaPlan:
    """How one dot runs on wgmma: the accumulator layout, the stages, and the encoded
    descriptors relative to their stages: ``a_desc[i][s]`` for M block ``i`` of warpgroup
    0 and k step ``s`` (plus ``a_warpgroup_step`` per warpgroup), ``b_desc[s]``."""

    inputs: DType
    acc: TileLayout
    a: WgmmaStage
    b: WgmmaStage
    a_desc: tuple[tuple[int, ...], ...]
    a_warpgroup_step: int
    b_desc: tuple[int, ...]

    @property
    def warpgroups(self) -> int:
        enc = self.acc.encoding
        assert isinstance(enc, MmaEncoding)
        return enc.num_warps // WARPGROUP_WARPS

    @property
    def n(self) -> int:
        return self.acc.shape[1]

    @property
    def instruction(self) -> str:
        t = "bf16" if self.inputs is DType.BFLOAT16 else "f16"
        return f"wgmma.mma_async.sync.aligned.m64n{self.n}k16.f32.{t}.{t}"

    def describe(self) -> str:
        (m, n), k = self.acc.shape, self.a.shape[1]
        return (f"wgmma.m64n{n}k16 {self.inputs.short} {m}x{n}x{k}, {self.warpgroups} "
                f"warpgroup(s) x {len(self.a_desc)} M block(s) x {len(self.b_desc)} k steps; "
                f"A: {self.a.describe()}; B: {self.b.describe()}")

    def __repr__(self) -> str:
        return self.describe()


def wgmma_layouts(m: int, n: int, num_warps: int) -> TileLayout:
    """The accumulator's layout: ``MmaEncoding(ACC, (num_warps, 1))``."""
    return TileLayout((m, n), MmaEncoding(MmaOperand.ACC, (num_warps, 1)))


def _descriptor(offsets: np.ndarray, spec: WgmmaOperandSpec, what: str) -> WgmmaDescriptor:
    verdict = wgmma_admissibility(offsets, elem_bytes=2, base_address=0, spec=spec,
                                  allow_base_offset=False)
    if verdict.params is None:
        raise LayoutError(f"the {what} slice is no wgmma descriptor: "
                          + "; ".join(str(v) for v in verdict.violations))
    return verdict.params


@lru_cache(maxsize=64)
def plan_wgmma(m: int, n: int, k: int, inputs: DType, num_warps: int) -> WgmmaPlan:
    """The plan of a dot that ``wgmma_misfit`` accepted, reading A (``m x k``) and B
    (``k x n``) from ``wgmma_stage``s; ``LayoutError`` when a slice has no descriptor."""
    a = wgmma_stage(Operand.A, (m, k), inputs)
    b = wgmma_stage(Operand.B, (k, n), inputs)
    kind = _TYPES[inputs]
    a_off, b_off = a.offsets(), b.offsets()
    groups = num_warps // WARPGROUP_WARPS
    blocks = m // (INSTRUCTION_M * groups)
    steps = k // INSTRUCTION_K
    a_spec = WgmmaOperandSpec(Operand.A, kind, n)
    b_spec = WgmmaOperandSpec(Operand.B, kind, n)

    def a_at(block: int, group: int, s: int) -> WgmmaDescriptor:
        row = (block * groups + group) * INSTRUCTION_M
        cols = slice(s * INSTRUCTION_K, (s + 1) * INSTRUCTION_K)
        return _descriptor(a_off[row:row + INSTRUCTION_M, cols], a_spec, f"A[{row}:, k{s}]")

    a_desc = tuple(tuple(a_at(i, 0, s).encode() for s in range(steps)) for i in range(blocks))
    step = 0
    if groups > 1:
        step = a_at(0, 1, 0).encode() - a_desc[0][0]
        for i in range(blocks):
            for g in range(groups):
                for s in range(steps):
                    if a_at(i, g, s).encode() != a_desc[i][s] + g * step:
                        raise LayoutError("internal: A's descriptors are not a constant step "
                                          "apart between warpgroups")
    b_desc = []
    for s in range(steps):
        rows = slice(s * INSTRUCTION_K, (s + 1) * INSTRUCTION_K)
        d = _descriptor(np.ascontiguousarray(b_off[rows, :].T), b_spec, f"B[k{s}]")
        if d.major is not Major.MN:
            raise LayoutError("internal: B's stage is not MN-major")
        b_desc.append(d.encode())
    return WgmmaPlan(inputs, wgmma_layouts(m, n, num_warps), a, b, a_desc, step,
                     tuple(b_desc))
