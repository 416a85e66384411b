"""Offline machine-code checks: every example and a spread of test kernels lowered to PTX
that nvJitLink assembles for sm_90a and sm_80, and to AMDGCN objects for gfx942; the
SASS of the canonical kernels read with cuobjdump; regressions for bugs that only a GPU
showed (hangs, misaligned shared accesses), pinned here in the PTX. No GPU needed.

An example is traced with the argument shapes and constexprs of its ``main()``
(``kernel.trace`` builds the optimized IR without running anything).
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import functools
import importlib
import os
import pickle
import re
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tests.codegen.sass_checks import needs_cuobjdump, needs_linker
from tests.lang import kernels as K
from tilekit.codegen import sass
from tilekit.codegen.driver import compile_module
from tilekit.ir.core import Module
from tilekit.rt import link

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


f32, bf16, i32 = np.float32, ml_dtypes.bfloat16, np.int32


def _empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return np.zeros(shape, dtype)


# Each example's kernel with the argument shapes and constexprs its main() uses by default.
def _example_cases() -> dict[str, Callable[[], tuple[Any, tuple, dict]]]:
    def vector_add():
        n = 100_003
        return "add", (_empty((n,), f32), _empty((n,), f32), _empty((n,), f32), n), \
            dict(BLOCK=1024)

    def softmax():
        x = _empty((1000, 4097), f32)
        return "softmax", (x, x.copy()), dict(N=4097)

    def argmax():
        return "row_argmax", (_empty((129, 1013), f32), _empty((129,), i32), 1013), \
            dict(BLOCK=128)

    def histogram():
        n, bins = 20_011, 37
        return "histogram", (_empty((n,), f32), _empty((bins,), i32), n, -3.0, 6.0 / bins), \
            dict(NUM_BINS=bins, BLOCK=512)

    def layer_norm():
        rows, cols = 67, 1001
        return "layer_norm", (_empty((rows, cols), f32), _empty((cols,), f32),
                              _empty((cols,), f32), _empty((rows, cols), f32), cols, 1e-5), \
            dict(BLOCK=256)

    def matmul():
        M, N, K_ = 131, 77, 200
        return "matmul", (_empty((M, K_), bf16), _empty((K_, N), bf16), _empty((M, N), f32),
                          K_), dict(BM=64, BN=32, BK=32)

    def transpose():
        return "transpose", (_empty((1000, 37), f32), _empty((37, 1000), f32)), \
            dict(BM=64, BN=16)

    def pipeline_copy():
        x = _empty((300, 1000), f32)
        return "pipeline_copy", (x, x.copy()), dict(BM=8, BN=128, STAGES=3)

    def pipeline_row_sum():
        return "pipeline_row_sum", (_empty((1000, 4097), bf16), _empty((1000,), f32)), \
            dict(BM=8, BN=256, STAGES=3)

    return {f.__name__: f for f in (vector_add, softmax, argmax, histogram, layer_norm,
                                    matmul, transpose, pipeline_copy, pipeline_row_sum)}


EXAMPLE_CASES = _example_cases()
ALL_EXAMPLES = sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_"))


@functools.cache
def example_module(name: str) -> Module:
    kernel_name, args, constexprs = EXAMPLE_CASES[name]()
    kernel = getattr(importlib.import_module(name), kernel_name)
    return kernel.trace(*args, **constexprs)


_BUILT: dict[tuple[int, str, str], Any] = {}  # (id(module), what, arch); modules stay alive
_KEEP: list[Module] = []


def ptx_of(module: Module, arch: str) -> str:
    key = (id(module), "ptx", arch)
    if key not in _BUILT:
        compiled = compile_module(module, arch)
        assert compiled.binary_kind == "ptx" and compiled.target == arch
        _KEEP.append(module)
        _BUILT[key] = compiled.binary.decode()
    return _BUILT[key]


def cubin_of(module: Module, arch: str) -> bytes:
    key = (id(module), "cubin", arch)
    if key not in _BUILT:
        _BUILT[key] = link.link_ptx(ptx_of(module, arch), arch, module.kernel.name)
    return _BUILT[key]


# --- PTX: every register's value modulo a power of two (to a fixed point) ------------------

_REG = re.compile(r"%[a-z]+\d+")
_BITS = 16  # residues are tracked modulo 2**_BITS at most


class Congruence(tuple):
    """``value == r (mod 2**k)`` for every value a register takes; ``k == 0``: nothing known.
    ``None`` stands for "no definition seen yet" (the top of the lattice)."""

    def __new__(cls, r: int, k: int) -> Congruence:
        k = max(0, min(k, _BITS))
        return super().__new__(cls, (r % (1 << k), k))

    r = property(lambda self: self[0])
    k = property(lambda self: self[1])


UNKNOWN = Congruence(0, 0)


def _tz(value: int) -> int:
    return _BITS if value % (1 << _BITS) == 0 else (value & -value).bit_length() - 1


def _join(a: Congruence | None, b: Congruence) -> Congruence:
    if a is None:
        return b
    k = min(a.k, b.k, _tz(a.r - b.r))
    return Congruence(a.r, k)


def _add(a: Congruence, b: Congruence, sign: int = 1) -> Congruence:
    return Congruence(a.r + sign * b.r, min(a.k, b.k))


def _mul(a: Congruence, b: Congruence) -> Congruence:
    # (ra + 2^ka x)(rb + 2^kb y) == ra rb  (mod 2^min(ka + tz(rb), kb + tz(ra), ka + kb))
    k = min(a.k + (_tz(b.r) if b.k else 0), b.k + (_tz(a.r) if a.k else 0), a.k + b.k)
    return Congruence(a.r * b.r, k)


def _imm(text: str) -> int | None:
    try:
        return int(text.strip().rstrip("U"), 0)
    except ValueError:
        return None


def _instructions(ptx: str) -> list[tuple[str, list[str]]]:
    """(opcode, operands) of each PTX instruction (predicate guards dropped)."""
    out = []
    for line in ptx.splitlines():
        line = line.split("//")[0].strip()
        if not line.endswith(";") or line.startswith("."):
            continue
        line = re.sub(r"^@!?%\w+\s+", "", line[:-1].strip())
        opcode, _, rest = line.partition(" ")
        out.append((opcode, [a.strip() for a in re.split(r",(?![^{]*})", rest) if a.strip()]))
    return out


def congruences(ptx: str, symbol_align: int = 16) -> dict[str, Congruence]:
    """For each register, the residue modulo a power of two that all its values share.

    Sound for any control flow: every definition of a register is joined in until nothing
    changes (the lattice is finite), so the result holds along every execution. Symbols
    (``tk_smem``) are ``symbol_align``-aligned; a definition not modelled here (loads,
    floats, packing, special registers) knows nothing.
    """
    defs = [(op, args) for op, args in _instructions(ptx)
            if args and _REG.fullmatch(args[0]) and not op.startswith(("st.", "setp", "atom"))]
    state: dict[str, Congruence | None] = {args[0]: None for _, args in defs}

    def val(text: str) -> Congruence | None:
        if _REG.fullmatch(text):
            return state.get(text, UNKNOWN)
        imm = _imm(text)
        if imm is not None:
            return Congruence(imm, _BITS)
        if re.fullmatch(r"[A-Za-z_$][\w$]*", text):
            return Congruence(0, _tz(symbol_align))
        return UNKNOWN

    def transfer(op: str, src: list[str]) -> Congruence | None:
        head, types = op.split(".")[0], op.split(".")[1:]
        if any(t.startswith(("f", "bf")) for t in types):
            return UNKNOWN  # float arithmetic and conversions
        vals = [val(s) for s in src]
        if None in vals:
            return None  # an operand not defined yet: wait for the next round
        if head in ("mov", "cvt", "cvta") and len(vals) == 1:
            return vals[0]
        if len(vals) == 2 and head in ("add", "sub"):
            return _add(vals[0], vals[1], -1 if head == "sub" else 1)
        if len(vals) == 2 and head in ("or", "xor", "and"):
            a, b = vals
            k = min(a.k, b.k)
            bit = {"or": int.__or__, "xor": int.__xor__, "and": int.__and__}[head]
            if head == "and" and src[1] and _imm(src[1]) is not None:  # zero bits of a mask
                mask = _imm(src[1])
                while k < _BITS and not (mask >> k) & 1:
                    k += 1
            return Congruence(bit(a.r, b.r), k)
        if head == "mul" and ("lo" in types or "wide" in types) and len(vals) == 2:
            return _mul(*vals)
        if head == "mad" and ("lo" in types or "wide" in types) and len(vals) == 3:
            return _add(_mul(vals[0], vals[1]), vals[2])
        if head == "shl" and len(vals) == 2 and _imm(src[1]) is not None:
            return _mul(vals[0], Congruence(1 << _imm(src[1]), _BITS))
        if head in ("selp", "min", "max") and len(vals) >= 2:
            return _join(vals[0], vals[1])
        return UNKNOWN

    changed = True
    while changed:
        changed = False
        for op, args in defs:
            new = transfer(op, args[1:])
            if new is None:
                continue
            joined = _join(state[args[0]], new)
            if joined != state[args[0]]:
                state[args[0]], changed = joined, True
    return {reg: c if c is not None else UNKNOWN for reg, c in state.items()}


def address_congruences(ptx: str, symbol_align: int = 16) -> Callable[[str], Congruence]:
    """A register's congruence, sharpened through its single definitions: each register
    defined once by ``add``/``sub``/``mov``/``cvt`` or by a multiply or shift by a constant
    is expanded into ``c + sum(a_i * atom_i)`` over registers defined otherwise (whose
    congruences ``congruences`` gives), so that ``(base + 2x) + 2x`` is known 4-aligned."""
    state = congruences(ptx, symbol_align)
    defs: dict[str, list[tuple[str, list[str]]]] = {}
    for op, args in _instructions(ptx):
        if args and _REG.fullmatch(args[0]) and not op.startswith(("st.", "setp", "atom")):
            defs.setdefault(args[0], []).append((op, args[1:]))

    @functools.cache
    def affine(text: str) -> tuple[int, tuple[tuple[str, int], ...]]:
        imm = _imm(text)
        if imm is not None:
            return imm, ()
        if not _REG.fullmatch(text) or len(defs.get(text, [])) != 1:
            return 0, ((text, 1),)
        op, src = defs[text][0]
        head, types = op.split(".")[0], op.split(".")[1:]
        if any(t.startswith(("f", "bf")) for t in types) or any("{" in x for x in src):
            return 0, ((text, 1),)
        if head in ("mov", "cvt") and len(src) == 1:
            return affine(src[0])
        if head in ("add", "sub") and len(src) == 2:
            return _combine(affine(src[0]), affine(src[1]), -1 if head == "sub" else 1)
        scale = None
        if head == "shl" and len(src) == 2 and _imm(src[1]) is not None:
            scale = 1 << _imm(src[1])
        elif head == "mul" and ("lo" in types or "wide" in types) and len(src) == 2 \
                and _imm(src[1]) is not None:
            scale = _imm(src[1])
        if scale is not None:
            c, terms = affine(src[0])
            return c * scale, tuple((t, a * scale) for t, a in terms)
        return 0, ((text, 1),)

    def at(text: str) -> Congruence:
        c, terms = affine(text)
        out = Congruence(c, _BITS)
        for atom, a in terms:
            if _REG.fullmatch(atom):
                atom_value = state.get(atom, UNKNOWN)
            else:  # a symbol
                atom_value = Congruence(0, _tz(symbol_align))
            out = _add(out, _mul(Congruence(a, _BITS), atom_value))
        return out

    return at


def _combine(x: tuple[int, tuple[tuple[str, int], ...]], y: tuple[int, tuple], sign: int):
    terms = dict(x[1])
    for t, a in y[1]:
        terms[t] = terms.get(t, 0) + sign * a
    return x[0] + sign * y[0], tuple((t, a) for t, a in terms.items() if a)


_WIDTH = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16}


def misaligned_shared_accesses(ptx: str) -> list[str]:
    """Shared-memory accesses whose address is not provably a multiple of their width."""
    at = address_congruences(ptx)
    bad = []
    for op, args in _instructions(ptx):
        parts = op.split(".")
        if parts[0] not in ("ld", "st", "atom", "red") or "shared" not in op:
            continue
        bits = [p[1:] for p in parts if p[:1] in "bfsu" and p[1:] in _WIDTH]
        vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d", p)), 1)
        width = _WIDTH[bits[-1]] * vec
        addr = next(a for a in args if a.startswith("["))[1:-1]
        base, _, offset = addr.partition("+")
        where = _add(at(base), Congruence(_imm(offset) or 0, _BITS))
        if where.k < _tz(width) or where.r % width:
            bad.append(f"{op} {', '.join(args)} (address == {where.r} mod {1 << where.k})")
    return bad


# --- examples: PTX for sm_90a and sm_80 that nvJitLink links; AMDGCN for gfx942 ---------


def test_every_example_has_a_case():
    assert sorted(EXAMPLE_CASES) == ALL_EXAMPLES, "add the new example's main() arguments here"


@needs_linker
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_example_links_for_nvidia(name: str, arch: str):
    module = example_module(name)
    cubin = cubin_of(module, arch)
    assert cubin.startswith(b"\x7fELF") and module.kernel.name.encode() in cubin
    assert not misaligned_shared_accesses(ptx_of(module, arch))


def run_in_child(fn: Callable[[], Any], timeout: float = 120.0) -> Any:
    """``fn()`` in a forked child: LLVM reports some errors by exiting the process, which
    must fail one test, not end the session. Returns its value or raises AssertionError
    with the child's exception or exit status and stderr."""
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            status = 0
            try:
                os.close(read_fd)
                os.dup2(err.fileno(), 2)
                try:
                    payload = ("ok", fn())
                except BaseException:  # noqa: BLE001 - carried back to the parent
                    payload = ("raised", traceback.format_exc())
                with os.fdopen(write_fd, "wb") as out:
                    pickle.dump(payload, out)
            except BaseException:  # noqa: BLE001
                status = 3
            os._exit(status)
        os.close(write_fd)
        chunks, deadline, timed_out = [], time.monotonic() + timeout, False
        with os.fdopen(read_fd, "rb", buffering=0) as inp:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([inp], [], [], left)[0]:
                    os.kill(pid, signal.SIGKILL)
                    chunks, timed_out = [], True
                    break
                chunk = inp.read(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        data = b"".join(chunks)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        stderr = err.read().decode(errors="replace").strip()
    if timed_out:
        raise AssertionError(f"the child ran past {timeout} s; stderr:\n{stderr}")
    if not data:
        raise AssertionError(f"the child died (wait status {status}); stderr:\n{stderr}")
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise AssertionError(f"{value}\nstderr:\n{stderr}")
    return value


PIPELINED = [n for n in ALL_EXAMPLES if n.startswith("pipeline_")]


@pytest.mark.parametrize("name", [n for n in ALL_EXAMPLES if n not in PIPELINED])
def test_example_assembles_for_gfx942(name: str):
    module = example_module(name)

    def build() -> tuple[str, bytes, int]:
        compiled = compile_module(module, "gfx942")
        return compiled.binary_kind, compiled.binary[:4], compiled.warp_size

    kind, magic, warp = run_in_child(build)
    assert (kind, magic, warp) == ("elf", b"\x7fELF", 64)


@pytest.mark.parametrize("name", PIPELINED)
def test_pipelines_on_gfx942_are_refused_at_the_users_line(name: str):
    from tilekit.errors import LoweringError

    with pytest.raises(LoweringError, match="AMD") as info:
        compile_module(example_module(name), "gfx942")
    assert info.value.loc is not None and info.value.loc.file.endswith(f"{name}.py")


# --- SASS -----------------------------------------------------------------------------------


@needs_cuobjdump
def test_vector_add_moves_128_bits_per_access_on_sm_90a():
    module = example_module("vector_add")
    assert module.kernel.aligned16 == frozenset({"X", "Y", "Out"})  # the specialization
    text = sass.disassemble(cubin_of(module, "sm_90a"))
    assert "code for sm_90a" in text
    ops = [i.split()[0] for i in sass.instructions(text)]
    assert "LDG.E.128" in ops and "STG.E.128" in ops, sorted(set(ops))
    # the same through nvdisasm, when it is installed
    if sass.available("nvdisasm"):
        assert [i.split()[0] for i in sass.instructions(
            sass.disassemble(cubin_of(module, "sm_90a"), "nvdisasm"))] == ops


@needs_cuobjdump
@pytest.mark.parametrize("dtype", [f32, bf16], ids=["f32", "bf16"])
def test_fma_is_one_fused_instruction(dtype: Any):
    """``tk.fma`` is ``FFMA`` (bfloat16 fused in float32), never a multiply and an add."""
    module = K.fma.trace(*(np.zeros(1000, dtype) for _ in range(4)), 1000, BLOCK=1024)
    ops = [i.split()[0].split(".")[0] for i in sass.instructions(
        sass.disassemble(cubin_of(module, "sm_90a")))]
    assert "FFMA" in ops and not {"FMUL", "FADD"} & set(ops), sorted(set(ops))


@needs_cuobjdump
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_softmax_of_a_4097_row_does_not_spill(arch: str):
    text = sass.disassemble(cubin_of(example_module("softmax"), arch))
    ops = {i.split()[0].split(".")[0] for i in sass.instructions(text)}
    assert ops and not ops & {"LDL", "STL"}, "local memory (spills) in softmax"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_a_row_divided_by_its_sum_computes_one_reciprocal(arch: str):
    """The example softmax's ``e / sum`` divides 33 registers per thread by one value: one
    reciprocal estimate per row and a float64 correction per element, no ``div.rn.f32``
    (each expands to a slow-path call that cost ptxas ~2 ms). Division by per-element
    divisors keeps ``div.rn.f32``; by a power of two, a multiply."""
    ptx = ptx_of(example_module("softmax"), arch)
    assert ptx.count("rcp.approx.ftz.f64") == 1 and "div.rn.f32" not in ptx
    x = np.zeros(1000, f32)
    ptx = ptx_of(K.binop.trace(x, x, x, 1000, OP="div", EXPECT=tk.float32, BLOCK=512), arch)
    assert "div.rn.f32" in ptx and "rcp.approx" not in ptx
    ptx = ptx_of(K.binop_literal.trace(x, x, 1000, OP="div", LIT=4.0, LEFT=False,
                                       EXPECT=tk.float32, BLOCK=512), arch)
    assert "div" not in ptx.replace(".visible", "") and "rcp" not in ptx
    assert "mul.rn.f32" in ptx or "mul.f32" in ptx


def test_sass_instructions_parse_predicates_and_drop_encodings():
    text = ("        /*0100*/              @!P5 LDG.E.128 R4, desc[UR4][R4.64] ;"
            "                 /* 0x000000040404d981 */\n"
            "                                                       /* 0x000e220000000800 */\n"
            "        /*0110*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;\n"
            "        /*0044*/ \t.dword\tadd\n")
    assert sass.instructions(text) == ["LDG.E.128 R4, desc[UR4][R4.64]",
                                       "BAR.SYNC.DEFER_BLOCKING 0x0"]


def test_sass_unknown_tool_is_an_error():
    with pytest.raises(ValueError, match="cuobjdump"):
        sass.tool("ptxas")


# --- regressions ------------------------------------------------------------------------------


@tk.kernel
def ticket(Counter, Tickets):
    t = tk.atomic_add(Counter, 0, 1)
    tk.store(Tickets, tk.program_id(0), t)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_scalar_atomic_has_two_barriers_not_tail_duplicated(arch: str):
    """The scalar atomic broadcasts its result through shared memory between two barriers.
    An inline-asm ``bar.sync`` was once tail-duplicated by LLVM into both arms of the
    owner's branch: three barriers, two of them divergent, and the GPU hung."""
    module = ticket.trace(np.zeros(1, i32), np.zeros(8, i32))
    ptx = ptx_of(module, arch)
    barriers = re.findall(r"^\s*(?:@!?%\w+\s+)?(?:bar|barrier)\.\S+.*$", ptx, re.MULTILINE)
    assert len(barriers) == 2 and all(re.search(r"\bbar\.sync\b", b) for b in barriers), \
        barriers
    assert not any(b.strip().startswith("@") for b in barriers), "a predicated barrier"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, ml_dtypes.bfloat16, np.float32])
