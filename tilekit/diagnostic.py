"""One problem to report: a message, the source location it is about, and hints;
rendered with the line and a caret (``tilekit.errors`` describes the format).

Imported by the first error (``TilekitError``) or checker that makes one, not with
``tilekit.errors``: a process that launches prebuilt kernels and raises nothing never
needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilekit.record import Record

if TYPE_CHECKING:
    from tilekit.errors import SourceLoc


class Diagnostic(Record):
    __slots__ = ()
    message: str
    loc: SourceLoc | None = None
    hints: tuple[str, ...] = ()

    def render(self, kind: str = "error") -> str:
        head = f"{self.loc}: {kind}: {self.message}" if self.loc else f"{kind}: {self.message}"
        lines = [head]
        if self.loc is not None:
            text = self.loc.source_line()
            if text is not None:
                lines.append("    " + text)
                if self.loc.col is not None:
                    width = 1
                    same_line = self.loc.end_line in (None, self.loc.line)
                    if self.loc.end_col is not None and same_line:
                        width = max(1, self.loc.end_col - self.loc.col)
                    lines.append("    " + " " * self.loc.col + "^" + "~" * (width - 1))
        lines.extend(f"hint: {h}" for h in self.hints)
        return "\n".join(lines)
