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
from tilekit.lang.builtins import (
    abs,
    arange,
    argmax,
    argmin,
    atomic_add,
    atomic_max,
    atomic_min,
    broadcast_to,
    cast,
    cdiv,
    ceil,
    cos,
    cumsum,
    device_assert,
    device_print,
    dot,
    erf,
    exp,
    exp2,
    expand_dims,
    floor,
    full,
    full_like,
    isnan,
    load,
    log,
    log2,
    max,
    maximum,
    min,
    minimum,
    num_programs,
    ones,
    permute,
    prod,
    program_id,
    reshape,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    static_assert,
    store,
    sum,
    tanh,
    where,
    zeros,
    zeros_like,
)
from tilekit.lang.control import range, static_range, when
from tilekit.lang.kernel import KernelFunction, Tensor, constexpr
from tilekit.lang.pipeline import TileStream, pipeline
from tilekit.lang.tensor import TensorArg, TileView
from tilekit.lang.tile import Tile
from tilekit.rt.launcher import JITKernel, kernel

__version__ = "0.1.0.dev0"


def load_portfolio(path: str, strict: bool = False) -> object:
    """Register the prebuilt kernels of an AOT portfolio (``tilekit aot``): a launch in one
    of its buckets then compiles nothing and imports no compiler. ``strict``: a launch of
    one of its kernels outside its buckets is a ``LaunchError`` listing the nearest ones,
    instead of a compile. Returns the verified ``tilekit.aot.portfolio.Portfolio``;
    a bad file is a ``PortfolioError``. docs/aot.md describes it all."""
    from tilekit.aot import registry

    return registry.load_portfolio(path, strict)


def __getattr__(name: str) -> object:
    # `tk.layout` imports the layout library (and islpy) only when first used, and
    # `tk.autotune` imports the tuner (its store, timers and probes) only when first used:
    # a process that launches prebuilt kernels never needs it.
    if name == "layout":
        import importlib

        return importlib.import_module("tilekit.layout")
    if name == "autotune":
        from tilekit.tune import autotune

        return autotune
    raise AttributeError(f"module 'tilekit' has no attribute {name!r}")
