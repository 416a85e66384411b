"""The protocol checker on whole schedules: correct ones pass, every mutant is refuted.

Schedules come from two places: built here by hand, op for op as ``docs/pipelines.md``
writes the scheduled form (uniform roles with TMA, cp.async and plain copies, two streams
of mixed engines, warp roles, a bulk-store epilogue), and from the schedule solver
(``tilekit.sched.schedule_pipelines``) on the kernels of ``builders.py``. ``mutants.py``
breaks each of them in every way it knows; the checker must name a rule for 100% of the
mutants and accept every original. The hand-built schedules also run on the interpreter
with data, so the protocol machine and the checker agree on what a correct schedule is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from tilekit.errors import ScheduleError, SourceLoc
from tilekit.ir import Block, Builder, DType, Function, Module, Region, TensorType, TileType
from tilekit.ir import verify as verify_ir
from tilekit.ir.async_protocol import ProtocolRule
from tilekit.ir.core import Value
from tilekit.sched.protocol import LONG_RUN, check_function, check_protocol, trip_counts

from .mutants import KINDS, Mutant, mutants

I32 = DType.INT32
F32 = DType.FLOAT32
BLOCK = 8
PIPELINE_LINE = 1234  # the user's pipeline line every scheduled op carries
LOC = SourceLoc("/src/user_kernel.py", PIPELINE_LINE, 8, 19)


# --- scheduled IR by hand, as docs/pipelines.md writes it ----------------------------------------

@dataclass(frozen=True)
class Stream:
    engine: str
    dtype: DType = F32
    along: int = 1  # (1, BLOCK) tiles along dim 1, or (BLOCK, 1) tiles along dim 0

    @property
    def shape(self) -> tuple[int, int]:
        return (1, BLOCK) if self.along == 1 else (BLOCK, 1)

    @property
    def nbytes(self) -> int:
        return BLOCK * self.dtype.itemsize


class _Emit:
    def __init__(self, block: Block) -> None:
        self.b = Builder(block)

    def op(self, name: str, operands: dict | None = None, attrs: dict | None = None,
           regions: tuple = ()) -> object:
        return self.b.create(name, operands, attrs, regions, loc=LOC)

    def const(self, value: int | bool | float, dtype: DType = I32,
              shape: tuple[int, ...] = ()) -> Value:
        return self.op("constant", attrs={"value": value, "dtype": dtype, "shape": shape}).result

    def bin(self, name: str, a: Value, b: Value | int) -> Value:
        if isinstance(b, int):
            b = self.const(b, a.type.dtype)
        return self.op(name, {"lhs": a, "rhs": b}).result

    def when(self, cond: Value, body: Callable[[], None]) -> None:
        block = Block()
        with self.b.at_end_of(block):
            body()
            self.op("yield")
        self.op("when", {"cond": cond}, regions=(Region([block]),))

    def loop(self, lo: Value, hi: Value, inits: list[Value],
             body: Callable[[Value, list[Value]], list[Value]]) -> list[Value]:
        block = Block([lo.type, *(v.type for v in inits)])
        with self.b.at_end_of(block):
            self.op("yield", {"values": body(block.args[0], list(block.args[1:]))})
        return self.op("for", {"lo": lo, "hi": hi, "step": self.const(1), "inits": inits},
                       regions=(Region([block]),)).results


def build_schedule(streams: tuple[Stream, ...], stages: int = 3, roles: bool = False,
                   epilogue: bool = False, name: str = "k") -> Module:
    """``Y[r] = sum_i (tile_i of every stream)`` scheduled by hand: rings, full/empty
    barriers, the prologue and steady loop (or warp roles), optionally a bulk-store
    epilogue (smem_write, fence_proxy_async, cta_barrier, copy_s2g, store_wait)."""
    S = stages
    fn = Function(name, Region([Block()]), {}, LOC)
    tensors = [fn.entry.add_arg(TensorType(2, s.dtype), f"X{k}") for k, s in enumerate(streams)]
    Y = fn.entry.add_arg(TensorType(2, F32), "Y")
    count = fn.entry.add_arg(TileType((), I32), "count")
    e = _Emit(fn.entry)
    r = e.op("program_id", attrs={"axis": 0}).result
    zero = e.const(0)
    acc0 = e.const(0.0, F32, (1, BLOCK))
    n = e.op("trip_count", {"n": count}, {"pipeline": 0, "stages": S}).result
    bufs = [e.op("smem_alloc", attrs={"shape": s.shape, "dtype": s.dtype, "stages": S,
                                      "name": f"buf{k}"}).result
            for k, s in enumerate(streams)]
    tma_bytes = sum(s.nbytes for s in streams if s.engine == "tma")
    any_other = any(s.engine != "tma" for s in streams)
    full = e.op("mbarrier_alloc", attrs={"count": S, "arrivals": int(tma_bytes > 0)
                                         + int(any_other), "name": "full"}).result
    empty = e.op("mbarrier_alloc", attrs={"count": S, "arrivals": 1, "name": "empty"}).result
    if tma_bytes:
        e.op("fence_mbarrier_init")
    e.op("cta_barrier")

    def produce(j: Value, slot: Value, parity: Value) -> None:
        e.op("mbarrier_wait", {"bar": empty, "slot": slot, "parity": parity})
        if tma_bytes:
            e.op("mbarrier_expect_tx", {"bar": full, "slot": slot}, {"bytes": tma_bytes})
        for s, X, buf in zip(streams, tensors, bufs):
            at = e.bin("add", zero, j)
            index = [r, at] if s.along == 1 else [at, r]
            e.op("copy_g2s", {"tensor": X, "index": index, "dst": buf, "slot": slot,
                              "bar": full, "bslot": slot},
                 {"engine": s.engine, "shape": s.shape, "padding": 0})
        if any_other:
            e.op("mbarrier_arrive", {"bar": full, "slot": slot})

    def produce_at(j: Value) -> None:
        slot = e.bin("mod", j, S)
        produce(j, slot, e.bin("xor", e.bin("and", e.bin("floordiv", j, S), 1), 1))

    def consume(i: Value, acc: Value, prefetch: bool) -> list[Value]:
        if prefetch:
            j = e.bin("add", i, S - 1)
            e.when(e.bin("lt", j, n), lambda: produce_at(j))
        slot = e.bin("mod", i, S)
        e.op("mbarrier_wait", {"bar": full, "slot": slot,
                               "parity": e.bin("and", e.bin("floordiv", i, S), 1)})
        tiles = [e.op("smem_read", {"src": buf, "slot": slot}).result for buf in bufs]
        if tma_bytes:  # generic reads, then the next lap's TMA copy: a proxy fence between
            e.op("fence_proxy_async")
        e.op("mbarrier_arrive", {"bar": empty, "slot": slot})
        for t, s in zip(tiles, streams):  # the user's body
            if s.dtype is not F32:
                t = e.op("cast", {"x": t}, {"dtype": F32}).result
            if s.along == 0:
                t = e.op("reshape", {"x": t}, {"shape": (1, BLOCK)}).result
            acc = e.bin("add", acc, t)
        return [acc]

    if not roles:
        for j in range(S - 1):
            jv = e.const(j)
            e.when(e.bin("lt", jv, n),
                   lambda jv=jv, j=j: produce(jv, e.const(j % S), e.const(((j // S) & 1) ^ 1)))
        (acc,) = e.loop(zero, n, [acc0], lambda i, c: consume(i, c[0], prefetch=True))
    else:
        producer, consumer = Block(), Block([acc0.type])
        with e.b.at_end_of(producer):
            e.loop(zero, n, [], lambda j, _: (produce_at(j), [])[1])
            e.op("yield")
        with e.b.at_end_of(consumer):
            out = e.loop(zero, n, [consumer.args[0]],
                         lambda i, c: consume(i, c[0], prefetch=False))
            e.op("yield", {"values": out})
        (acc,) = e.op("warp_roles", {"inits": [acc0]},
                      {"producer_warps": 1, "consumer_warps": 4, "producer_regs": 40,
                       "consumer_regs": 232},
                      regions=(Region([producer]), Region([consumer]))).results
    e.op("cta_barrier")
    e.op("mbarrier_inval", {"bar": full})
    e.op("mbarrier_inval", {"bar": empty})
    if epilogue:
        out = e.op("smem_alloc", attrs={"shape": (1, BLOCK), "dtype": F32, "stages": 1,
                                        "name": "out"}).result
        e.op("smem_write", {"dst": out, "slot": zero, "value": acc})
        e.op("fence_proxy_async")
        e.op("cta_barrier")
        token = e.op("copy_s2g", {"src": out, "slot": zero, "tensor": Y, "index": [r, zero]},
                     {"shape": (1, BLOCK)}).result
        e.op("store_wait", {"token": token})
    else:
        e.op("tile_store", {"tensor": Y, "index": [r, zero], "value": acc},
             {"shape": (1, BLOCK)})
    module = Module([fn])
    verify_ir(module)
    return module


HAND_BUILT: dict[str, Callable[[], Module]] = {
    "tma": lambda: build_schedule((Stream("tma"),), epilogue=True),
    "cp_async": lambda: build_schedule((Stream("cp_async"),)),
    "plain": lambda: build_schedule((Stream("plain", DType.FLOAT16),)),
    "mixed": lambda: build_schedule((Stream("tma"), Stream("plain", DType.FLOAT16, along=0)),
                                    stages=2),
    "roles_tma": lambda: build_schedule((Stream("tma"),), roles=True),
    "roles_mixed": lambda: build_schedule((Stream("tma"), Stream("cp_async", along=0)),
                                          stages=4, roles=True, epilogue=True),
}


def solver_schedules() -> dict[str, Callable[[], Module]]:
    """The schedule solver's output on the kernels of ``builders.py`` (without its own
    call of the checker), once it is importable."""
    try:
        import tilekit.sched.schedule as schedule
    except ImportError:
        return {}
    from .builders import mixed, row_sum, sequential

    def solved(kernel: Callable[[], object], target: str) -> Callable[[], Module]:
        def make() -> Module:
            original = schedule._check_protocol
            schedule._check_protocol = lambda module: None
            try:
                return schedule.schedule_pipelines(kernel().module, target)
            finally:
                schedule._check_protocol = original
        return make

    return {
        "solver_tma": solved(lambda: row_sum(BLOCK, stages=3), "sm_90a"),
        "solver_tma_roles": solved(lambda: row_sum(BLOCK, stages=2, roles="specialized"),
                                   "sm_90a"),
        "solver_cp_async": solved(lambda: row_sum(BLOCK, stages=3, facts=((), ("X",), ("X",))),
                                  "sm_80"),
        "solver_plain": solved(lambda: row_sum(BLOCK, stages=2, facts=((), (), ())), "sm_90a"),
        "solver_mixed_roles": solved(lambda: mixed(BLOCK, roles="specialized"), "sm_90a"),
        "solver_sequential": solved(lambda: sequential(BLOCK), "sm_90a"),
        "solver_sequential_reuse": solved(_reusing_sequential, "sm_90a"),
    }


def _reusing_sequential() -> object:
    """Two pipelines one after the other on the same bytes of shared memory: the first by
    cp.async (generic-proxy writes), the second by TMA, so the second starts with a
    fence_proxy_async."""
    from .builders import sequential

    kernel = sequential(BLOCK)
    fn = kernel.fn
    fn.aligned16 = fn.unit_inner = fn.strides16 = frozenset({"X"})
    first = next(op for op in fn.walk() if op.name == "pipeline")
    first.attrs["engine"] = "cp_async"
    return kernel


SCHEDULES = {**HAND_BUILT, **solver_schedules()}


# --- the originals -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCHEDULES))
def test_checker_accepts_correct_schedules(name: str) -> None:
    check_protocol(SCHEDULES[name]())


def _engines(module: Module) -> set[str]:
    return {op.attrs["engine"] for op in module.walk() if op.name == "copy_g2s"}


def test_solver_schedules_cover_every_engine_and_warp_roles() -> None:
    if "solver_tma" not in SCHEDULES:
        pytest.skip("tilekit.sched.schedule is not importable")
    modules = [make() for name, make in SCHEDULES.items() if name.startswith("solver")]
    assert set().union(*map(_engines, modules)) == {"tma", "cp_async", "plain"}
    assert any(op.name == "warp_roles" for m in modules for op in m.walk())


@pytest.mark.parametrize("name", list(HAND_BUILT))
def test_hand_built_schedules_run_on_the_interpreter(name: str) -> None:
    """The same schedules with data, every rule checked as they run: the checker's idea
    of a correct schedule is the interpreter's."""
    from tilekit.rt import interpreter
    from tilekit.rt.arrays import to_host
    from tilekit.rt.memory import TensorBinding

    module = SCHEDULES[name]()
    fn = module.kernel
    rng = np.random.default_rng(0)
    rows, trips = 2, 5
    arrays = {}
    for a in fn.args[:-2]:
        along = next(op.attrs["shape"] for op in fn.walk()
                     if op.name == "copy_g2s" and op.operand("tensor") is a)[0] == 1
        shape = (rows, trips * BLOCK - 3) if along else (trips * BLOCK - 3, rows)
        arrays[a] = rng.standard_normal(shape).astype(a.type.dtype.np)
    y = np.zeros((rows, BLOCK), np.float32)
    args = {a: TensorBinding(a.name_hint, to_host(v, a.name_hint, None))
            for a, v in arrays.items()}
    args[fn.args[-2]] = TensorBinding("Y", to_host(y, "Y", None))
    args[fn.args[-1]] = np.asarray(trips, np.int32)
    interpreter.run(fn, (rows,), args)
    want = np.zeros((rows, BLOCK))
    for x in arrays.values():
        x = x if x.shape[0] == rows else x.T
        padded = np.zeros((rows, trips * BLOCK))
        padded[:, :x.shape[1]] = x
        want += padded.reshape(rows, trips, BLOCK).sum(axis=1)
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-3)