def test_cross_warp_argmax_indices_are_4_byte_aligned_in_shared(arch: str, dtype: Any):
    """int8 argmax over axis 1 of a (7, 31) tile reduces across warps through shared
    memory: 7 one-byte values, then 7 int32 indices. The indices once started at byte 7
    and the GPU faulted (CUDA_ERROR_MISALIGNED_ADDRESS)."""
    module = K.reduce_nd.trace(np.zeros((7, 31), dtype), np.zeros(7, i32), SHAPE=(7, 31),
                               KIND="argmax", AXIS=1, KEEP=False, EXPECT=tk.int32,
                               OUT_SHAPE=(7,))
    ptx = ptx_of(module, arch)
    assert re.search(r"st\.shared\.b32", ptx), "no int32 index through shared memory"
    assert misaligned_shared_accesses(ptx) == []


def test_the_alignment_check_finds_a_misaligned_shared_store():
    ptx = """
    mov.b64 %rd1, tk_smem;
    mul.wide.u32 %rd2, %r4, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.shared.b32 [%rd3+7], %r5;
    st.shared.b32 [%rd3+8], %r5;
    mul.lo.s32 %r6, %r1, 35;
    cvt.u64.u32 %rd4, %r6;
    add.s64 %rd5, %rd1, %rd4;
    ld.shared.b8 %rs1, [%rd5];
    ld.shared.v2.b32 {%r7, %r8}, [%rd5];
    """
    bad = misaligned_shared_accesses(ptx)
    assert len(bad) == 2 and "+7" in bad[0] and "v2" in bad[1], bad


