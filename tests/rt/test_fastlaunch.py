"""The native launcher (``tilekit.rt._fastlaunch``) against the generated Python dispatcher.

The native launcher must decide every call as the generated ``_tk_call`` does (hit, miss,
nothing to run) and, on a hit, write the same bytes and make the same single
``cuLaunchKernelEx``. Checked three ways, without a GPU:

* ``test_fastpath.py``'s whole suite, run again here with the fake driver's
  ``cuLaunchKernelEx`` as a C function (a ctypes callback), so that its hits go native;
* differential tests (hypothesis): random profiles, tables, calls, grids and streams, each
  call made through both and compared (launched bytes, what reached the slow path,
  results and errors), and the native key against ``Dispatcher.key_fn``;
* one test per key fact: changing it misses, into the slow path;
* 10^5 calls leave no memory, objects or references behind.

GPU tests (marked ``gpu``) run the native launcher on the real driver. Every test here is
skipped, with the reason, when the extension is not built.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import inspect
import struct
import sys
import tracemalloc
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import tilekit as tk
from tilekit import knobs
from tilekit.codegen.artifact import AssertSite, CompiledKernel, ParamSlot, SlotKind
from tilekit.errors import LaunchError
from tilekit.rt import device_arrays, driver, fastpath, tensor_maps

from . import test_fastpath as python_suite
from .fake_gpu import PROPS, Driver, FakeLibcuda, FakeTensor, use_fake_gpu
from .ptx_kernels import add

_lib, _why = fastpath._load_native()
pytestmark = pytest.mark.skipif(_lib is None, reason=f"the native launcher is {_why}")


@pytest.fixture(autouse=True, scope="module")
def native_on() -> Any:
    """The native launcher is on here, whatever TILEKIT_NATIVE_LAUNCH says."""
    with knobs.override(native_launch=True):
        yield


LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)


def from_python() -> bool:
    """Whether the ``cuLaunchKernelEx`` being called was called by the generated Python
    functions (through ctypes) rather than by the native launcher (from C)."""
    return sys._getframe(2).f_code.co_name in ("_tk_call", "_tk_try")


def c_launch_ex(drv: Driver) -> Any:
    """The fake driver's ``cuLaunchKernelEx`` as a C function; each launch it records says
    whether the native launcher made it (``native``)."""

    def launch(config: int, fh: int | None, params: int, extra: int | None) -> int:
        native = not from_python()
        rc = drv.launch_ex((ctypes.c_char * fastpath.CONFIG_BYTES).from_address(config),
                           ctypes.c_void_p(fh), (ctypes.c_void_p * 1).from_address(params),
                           extra)
        if rc == 0:
            drv.launches[-1]["native"] = native
        return rc

    return LAUNCH_EX(launch)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Driver:  # type: ignore[misc]
    """``test_fastpath``'s fake driver, its fast-path launches through C."""
    drv = use_fake_gpu(monkeypatch)
    launch_ex = c_launch_ex(drv)
    monkeypatch.setattr(driver, "launch_ex_fn", lambda: launch_ex)
    for k in python_suite.KERNELS:
        k._loaded.clear()
    yield drv
    for k in python_suite.KERNELS:
        k._loaded.clear()


# test_fastpath.py's suite, run again with the fixture above: written once, run twice.
for _name, _test in vars(python_suite).items():
    if _name.startswith("test_") and "fake" in inspect.signature(_test).parameters:
        globals()[_name] = _test


def paths(drv: Driver) -> list[str]:
    """Each launch: slow, native (the C launcher) or python (the generated function)."""
    return [launch["path"] if launch["path"] == "slow" else
            "native" if launch["native"] else "python" for launch in drv.launches]


def launcher(kern: Any) -> Any:
    dispatcher, = kern._loaded.fast.values()
    return dispatcher.native


