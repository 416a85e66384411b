"""assign_layouts on traced kernels: every tile value gets a layout, the ops' layout rules
hold on the result (elementwise operands share the result's layout, reductions give
slices, permutes permuted encodings, loops carry one layout), disagreements become
explicit ``convert_layout`` ops with their plans, and the input module is left alone."""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.ir.core import Module
from tilekit.ir.printer import print_module
from tilekit.ir.types import TileType
from tilekit.ir.verifier import verify
from tilekit.layout.propagate import ELEMENTWISE, LayoutOptions, assign_layouts
from tilekit.layout.tile_layouts import (
    BlockedEncoding,
    ScalarEncoding,
    SliceEncoding,
    TileLayout,
)

from ..codegen.test_offline import ALL_EXAMPLES, KERNEL_CASES, example_module

f32 = np.float32

MODULES = [("example", n) for n in ALL_EXAMPLES] + [("kernel", c) for c in sorted(KERNEL_CASES)]
OPTIONS = [LayoutOptions(4, 32), LayoutOptions(8, 32), LayoutOptions(4, 64, "gfx942")]


def traced(kind: str, name: str) -> Module:
    return example_module(name) if kind == "example" else KERNEL_CASES[name]()


def tile_values(module: Module):
    """Every tile-typed value: block arguments and op results, nested regions included."""
    for fn in module.functions:
        yield from (a for a in fn.args if isinstance(a.type, TileType))
    for op in module.walk():
        for region in op.regions:
            yield from (a for a in region.block.args if isinstance(a.type, TileType))
        yield from (r for r in op.results if isinstance(r.type, TileType))


def layout_of(value) -> TileLayout:
    assert isinstance(value.type, TileType) and isinstance(value.type.layout, TileLayout), value
    return value.type.layout


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"{o.num_warps}x{o.warp_size}")
@pytest.mark.parametrize("kind,name", MODULES, ids=[n for _, n in MODULES])
def test_every_tile_value_has_a_layout_and_the_rules_hold(kind: str, name: str,
                                                          options: LayoutOptions):
    module = traced(kind, name)
    laid = assign_layouts(module, options)
    verify(laid, layouts=True)
    for value in tile_values(laid):
        lay = layout_of(value)
        assert lay.shape == value.type.shape
        assert (lay.num_warps, lay.warp_size) == (options.num_warps, options.warp_size), lay
    for op in laid.walk():
        tiles = [v for v in op.operands if isinstance(v.type, TileType)]
        if op.name in ELEMENTWISE:
            res = layout_of(op.result)
            assert all(layout_of(v) == res for v in tiles), op.name
        elif op.name in ("reduce", "argreduce"):
            src, res = layout_of(op.operand("x")), layout_of(op.result)
            if res.rank == 0:
                assert isinstance(res.encoding, ScalarEncoding)
            else:
                assert res.encoding == SliceEncoding(src.encoding, op.attrs["axis"]), op.name
        elif op.name == "permute":
            src = layout_of(op.operand("x"))
            assert isinstance(src.encoding, BlockedEncoding)
            assert layout_of(op.result).encoding == src.encoding.permuted(op.attrs["order"])
        elif op.name == "scan":
            assert layout_of(op.result) == layout_of(op.operand("x"))
        elif op.name in ("for", "when"):
            body = op.regions[0].block
            yielded = body.terminator.operands if body.terminator else []
            inits = op.variadic("inits")
            for r, y, i in zip(op.results, yielded, inits):
                if isinstance(r.type, TileType):
                    assert layout_of(r) == layout_of(y) == layout_of(i)
        elif op.name == "convert_layout":
            assert layout_of(op.result) == op.attrs["layout"]
            assert layout_of(op.operand("x")) != op.attrs["layout"]
            assert {"how", "cost"} <= set(op.attrs)


