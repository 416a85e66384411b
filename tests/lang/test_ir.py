"""Unit tests of the IR: the builder's type checks, the verifier (all findings at
once), dead-code elimination, the pass manager's verification and dumps, and
the op registry's completeness.

Modules are built by hand with ``Builder`` (not traced), so each test controls
exactly which ops exist and can break the IR on purpose.
"""

# Kernels here compute values they never use, on purpose (the error comes first).
# ruff: noqa: F841

from __future__ import annotations

import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.errors import IRError, SourceLoc
from tilekit.ir import (
    DCE,
    REGISTRY,
    Block,
    Builder,
    DType,
    Function,
    Module,
    Operation,
    OpTypeError,
    Pass,
    PassManager,
    Region,
    TensorType,
    TileType,
    print_module,
    verify,
)
from tilekit.ir.core import Value

F32 = DType.FLOAT32
I32 = DType.INT32


def loc(line: int) -> SourceLoc:
    return SourceLoc("/src/kern.py", line, 4, 9)


def new_function(*args: tuple[str, object]) -> tuple[Function, Builder]:
    fn = Function("k", Region([Block()]))
    for name, type_ in args:
        fn.entry.add_arg(type_, name)  # type: ignore[arg-type]
    return fn, Builder(fn.entry)


def const(b: Builder, value: float | int, shape: tuple[int, ...] = (), dtype: DType = F32,
          line: int = 1, insert: bool = True) -> Value:
    op = b.create("constant", {}, {"value": value, "shape": shape, "dtype": dtype}, loc=loc(line),
                  insert=insert)
    return op.result


def counted_loop(b: Builder, inits: list[Value], body: Block, line: int = 10) -> Operation:
    lo, hi, step = const(b, 0, dtype=I32), const(b, 4, dtype=I32), const(b, 1, dtype=I32)
    return b.create("for", {"lo": lo, "hi": hi, "step": step, "inits": inits},
                    regions=[Region([body])], loc=loc(line))


def names(fn: Function) -> list[str]:
    return [op.name for op in fn.walk()]


# --- the builder -------------------------------------------------------------------------------


def test_builder_checks_types() -> None:
    fn, b = new_function()
    x = const(b, 1.0, (4,))
    i = const(b, 1, (4,), I32)
    with pytest.raises(OpTypeError, match="operand types differ: tile<4xf32> vs tile<4xi32>"):
        b.create("add", {"lhs": x, "rhs": i})
    y = const(b, 1.0, (8,))
    with pytest.raises(OpTypeError, match="operand types differ"):
        b.create("mul", {"lhs": x, "rhs": y})
    with pytest.raises(OpTypeError, match="missing operand 'rhs'"):
        b.create("sub", {"lhs": x})
    with pytest.raises(OpTypeError, match="missing attribute 'dtype'"):
        b.create("constant", {}, {"value": 0, "shape": ()})
    with pytest.raises(OpTypeError, match="when condition must be a bool scalar"):
        b.create("when", {"cond": x, "inits": []}, regions=[Region([Block()])])
    # Nothing of the rejected ops entered the block.
    assert names(fn) == ["constant", "constant", "constant"]


def test_builder_checks_memory_ops() -> None:
    fn, b = new_function(("X", TensorType(1, F32)))
    X = fn.args[0]
    offs = const(b, 0.0, (4,))
    with pytest.raises(OpTypeError, match="offsets must be integers, got tk.float32"):
        b.create("load", {"tensor": X, "offsets": offs})
    ioffs = const(b, 0, (4,), I32)
    with pytest.raises(OpTypeError, match="must be a tensor"):
        b.create("load", {"tensor": ioffs, "offsets": ioffs})
    bad_mask = const(b, 1, (4,), I32)
    with pytest.raises(OpTypeError, match="mask must be a bool tile of shape"):
        b.create("load", {"tensor": X, "offsets": ioffs, "mask": bad_mask})
    with pytest.raises(OpTypeError, match=r"axis 1 out of range for a rank-1 tensor"):
        b.create("dim", {"tensor": X}, {"axis": 1})


