"""Running one program: inputs, the kernel from its source file, the backends, the reference,
and the comparison.

``check(prog, backends)`` is what the CI test and the device runner call. Its ``Outcome``
says, per backend, whether the kernel's outputs match the reference (``ok``), differ
(``mismatch``, with the elements), or why they could not be compared: tilekit refused a
program the reference accepts (``trace_error``, ``compile_error``), raised something that
is not a ``TilekitError`` (``crash``), accepted a program it should refuse (``accepted``),
or the reference could not say (``unreliable``, a generator gap, counted and skipped).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.fuzz import refnum as R
from tests.fuzz import render
from tests.fuzz.program import FLOATS, Program, TensorSpec, int_range
from tests.fuzz.reference import Memory, Rejected, evaluate
from tilekit.ir.dtypes import DType

# --- inputs -----------------------------------------------------------------------------------

SPECIAL_FLOATS = (0.0, -0.0, math_inf := float("inf"), -math_inf, float("nan"), float("nan"),
                  1.0, -1.0, 0.5, 65504.0, 1e-8, -3e38, 1e-45, 2.0 ** -126, 255.0, -128.5)


def random_values(rng: np.random.Generator, shape: tuple[int, ...], d: DType) -> np.ndarray:
    """Values of ``d``: mostly ordinary, some extreme, some special (NaN, inf, -0, limits)."""
    n = int(np.prod(shape)) if shape else 1
    kind = rng.integers(0, 100, size=n)
    if d in FLOATS:
        v = rng.uniform(-4, 4, size=n)
        small = rng.integers(-3, 4, size=n).astype(np.float64)
        wide = np.sign(rng.uniform(-1, 1, size=n)) * 2.0 ** rng.uniform(-30, 30, size=n)
        special = np.array(SPECIAL_FLOATS)[rng.integers(0, len(SPECIAL_FLOATS), size=n)]
        v = np.where(kind < 12, small, v)
        v = np.where((kind >= 12) & (kind < 20), wide, v)
        v = np.where(kind >= 92, special, v)
        with np.errstate(over="ignore"):
            return R.store(R.round_to(v, d), d).reshape(shape)
    if d is DType.BOOL:
        return (kind % 2 == 0).reshape(shape)
    lo, hi = int_range(d)
    small = rng.integers(max(lo, -10), min(hi, 10) + 1, size=n)
    full = np.array([int(x) for x in rng.integers(0, 2**63 - 1, size=n, dtype=np.int64)],
                    dtype=object) * 2 % (hi - lo + 1) + lo
    extreme = np.array([lo, hi, 0, 1, hi // 2 + 1, lo + 1], dtype=object)[
        rng.integers(0, 6, size=n)]
    v = np.where(kind < 55, small.astype(object), full)
    v = np.where(kind >= 88, extreme, v)
    return np.array([int(x) for x in v], dtype=object).astype(R.np_type(d)).reshape(shape)


def _base_shape(t: TensorSpec) -> tuple[int, ...]:
    if t.view == "step":
        return t.shape[:-1] + (2 * t.shape[-1],)
    if t.view == "T":
        return (t.shape[1], t.shape[0])
    return t.shape


def view_of(base: np.ndarray, t: TensorSpec) -> np.ndarray:
    if t.view == "step":
        return base[..., ::2]
    if t.view == "T":
        return base.T
    return base


def make_bases(prog: Program) -> dict[str, np.ndarray]:
    """Every tensor's underlying array (inputs: data; outputs: random values the kernel
    must overwrite exactly where it stores)."""
    out = {}
    for t in prog.tensors:
        seed = int(hashlib.sha256(f"{prog.data_seed}/{t.name}".encode()).hexdigest()[:8], 16)
        out[t.name] = random_values(np.random.default_rng(seed), _base_shape(t), t.dtype)
    return out


# --- kernels from source files ----------------------------------------------------------------

def load_kernel(prog: Program, directory: Path, name: str) -> tuple[Any, Path]:
    """Write the program's source to ``directory/name.py``, import it, return the kernel."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(render.source(prog))
    module_name = f"tilekit_fuzz_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(module_name, None)
    return getattr(module, render.KERNEL), path


def launch(kernel: Any, prog: Program, bases: dict[str, np.ndarray], backend: str) -> None:
    from tilekit import knobs

    views = {t.name: view_of(bases[t.name], t) for t in prog.tensors}
    args: list[Any] = [views[t.name] for t in prog.tensors]
    for s in prog.scalars:
        args.append(s.value if s.dtype is None else R.np_type(s.dtype).type(s.value))
    with knobs.override(interpret=backend == "interp"):
        kernel[prog.grid](*args)


# --- the reference and the comparison ---------------------------------------------------------

def reference(prog: Program, bases: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray,
                                                                                np.ndarray]]:
    """Expected output arrays and their error bounds (whole underlying arrays)."""
    copies = {name: b.copy() for name, b in bases.items()}
    errs = {name: np.zeros(b.shape) for name, b in copies.items()}
    memory = {t.name: Memory(view_of(copies[t.name], t), view_of(errs[t.name], t), t.dtype)
              for t in prog.tensors}
    evaluate(prog, memory)
    return {t.name: (copies[t.name], errs[t.name]) for t in prog.tensors if t.output}


