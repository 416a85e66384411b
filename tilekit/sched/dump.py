"""``TILEKIT_DUMP=sched``: the schedule of every pipeline, in words, then the scheduled IR.

For each pipeline: the user's line, the stage count, the warp roles, per stream the engine
(and, when a faster one was refused, each rule's name and message; when TMA reads a copy
the runtime makes of a tensor it refused, the layout library's repack plan and the rules the
tensor itself broke; for a stage a ``tk.dot``
reads in place, its swizzle and ldmatrix reads, or why it is not), and the shared-memory
plan (every ring's and barrier ring's offset and bytes, the function's total against the
target's limit).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TextIO

from tilekit.codegen.target import Target
from tilekit.ir.core import Module
from tilekit.ir.passes import dump
from tilekit.layout.tma import GlobalTensor
from tilekit.sched.engines import Engine
from tilekit.sched.report import RoleMode, ScheduleReport


def _where(report: ScheduleReport) -> list[str]:
    if report.loc is None:
        return ["<unknown line>"]
    out = [str(report.loc)]
    text = report.loc.source_line()
    if text is not None:
        out.append("    " + text.strip())
    return out


def _asked(witness: GlobalTensor | None) -> str:
    if witness is None:
        return ""
    return (f" (asked for the bucket's weakest tensor: shape {witness.shape}, strides "
            f"{witness.strides} elements, base aligned to {witness.base_align} bytes)")


def format_report(report: ScheduleReport) -> str:
    """One pipeline's schedule, several lines."""
    head, *source = _where(report)
    lines = [f"pipeline {report.pipeline} at {head}"] + [f"  {s}" for s in source]
    r = report.roles
    roles = f"{r.mode}"
    if r.mode is RoleMode.SPECIALIZED:
        if r.producer_regs is None:
            roles += (f" (producer: {r.producer_warps} warp; consumer: {r.consumer_warps} "
                      "warps; no setmaxnreg)")
        else:
            roles += (f" (producer: {r.producer_warps} warp, {r.producer_regs} registers; "
                      f"consumer: {r.consumer_warps} warps, {r.consumer_regs} registers)")
    lines.append(f"  stages: {report.stages}; warp roles: {roles}; full barriers expect "
                 f"{report.arrivals} arrival(s) per phase")
    if r.note:
        lines.append(f"    note: {r.note}")
    for s in report.streams:
        how = "forced" if s.decision.forced else "auto"
        extra = ""
        if s.engine is Engine.CP_ASYNC:
            extra = f", {s.decision.vector_bytes}-byte chunks"
            if s.decision.checked:
                extra += (" if the base and row strides are multiples of "
                          f"{s.decision.vector_bytes} bytes at run time, else element copies")
        elif s.engine is Engine.TMA and s.decision.box is not None:
            box = s.decision.box
            copies = s.tile_bytes // (math.prod(box) * s.dtype.itemsize)
            extra = (f", {s.tile_bytes} transaction bytes per stage, {copies} box"
                     f"{'es' if copies > 1 else ''} of {'x'.join(map(str, box))}")
        dims = "x".join(map(str, s.shape))
        edge = "edge tiles guarded" if s.guarded else "no edge tiles (divisible)"
        lines.append(f"  stream {s.index}: {s.tensor} {dims}x{s.dtype.short} along {s.axis}: "
                     f"{s.engine} ({how}{extra}); {edge}")
        if s.decision.repack:
            lines.append(f"    TMA reads a copy of {s.tensor} that the runtime makes before each "
                         f"launch (the layout library's plan for the bucket's weakest tensor: "
                         f"{s.decision.repack_note})")
            lines.append(f"    TMA refused {s.tensor} itself:")
            lines.extend(f"      {x.rule.name}: {x.message}" for x in s.tma_rejections)
        if s.feeds is not None:
            lines.append(f"    stage read in place by tk.dot: {s.feeds.describe()}")
        elif s.feed_note:
            lines.append(f"    stage read into registers (only tk.dot reads it, but "
                         f"{s.feed_note})")
        for engine in Engine:
            rejected = s.decision.rejected(engine)
            if not rejected or engine is s.engine and not s.decision.forced:
                continue
            lines.append(f"    {engine} rejected{_asked(s.decision.witness)}:")
            lines.extend(f"      {x.rule.name}: {x.message}" for x in rejected)
    reuse = ""
    if report.reuses:
        reuse = f", reusing the bytes of pipeline(s) {', '.join(map(str, report.reuses))}"
        if any(s.engine is Engine.TMA for s in report.streams):
            reuse += " (fence.proxy.async first)"
    lines.append(f"  shared memory: {report.bytes} bytes at offset {report.base}{reuse}")
    for a in report.allocations:
        kind = "mbarriers" if a.is_barrier else "stages"
        lines.append(f"    {a.name:<24} offset {a.offset:>7}  {a.bytes:>7} bytes  ({kind})")
    return "\n".join(lines)


def format_reports(function: str, target: str, reports: Sequence[ScheduleReport],
                   total: int, limit: int) -> str:
    out = [f"// ----- sched: {function} on {target} -----"]
    out += [format_report(r) for r in reports]
    if not reports:
        out.append("no pipelines")
    out.append(f"pipeline shared memory: {total} of {limit} bytes ({target})")
    return "\n".join(out) + "\n"


def dump_schedule(module: Module, target: Target, stream: TextIO | None = None) -> None:
    """The reports of every scheduled function, then the scheduled IR."""
    out = stream if stream is not None else sys.stderr
    for fn in module.functions:
        out.write(format_reports(fn.name, target.name, getattr(fn, "schedule_reports", ()),
                                 getattr(fn, "pipeline_smem_bytes", 0),
                                 target.max_shared_bytes))
    dump(module, "after schedule_pipelines", out)
