"""Kernels written with ``tk.pipeline``, traced for real arrays (whose facts pick the
engines), scheduled, and run on the interpreter against the plain loop and numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tilekit.errors import ScheduleError
from tilekit.sched import Engine, RoleMode, schedule_pipelines

from .builders import run


@tk.kernel
def weighted_row_sum(X: tk.Tensor, Y: tk.Tensor, BLOCK: tk.constexpr, STAGES: tk.constexpr,
                     ROLES: tk.constexpr):
    r = tk.program_id(0)
    acc = tk.zeros((1, BLOCK), tk.float32)
    for i, x in tk.pipeline(X.tiles((1, BLOCK), row=r), stages=STAGES, warp_roles=ROLES):
        acc += x.to(tk.float32) * (i + 1).to(tk.float32)
    Y.tile((1, BLOCK), (r, 0)).store(acc)


@tk.kernel
def matmul(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr,
           BK: tk.constexpr, STAGES: tk.constexpr, ROLES: tk.constexpr):
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                               stages=STAGES, warp_roles=ROLES):
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc)


@tk.kernel
def forced(X: tk.Tensor, Y: tk.Tensor, ENGINE: tk.constexpr):
    r = tk.program_id(0)
    acc = tk.zeros((1, 8), tk.float32)
    for _, x in tk.pipeline(X.tiles((1, 8), row=r), stages=2, engine=ENGINE):  # LINE
        acc += x
    Y.tile((1, 8), (r, 0)).store(acc)


def _weighted(x: np.ndarray, block: int) -> np.ndarray:
    n = -(-x.shape[1] // block)
    padded = np.zeros((x.shape[0], n * block))
    padded[:, :x.shape[1]] = x.astype(np.float64)
    return sum(padded[:, i * block:(i + 1) * block] * (i + 1) for i in range(n)) + \
        np.zeros((x.shape[0], block))


@pytest.mark.parametrize("roles", [None, True, False])
@pytest.mark.parametrize("cols,dtype,target,engine", [
    (40, np.float32, "sm_90a", Engine.TMA),  # 160-byte rows
    (37, np.float32, "sm_90a", Engine.CP_ASYNC),  # 148-byte rows
    (37, ml_dtypes.bfloat16, "sm_90a", Engine.PLAIN),  # 74-byte rows
    (40, np.float32, "sm_80", Engine.CP_ASYNC),
    (8000, np.float32, "sm_90a", Engine.TMA),  # 1000 steps
    (17, np.float32, "sm_90a", Engine.TMA),  # ragged: 3 = STAGES steps, the last 1 wide
])
def test_row_sum(cols: int, dtype, target: str, engine: Engine, roles) -> None:
    block, stages = 8, 3
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((3, cols)).astype(dtype)
    if cols == 17:  # 16-byte rows need 20 columns: keep 17 elements of a 20-wide buffer
        x = rng.standard_normal((3, 20)).astype(dtype)[:, :17]
    y = np.zeros((3, block), np.float32)
    module = weighted_row_sum.trace(x, y, BLOCK=block, STAGES=stages, ROLES=roles)
    scheduled = schedule_pipelines(module, target)
    (report,) = scheduled.kernel.schedule_reports
    assert report.engines == (engine,)
    specialized = roles is True and target == "sm_90a"
    assert report.roles.mode is (RoleMode.SPECIALIZED if specialized else RoleMode.UNIFORM)
    want = np.full_like(y, np.nan)
    got = want.copy()
    run(module, (3,), X=x, Y=want)
    run(scheduled, (3,), X=x, Y=got)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, _weighted(x, block), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("roles", [None, True])
@pytest.mark.parametrize("k", [1, 8, 16, 24, 33, 80])  # 1, 1, 2 = S-1, 3 = S, 5, 10 steps
def test_matmul(k: int, roles) -> None:
    bm, bn, bk, stages = 4, 4, 8, 3
    rng = np.random.default_rng(k)
    a = rng.standard_normal((6, k)).astype(np.float32)
    b = rng.standard_normal((k, 7)).astype(np.float32)
    c = np.full((6, 7), np.nan, np.float32)
    module = matmul.trace(a, b, c, BM=bm, BN=bn, BK=bk, STAGES=stages, ROLES=roles)
    scheduled = schedule_pipelines(module, "sm_90a")
    (report,) = scheduled.kernel.schedule_reports
    assert len(report.streams) == 2 and report.arrivals >= 1
    grid = (2, 2)
    want, got = c.copy(), c.copy()
    run(module, grid, A=a, B=b, C=want)
    run(scheduled, grid, A=a, B=b, C=got)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_forced_engine_error_names_the_users_line() -> None:
    x = np.zeros((2, 37), np.float32)
    module = forced.trace(x, np.zeros((2, 8), np.float32), ENGINE="tma")
    with pytest.raises(ScheduleError) as info:
        schedule_pipelines(module, "sm_90a")
    line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("LINE"))
    assert info.value.loc.line == line
    assert f"test_surface.py:{line}" in str(info.value)
    assert "TMA_GLOBAL_STRIDE_ALIGN" in str(info.value)


def test_wide_tiles_go_through_tma_as_several_boxes() -> None:
    x = np.random.default_rng(3).standard_normal((2, 1500)).astype(np.float32)  # 6000 B rows
    y = np.zeros((2, 512), np.float32)
    module = weighted_row_sum.trace(x, y, BLOCK=512, STAGES=2, ROLES=None)
    scheduled = schedule_pipelines(module, "sm_90a")
    (report,) = scheduled.kernel.schedule_reports
    assert report.engines == (Engine.TMA,) and report.streams[0].decision.box == (1, 256)
    copies = [op for op in scheduled.walk() if op.name == "copy_g2s"]
    assert copies and all(op.attrs["box"] == (1, 256) for op in copies)
    expects = [op for op in scheduled.walk() if op.name == "mbarrier_expect_tx"]
    assert expects and all(op.attrs["bytes"] == 2048 for op in expects)
    want, got = np.full_like(y, np.nan), np.full_like(y, np.nan)
    run(module, (2,), X=x, Y=want)
    run(scheduled, (2,), X=x, Y=got)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, _weighted(x, 512), rtol=1e-5, atol=1e-3)
