"""tilekit's layout algebra against CuTe's C++ on 740 random cases (``cute_golden.json``).

The answers were printed by CuTe itself (``include/cute/layout.hpp`` of the CUTLASS commit the
file names, every shape and stride a static ``Int<N>``), by ``make_cute_golden.py``; cases
that CuTe refuses to compile are not in the file. tilekit must give the same layout, with
three deliberate differences, each checked here rather than waved through:

* **Size-1 leaves get stride 0.** CuTe keeps whatever stride its arithmetic produced for a
  mode of size 1; it never changes the function. Compared up to those strides.
* **The open leaf.** Past its size a layout runs on through its last leaf of size > 1 in
  tilekit, through its last leaf even of size 1 in CuTe (``tilekit.layout.inttuple``). Where a
  composition reaches past the left layout's size and that layout ends in a size-1 leaf, the
  answers differ; each is checked against its own extension.
* **Refusals.** tilekit refuses a composition that no layout equals (strides that neither
  divide nor are divided by a mode, digits that carry between modes), where CuTe returns a
  layout that is not the composition; and a ``None`` (keep) entry in the tiler of a zipped,
  tiled or flat divide or product, whose kept mode CuTe splits in two as if it were a
  (tile, rest) pair. Each refusal is checked to be truthful: the function is not a layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.layout.cute_strategies import reference_eval, reference_flatten, reference_values
from tilekit.errors import LayoutError
from tilekit.layout import cute
from tilekit.layout.cute import Layout, complement, make_layout

P = Layout.parse
GOLDEN = json.loads((Path(__file__).parent / "cute_golden.json").read_text())
CASES = GOLDEN["cases"]
OPS = sorted({c["op"] for c in CASES})


def tiler_of(entry: object) -> object:
    if entry is None or isinstance(entry, int):
        return entry
    if isinstance(entry, str):
        return P(entry)
    return tuple(tiler_of(e) for e in entry)  # type: ignore[union-attr]


def run(case: dict) -> Layout:
    a = P(case["a"])
    if case["op"] == "coalesce":
        profile = case["profile"]
        return cute.coalesce(a, None if profile is None else (1,) * profile)
    if case["op"] == "complement":
        return cute.complement(a, case["bound"])
    return getattr(cute, case["op"])(a, tiler_of(case["tiler"]))


def unit_strides_zeroed(layout: Layout) -> tuple[object, tuple[int, ...]]:
    shapes, strides = reference_flatten(layout.shape), reference_flatten(layout.stride)
    return layout.shape, tuple(0 if s == 1 else d for s, d in zip(shapes, strides, strict=True))


def cute_eval(layout: Layout, index: int) -> int:
    """``layout(index)`` as CuTe extends it past the size: through the last leaf, size 1 too."""
    shapes, strides = reference_flatten(layout.shape), reference_flatten(layout.stride)
    value = 0
    for s, d in zip(shapes[:-1], strides[:-1], strict=True):
        value += (index % s) * d
        index //= s
    return value + index * strides[-1]


def is_a_layout(shape: object, fn: list[int]) -> bool:
    """Whether the function with these values (colexicographic order) on ``shape`` is a
    layout: linear in every leaf coordinate, so its strides are its values at unit steps."""
    leaves = reference_flatten(shape)
    steps = [1]
    for n in leaves[:-1]:
        steps.append(steps[-1] * n)
    strides = [fn[step] - fn[0] if n > 1 else 0 for n, step in zip(leaves, steps, strict=True)]
    probe = Layout(tuple(leaves), tuple(strides))
    return fn[0] == 0 and reference_values(probe) == fn


def composed(a: Layout, b: Layout) -> list[int]:
    return [reference_eval(a, x) for x in reference_values(b)]


def refused_compositions(case: dict) -> list[tuple[Layout, Layout]]:
    """The compositions ``A o B`` that the case's operation is made of (per divided or
    multiplied mode), for checking a refusal."""
    a, op = P(case["a"]), case["op"]
    if op == "composition":
        return [(a, P(case["tiler"]))]
    tiler = tiler_of(case["tiler"])
    if op in ("blocked_product", "raked_product"):
        b = tiler
        r = max(a.rank, b.rank)  # type: ignore[union-attr]
        pad = [Layout(1, 0)]
        a = make_layout(*a.modes(), *pad * (r - a.rank)) if a.rank < r else a
        b = make_layout(*b.modes(), *pad * (r - b.rank)) if b.rank < r else b  # type: ignore
        tiler = b
    pairs = list(zip(a.modes(), tiler)) if isinstance(tiler, tuple) else [(a, tiler)]
    out = []
    for mode, t in pairs:
        if t is None:
            continue
        t = t if isinstance(t, Layout) else Layout(t, 1)
        if op.endswith("divide"):
            out.append((mode, make_layout(t, complement(t, mode.size))))
        else:
            out.append((complement(mode, mode.size * t.cosize), t))
    return out


def check_case(case: dict) -> str:
    """Compare one case; return how it agreed (for the census below)."""
    want = P(case["cute"])
    try:
        got = run(case)
    except LayoutError as err:
        if "None (keep)" in str(err):
            entries = case["tiler"] if isinstance(case["tiler"], list) else []
            assert None in entries and case["op"].split("_")[0] in ("zipped", "tiled", "flat")
            return "refused: None in a zipped/tiled/flat tiler"
        assert "composition" in str(err), err
        parts = refused_compositions(case)
        assert any(not is_a_layout(b.shape, composed(a, b)) for a, b in parts), (
            f"tilekit refused {case}, yet every composition in it is a layout"
        )
        return "refused: not a layout"
    if unit_strides_zeroed(got) == unit_strides_zeroed(want):
        return "same" if got == want else "same but for size-1 strides"
    assert case["op"] == "composition", f"{case}: tilekit gives {got}"
    a, b = P(case["a"]), P(case["tiler"])
    assert reference_flatten(a.shape)[-1] == 1 and max(reference_values(b)) >= a.size, (
        f"{case}: tilekit gives {got}, and not because of the open leaf"
    )
    # both compatible with B (the mode sizes of B), each the composition in its own extension
    assert [m.size for m in got.modes()] == [m.size for m in want.modes()] == [
        m.size for m in b.modes()
    ]
    assert reference_values(got) == composed(a, b)
    assert reference_values(want) == [cute_eval(a, x) for x in reference_values(b)]
    return "open leaf"


@pytest.mark.parametrize("op", OPS)
def test_agrees_with_cute(op: str) -> None:
    census: dict[str, int] = {}
    cases = [c for c in CASES if c["op"] == op]
    for case in cases:
        how = check_case(case)
        census[how] = census.get(how, 0) + 1
    agreed = census.get("same", 0) + census.get("same but for size-1 strides", 0)
    assert agreed > 0.9 * len(cases), census


def test_the_golden_cases_cover_ranks_one_to_three_and_nesting() -> None:
    ranks = {P(c["a"]).rank for c in CASES}
    assert ranks == {1, 2, 3}
    for op in ("blocked_product", "raked_product"):
        rank_one = [c for c in CASES if c["op"] == op and P(c["a"]).rank == 1]
        assert sum(isinstance(P(c["a"]).shape, int) for c in rank_one) > 5
        assert sum(P(c["tiler"]).rank == 1 for c in rank_one) > 5
    assert any(P(c["a"]).depth >= 3 for c in CASES)


def test_the_issue_27_cases() -> None:
    """The rank-1 products that CuTe and tilekit disagreed on (CuTe's answers)."""
    assert cute.raked_product(P("5:1"), P("4:1")) == P("((4,5)):((5,1))")
    # element j of copy i at 5*i + j, copy i fastest: 0, 5, 10, 15, 1, 6, ...
    assert cute.raked_product(P("5:1"), P("4:1")).to_table(flat=True).tolist() == [
        5 * i + j for j in range(5) for i in range(4)
    ]
    assert cute.raked_product(P("8:1"), P("2:4")) == P("((2,8)):((32,1))")
    assert cute.blocked_product(P("8:1"), P("2:4")) == P("((8,2)):((1,32))")
