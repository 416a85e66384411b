"""The errors tilekit raises, and how they point at the user's source.

Every error a user can cause is a ``TilekitError``: a message, the source
location it is about (the user's line, not tilekit's), and ``hint:`` lines
saying what to do. Rendering shows the line with a caret, rustc-style::

    softmax.py:14:11: error: `if` on a runtime tile value
        if x > 0:
           ^~~~~
    hint: use tk.where(cond, a, b) for values, or `with tk.when(cond):` for effects

Checkers that find several problems raise once with all of them
(``related``). This module and ``tilekit.diagnostic`` (imported by the first
error) import nothing from tilekit, so every layer may use them.
"""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Sequence
from types import CodeType, FrameType, TracebackType
from typing import TYPE_CHECKING

from tilekit.record import Record

if TYPE_CHECKING:
    from tilekit.diagnostic import Diagnostic

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class SourceLoc(Record):
    """A position in a user's source file (1-based line, 0-based columns)."""
    __slots__ = ()
    file: str
    line: int
    col: int | None = None
    end_col: int | None = None
    end_line: int | None = None

    def __str__(self) -> str:
        col = f":{self.col + 1}" if self.col is not None else ""
        return f"{self.file}:{self.line}{col}"

    @property
    def short(self) -> str:
        """`basename:line:col`, stable across machines (used in printed IR)."""
        col = f":{self.col + 1}" if self.col is not None else ""
        return f"{os.path.basename(self.file)}:{self.line}{col}"

    def source_line(self) -> str | None:
        text = linecache.getline(self.file, self.line)
        return text.rstrip("\n") if text else None


def _positions(code: CodeType) -> list[tuple[int | None, int | None, int | None, int | None]]:
    cached = _POSITIONS.get(code)
    if cached is None:
        if hasattr(code, "co_positions"):
            cached = list(code.co_positions())
        else:  # Python 3.10: lines only
            cached = []
        _POSITIONS[code] = cached
    return cached


_POSITIONS: dict[CodeType, list] = {}


def _is_internal(filename: str) -> bool:
    # "<tilekit ...>": code tilekit generates (the launch fast path's dispatchers)
    return filename.startswith((_PACKAGE_DIR, "<frozen ", "<tilekit "))


def frame_loc(frame: FrameType) -> SourceLoc:
    """The location of the instruction a frame is executing."""
    code = frame.f_code
    positions = _positions(code)
    index = frame.f_lasti // 2
    if 0 <= index < len(positions):
        line, end_line, col, end_col = positions[index]
        if line is not None:
            return SourceLoc(code.co_filename, line, col, end_col, end_line)
    return SourceLoc(code.co_filename, frame.f_lineno)


def user_frames(tb: TracebackType | None) -> list[FrameType]:
    """The frames of a traceback outside tilekit's own package, outermost first."""
    frames = []
    while tb is not None:
        if not _is_internal(tb.tb_frame.f_code.co_filename):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def user_loc(skip: int = 1) -> SourceLoc | None:
    """The innermost frame outside tilekit's own package: the user's line.

    Walking frames costs about a microsecond per frame, cheap enough to do for
    every traced op.
    """
    frame: FrameType | None = sys._getframe(skip)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame_loc(frame) if frame is not None else None


class TilekitError(Exception):
    """Base of every error tilekit raises about a user's kernel or inputs."""

    kind = "error"

    def __init__(
        self,
        message: str,
        loc: SourceLoc | None = None,
        hints: Sequence[str] = (),
        related: Sequence[Diagnostic] = (),
    ) -> None:
        from tilekit.diagnostic import Diagnostic  # made by the first error, not at import

        self.diagnostic = Diagnostic(message, loc, tuple(hints))
        self.related = tuple(related)
        super().__init__(message)

    @property
    def message(self) -> str:
        return self.diagnostic.message

    @property
    def loc(self) -> SourceLoc | None:
        return self.diagnostic.loc

    @property
    def hints(self) -> tuple[str, ...]:
        return self.diagnostic.hints

    def __str__(self) -> str:
        parts = [self.diagnostic.render(self.kind)]
        parts.extend(d.render(self.kind) for d in self.related)
        return "\n".join(parts)


class TraceError(TilekitError):
    """The kernel's Python code did something the tracer cannot turn into IR."""


class LaunchError(TilekitError):
    """The arguments or grid of a launch are wrong (dtype, rank, count, device...)."""


class IRError(TilekitError):
    """The IR failed verification: a tilekit bug, or a malformed hand-built module."""


class LayoutError(TilekitError):
    """A layout is malformed, or no layout satisfies the constraints."""


class ScheduleError(TilekitError):
    """The pipeline schedule or the async protocol is invalid."""


class LoweringError(TilekitError):
    """An op could not be lowered for the target."""


class ExecutionError(TilekitError):
    """A kernel failed while running (interpreter faults)."""


class MemoryAccessError(ExecutionError):
    """A load, store or atomic touched memory outside its tensor."""


class PortfolioError(TilekitError):
    """An AOT portfolio file, or the declaration of what to build into one, is wrong."""


class PerformanceWarning(UserWarning):
    """A kernel runs correctly but slowly, for a reason tilekit can name (its registers
    spill to local memory). Shown once per kernel source line; silence it with
    ``warnings.simplefilter("ignore", tilekit.PerformanceWarning)`` or make it an error
    with ``"error"``."""