# --- the mutants ---------------------------------------------------------------------------------

def _verdict(mutant: Mutant) -> str:
    verify_ir(mutant.module)  # a mutant is well-typed IR: only its protocol is broken
    try:
        check_protocol(mutant.module)
    except ScheduleError as exc:
        rules = [r.name for r in ProtocolRule if f", {r.name} (" in exc.message]
        return rules[0] if rules else f"ScheduleError without a rule: {exc.message}"
    return "NOT FLAGGED"


#: Mutants that are no bug (equivalent to their original), with why: the checker must
#: accept them. None: the solver emits one fence where one would do (a pipeline reusing
#: bytes gets fence_proxy_async, which also covers the barriers' initialization).
EQUIVALENT: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_checker_flags_every_mutant(name: str) -> None:
    found = mutants(SCHEDULES[name]())
    table = [(m.name, m.where, _verdict(m)) for m in found]
    wrong = [row for row in table if (row[2] in ProtocolRule.__members__)
             == ((name, row[0]) in EQUIVALENT)]
    text = "\n".join(f"  {n:<32} {w:<40} {v}" for n, w, v in table)
    assert found and not wrong, (f"{len(wrong)} of {len(found)} mutants of {name} missed "
                                 f"(or an equivalent one flagged):\n{text}")


