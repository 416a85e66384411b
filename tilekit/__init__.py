"""tilekit: an embedded Python DSL and JIT for layout-typed, pipelined GPU tile kernels.

    import tilekit as tk

    @tk.kernel
    def add(X, Y, Out, n, BLOCK: tk.constexpr):
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        mask = offs < n
        tk.store(Out, offs, tk.load(X, offs, mask) + tk.load(Y, offs, mask), mask)

    add[tk.cdiv(n, 1024),](x, y, out, n, BLOCK=1024)
"""

from tilekit.errors import (
    ExecutionError,
    LaunchError,
    MemoryAccessError,
    PerformanceWarning,
    PortfolioError,
    TilekitError,
    TraceError,
)
from tilekit.ir.dtypes import (
    DType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from tilekit.lang.kernel import KernelFunction, Tensor, constexpr
from tilekit.rt.launcher import JITKernel, kernel

# The language (builtins, control flow, tiles, pipelines) is imported when a kernel first
# uses it, i.e. when it is first traced: a process that launches prebuilt kernels from a
# portfolio never imports it (nor the IR). ``tk.load`` and the rest resolve here on
# first access and are then plain module attributes.
_LAZY = {
    **dict.fromkeys((
        "abs", "arange", "argmax", "argmin", "atomic_add", "atomic_max", "atomic_min",
        "broadcast_to", "cast", "ceil", "cos", "cumsum", "device_assert",
        "device_print", "dot", "erf", "exp", "exp2", "expand_dims", "floor", "fma", "full",
        "full_like", "isnan", "load", "log", "log2", "max", "maximum", "min", "minimum",
        "num_programs", "ones", "permute", "prod", "program_id", "reshape", "rsqrt",
        "sigmoid", "sin", "sqrt", "static_assert", "store", "sum", "tanh", "where", "zeros",
        "zeros_like"), "tilekit.lang.builtins"),
    **dict.fromkeys(("range", "static_range", "when"), "tilekit.lang.control"),
    **dict.fromkeys(("TileStream", "pipeline"), "tilekit.lang.pipeline"),
    **dict.fromkeys(("TensorArg", "TileView"), "tilekit.lang.tensor"),
    "Tile": "tilekit.lang.tile",
    "layout": None,  # the layout library (and islpy): the module itself
    "autotune": "tilekit.tune",  # the tuner (its store, timers and probes)
}

__version__ = "0.1.0.dev0"


def load_portfolio(path: str, strict: bool = False) -> object:
    """Register the prebuilt kernels of an AOT portfolio (``tilekit aot``): a launch in one
    of its buckets then compiles nothing and imports no compiler. ``strict``: a launch of
    one of its kernels outside its buckets is a ``LaunchError`` listing the nearest ones,
    instead of a compile. Returns the verified ``tilekit.aot.portfolio.Portfolio``;
    a bad file is a ``PortfolioError`` (a bad binary when its variant is first launched:
    each is read and verified then). docs/aot.md describes it all."""
    from tilekit.aot import registry

    return registry.load_portfolio(path, strict)


def cdiv(a: object, b: object) -> object:
    """Ceiling division, for Python ints (on the host too: no import of the language) and
    for tiles (``tilekit.lang.builtins.cdiv``)."""
    if type(a) is int and type(b) is int:
        return -(-a // b)
    from tilekit.lang.builtins import cdiv as tiles_cdiv

    return tiles_cdiv(a, b)


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'tilekit' has no attribute {name!r}")
    import importlib

    module = _LAZY[name]
    value = importlib.import_module("tilekit.layout") if module is None else \
        getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