# --- a spread of test kernels links for sm_90a ----------------------------------------------

_V = 97  # a ragged length


def _vec(dtype: Any = f32, n: int = _V) -> np.ndarray:
    return np.zeros(n, dtype)


KERNEL_CASES: dict[str, Callable[[], Module]] = {
    "reduce_sum_axis0_3d": lambda: K.reduce_nd.trace(
        np.zeros((4, 5, 6), f32), _vec(f32, 30), SHAPE=(4, 5, 6), KIND="sum", AXIS=0,
        KEEP=False, EXPECT=tk.float32, OUT_SHAPE=(5, 6)),
    "row_reduce_max_4097": lambda: K.row_reduce_grid.trace(
        np.zeros((3, 4097), f32), _vec(f32, 3), N=4097, KIND="max"),
    "cumsum2d_axis0": lambda: K.cumsum2d.trace(
        np.zeros((7, 33), i32), np.zeros((7, 33), i32), M=7, N=33, AXIS=0, EXPECT=tk.int32),
    "matmul_trans_b_bf16": lambda: K.matmul.trace(
        np.zeros((65, 33), bf16), np.zeros((31, 33), bf16), np.zeros((65, 31), f32), 33,
        BM=32, BN=32, BK=16, ACC=tk.float32, TRANS_B=True),
    "nested_tiles_loops": lambda: K.nested_tiles.trace(
        np.zeros((37, 41), f32), _vec(f32, 37), 37, 41, BR=8, BC=16),
    "when_blocks": lambda: K.when_blocks.trace(
        _vec(), _vec(), _vec(i32, 8), _V, 0.5, BLOCK=32),
    "atomics_max": lambda: K.atomics.trace(
        _vec(i32, 16), _vec(i32), _vec(i32), _vec(i32), _V, KIND="max", BLOCK=64),
    "gather_2d": lambda: K.gather_2d.trace(
        np.zeros((5, 7), f32), _vec(f32, 64), R=8, C=8, OTHER=-1.0),
    "shapes3d_permute_reshape": lambda: K.shapes3d.trace(
        np.zeros((2, 4, 8), f32), np.zeros((8, 2, 4), f32), np.zeros((8, 8), f32),
        np.zeros((2, 4, 8), f32), np.zeros((3, 64), f32), A=2, B=4, C=8),
    "rope_reshape_pairs": lambda: K.rope.trace(
        np.zeros((5, 16), f32), np.zeros((5, 8), f32), np.zeros((5, 8), f32),
        np.zeros((5, 16), f32), H=16),
    "cross_entropy_argmax": lambda: K.cross_entropy.trace(
        np.zeros((3, 37), f32), _vec(i32, 3), _vec(f32, 3), _vec(i32, 3), V=37),
}


@needs_linker
@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_test_kernel_links_for_sm_90a(case: str):
    module = KERNEL_CASES[case]()
    cubin = cubin_of(module, "sm_90a")
    assert cubin.startswith(b"\x7fELF")
    assert not misaligned_shared_accesses(ptx_of(module, "sm_90a"))