def test_builder_checks_loop_bounds() -> None:
    fn, b = new_function()
    lo = const(b, 0, dtype=I32)
    hi = const(b, 4, dtype=DType.INT64)
    with pytest.raises(OpTypeError, match="loop bounds have different types"):
        b.create("for", {"lo": lo, "hi": hi, "step": lo, "inits": []},
                 regions=[Region([Block([TileType((), I32)])])])
    flo = const(b, 0.0)
    with pytest.raises(OpTypeError, match="loop lower bound must be an integer scalar"):
        b.create("for", {"lo": flo, "hi": flo, "step": flo, "inits": []},
                 regions=[Region([Block([TileType((), F32)])])])


def test_builder_rejects_unknown_operand_names() -> None:
    fn, b = new_function()
    x = const(b, 1.0)
    with pytest.raises(TypeError, match=r"neg: unknown operands \['y'\]"):
        b.create("neg", {"x": x, "y": x})


# --- the verifier ------------------------------------------------------------------------------


def test_well_formed_module_verifies() -> None:
    fn, b = new_function(("X", TensorType(1, F32)))
    x = const(b, 1.0, (4,))
    body = Block([TileType((), I32), x.type])
    with b.at_end_of(body):
        s = b.create("add", {"lhs": body.args[1], "rhs": x}).result
        b.create("yield", {"values": [s]})
    counted_loop(b, [x], body)
    verify(Module([fn]))


def test_verifier_reports_every_problem_at_once() -> None:
    fn, b = new_function(("X", TensorType(1, F32)))
    x = const(b, 1.0, (4,), line=1)

    # 1. A value defined in a loop body used after the loop.
    body = Block([TileType((), I32)])
    with b.at_end_of(body):
        inner = b.create("neg", {"x": x}, loc=loc(3)).result
        b.create("yield", {"values": []}, loc=loc(4))
    counted_loop(b, [], body, line=2)
    b.create("abs", {"x": inner}, loc=loc(5))

    # 2. A result type that its operands do not give.
    wrong = b.create("exp", {"x": x}, loc=loc(6))
    wrong.results[0].type = TileType((4,), DType.FLOAT16)

    # 3. A loop body without a terminator.
    no_term = Block([TileType((), I32)])
    with b.at_end_of(no_term):
        b.create("neg", {"x": x}, loc=loc(8))
    counted_loop(b, [], no_term, line=7)

    # 4. A terminator in the middle of a block.
    mid = Block([TileType((), I32)])
    with b.at_end_of(mid):
        b.create("yield", {"values": []}, loc=loc(10))
        b.create("neg", {"x": x}, loc=loc(11))
        b.create("yield", {"values": []}, loc=loc(12))
    counted_loop(b, [], mid, line=9)

    # 5. Operands that do not fill the op's slots.
    slots = b.create("add", {"lhs": x, "rhs": x}, loc=loc(13))
    slots.slots = ("lhs", "lhs")

    with pytest.raises(IRError) as info:
        verify(Module([fn]))
    err = info.value
    problems = [err.diagnostic, *err.related]
    found = [(p.loc.line if p.loc else None, p.message) for p in problems]
    expected = [
        (5, "operand #0 of `abs` is used outside the scope that defines it"),
        (6, "`exp` results are ['tile<4xf16>'], its operands give ['tile<4xf32>']"),
        (7, "the body of `for` must end with `yield`"),
        (7, "region does not end with a terminator"),
        (10, "`yield` must be the last op of its block"),
        (13, "`add`: missing operand 'rhs'"),
    ]
    for line, message in expected:
        assert any(ln == line and message in m for ln, m in found), (line, message, found)
    assert err.message.startswith("invalid IR: ")
    # The rendered error lists every problem, each with its location.
    text = str(err)
    for line, _ in expected:
        assert f"/src/kern.py:{line}:5: error:" in text
    assert text.count("error:") == len(problems) >= len(expected)


