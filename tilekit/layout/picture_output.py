"""Writing a :class:`~tilekit.layout.pictures.Picture` out: SVG, an ASCII table, or PNG.

Steps 2 and 3 of ``pictures`` (its docstring says what is drawn and why): a picture becomes SVG
text (pure string building, no dependency) or a text table for terminals, and SVG becomes PNG
through an external renderer (``cairosvg``, or ``rsvg-convert`` / ``inkscape`` on PATH) when
one is installed. Split out of ``pictures``, which keeps turning layouts into pictures and
re-exports :class:`PngRenderer`, :func:`find_png_renderer` and :func:`svg_to_png`. The output
is byte for byte what it was before the split: the same geometry, markup, ``data-*`` facts and
tooltips, which tools and tests read.

``pictures`` imports this module at its top; this module needs ``pictures`` (the picture
types, the text colour of a fill) only when drawing, so it imports ``pictures`` at its bottom
and either module can be imported first.
"""

from __future__ import annotations

import enum
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

__all__ = ["PngRenderer", "find_png_renderer", "picture_svg", "picture_text", "svg_to_png"]

# Drawing geometry (pixels).
_FONT = 10.0
_CHAR_W = 0.6 * _FONT  # monospace advance
_LINE = 12.0
_MARGIN = 16.0
_MIN_CELL = 3.0
_MAX_SHRUNK_CELL = 24.0


# ---------------------------------------------------------------------------------------- SVG


@dataclass(frozen=True)
class _Geometry:
    cell_w: float
    cell_h: float
    labels: bool


def _geometry(picture: pictures.Picture, view: pictures.View) -> _Geometry:
    cells = [cell for panel in picture.panels for cell in panel.cells]
    chars = max((len(line) for cell in cells for line in cell.lines), default=1)
    lines = max((len(cell.lines) for cell in cells), default=1)
    natural_w = max(24.0, chars * _CHAR_W + 8.0)
    natural_h = max(22.0, lines * _LINE + 8.0)
    cols = max((panel.cols for panel in picture.panels), default=1)
    col_chars = max((len(label) for panel in picture.panels for label in panel.col_labels),
                    default=1)
    natural_w = max(natural_w, col_chars * _CHAR_W + 4.0)
    header = max((len(label) for panel in picture.panels for label in panel.row_labels),
                 default=0) * _CHAR_W + 8.0
    room = view.max_width_px - 2 * _MARGIN - header
    shrunk = min(_MAX_SHRUNK_CELL, max(_MIN_CELL, room / cols))
    always = view.labels is pictures.Labels.ALWAYS
    auto = view.labels is pictures.Labels.AUTO
    if view.cell_px is not None:
        if view.cell_px <= 0:
            raise pictures.PictureError(f"cell_px must be positive, got {view.cell_px}")
        fits = natural_w <= view.cell_px and natural_h <= view.cell_px
        show = always or (auto and fits)
        return _Geometry(view.cell_px, view.cell_px, show)
    if always or (auto and cols * natural_w <= room):
        return _Geometry(natural_w, natural_h, True)
    return _Geometry(shrunk, shrunk, False)


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _panel_svg(panel: pictures.Panel, index: int, x0: float, y0: float, geo: _Geometry) -> tuple[
    list[str], float, float
]:
    """The SVG of one panel with its top-left corner at (x0, y0); returns (parts, width, height)."""
    header_w = max((len(label) for label in panel.row_labels), default=0) * _CHAR_W + 8.0
    title_h = _LINE + 6.0 if panel.title else 0.0
    col_header_h = _LINE + 4.0
    grid_x, grid_y = x0 + header_w, y0 + title_h + col_header_h
    width = header_w + panel.cols * geo.cell_w
    height = title_h + col_header_h + panel.rows * geo.cell_h
    parts = [f'<g class="panel" data-panel="{index}">']
    if panel.title:
        parts.append(f'<text class="panel-title" x="{_num(x0)}" y="{_num(y0 + _LINE)}">'
                     f"{escape(panel.title)}</text>")
    widest = max((len(label) for label in panel.col_labels), default=1)
    col_step = max(1, math.ceil((widest * _CHAR_W + 4.0) / geo.cell_w))
    for j, label in enumerate(panel.col_labels):
        if j % col_step == 0:
            x = grid_x + (j + 0.5) * geo.cell_w
            parts.append(f'<text class="axis" x="{_num(x)}" y="{_num(grid_y - 4.0)}" '
                         f'text-anchor="middle">{escape(label)}</text>')
    row_step = max(1, math.ceil(_LINE / geo.cell_h))
    for i, label in enumerate(panel.row_labels):
        if i % row_step == 0 and label:
            y = grid_y + (i + 0.5) * geo.cell_h + 0.35 * _FONT
            parts.append(f'<text class="axis" x="{_num(grid_x - 4.0)}" y="{_num(y)}" '
                         f'text-anchor="end">{escape(label)}</text>')
    for cell in panel.cells:
        x = grid_x + (cell.col - panel.first_col) * geo.cell_w
        y = grid_y + (cell.row - panel.first_row) * geo.cell_h
        facts = "".join(f" data-{key}={quoteattr(str(value))}" for key, value in cell.facts)
        parts.append(f'<g class="cell" data-row="{cell.row}" data-col="{cell.col}"{facts}>'
                     f"<title>{escape(cell.tooltip)}</title>"
                     f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(geo.cell_w)}" '
                     f'height="{_num(geo.cell_h)}" fill="{cell.fill}"/>')
        if geo.labels:
            ink = "" if pictures._ink(cell.fill) == "#000000" else ' fill="#ffffff"'
            top = y + geo.cell_h / 2 - (len(cell.lines) - 1) * _LINE / 2 + 0.35 * _FONT
            for k, line in enumerate(cell.lines):
                parts.append(f'<text x="{_num(x + geo.cell_w / 2)}" y="{_num(top + k * _LINE)}" '
                             f"{ink}>{escape(line)}</text>")
        parts.append("</g>")
    parts.append("</g>")
    return parts, width, height


