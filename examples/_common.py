"""Shared helpers for the examples: random inputs, poisoned outputs, checks."""

from __future__ import annotations

import numpy as np


def poisoned(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An output buffer full of a sentinel (NaN for floats), so unwritten elements show."""
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt.name == "bfloat16":
        return np.full(shape, np.nan, dtype=dt)
    return np.full(shape, np.iinfo(dt).min if dt.kind in "iu" else True, dtype=dt)


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    out64 = np.asarray(out, dtype=np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    if np.isnan(out64).any():
        return float("inf")
    return float(np.linalg.norm(out64 - ref64) / max(np.linalg.norm(ref64), 1e-30))


def report(name: str, err: float, tol: float) -> float:
    status = "ok" if err <= tol else "FAILED"
    print(f"{name}: relative error {err:.2e} (tolerance {tol:.0e}) {status}")
    if err > tol:
        raise SystemExit(f"{name}: result differs from numpy")
    return err