def test_verifier_catches_a_stale_parent_link() -> None:
    fn, b = new_function()
    x = const(b, 1.0)
    op = b.create("neg", {"x": x}, loc=loc(2))
    op.parent = Block()
    with pytest.raises(IRError, match="`neg` has a stale parent link"):
        verify(Module([fn]))


def test_verifier_checks_loop_region_arguments() -> None:
    fn, b = new_function()
    x = const(b, 1.0, (4,))
    body = Block([TileType((), I32)])  # no argument for the carried value
    with b.at_end_of(body):
        b.create("yield", {"values": [x]})
    counted_loop(b, [x], body, line=3)
    with pytest.raises(IRError, match="for body arguments .* do not match"):
        verify(Module([fn]))


# --- dead-code elimination ---------------------------------------------------------------------


def test_dce_removes_unused_pure_ops_and_keeps_effects() -> None:
    fn, b = new_function(("X", TensorType(1, F32)))
    X = fn.args[0]
    offs = b.create("arange", {}, {"start": 0, "end": 4}).result
    v = b.create("load", {"tensor": X, "offsets": offs}).result    # unused, but kept: may fault
    dead1 = b.create("neg", {"x": offs}).result                     # a dead chain of two ops
    b.create("abs", {"x": dead1})
    kept = b.create("exp", {"x": v}).result                          # read by the store
    b.create("store", {"tensor": X, "offsets": offs, "value": kept})
    body = Block([TileType((), I32), kept.type])
    with b.at_end_of(body):
        b.create("sin", {"x": body.args[1]})                        # dead inside the loop
        b.create("yield", {"values": [body.args[1]]})
    counted_loop(b, [kept], body)                                    # results unused: kept
    cond = b.create("constant", {}, {"value": True, "shape": (), "dtype": DType.BOOL}).result
    b.create("assert", {"cond": cond}, {"message": "m"})
    before = names(fn)
    module = DCE.run(Module([fn]))
    verify(module)
    after = names(module.kernel)
    assert [n for n in before if n not in after] == ["neg", "abs", "sin"]
    assert after.count("constant") == 4  # the loop bounds and the assert's condition
    assert {"load", "store", "for", "yield", "assert", "arange", "exp"} <= set(after)


def test_dce_keeps_an_unused_loop_and_a_when() -> None:
    fn, b = new_function()
    body = Block([TileType((), I32)])
    with b.at_end_of(body):
        b.create("yield", {"values": []})
    counted_loop(b, [], body)
    cond = b.create("constant", {}, {"value": True, "shape": (), "dtype": DType.BOOL}).result
    wbody = Block()
    with b.at_end_of(wbody):
        b.create("yield", {"values": []})
    b.create("when", {"cond": cond, "inits": []}, regions=[Region([wbody])])
    before = names(fn)
    assert names(DCE.run(Module([fn])).kernel) == before


def test_dce_on_a_traced_kernel() -> None:
    @tk.kernel
    def k(X: tk.Tensor, N: tk.constexpr):
        x = tk.load(X, tk.arange(N))
        unused = tk.exp(x) * 2.0
        tk.store(X, tk.arange(N), x + 1.0)

    text = print_module(k.trace(np.zeros(8, np.float32), N=8))
    assert "exp" not in text and " mul " not in text
    assert "load" in text and "store" in text


# --- the pass manager --------------------------------------------------------------------------


def _traced() -> Module:
    fn, b = new_function(("X", TensorType(1, F32)))
    offs = b.create("arange", {}, {"start": 0, "end": 4}).result
    v = b.create("load", {"tensor": fn.args[0], "offsets": offs}).result
    b.create("neg", {"x": v}, loc=loc(7))  # dead
    b.create("store", {"tensor": fn.args[0], "offsets": offs, "value": v})
    return Module([fn])


def _break_ir(module: Module) -> Module:
    """A buggy pass: makes `store` read a value from a detached op."""
    fn = module.kernel
    stray = Builder(Block()).create("arange", {}, {"start": 0, "end": 4})
    store = next(op for op in fn.walk() if op.name == "store")
    store.operands[1] = stray.result
    return module