def picture_svg(picture: pictures.Picture, view: pictures.View) -> str:
    geo = _geometry(picture, view)
    body: list[str] = []
    y = _MARGIN + 18.0 + _LINE * len(picture.notes) + 8.0
    x = _MARGIN
    row_height = 0.0
    width = _MARGIN * 2 + len(picture.title) * 10.0
    for line in picture.notes:
        width = max(width, _MARGIN * 2 + len(line) * 0.62 * 11.0)
    for index, panel in enumerate(picture.panels):
        parts, w, h = _panel_svg(panel, index, x, y, geo)
        if x > _MARGIN and x + w > view.max_width_px - _MARGIN:
            x, y, row_height = _MARGIN, y + row_height + _MARGIN, 0.0
            parts, w, h = _panel_svg(panel, index, x, y, geo)
        body.extend(parts)
        width = max(width, x + w + _MARGIN)
        x += w + 2 * _MARGIN
        row_height = max(row_height, h)
    y += row_height + _MARGIN
    legend = ['<g class="legend">']
    x = _MARGIN
    for swatch in picture.legend:
        item_w = 14.0 + 6.0 + len(swatch.text) * _CHAR_W + 18.0
        if x > _MARGIN and x + item_w > max(width, view.max_width_px) - _MARGIN:
            x, y = _MARGIN, y + 20.0
        legend.append(f'<rect x="{_num(x)}" y="{_num(y)}" width="14" height="14" '
                      f'fill="{swatch.fill}" stroke="#555555" stroke-width="0.5"/>'
                      f'<text x="{_num(x + 20.0)}" y="{_num(y + 11.0)}">'
                      f"{escape(swatch.text)}</text>")
        x += item_w
        width = max(width, x)
    legend.append("</g>")
    height = y + (20.0 if picture.legend else 0.0) + _MARGIN
    stroke = 1.0 if geo.cell_w >= 8 else 0.3
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(width)}" height="{_num(height)}" '
        f'viewBox="0 0 {_num(width)} {_num(height)}">',
        f"<title>{escape(picture.title)}</title>",
        "<style>text{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;font-size:"
        f"{_num(_FONT)}px}}.cell text{{text-anchor:middle}}"
        f".cell rect{{stroke:#ffffff;stroke-width:{_num(stroke)}}}"
        ".title{font-size:16px;font-weight:bold}.note{font-size:11px;fill:#333333}"
        ".panel-title{font-size:12px;font-weight:bold}.axis{fill:#555555}</style>",
        '<rect class="background" width="100%" height="100%" fill="#ffffff"/>',
        f'<text class="title" x="{_num(_MARGIN)}" y="{_num(_MARGIN + 14.0)}">'
        f"{escape(picture.title)}</text>",
    ]
    for k, line in enumerate(picture.notes):
        head.append(f'<text class="note" x="{_num(_MARGIN)}" '
                    f'y="{_num(_MARGIN + 18.0 + _LINE * (k + 1))}">{escape(line)}</text>')
    return "\n".join([*head, *body, *legend, "</svg>"]) + "\n"