def run(x: Any, n: int, **kw: Any) -> None:
    add[(n + 127) // 128](x, x, x, n, BLOCK=128, **kw)


# --- the native launcher serves hits, and misses like the generated function ---------------


def test_hits_go_native_and_pack_what_the_slow_path_packs(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, 1000)
    run(x, 1000)
    native = launcher(add)
    assert native is not None and add._fast_call is native
    assert paths(fake) == ["slow", "native"]
    slow, hit = fake.launches
    for what in ("function", "grid", "threads", "shared", "stream"):
        assert slow[what] == hit[what], what
    assert native.stats == {"hits": 1, "declines": 0, "misses": 0, "empty": 0}


def test_behind_the_native_launcher_a_first_launch_compiles_nothing(fake: Driver) -> None:
    """The slow path installs the native launcher and the entry's key without generating
    any Python (a fresh process's first launch waits for no compile); the generated call
    is compiled when the launcher first declines a call, and runs it."""
    x = FakeTensor((1000,))
    run(x, 1000)
    (dispatcher,) = add._loaded.fast.values()
    assert dispatcher.native is not None and dispatcher.sources == {}
    with knobs.override(interpret=True):  # declined: the generated call decides (slow path)
        run(x, 1000)
    assert set(dispatcher.sources) == {"call"}
    assert dispatcher.key([x, x, x, 1000, 128]) == dispatcher.key_fn(x, x, x, 1000, 128)
    assert paths(fake) == ["slow", "slow"]


X = FakeTensor((4096,))


def add_call(x: Any = X, n: int = 4096, block: int = 128) -> tuple[Any, ...]:
    return add, 32, (x, x, x, n), {"BLOCK": block}


def rows_call(x: Any) -> tuple[Any, ...]:
    return python_suite.scale_rows, 8, (x, x), {"N": 64}


# Per fact of the key, a call and one that differs from it in that fact (kernel, grid,
# positional and keyword arguments).
KEY_FACTS = {
    "dtype": (add_call(), add_call(FakeTensor((4096,), dtype="torch.bfloat16"))),
    "alignment": (add_call(), add_call(FakeTensor((4095,), ptr=0x7F00_0000_0004), 4095)),
    "device": (add_call(), add_call(FakeTensor((4096,), device=1))),
    "unit stride": (add_call(), add_call(FakeTensor((4096,), strides=(2,)))),
    "span past int32": (add_call(), add_call(FakeTensor((2**20,), strides=(2**12,)))),
    "int past int32": (add_call(), add_call(n=2**31 + 5)),
    "constexpr": (add_call(), add_call(block=256)),
    # scale_rows' tile views make (X, 1, 64) a fact: 100 columns are no multiple of 64
    "size fact": (rows_call(FakeTensor((8, 64))), rows_call(FakeTensor((8, 100)))),
    "row stride": (rows_call(FakeTensor((8, 64))), rows_call(FakeTensor((8, 64), strides=(65, 1)))),
}


@pytest.mark.parametrize("fact", list(KEY_FACTS))
def test_a_change_of_one_key_fact_misses(fake: Driver, fact: str) -> None:
    """After a native hit, a call that differs in one fact of the key misses: the slow
    path launches it and installs it, and then both hit natively."""
    (kern, grid, args, kwargs), (_, other_grid, other_args, other_kwargs) = KEY_FACTS[fact]
    kern[grid](*args, **kwargs)
    kern[grid](*args, **kwargs)
    native = launcher(kern)
    key, other_key = native.key(*args, **kwargs), native.key(*other_args, **other_kwargs)
    assert key is not None and other_key is not None and key != other_key
    kern[other_grid](*other_args, **other_kwargs)
    assert paths(fake) == ["slow", "native", "slow"] and fake.loads == 2
    kern[other_grid](*other_args, **other_kwargs)
    kern[grid](*args, **kwargs)
    assert paths(fake)[3:] == ["native", "native"] and fake.loads == 2


def test_a_grid_past_the_limits_misses_into_the_slow_paths_error(fake: Driver) -> None:
    kern, grid, args, kwargs = add_call()
    kern[grid](*args, **kwargs)
    with pytest.raises(LaunchError, match=r"grid dimension 1 \(y\) is 70000"):
        kern[1, 70000](*args, **kwargs)
    assert paths(fake) == ["slow"] and launcher(kern).stats["misses"] == 1


def test_a_driver_error_misses_into_the_slow_path_once(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, 1000)
    fake.fail_next = 1
    run(x, 1000)  # the native launch fails: the slow path runs (no second fast attempt)
    assert paths(fake) == ["slow", "slow"]
    assert launcher(add).stats["misses"] == 1
    run(x, 1000)
    assert paths(fake)[-1] == "native"


def test_the_knob_keeps_the_generated_function(fake: Driver) -> None:
    x = FakeTensor((1000,))
    with knobs.override(native_launch=False):
        run(x, 1000)
    (dispatcher,) = add._loaded.fast.values()
    assert dispatcher.native is None and add._fast_call is dispatcher.python_call
    run(x, 1000)
    assert paths(fake) == ["slow", "python"]


def test_numpy_scalars_keep_the_generated_function(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, np.int64(1000))
    run(x, np.int64(1000))
    assert launcher(add) is None and paths(fake) == ["slow", "python"]


def test_an_interpret_override_declines_to_the_generated_function(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, 1000)
    native = launcher(add)
    with knobs.override(interpret=True):  # the slow path decides (here: the fake GPU)
        assert native.key(x, x, x, 1000, BLOCK=128) is not None
        run(x, 1000)
    assert native.stats["declines"] == 1 and paths(fake) == ["slow", "slow"]


# --- a dispatcher of a made-up kernel: random profiles, tables and calls -----------------

SCALAR_SLOTS = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64"]
DTYPES = {"torch.float32": 4, "torch.bfloat16": 2, "torch.int64": 8, "torch.uint8": 1}
ABSENT = object()  # a parameter or stream= the call does not pass
POSONLY, NORMAL, KWONLY = (inspect.Parameter.POSITIONAL_ONLY,
                           inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           inspect.Parameter.KEYWORD_ONLY)


class TorchLikeStream:
    cuda_stream = 0x7000


@dataclasses.dataclass
class Param:
    name: str
    kind: str  # fastpath's TENSOR, INT, SCALAR, CONST
    type: Any
    rank: int = 0
    bf16: bool = False
    binding: inspect._ParameterKind = NORMAL
    default: Any = inspect.Parameter.empty


class Harness:
    """A ``fastpath.Dispatcher`` of a made-up kernel (a signature and a profile: nothing
    is traced or compiled), its ``cuLaunchKernelEx`` a C callback recording the launch
    configuration and every slot's bytes, its slow path and status check recorders.
    ``record=False`` only counts (for the leak test)."""

    def __init__(self, params: list[Param], stream_option: bool,
                 facts: tuple[tuple[str, int, int], ...] = (), record: bool = True) -> None:
        for dtype, size in DTYPES.items():
            fastpath.note_dtype(dtype, size)
        self.params, self.record, self.rc = params, record, 0
        self.launches: list[tuple[Any, ...]] = []
        self.fallbacks: list[tuple[Any, ...]] = []
        self.checks: list[tuple[Any, ...]] = []
        self.counts = {"launches": 0, "fallbacks": 0}
        self.slot_sizes: dict[int, list[int]] = {}  # function handle -> its slots' sizes
        self.handles = iter(range(0x1000, 1 << 30))
        self.launch_ex = LAUNCH_EX(self._launch)
        harness = self

        class Recording(fastpath.Dispatcher):
            def _fallback(self, grid: Any, values: tuple[Any, ...], more: tuple[Any, ...],
                          stream: Any, extra: dict[str, Any]) -> str:
                harness.counts["fallbacks"] += 1
                if harness.record:
                    harness.fallbacks.append((grid, values, more, stream, dict(extra)))
                return "slow path"

        signature = inspect.Signature([inspect.Parameter(p.name, p.binding, default=p.default)
                                       for p in params])
        profile = fastpath.Profile(tuple(fastpath.ArgPlan(p.name, p.kind, p.type, p.rank,
                                                          p.bf16) for p in params),
                                   stream_option)
        self.dispatcher = Recording(SimpleNamespace(name="made_up", signature=signature),
                                    profile, lambda device: 0x5000 + 0x100 * device,
                                    device_arrays.stream_handle, self.launch_ex, self._check,
                                    facts)

    def _launch(self, config: int, fh: int, params: int, extra: Any) -> int:
        self.counts["launches"] += 1
        if self.record:
            sizes = self.slot_sizes[fh]
            ptrs = (ctypes.c_void_p * len(sizes)).from_address(params)
            self.launches.append((ctypes.string_at(config, fastpath.CONFIG_BYTES), fh, extra,
                                  tuple(ctypes.string_at(ptrs[i], n)
                                        for i, n in enumerate(sizes))))
        return self.rc

    def _check(self, loaded: Any, stream: Any, loc: Any) -> None:
        self.checks.append((loaded.function.handle, stream))
        if stream == TorchLikeStream.cuda_stream:
            raise RuntimeError("the status word says an assertion failed")

    def add_entry(self, values: list[Any], index: list[str], scalars: list[str],
                  asserts: bool = False, shared: int = 0) -> bool:
        """An entry for the key of a call with these values: tensors indexed in
        ``index``'s types, scalars in ``scalars``' slot types (ints in the slow path's
        choice); False when the call has no key."""
        key = self.dispatcher.key_fn(*values)
        try:
            hash(key)
        except TypeError:
            return False
        if key is None:
            return False
        slots: list[ParamSlot] = []
        tensors = [p for p in self.params if p.kind == fastpath.TENSOR]
        for p, idx in zip(tensors, index):
            slots.append(ParamSlot(SlotKind.POINTER, p.name, "uint64"))
            slots += [ParamSlot(SlotKind.SIZE, p.name, idx, a) for a in range(p.rank)]
            slots += [ParamSlot(SlotKind.STRIDE, p.name, idx, a) for a in range(p.rank)]
        scalar_params = [(p, v) for p, v in zip(self.params, values)
                         if p.kind in (fastpath.INT, fastpath.SCALAR)]
        for (p, v), dtype in zip(scalar_params, scalars):
            if p.kind == fastpath.INT:
                dtype = "int32" if -(2**31) <= v < 2**31 else "int64"
            slots.append(ParamSlot(SlotKind.SCALAR, p.name, "bfloat16" if p.bf16 else dtype))
        slots.append(ParamSlot(SlotKind.STATUS, "", "uint64"))
        compiled = CompiledKernel("made_up", "sm_90a", "ptx", b"", 4, 32, shared, tuple(slots),
                                  asserts=(AssertSite("x > 0", "f.py", 1),) if asserts else ())
        handle = next(self.handles)
        loaded = SimpleNamespace(compiled=compiled, status_ptr=0x7E00_0000_1000, props=PROPS,
                                 function=SimpleNamespace(handle=handle))
        self.slot_sizes[handle] = [struct.calcsize("<" + fastpath.SLOT_FORMATS[s.dtype])
                                   for s in slots]
        return self.dispatcher.add(key, None, loaded)  # type: ignore[arg-type]

    def outcome(self, fn: Any, grid: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """What a call through ``fn`` did: its result or error, the launches (bytes), the
        calls that reached the slow path, the status checks."""
        self.launches.clear()
        self.fallbacks.clear()
        self.checks.clear()
        try:
            result: tuple[Any, ...] = ("returned", fn(grid, *args, **kwargs))
        except Exception as exc:
            result = ("raised", type(exc).__name__, str(exc))
        return result, list(self.launches), list(self.fallbacks), list(self.checks)


@st.composite
def made_up_kernels(draw: Any) -> tuple[list[Param], bool, tuple[tuple[str, int, int], ...]]:
    """A kernel's parameters (tensors of rank 0-3, ints, float/int/bool/bfloat16 scalars,
    constexprs; positional-only, normal and keyword-only; some with defaults), whether
    ``stream=`` is a launch option, and the size facts its key covers."""
    n = draw(st.integers(1, 6))
    bindings = sorted(draw(st.lists(st.sampled_from([POSONLY, NORMAL, NORMAL, KWONLY]),
                                    min_size=n, max_size=n)))
    params: list[Param] = []
    defaulted = False
    for i, binding in enumerate(bindings):
        kind = draw(st.sampled_from(["tensor", "tensor", "int", "float", "int scalar", "bool",
                                     "bf16", "const"]))
        if i == 0:
            kind = "tensor"
        name = f"a{i}"
        if kind == "tensor":
            p = Param(name, fastpath.TENSOR, FakeTensor, draw(st.integers(0, 3)))
        elif kind == "int":
            p = Param(name, fastpath.INT, int)
        elif kind == "const":
            p = Param(name, fastpath.CONST, None)
        else:
            p = Param(name, fastpath.SCALAR, {"float": float, "bf16": float, "bool": bool,
                                              "int scalar": int}[kind], bf16=kind == "bf16")
        p.binding = binding
        if p.kind in (fastpath.INT, fastpath.CONST) and (
                defaulted and binding is not KWONLY or draw(st.booleans())):
            p.default = 128 if p.kind == fastpath.CONST else 7
            defaulted = defaulted or binding is not KWONLY
        elif defaulted and binding is not KWONLY:  # a positional parameter after a default
            p.binding = KWONLY
        params.append(p)
    params.sort(key=lambda p: p.binding)
    ranked = [(p.name, a) for p in params if p.kind == fastpath.TENSOR for a in range(p.rank)]
    facts = draw(st.lists(st.tuples(st.sampled_from(ranked), st.sampled_from([1, 2, 3, 4, 64])),
                          max_size=3)) if ranked else []
    return params, draw(st.booleans()), tuple(sorted({(t, a, n) for (t, a), n in facts}))


def tensors(rank: int) -> Any:
    sizes = st.sampled_from([0, 1, 2, 3, 64, 65, 1000, 2**20, 2**31 - 1, 2**31, 2**31 + 1])
    strides = st.sampled_from([0, 1, 2, 64, 65, 2**12, 2**40])
    return st.builds(
        FakeTensor, st.lists(sizes, min_size=rank, max_size=rank).map(tuple),
        st.sampled_from(sorted(DTYPES)),
        st.sampled_from([0, 2, 4, 8, 16, 24, 48]).map(lambda off: 0x7F00_0000_0000 + off),
        st.one_of(st.none(), st.lists(strides, min_size=rank, max_size=rank).map(tuple)),
        st.sampled_from([0, 0, 1]))


INTS = [0, 5, 1000, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63, 2**64 + 3, -(2**70)]
FLOATS = [0.0, 1.5, -2.25, 1e-8, 65504.0, 70000.0, 3.4e38, 1e300, float("inf"), float("nan")]


def values_of(p: Param, typed: bool = False) -> Any:
    """A value for parameter ``p``: of its type (a tensor of its rank) when ``typed``,
    else mostly so."""
    if p.kind == fastpath.TENSOR:
        right = tensors(p.rank)
        other = st.integers(0, 3).flatmap(tensors)
    elif p.kind == fastpath.CONST:
        right = st.sampled_from([64, 128, 128.0, "mode", (1, 2), None])
        other = st.just([1])  # unhashable
    else:
        right = st.sampled_from(INTS) if p.kind == fastpath.INT or p.type is int else \
            st.booleans() if p.type is bool else st.sampled_from(FLOATS)
        other = st.sampled_from([5.0, np.int64(5), True, "5", None])
    return right if typed else st.one_of(*[right] * 4, other)


GRIDS = [1, 8, 0, -1, 2**31, 2**80, (4,), (4, 2), (1, 1, 2), (0, 3), (2**80, 0), (1, 70000),
         (70000, 1), (True,), True, (1.5,), [3, 2], np.int64(4), (np.int32(2),), (), (1,) * 4,
         lambda meta: (3,), lambda meta: 0, lambda meta: "x", lambda meta: (len(meta), 2)]
STREAMS = [ABSENT, ABSENT, None, 0, 0x6000, -1, 2**64, True, TorchLikeStream(), "bad"]


def arrange(draw: Any, params: list[Param], values: list[Any], stream: Any) -> tuple[Any, ...]:
    """A call of these values: each positional or by keyword where it may be, omitted
    where the value is the default; sometimes a wrong shape (an unknown keyword, one
    positional argument too many, a parameter given twice)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p, v in zip(params, values):
        if v is p.default and draw(st.booleans()):
            continue
        if p.binding is POSONLY or (p.binding is NORMAL and len(args) == params.index(p)
                                     and draw(st.booleans())):
            if len(args) != params.index(p):
                return (), {}  # a positional-only parameter after an omitted one
            args.append(v)
        else:
            kwargs[p.name] = v
    if stream is not ABSENT:
        kwargs["stream"] = stream
    odd = draw(st.sampled_from([None] * 12 + ["keyword", "positional", "twice"]))
    if odd == "keyword":
        kwargs["bogus"] = 1
    elif odd == "positional":
        args += [v for p, v in zip(params, values)][len(args):] + [1]
        kwargs = {k: v for k, v in kwargs.items() if k == "stream"}
    elif odd == "twice" and args:
        kwargs[params[0].name] = args[0]
    return tuple(args), kwargs


def span_overflows(values: list[Any]) -> bool:
    """A tensor whose span does not fit in int64: the native key declines it."""
    return any(isinstance(v, FakeTensor) and
               sum(abs((n - 1) * s) for n, s in zip(v.shape, v.stride())) >= 2**63
               for v in values)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # bf16(1e300)
@given(made_up_kernels(), st.data())
def test_native_and_generated_dispatchers_agree(kernel: Any, data: Any) -> None:
    """Random profiles, tables and calls: both dispatchers make the same launches (the
    same bytes), send the same calls to the slow path, return and raise the same; the
    native key is ``key_fn``'s; a plain hit of the generated function is a native hit."""
    params, stream_option, facts = kernel
    harness = Harness(params, stream_option, facts)
    dispatcher = harness.dispatcher
    native = dispatcher.native
    assert native is not None and dispatcher.call is native
    draw = data.draw
    seeds = [[draw(values_of(p, typed=True)) for p in params]
             for _ in range(draw(st.integers(1, 3)))]
    tensor_count = sum(p.kind == fastpath.TENSOR for p in params)

    def add_entry(values: list[Any]) -> None:
        harness.add_entry(values, draw(st.lists(st.sampled_from(["int32", "int64"]),
                                                min_size=tensor_count, max_size=tensor_count)),
                          draw(st.lists(st.sampled_from(SCALAR_SLOTS), min_size=len(params),
                                        max_size=len(params))),
                          asserts=draw(st.booleans()), shared=draw(st.sampled_from([0, 4096])))

    for seed in seeds:
        add_entry(seed)
    for i in range(draw(st.integers(1, 4))):
        if i == 0:  # a seed, plainly: a hit of the generated function must be native
            values, grid, stream = seeds[0], 1, ABSENT
            args, kwargs = tuple(v for p, v in zip(params, values) if p.binding is not KWONLY), \
                {p.name: v for p, v in zip(params, values) if p.binding is KWONLY}
        else:
            seed = draw(st.sampled_from(seeds))
            values = [v if draw(st.integers(0, 9)) < 8 else draw(values_of(p))
                      for p, v in zip(params, seed)]
            grid = draw(st.sampled_from(GRIDS))
            stream = draw(st.sampled_from(STREAMS)) if stream_option else ABSENT
            args, kwargs = arrange(draw, params, values, stream)
        harness.rc = draw(st.sampled_from([0, 0, 0, 201]))
        key = native.key(*args, **{k: v for k, v in kwargs.items() if k != "stream"})
        if key is not None:
            assert key == dispatcher.key_fn(*values)
        hits = native.stats["hits"]
        before = native.stats
        by_native = harness.outcome(native, grid, args, kwargs)
        after = native.stats
        event("native: " + next((k for k in after if after[k] != before[k]), "raised"))
        by_python = harness.outcome(dispatcher.python_call, grid, args, kwargs)
        assert by_native == by_python
        result, launches, fallbacks, _ = by_python
        if i == 0 and launches and not fallbacks and not span_overflows(values):
            assert native.stats["hits"] == hits + 1
        if draw(st.integers(0, 3)) == 0:  # the table grows between calls (a slow launch)
            add_entry(values)


def test_every_slot_type_packs_as_struct_does() -> None:
    """Each scalar slot type with values at and past its range, through both dispatchers."""
    params = [Param("x", fastpath.TENSOR, FakeTensor, 1), Param("v", fastpath.SCALAR, float),
              Param("k", fastpath.SCALAR, int), Param("b", fastpath.SCALAR, bool)]
    x = FakeTensor((100,))
    for slot in SCALAR_SLOTS:
        harness = Harness(params, True)
        assert harness.add_entry([x, 1.0, 1, True], ["int32"], ["float32", slot, slot, slot])
        harness.add_entry([x, 1.0, 1, True], ["int32"], [slot, slot, slot])
        for v, k, b in [(1.5, 0, True), (-2.5, -1, False), (70000.0, 255, True),
                        (1e300, 256, False), (float("nan"), 2**31, True),
                        (-0.0, 2**64 - 1, True), (3.4e38, 2**64, False), (1e-10, -(2**63), True)]:
            by_native = harness.outcome(harness.dispatcher.native, 4, (x, v, k, b), {})
            by_python = harness.outcome(harness.dispatcher.python_call, 4, (x, v, k, b), {})
            assert by_native == by_python, (slot, v, k, b)


def test_the_last_key_memo_follows_the_table() -> None:
    """The launcher remembers its last key and entry while the table keeps its size, and
    forgets them when the dispatcher empties the table (``cover``): an emptied table is
    looked up again, a refilled one serves its new entry."""
    harness = Harness([Param("x", fastpath.TENSOR, FakeTensor, 1)], False)
    native, x = harness.dispatcher.native, FakeTensor((100,))
    assert harness.add_entry([x], ["int32"], [])
    for _ in range(2):
        _, launches, fallbacks, _ = harness.outcome(native, 1, (x,), {})
        assert [launch[1] for launch in launches] == [0x1000] and fallbacks == []
    native.forget()
    harness.dispatcher.table.clear()  # as cover() does
    _, launches, fallbacks, _ = harness.outcome(native, 1, (x,), {})
    assert launches == [] and len(fallbacks) == 1
    assert native.stats == {"hits": 2, "declines": 1, "misses": 0, "empty": 0}
    assert harness.add_entry([x], ["int64"], [])  # another loaded kernel for the key
    _, launches, _, _ = harness.outcome(native, 1, (x,), {})
    assert [launch[1] for launch in launches] == [0x1001] and native.stats["hits"] == 3


def test_cover_makes_a_new_launcher_and_the_old_one_forgets(fake: Driver) -> None:
    x = FakeTensor((8, 64))
    python_suite.scale_rows[8](x, x, N=64)
    (dispatcher,) = python_suite.scale_rows._loaded.fast.values()
    kept = python_suite.scale_rows[8]  # a kern[grid] kept across the regeneration
    kept(x, x, N=64)
    old = dispatcher.native
    assert dispatcher.cover((("X", 0, 8),))
    assert dispatcher.native is not old and dispatcher.table == {}
    kept(x, x, N=64)  # the old launcher's key form is not in the new table: the slow path
    assert paths(fake) == ["slow", "native", "slow"]


class FreshTensor:
    """What the fast path reads of a torch tensor, each read a new object as torch's are
    (FakeTensor returns the same ones): a reference the launcher loses shows as memory."""

    dtype = "torch.float32"

    def __init__(self, shape: tuple[int, ...], ptr: int = 0x7F00_0000_0000) -> None:
        self._shape, self._ptr = shape, ptr

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(list(self._shape))

    def stride(self) -> tuple[int, ...]:
        return (self._shape[1], 1)

    def data_ptr(self) -> int:
        return self._ptr + 0  # a new int object

    def get_device(self) -> int:
        return 0

    def dim(self) -> int:
        return len(self._shape)


def test_many_calls_leak_nothing() -> None:
    """10^5 calls of the native launcher (hits, keyword calls, grids through ``_grid3``,
    declines, misses) leave nothing behind: tracemalloc's traced memory, gc's object count
    and the reference counts of the arguments stay flat."""
    params = [Param("x", fastpath.TENSOR, FreshTensor, 2), Param("n", fastpath.INT, int),
              Param("v", fastpath.SCALAR, float, bf16=True),
              Param("B", fastpath.CONST, None, binding=KWONLY)]
    harness = Harness(params, True, (("x", 1, 16),), record=False)
    x, odd = FreshTensor((64, 64)), FreshTensor((64, 64), ptr=0x7F00_0000_0008)
    n, v = 10**6, 1.5
    assert harness.add_entry([x, n, v, 128], ["int32"], ["int32", "float32"], asserts=True)
    harness.checks = type("Nowhere", (list,), {"append": lambda self, item: None})()
    native = harness.dispatcher.native

    def burst(k: int) -> None:
        for _ in range(k):
            native(8, x, n, v, B=128)  # a hit
            native((8, 2), x=x, n=n, v=v, B=128, stream=0x6000)  # a hit
            native(lambda meta: (meta["n"] // 128,), x, n, v, B=128)  # through _grid3
            native(8, odd, n, v, B=128)  # not in the table: declined
            native((1, 70000), x, n, v, B=128)  # over the limit: a miss

    burst(2000)
    gc.collect()
    objects = len(gc.get_objects())
    refs = [sys.getrefcount(o) for o in (x, odd, n, v, native)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    burst(20_000)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 10_000, grown
    assert len(gc.get_objects()) - objects < 20
    assert [sys.getrefcount(o) for o in (x, odd, n, v, native)] == refs
    assert native.stats == {"hits": 3 * 22_000, "declines": 22_000, "misses": 22_000,
                            "empty": 0}
    assert harness.counts == {"launches": 3 * 22_000, "fallbacks": 2 * 22_000}


# --- kernels with tensor maps keep the generated function ---------------------------------


@pytest.fixture
def tma_fake(monkeypatch: pytest.MonkeyPatch) -> Driver:  # type: ignore[misc]
    """``test_tensor_maps``' fake GPU (a tensor map slot for ``copy_rows``), its fast-path
    launches through C."""
    from . import test_tensor_maps as maps

    lib = FakeLibcuda()
    driver.use_library(lib)
    tensor_maps.clear()
    drv = use_fake_gpu(monkeypatch, maps.tma_compile)
    launch_ex = c_launch_ex(drv)
    monkeypatch.setattr(driver, "launch_ex_fn", lambda: launch_ex)
    for k in (maps.copy_rows, maps.plain_rows):
        k._loaded.clear()
    yield drv
    for k in (maps.copy_rows, maps.plain_rows):
        k._loaded.clear()
    monkeypatch.undo()
    tensor_maps.clear()
    driver.use_library(None)


def test_kernels_with_tensor_maps_keep_the_generated_function(tma_fake: Driver) -> None:
    from .test_tensor_maps import bf16, copy_rows, plain_rows

    x, y = bf16(64, 64), bf16(64, 64, ptr=0x7F00_0010_0000)
    for kern in (plain_rows, copy_rows):
        kern[64](x, y, N=64)
        kern[64](x, y, N=64)
    assert launcher(plain_rows) is not None and launcher(copy_rows) is None
    assert paths(tma_fake) == ["slow", "native", "slow", "python"]


# --- on a GPU: the real driver's cuLaunchKernelEx, called from C ---------------------------


@pytest.fixture
def gpu_kernels(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    """``test_gpu``'s setting: hand-written PTX for the kernel ABI, a fresh cache."""
    from .ptx_kernels import check_positive, compiled_by_hand

    with compiled_by_hand(monkeypatch, str(tmp_path)):
        yield SimpleNamespace(add=add, check_positive=check_positive)


def _torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.mark.gpu
def test_gpu_native_hits_compute_what_the_slow_path_computes(gpu_kernels: Any) -> None:
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n in (5000, 5000, 4099, 1, 70_000):
        x = torch.randn(n, device="cuda", generator=gen)
        y = torch.randn(n, device="cuda", generator=gen)
        out = torch.full_like(x, float("nan"))
        add[tk.cdiv(n, 128)](x, y, out, n, BLOCK=128)
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    native = launcher(add)
    assert native is not None and native.stats["hits"] == 4, native.stats
    base = torch.randn(4100, device="cuda")
    out = torch.zeros(4100, device="cuda")
    add[33](base[1:], base[1:], out[1:], 4099, BLOCK=128)  # not 16-byte aligned: a miss
    add[33](base[1:], base[1:], out[1:], 4099, BLOCK=128)  # now a native hit
    torch.testing.assert_close(out[1:], 2 * base[1:], rtol=0, atol=0)
    assert native.stats["hits"] == 5 and len(add._loaded) == 2


@pytest.mark.gpu
def test_gpu_native_streams_and_graph_capture(gpu_kernels: Any) -> None:
    """stream= and torch's current stream, and a CUDA graph captured from native hits."""
    torch = _torch()
    n = 10_000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.zeros(n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        add[tk.cdiv(n, 128)](x, y, out, n, BLOCK=128)  # compiled, loaded, keyed
        add[tk.cdiv(n, 128)](x, y, out, n, BLOCK=128)
    add[tk.cdiv(n, 128)](x, y, out, n, BLOCK=128, stream=s)
    add[tk.cdiv(n, 128)](x, y, out, n, BLOCK=128, stream=s.cuda_stream)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    native = launcher(add)
    hits = native.stats["hits"]
    assert hits == 3
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        add[tk.cdiv(n, 128)](x, y, out, n, BLOCK=128)
        add[tk.cdiv(n, 128)](out, y, out, n, BLOCK=128)  # out = x + 2y
    assert native.stats["hits"] == hits + 2
    for seed in range(2):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x.copy_(torch.randn(n, device="cuda", generator=gen))
        out.zero_()
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, (x + y) + y, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_native_hits_read_the_assert_status_word(gpu_kernels: Any) -> None:
    from tilekit.errors import ExecutionError

    torch = _torch()
    check_positive = gpu_kernels.check_positive
    x = torch.ones(1000, device="cuda")
    check_positive[8](x, 1000, BLOCK=128)
    x[300] = -1.0
    with pytest.raises(ExecutionError, match="x must be positive"):
        check_positive[8](x, 1000, BLOCK=128)  # a native hit, then the status word
    assert launcher(check_positive).stats["hits"] == 1
    x[300] = 1.0
    check_positive[8](x, 1000, BLOCK=128)