@pytest.mark.parametrize("kind,name", MODULES[:len(ALL_EXAMPLES)], ids=ALL_EXAMPLES)
def test_the_input_module_is_not_mutated(kind: str, name: str):
    module = traced(kind, name)
    before = print_module(module, with_locs=True)
    laid = assign_layouts(module)
    assert laid is not module
    assert print_module(module, with_locs=True) == before
    assert not any(isinstance(v.type.layout, TileLayout) for v in tile_values(module))
    assert "#blocked<" in print_module(laid) and "#blocked<" not in before


# --- explicit conversions ---------------------------------------------------------------------


@tk.kernel
def transpose_add(X, Y, Out, M: tk.constexpr, N: tk.constexpr):
    x = X.tile((M, N), (0, 0)).load()
    y = Y.tile((N, M), (0, 0)).load()
    Out.tile((N, M), (0, 0)).store(x.T + y)


@tk.kernel
def reshape_add(X, Y, Out, M: tk.constexpr, N: tk.constexpr):
    x = X.tile((M * N,), (0,)).load()
    y = Y.tile((M, N), (0, 0)).load()
    Out.tile((M, N), (0, 0)).store(tk.reshape(x, (M, N)) + y)


def converts(module: Module):
    return [op for op in module.walk() if op.name == "convert_layout"]


@pytest.mark.parametrize("M,N", [(32, 64), (16, 16), (7, 37)])
def test_a_transposed_tile_added_to_a_loaded_one_is_converted(M: int, N: int):
    module = transpose_add.trace(np.zeros((M, N), f32), np.zeros((N, M), f32),
                                 np.zeros((N, M), f32), M=M, N=N)
    laid = assign_layouts(module)
    (convert,) = converts(laid)
    src = layout_of(convert.operand("x"))
    assert convert.operand("x").owner.name == "permute"
    add = next(op for op in laid.walk() if op.name == "add")
    y = next(op for op in laid.walk() if op.name == "tile_load" and op.attrs["shape"] == (N, M))
    assert convert.result in add.operands
    assert layout_of(add.result) == layout_of(y.result) == convert.attrs["layout"] != src
    assert isinstance(convert.attrs["how"], str) and convert.attrs["how"]
    if M & (M - 1) == 0 and N & (N - 1) == 0:  # F2 layouts: a costed plan
        assert isinstance(convert.attrs["cost"], (int, float)) and convert.attrs["cost"] >= 0
        assert convert.attrs["plan"] is not None
    else:
        assert convert.attrs["cost"] is None and convert.attrs["plan"] is None
    printed = print_module(laid)
    assert "convert_layout" in printed
    if convert.attrs["cost"] is not None:
        assert f"cost = {convert.attrs['cost']}" in printed


def test_a_reshaped_tile_meets_the_other_operands_layout():
    module = reshape_add.trace(np.zeros(256, f32), np.zeros((8, 32), f32),
                               np.zeros((8, 32), f32), M=8, N=32)
    laid = assign_layouts(module)
    add = next(op for op in laid.walk() if op.name == "add")
    assert layout_of(add.operands[0]) == layout_of(add.operands[1]) == layout_of(add.result)
    reshape = next(op for op in laid.walk() if op.name == "reshape")
    assert layout_of(reshape.result).shape == (8, 32)


def test_agreeing_producers_and_consumers_need_no_conversion():
    module = example_module("vector_add")
    assert converts(assign_layouts(module)) == []


# --- the layout dump -------------------------------------------------------------------------


def test_layout_dump_prints_blocked_layouts(capsys):
    from tilekit.codegen.driver import compile_module

    module = transpose_add.trace(np.zeros((32, 64), f32), np.zeros((64, 32), f32),
                                 np.zeros((64, 32), f32), M=32, N=64)
    with knobs.override(dump=frozenset({"layout"}), dump_locs=False):
        compile_module(module, "sm_90a")
    err = capsys.readouterr().err
    assert "// ----- layout: transpose_add -----" in err
    assert "#blocked<spt=[" in err and "convert_layout" in err and "#scalar" in err
    compile_module(module, "sm_90a")  # no dump without the knob
    assert capsys.readouterr().err == ""