def test_pass_manager_verifies_after_each_pass() -> None:
    calls: list[str] = []

    def noop(module: Module) -> Module:
        calls.append("noop")
        return module

    pm = PassManager([Pass("break_ir", _break_ir), Pass("noop", noop)])
    with knobs.override(verify_passes=True), pytest.raises(IRError, match="outside the scope"):
        pm.run(_traced())
    assert calls == []  # stopped right after the pass that broke the IR
    with knobs.override(verify_passes=False):
        pm.run(_traced())
    assert calls == ["noop"]


def test_pass_manager_dumps_the_named_pass(capsys: pytest.CaptureFixture[str]) -> None:
    pm = PassManager([Pass("noop", lambda m: m), DCE])
    with knobs.override(dump=frozenset({"eliminate_dead_code"}), dump_locs=False):
        pm.run(_traced())
    err = capsys.readouterr().err
    assert err.startswith("// ----- after eliminate_dead_code: k -----\n")
    assert "after noop" not in err
    assert "neg" not in err and "store %X" in err and "loc(" not in err

    with knobs.override(dump=frozenset({"all"}), dump_locs=True):
        pm.run(_traced())
    err = capsys.readouterr().err
    assert err.index("// ----- after noop: k -----") < err.index("after eliminate_dead_code")
    assert "loc(kern.py:7:5)" in err  # in the dump after noop, before DCE removes it

    with knobs.override(dump=frozenset()):
        pm.run(_traced())
    assert capsys.readouterr().err == ""


def _dump_kernel() -> tk.KernelFunction:
    @tk.kernel
    def dumped(X: tk.Tensor, N: tk.constexpr):
        x = tk.load(X, tk.arange(N))
        unused = tk.exp(x)
        tk.store(X, tk.arange(N), x)

    return dumped


def test_dump_ir_prints_the_traced_ir(capsys: pytest.CaptureFixture[str]) -> None:
    k = _dump_kernel()
    with knobs.override(dump=frozenset({"ir"})):
        k.trace(np.zeros(8, np.float32), N=8)
    err = capsys.readouterr().err
    assert err.startswith("// ----- ir: dumped -----\nkernel @dumped(%X: tensor<?xf32, i32>) "
                          "[N = 8] {\n")
    assert "exp" in err  # the traced IR, before dead-code elimination
    assert "loc(test_ir.py:" in err
    assert "after eliminate_dead_code" not in err
    # Cached specializations are not traced (nor dumped) again.
    with knobs.override(dump=frozenset({"ir"})):
        k.trace(np.zeros(8, np.float32), N=8)
    assert capsys.readouterr().err == ""


def test_dump_ir_through_the_environment(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TILEKIT_DUMP", "ir")
    monkeypatch.setenv("TILEKIT_DUMP_LOCS", "0")
    _dump_kernel()[1](np.zeros(8, np.float32), N=8)
    err = capsys.readouterr().err
    assert "// ----- ir: dumped -----" in err and "exp" in err and "loc(" not in err

    monkeypatch.setenv("TILEKIT_DUMP", "all")
    _dump_kernel().trace(np.zeros(8, np.float32), N=8)
    err = capsys.readouterr().err
    ir_part, _, after = err.partition("// ----- after eliminate_dead_code: dumped -----")
    assert ir_part.startswith("// ----- ir: dumped -----") and "exp" in ir_part
    assert after and "exp" not in after

    monkeypatch.delenv("TILEKIT_DUMP")
    _dump_kernel().trace(np.zeros(8, np.float32), N=8)
    assert capsys.readouterr().err == ""


# --- the registry ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_op_is_documented_and_has_a_reference(name: str) -> None:
    opdef = REGISTRY[name]
    assert opdef.name == name
    assert opdef.doc.strip(), f"op {name!r} has no doc string"
    if name == "yield":
        assert opdef.is_terminator and opdef.reference is None
    else:
        assert callable(opdef.reference), f"op {name!r} has no reference semantics"


def test_only_yield_is_a_terminator() -> None:
    assert [n for n, d in REGISTRY.items() if d.is_terminator] == ["yield"]