def test_mutants_cover_every_kind() -> None:
    """The generator finds a site of every kind in the schedules (so 100% is not 100% of
    nothing), and a ring of one stage has no shrunk mutant."""
    kinds = {m.kind for name in HAND_BUILT for m in mutants(SCHEDULES[name]())}
    assert kinds == set(KINDS)
    one_stage = [m for m in mutants(SCHEDULES["tma"]()) if m.kind == "shrink smem_alloc"]
    assert [m.index for m in one_stage] == [0]  # buf0 only, not the 1-stage `out`


def test_a_mutant_changes_only_its_copy() -> None:
    module = SCHEDULES["tma"]()
    before = [op.name for op in module.walk()]
    found = mutants(module)
    assert [op.name for op in module.walk()] == before
    flipped = next(m for m in found if m.kind == "flip parity")
    assert len(list(flipped.module.walk())) == len(before) + 2


# --- what the errors say -------------------------------------------------------------------------

def test_error_names_rule_trip_count_line_and_hint() -> None:
    dropped = next(m for m in mutants(SCHEDULES["cp_async"]())
                   if m.kind == "drop mbarrier_arrive" and m.index == 0)  # the producer's
    with pytest.raises(ScheduleError) as info:
        check_protocol(dropped.module)
    err = info.value
    assert err.loc == LOC
    assert err.message.startswith(
        f"pipeline protocol broken, DEADLOCK ({ProtocolRule.DEADLOCK.value}), at trip count 1 "
        "(also at 2, 3, 4, 1000): `mbarrier_wait`: role `cta` waits on barrier `full`[0] "
        "phase 0 (0 of 1 arrivals)")
    assert any("arrive" in h for h in err.hints)
    assert str(err).startswith(f"/src/user_kernel.py:{PIPELINE_LINE}:9: error: pipeline")


