"""``TILEKIT_DUMP=sched``: the schedule report, in words and as data."""

from __future__ import annotations

import numpy as np

from tilekit import knobs
from tilekit.sched import Engine, schedule_pipelines
from tilekit.sched.dump import format_report

from .builders import facts_of, mixed, row_sum


def test_dump_shows_a_tma_rejection_with_its_rule(capsys) -> None:
    x = np.zeros((2, 37), np.float32)  # 148-byte rows: not a multiple of 16
    kernel = facts_of(row_sum(8), X=x)
    with knobs.override(dump=frozenset({"sched"})):
        scheduled = schedule_pipelines(kernel.module, "sm_90a")
    err = capsys.readouterr().err
    assert f"pipeline 0 at {__file__.rsplit('/', 1)[0]}/builders.py:{kernel.pipeline_line}" \
        in err
    assert "stages: 3" in err and "warp roles: uniform" in err
    assert "cp_async (auto, 4-byte chunks)" in err
    assert "tma rejected (asked for the bucket's weakest tensor: shape (3, 24), strides " \
        "(25, 1) elements, base aligned to 16 bytes):" in err
    assert "TMA_GLOBAL_STRIDE_ALIGN: global stride 100 bytes (globalStrides[0]) is not a " \
        "multiple of 16" in err
    assert "p0.X.0" in err and "offset       0" in err
    assert "pipeline shared memory: 432 of 232448 bytes (sm_90a)" in err
    assert "after schedule_pipelines" in err and "copy_g2s" in err
    (report,) = scheduled.kernel.schedule_reports
    assert report.streams[0].tma_rules == ("TMA_GLOBAL_STRIDE_ALIGN",)


def test_no_dump_without_the_knob(capsys) -> None:
    with knobs.override(dump=frozenset()):
        schedule_pipelines(row_sum(8).module, "sm_90a")
    assert capsys.readouterr().err == ""


def test_report_of_specialized_roles_and_two_streams() -> None:
    a = np.zeros((2, 40), np.float32)
    b = np.zeros((40, 3), np.float16)
    kernel = facts_of(mixed(8, 2, "specialized"), A=a, B=b)
    (report,) = schedule_pipelines(kernel.module, "sm_90a").kernel.schedule_reports
    assert report.engines == (Engine.TMA, Engine.PLAIN)
    text = format_report(report)
    # no dot in the body: no setmaxnreg, no padding warps
    assert "specialized (producer: 1 warp; consumer: 4 warps; no setmaxnreg)" in text
    assert "note: no setmaxnreg: the body has no dot" in text
    assert "expect 2 arrival(s)" in text
    assert "stream 1: B 8x1xf16 along 0: plain (auto)" in text
    assert "TMA_BOX_INNER_BYTES" in text and "CP_ASYNC_CHUNK" in text
    assert [a.name for a in report.allocations] == ["p0.A.0", "p0.B.1", "p0.full", "p0.empty"]
    assert report.total_bytes == report.bytes and report.limit == 227 * 1024


def test_roles_none_is_reported_as_uniform_for_now() -> None:
    (report,) = schedule_pipelines(row_sum(8).module, "sm_90a").kernel.schedule_reports
    assert "uniform" in format_report(report)
    assert "no warp roles requested" in report.roles.note