@dataclass
class Mismatch:
    tensor: str
    count: int
    compared: int
    examples: list[tuple[tuple[int, ...], str, str, float]]  # index, got, expected, bound

    def describe(self) -> str:
        lines = [f"{self.tensor}: {self.count} of {self.compared} compared elements differ"]
        for idx, got, want, bound in self.examples:
            lines.append(f"  at {idx}: got {got}, expected {want}"
                         + (f" (within {bound:.3g})" if bound else " (exactly)"))
        return "\n".join(lines)


def compare(prog: Program, got: dict[str, np.ndarray],
            want: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[list[Mismatch], int, int]:
    """Mismatches, and how many elements were compared and skipped (unknown)."""
    out = []
    compared = skipped = 0
    for name, (exp, err) in want.items():
        g = got[name]
        d = prog.tensor(name).dtype
        known = np.isfinite(err)
        if d in FLOATS:
            gf, xf = R.to_f64(g), R.to_f64(exp)
            with np.errstate(invalid="ignore"):
                both_nan = np.isnan(gf) & np.isnan(xf)
                same_bits = (gf == xf) & (np.signbit(gf) == np.signbit(xf))
                close = np.abs(gf - xf) <= err * (1 + 1e-9)
            ok = both_nan | np.where(err == 0, same_bits, close | same_bits)
        else:
            ok = g == exp
        ok = ok | ~known
        compared += int(known.sum())
        skipped += int((~known).sum())
        bad = np.argwhere(~ok)
        if len(bad):
            examples = []
            for idx in bad[:6]:
                i = tuple(int(x) for x in idx)
                examples.append((i, repr(g[i].item()), repr(exp[i].item()), float(err[i])))
            out.append(Mismatch(name, len(bad), int(known.sum()), examples))
    return out, compared, skipped


# --- one program, end to end ------------------------------------------------------------------

@dataclass
class Result:
    status: str  # ok, mismatch, trace_error, compile_error, crash, accepted, rejected, unreliable
    detail: str = ""
    mismatches: list[Mismatch] = field(default_factory=list)
    compared: int = 0
    skipped: int = 0


@dataclass
class Outcome:
    reference: str  # ok, rejected, unreliable, crash
    detail: str
    results: dict[str, Result]
    path: Path | None = None

    @property
    def failed(self) -> bool:
        return self.reference == "crash" or any(
            r.status not in ("ok", "rejected", "unreliable") for r in self.results.values())

    def signature(self) -> str:
        """What went wrong, coarsely: failures with the same signature are the same kind."""
        if self.reference == "crash":
            return "reference crash: " + self.detail.strip().splitlines()[-1][:120]
        parts = []
        for backend, r in sorted(self.results.items()):
            if r.status in ("ok", "rejected", "unreliable"):
                continue
            lines = r.detail.strip().splitlines()
            # a traceback says what it is on its last line; a TilekitError on its first
            first = (lines[-1] if r.status == "crash" else lines[0])[:120] if lines else ""
            parts.append(f"{backend}: {r.status}" + (f": {first}" if r.status != "mismatch"
                                                      else ""))
        return "; ".join(parts)


def _tilekit_error(exc: BaseException) -> bool:
    from tilekit.errors import TilekitError

    return isinstance(exc, TilekitError)


def check(prog: Program, backends: tuple[str, ...], directory: Path, name: str) -> Outcome:
    """Run ``prog`` on each backend and compare with the reference."""
    bases = make_bases(prog)
    ref_status, ref_detail = "ok", ""
    want: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    try:
        want = reference(prog, bases)
    except Rejected as exc:
        ref_status, ref_detail = "rejected", str(exc)
    except R.Unreliable as exc:
        ref_status, ref_detail = "unreliable", str(exc)
    except Exception:  # a bug of the fuzzer itself
        ref_status, ref_detail = "crash", traceback.format_exc()
    results: dict[str, Result] = {}
    path: Path | None = None
    try:
        kernel, path = load_kernel(prog, directory, name)
    except Exception:
        return Outcome("crash", "rendering: " + traceback.format_exc(), {}, None)
    for backend in backends:
        got = {n: b.copy() for n, b in bases.items()}
        try:
            launch(kernel, prog, got, backend)
        except Exception as exc:
            text = "".join(traceback.format_exception_only(type(exc), exc))
            if ref_status == "rejected" and _tilekit_error(exc):
                results[backend] = Result("rejected", text)
            elif ref_status == "unreliable":
                results[backend] = Result("unreliable", ref_detail)
            elif not _tilekit_error(exc):
                results[backend] = Result("crash", traceback.format_exc())
            else:
                from tilekit.errors import TraceError

                kind = "trace_error" if isinstance(exc, TraceError) else "compile_error"
                results[backend] = Result(kind, text)
            continue
        if ref_status == "rejected":
            results[backend] = Result("accepted", ref_detail)
            continue
        if ref_status != "ok":
            results[backend] = Result(ref_status, ref_detail)
            continue
        mismatches, compared, skipped = compare(
            prog, {n: got[n] for n in want}, want)
        status = "mismatch" if mismatches else "ok"
        results[backend] = Result(status, "\n".join(m.describe() for m in mismatches),
                                  mismatches, compared, skipped)
    return Outcome(ref_status, ref_detail, results, path)