def test_findings_are_collected_and_raised_once() -> None:
    module = SCHEDULES["tma"]()
    for op in list(module.walk()):
        if op.name in ("fence_mbarrier_init", "fence_proxy_async"):
            op.parent.ops.remove(op)
    findings = check_function(module.kernel)
    assert [(f.rule, f.op.name) for f in findings] == [
        (ProtocolRule.MISSING_FENCE, "copy_s2g"),  # at trip count 0: only the epilogue runs
        (ProtocolRule.MISSING_FENCE, "copy_g2s")]
    with pytest.raises(ScheduleError) as info:
        check_protocol(module)
    assert "at trip count 0: `copy_s2g`" in info.value.message
    (related,) = info.value.related
    assert "at trip count 1 (also at 2, 3, 4, 1000): `copy_g2s`" in related.message


def test_trip_counts() -> None:
    assert trip_counts(3) == (0, 1, 2, 3, 4, LONG_RUN)
    assert trip_counts(1) == (0, 1, 2, LONG_RUN)
    assert trip_counts(2) == (0, 1, 2, 3, LONG_RUN)


def test_a_kernel_with_two_pipelines_checks_clean() -> None:
    """Two pipelines in one kernel (1000 iterations each in the long runs) are checked
    each on its own barriers: no finding. (Its cost, ~30 ms per pipeline, is a figure for
    docs/pipelines.md, not a timed test: CI machines are shared.)"""
    module = build_schedule((Stream("tma"),), stages=3)
    second = build_schedule((Stream("cp_async"),), stages=2)
    module.kernel.entry.ops.extend(second.kernel.entry.ops)  # same arguments' types
    for op in second.kernel.entry.ops:
        op.parent = module.kernel.entry
    for a, b in zip(second.kernel.args, module.kernel.args):
        for op in module.kernel.walk():
            op.operands = [b if v is a else v for v in op.operands]
    for op in module.kernel.walk():
        if op.name == "trip_count" and op.parent is module.kernel.entry and \
                op.attrs["stages"] == 2:
            op.attrs["pipeline"] = 1
    verify_ir(module)
    check_protocol(module)  # raises a ScheduleError on any finding


def test_a_stage_index_from_data_is_not_checkable() -> None:
    module = SCHEDULES["cp_async"]()
    fn = module.kernel
    pid = next(op for op in fn.walk() if op.name == "program_id").result
    read = next(op for op in fn.walk() if op.name == "smem_read")
    read.operands[read.slots.index("slot")] = pid
    with pytest.raises(ScheduleError, match="pipeline protocol not checkable at trip count 1 "
                                            r".*`smem_read` takes an operand that depends on "
                                            "runtime data") as info:
        check_protocol(module)
    assert info.value.loc == LOC


def test_functions_without_async_ops_are_not_run() -> None:
    from .builders import row_sum

    assert check_function(row_sum(BLOCK).fn) == []  # an unscheduled `pipeline` only
