"""Regenerate ``cute_golden.json``: random layout-algebra cases answered by CuTe's C++ headers.

Run by hand (not by pytest), with a CUTLASS checkout and a CUDA toolkit's include folder::

    python3 tests/layout/make_cute_golden.py --cutlass /tmp/cutlass --cuda /usr/local/cuda \
        --commit <the CUTLASS commit>

It draws cases from a fixed seed (ranks 1-3, nested modes, sizes 1, primes, odd and even
composites, strides with 0 and gaps), writes one C++ function per case with every shape and
stride a static ``Int<N>``, compiles them with g++ against ``include/cute``, drops the cases
CuTe refuses at compile time (its static asserts: non-injective complements, misaligned
compositions, mismatched ranks) and records what the program prints for the others.
The answers come from CuTe alone; tilekit is not imported.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "cute_golden.json"
SEED = 27
LEAF_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16)
STRIDE_VALUES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 30, 64)
CASES_PER_OP = {
    "coalesce": 60,
    "complement": 60,
    "composition": 80,
    "logical_divide": 90,
    "zipped_divide": 50,
    "tiled_divide": 40,
    "flat_divide": 40,
    "logical_product": 90,
    "zipped_product": 50,
    "tiled_product": 40,
    "flat_product": 40,
    "blocked_product": 160,
    "raked_product": 160,
}
CHUNK = 60
FIRST_CASE_LINE = 4

IntTuple = int | tuple


# ---------------------------------------------------------------------------------------------
# Random cases (plain Python values: shapes/strides as nested tuples)


def leaves_of(t: IntTuple) -> list[int]:
    return [x for s in t for x in leaves_of(s)] if isinstance(t, tuple) else [t]


def like(shape: IntTuple, values: Sequence[int]) -> IntTuple:
    it = iter(values)

    def build(p: IntTuple) -> IntTuple:
        return tuple(build(s) for s in p) if isinstance(p, tuple) else next(it)

    return build(shape)


def text(t: IntTuple) -> str:
    return "(" + ",".join(text(s) for s in t) + ")" if isinstance(t, tuple) else str(t)


def layout_text(layout: tuple[IntTuple, IntTuple]) -> str:
    return f"{text(layout[0])}:{text(layout[1])}"


def leaf_list(rng: random.Random, count: int, budget: int) -> list[int]:
    out = []
    for _ in range(count):
        leaf = rng.choice([n for n in LEAF_SIZES if n <= budget] or [1])
        out.append(leaf)
        budget = max(1, budget // leaf)
    return out


def nest(rng: random.Random, leaves: list[int], depth: int) -> IntTuple:
    """A random nesting of ``leaves`` (one leaf may stay an int)."""
    if len(leaves) == 1 and (depth == 0 or rng.random() < 0.6):
        return leaves[0]
    if depth == 0:
        return tuple(leaves)
    cuts = sorted(rng.sample(range(1, len(leaves)), rng.randint(0, len(leaves) - 1)))
    groups = [leaves[a:b] for a, b in zip([0, *cuts], [*cuts, len(leaves)], strict=False)]
    return tuple(nest(rng, g, depth - 1) for g in groups)


def shape_of_rank(rng: random.Random, rank: int, budget: int) -> IntTuple:
    """Top-level ``rank`` modes (rank 1: an int, a 1-tuple or a nested 1-tuple)."""
    modes = []
    for _ in range(rank):
        count = rng.choice((1, 1, 1, 2, 2, 3))
        leaves = leaf_list(rng, count, max(1, budget))
        budget = max(1, budget // max(1, _prod(leaves)))
        modes.append(nest(rng, leaves, 1) if count > 1 else leaves[0])
    if rank == 1 and rng.random() < 0.6 and not isinstance(modes[0], tuple):
        return modes[0]
    return tuple(modes)


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def strides_for(rng: random.Random, shape: IntTuple, kind: str) -> IntTuple:
    """``compact`` (permuted mixed radix), ``gapped`` (tractable with holes) or ``any``."""
    leaves = leaves_of(shape)
    if kind == "any":
        return like(shape, [rng.choice(STRIDE_VALUES) for _ in leaves])
    order = list(range(len(leaves)))
    if rng.random() < 0.5:
        rng.shuffle(order)
    gap = (lambda: 1) if kind == "compact" else (lambda: rng.choice((1, 1, 2, 3, 5)))
    strides = [0] * len(leaves)
    running = gap()
    for k in order:
        if leaves[k] == 1:
            strides[k] = rng.choice(STRIDE_VALUES)
            continue
        strides[k] = running
        running *= leaves[k] * gap()
    return like(shape, strides)


def layout(rng: random.Random, rank: int, budget: int, kinds: Sequence[str]) -> tuple:
    shape = shape_of_rank(rng, rank, budget)
    return shape, strides_for(rng, shape, rng.choice(kinds))


def factorizations(n: int) -> list[list[int]]:
    if n == 1:
        return [[]]
    out = [[n]]
    for f in range(2, n):
        if n % f == 0:
            out.extend([f, *rest] for rest in factorizations(n // f))
    return out


def digit_tile(rng: random.Random, shape: IntTuple, overflow: bool) -> tuple:
    """A layout whose modes walk disjoint runs of a refinement of ``shape``'s mixed radix."""
    digits: list[int] = []
    for leaf in leaves_of(shape):
        if leaf > 1:
            digits.extend(rng.choice(factorizations(leaf)))
    if overflow:
        digits.append(rng.randint(2, 3))
    prefix = [1]
    for d in digits:
        prefix.append(prefix[-1] * d)
    cuts = sorted(set(rng.randint(1, max(1, len(digits) - 1)) for _ in range(len(digits))))
    cuts = [c for c in cuts if 0 < c < len(digits)]
    runs = [(a, b) for a, b in zip([0, *cuts], [*cuts, len(digits)], strict=False) if b > a]
    modes = [(prefix[b] // prefix[a], prefix[a]) for a, b in runs if rng.random() < 0.6]
    if rng.random() < 0.2:
        modes.append((1, rng.choice(STRIDE_VALUES)))
    if not modes:
        modes.append((prefix[-1] if prefix[-1] > 1 else 1, 1))
    rng.shuffle(modes)
    shape_t = nest(rng, [m[0] for m in modes], 2)
    return shape_t, like(shape_t, [m[1] for m in modes])


def modes_of(lay: tuple) -> list[tuple]:
    shape, stride = lay
    if isinstance(shape, tuple):
        return list(zip(shape, stride, strict=False))
    return [lay]


def tiler_for(rng: random.Random, a: tuple) -> object:
    """A whole-layout tiler (layout or int) or a by-mode tuple of layouts, ints and None."""
    r = rng.random()
    if r < 0.3:
        return ("L", digit_tile(rng, a[0], overflow=False))
    if r < 0.4:
        return ("I", rng.randint(1, _prod(leaves_of(a[0])) + 2))
    entries = []
    for mode in modes_of(a)[: rng.randint(1, len(modes_of(a)))]:
        kind = rng.choice(("none", "int", "layout", "layout"))
        if kind == "none":
            entries.append(None)
        elif kind == "int":
            if isinstance(mode[0], int):
                entries.append(("I", rng.randint(1, mode[0] + 3)))
            else:
                digits = [d for leaf in leaves_of(mode[0]) if leaf > 1 for d in [leaf]]
                entries.append(("I", _prod(digits[: rng.randint(0, len(digits))])))
        else:
            entries.append(("L", digit_tile(rng, mode[0], overflow=False)))
    return ("T", entries)


def overruns_a_unit_leaf(a: tuple, tiler: object) -> bool:
    """Whether an int tile that does not divide its mode (a ragged edge: the rest runs past the
    mode's size) meets a mode whose last leaf has size 1. There CuTe opens that size-1 leaf
    and tilekit the last leaf of size > 1 (a deliberate difference, see
    ``tilekit.layout.inttuple``); the golden composition cases cover it, divides skip it."""
    kind, value = tiler  # type: ignore[misc]
    pairs = [(a, tiler)] if kind != "T" else list(zip(modes_of(a), value, strict=False))
    for mode, entry in pairs:
        if entry is None or entry[0] != "I":
            continue
        size = _prod(leaves_of(mode[0]))
        if leaves_of(mode[0])[-1] == 1 and size % entry[1] != 0:
            return True
    return False


def product_tiler(rng: random.Random, a: tuple) -> object:
    r = rng.random()
    if r < 0.6:
        return ("L", layout(rng, rng.randint(1, 2), 12, ("compact", "compact", "gapped", "any")))
    if r < 0.7:
        return ("I", rng.randint(1, 5))
    entries = []
    for _ in modes_of(a)[: rng.randint(1, len(modes_of(a)))]:
        kind = rng.choice(("none", "int", "layout", "layout"))
        if kind == "none":
            entries.append(None)
        elif kind == "int":
            entries.append(("I", rng.randint(1, 4)))
        else:
            entries.append(("L", layout(rng, 1, 6, ("compact", "gapped", "any"))))
    return ("T", entries)


def draw_case(rng: random.Random, op: str) -> dict:
    rank = rng.choice((1, 1, 2, 2, 3))
    if op == "coalesce":
        a = layout(rng, rank, 64, ("compact", "gapped", "any"))
        prof = rng.random() < 0.4 and isinstance(a[0], tuple)
        return {"op": op, "a": a, "profile": len(a[0]) if prof else None}
    if op == "complement":
        a = layout(rng, rank, 32, ("compact", "gapped", "gapped"))
        return {"op": op, "a": a, "bound": rng.choice((None, rng.randint(1, 200)))}
    if op == "composition":
        a = layout(rng, rank, 64, ("compact", "gapped", "any"))
        if rng.random() < 0.8:
            b = digit_tile(rng, a[0], overflow=rng.random() < 0.3)
        else:
            b = layout(rng, rng.randint(1, 2), 16, ("compact", "gapped"))
        return {"op": op, "a": a, "tiler": ("L", b)}
    if op.endswith("divide"):
        while True:
            a = layout(rng, rank, 64, ("compact", "gapped", "any", "any"))
            tiler = tiler_for(rng, a)
            if not overruns_a_unit_leaf(a, tiler):
                return {"op": op, "a": a, "tiler": tiler}
    a = layout(rng, rank, 24, ("compact", "compact", "gapped", "any"))
    if op in ("blocked_product", "raked_product"):
        if rng.random() < 0.3:  # rank 1 and int-shaped, the case issue 27 found wrong
            a = (rng.choice(LEAF_SIZES), rng.choice(STRIDE_VALUES[1:6]))
        b = layout(rng, rng.choice((1, 1, 2, 2, 3)), 16, ("compact", "compact", "gapped", "any"))
        return {"op": op, "a": a, "tiler": ("L", b)}
    return {"op": op, "a": a, "tiler": product_tiler(rng, a)}


# ---------------------------------------------------------------------------------------------
# C++


def cpp_int_tuple(t: IntTuple) -> str:
    if isinstance(t, tuple):
        return "cute::make_tuple(" + ",".join(cpp_int_tuple(s) for s in t) + ")"
    return f"Int<{t}>{{}}"


def cpp_layout(lay: tuple) -> str:
    return f"make_layout({cpp_int_tuple(lay[0])},{cpp_int_tuple(lay[1])})"


def cpp_tiler(tiler: object) -> str:
    if tiler is None:
        return "_"
    kind, value = tiler  # type: ignore[misc]
    if kind == "L":
        return cpp_layout(value)
    if kind == "I":
        return f"Int<{value}>{{}}"
    return "make_tile(" + ",".join(cpp_tiler(t) for t in value) + ")"


def cpp_call(case: dict) -> str:
    op, a = case["op"], cpp_layout(case["a"])
    if op == "coalesce":
        if case["profile"] is None:
            return f"coalesce({a})"
        return f"coalesce({a},{cpp_int_tuple(tuple([1] * case['profile']))})"
    if op == "complement":
        bound = case["bound"]
        return f"complement({a})" if bound is None else f"complement({a},Int<{bound}>{{}})"
    return f"{op}({a},{cpp_tiler(case['tiler'])})"


def program(cases: Sequence[tuple[int, dict]]) -> str:
    """One function per case, each on its own line (compile errors name the line)."""
    head = "#include <cute/layout.hpp>\n#include <cstdio>\nusing namespace cute;\n"
    lines = [head]  # three lines: case k is on line FIRST_CASE_LINE + k
    for i, case in cases:
        lines.append(f'void case_{i}(){{printf("{i} ");print({cpp_call(case)});printf("\\n");}}\n')
    body = "".join(f"case_{i}();" for i, _ in cases)
    lines.append(f"int main(){{{body}return 0;}}\n")
    return "".join(lines)


def compile_chunk(cases: list[tuple[int, dict]], flags: list[str], work: Path) -> dict[int, str]:
    """Compile, drop the cases whose lines the errors name, retry; run what compiles."""
    name = f"chunk_{cases[0][0]}"
    while cases:
        src, exe = work / f"{name}.cpp", work / name
        src.write_text(program(cases))
        proc = subprocess.run(
            ["g++", "-std=c++17", "-O0", "-fmax-errors=0", *flags, str(src), "-o", str(exe)],
            capture_output=True, text=True,
        )
        if proc.returncode == 0:
            out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
            answers = {}
            for line in out.splitlines():
                i, result = line.split(" ", 1)
                answers[int(i)] = result.replace("_", "")
            return answers
        bad_lines = {int(m) for m in re.findall(rf"{re.escape(str(src))}:(\d+):", proc.stderr)}
        bad = {
            cases[n - FIRST_CASE_LINE][0]
            for n in bad_lines
            if 0 <= n - FIRST_CASE_LINE < len(cases)
        }
        if not bad:
            sys.exit(f"cannot attribute compile errors to cases:\n{proc.stderr[:4000]}")
        cases = [c for c in cases if c[0] not in bad]
    return {}


def as_json(case: dict, result: str) -> dict:
    out: dict = {"op": case["op"], "a": layout_text(case["a"])}
    if "profile" in case:
        out["profile"] = case["profile"]
    if "bound" in case:
        out["bound"] = case["bound"]
    if "tiler" in case:
        out["tiler"] = tiler_json(case["tiler"])
    out["cute"] = result
    return out


def tiler_json(tiler: object) -> object:
    """A layout as its text, an int as an int, a by-mode tuple as a list (None kept)."""
    if tiler is None:
        return None
    kind, value = tiler  # type: ignore[misc]
    if kind == "L":
        return layout_text(value)
    if kind == "I":
        return value
    return [tiler_json(t) for t in value]


def one_case_a_line(doc: dict) -> str:
    """JSON with one case per line: small, and a regenerated file diffs case by case."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = [json.dumps(c, separators=(",", ":")) for c in doc["cases"]]
    return json.dumps(head)[:-1] + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cutlass", type=Path, required=True, help="folder with include/cute")
    parser.add_argument("--cuda", type=Path, required=True, help="CUDA toolkit root")
    parser.add_argument("--commit", default="unknown", help="the CUTLASS commit, recorded")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    inc = args.cuda / "include"
    flags = [f"-I{args.cutlass / 'include'}", f"-I{inc}", f"-I{inc / 'cccl'}"]
    rng = random.Random(SEED)
    cases = [draw_case(rng, op) for op, n in CASES_PER_OP.items() for _ in range(n)]
    numbered = list(enumerate(cases))
    chunks = [numbered[k : k + CHUNK] for k in range(0, len(numbered), CHUNK)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        answers: dict[int, str] = {}
        for part in pool.map(lambda c: compile_chunk(c, flags, Path(tmp)), chunks):
            answers.update(part)
    kept = [as_json(cases[i], answers[i]) for i in sorted(answers)]
    doc = {
        "about": "CuTe's answers (include/cute/layout.hpp, all-static Int<N>) to random cases; "
        "regenerate with tests/layout/make_cute_golden.py",
        "cutlass": args.commit,
        "seed": SEED,
        "cases": kept,
    }
    OUT.write_text(one_case_a_line(doc))
    print(f"{len(kept)} of {len(cases)} cases kept (CuTe refused the rest) -> {OUT}")


if __name__ == "__main__":
    main()