# --------------------------------------------------------------------------------------- text


def picture_text(picture: pictures.Picture) -> str:
    """An ASCII table per panel: the same labels as the SVG, one cell per column."""
    out = [picture.title, *picture.notes]
    for panel in picture.panels:
        labels = {(c.row, c.col): " ".join(line for line in c.lines if line) for c in panel.cells}
        width = max([len(v) for v in labels.values()] + [len(v) for v in panel.col_labels] + [1])
        row_w = max([len(v) for v in panel.row_labels] + [1])
        out.append("")
        if panel.title:
            out.append(panel.title)
        out.append(" " * row_w + " | " + " ".join(v.rjust(width) for v in panel.col_labels))
        out.append("-" * row_w + "-+-" + "-" * ((width + 1) * panel.cols - 1))
        for i, row_label in enumerate(panel.row_labels):
            row = panel.first_row + i
            texts = (labels.get((row, panel.first_col + j), "") for j in range(panel.cols))
            out.append(row_label.rjust(row_w) + " | " + " ".join(t.rjust(width) for t in texts))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------- PNG


class PngRenderer(enum.Enum):
    """The SVG rasterizers tried, in this order, for ``.png`` output."""

    CAIROSVG = enum.auto()  # the Python package
    RSVG_CONVERT = enum.auto()  # librsvg's command-line tool
    INKSCAPE = enum.auto()


def find_png_renderer() -> PngRenderer | None:
    """The first installed renderer, or None."""
    try:
        import cairosvg  # noqa: F401
    except (ImportError, OSError):  # OSError: the package is there but libcairo is not
        pass
    else:
        return PngRenderer.CAIROSVG
    if shutil.which("rsvg-convert"):
        return PngRenderer.RSVG_CONVERT
    if shutil.which("inkscape"):
        return PngRenderer.INKSCAPE
    return None


def svg_to_png(svg: str, path: str | os.PathLike[str]) -> PngRenderer:
    """Rasterize ``svg`` into ``path``; says which renderer did it."""
    renderer = find_png_renderer()
    target = str(path)
    if renderer is None:
        raise pictures.PictureError(
            f"cannot write {target}: PNG output needs an SVG renderer, and none is installed",
            hints=["pip install cairosvg (needs the cairo library)",
                   "or put rsvg-convert (Debian: apt-get install librsvg2-bin) or inkscape on PATH",
                   "or write .svg instead: every browser shows it"],
        )
    if renderer is PngRenderer.CAIROSVG:
        import cairosvg

        cairosvg.svg2png(bytestring=svg.encode(), write_to=target)
        return renderer
    command = (["rsvg-convert", "--format", "png", "--output", target]
               if renderer is PngRenderer.RSVG_CONVERT else
               ["inkscape", "--pipe", "--export-type=png", f"--export-filename={target}"])
    result = subprocess.run(command, input=svg.encode(), capture_output=True, check=False)
    if result.returncode != 0:
        raise pictures.PictureError(f"{command[0]} failed to write {target}: "
                           f"{result.stderr.decode(errors='replace').strip()}")
    return renderer


# The cycle with ``pictures`` (which re-exports the names above) is closed last: by now they
# exist, so ``pictures`` can import them whichever module was imported first.
from tilekit.layout import pictures  # noqa: E402
