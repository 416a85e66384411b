"""Every ``TILEKIT_*`` environment variable, read in one place.

Each knob is typed, documented, and read when it is used (never at import
time), so a test or a user can change the environment between calls.
``override`` sets knobs for the duration of a ``with`` block, which is how
tests flip a knob without touching ``os.environ``.

The README's table of environment variables mirrors ``describe()``; a test
keeps the two in step.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}, got {text!r}")


def _parse_names(text: str) -> frozenset[str]:
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def _parse_str(text: str) -> str:
    return text


def _parse_paths(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split(os.pathsep) if part.strip())


class Knob(Generic[T]):
    """One environment variable: its name, parser, default and meaning. (A plain class,
    not a dataclass: ``import tilekit`` creates no dataclass it can do without, each
    costs about half a millisecond.)"""

    __slots__ = ("env", "parse", "default", "doc")

    def __init__(self, env: str, parse: Callable[[str], T], default: T, doc: str) -> None:
        self.env, self.parse, self.default, self.doc = env, parse, default, doc

    def __repr__(self) -> str:
        return f"Knob({self.env!r}, default={self.default!r})"

    def get(self) -> T:
        if self.env in _overrides:
            return _overrides[self.env]
        raw = os.environ.get(self.env)
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ValueError(f"environment variable {self.env}={raw!r}: {exc}") from None


INTERPRET: Knob[bool] = Knob(
    "TILEKIT_INTERPRET",
    _parse_bool,
    False,
    "Run every kernel on the CPU interpreter (numpy), even when a GPU is present. "
    "The interpreter checks every memory access and names the faulting source line.",
)
JITTER: Knob[bool] = Knob(
    "TILEKIT_JITTER",
    _parse_bool,
    False,
    "Compile pipelines with a random delay (0-2 us) before each copy a producer issues and "
    "each stage a consumer reads: a stress test of the barrier protocol (bench/pipeline.py "
    "--stress). Slow; for testing only. Part of the cache key.",
)
DUMP: Knob[frozenset[str]] = Knob(
    "TILEKIT_DUMP",
    _parse_names,
    frozenset(),
    "Comma-separated stages to print to stderr: `source` (the kernel's Python and each "
    "helper's, as the tracer runs them: `return`/`break`/`continue` in runtime scopes "
    "made flags and guards, hooks around each loop and `with`), `ir` (the traced IR), a pass name "
    "(the IR after that pass), `all` (after every pass), `layout` (the IR with every "
    "tile's layout and the convert_layout plans, when a kernel is compiled for the GPU), "
    "`sched` (each pipeline's schedule: copy engine per stream with the rules that "
    "rejected TMA, stages, shared-memory plan, warp roles; then the scheduled IR), "
    "`llvm` (its LLVM IR), `ptx` (its PTX; printed when the kernel is compiled or "
    "loaded from the disk cache) or `tune` (each autotuning decision: every config's "
    "median or why it was pruned, and the choice).",
)
DUMP_LOCS: Knob[bool] = Knob(
    "TILEKIT_DUMP_LOCS",
    _parse_bool,
    True,
    "Print each op's source location (`file:line:col`) in dumps.",
)
VERIFY_PASSES: Knob[bool] = Knob(
    "TILEKIT_VERIFY_PASSES",
    _parse_bool,
    True,
    "Run the IR verifier after every pass (cheap; turn off only to time passes).",
)

CACHE_DIR: Knob[str] = Knob(
    "TILEKIT_CACHE_DIR",
    _parse_str,
    "",
    "Where compiled kernels are cached on disk (empty: `$XDG_CACHE_HOME/tilekit`, else "
    "`~/.cache/tilekit`). `tilekit cache clear` empties it.",
)

RECORD: Knob[str] = Knob(
    "TILEKIT_RECORD",
    _parse_str,
    "",
    "A file to which each process appends one line of JSON, an abstract call, per kernel "
    "variant it compiles or loads for the GPU: the buckets a real run used, for "
    "`tilekit aot --calls` (docs/aot.md).",
)
PORTFOLIO: Knob[tuple[str, ...]] = Knob(
    "TILEKIT_PORTFOLIO",
    _parse_paths,
    (),
    "AOT portfolio files (`tilekit aot`), separated by `:` (`;` on Windows), loaded when "
    "the first kernel is loaded for the GPU, as `tilekit.load_portfolio(path)` would.",
)

NATIVE_LAUNCH: Knob[bool] = Knob(
    "TILEKIT_NATIVE_LAUNCH",
    _parse_bool,
    True,
    "Serve the launch fast path's cache hits with the native launcher (the C extension "
    "`tilekit.rt._fastlaunch`) when it is built; 0 keeps the generated Python dispatcher "
    "(same hits, same packed bytes). Read when a kernel's dispatcher is built; "
    "`tilekit info` says which one is active.",
)

WGMMA: Knob[bool] = Knob(
    "TILEKIT_WGMMA",
    _parse_bool,
    True,
    "Let `tk.dot`s fed by `tk.pipeline` stages run on wgmma with TMA (sm_90a, when the "
    "bucket admits it; docs/tensor_cores.md). 0 keeps them on mma.sync, to compare or "
    "to bisect. Part of the cache key; portfolios are built with it on.",
)

CHECK: Knob[bool] = Knob(
    "TILEKIT_CHECK",
    _parse_bool,
    False,
    "Compile GPU kernels with a bounds check on every `tk.load`, `tk.store` and atomic "
    "(masked-off lanes excluded): an access the interpreter rejects is skipped and raises "
    "`MemoryAccessError` after the launch, at its line, with the program id and the index, "
    "and the arrays the kernel writes are left as they were (README, Debugging). Slow: "
    "checked launches take the slow path, copy the arrays they write and synchronize. Read "
    "when a launch takes the slow path (`knobs.override(check=True)` turns the fast path "
    "off). Part of the cache key.",
)

ALL: tuple[Knob[Any], ...] = (INTERPRET, DUMP, DUMP_LOCS, VERIFY_PASSES, CACHE_DIR, JITTER,
                              RECORD, PORTFOLIO, NATIVE_LAUNCH, WGMMA, CHECK)

_overrides: dict[str, Any] = {}


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Set knobs by their short name for the duration of the block.

    >>> with override(interpret=True): ...
    """
    by_name = {k.env.removeprefix("TILEKIT_").lower(): k for k in ALL}
    saved = dict(_overrides)
    try:
        for name, value in values.items():
            if name not in by_name:
                raise KeyError(f"no knob named {name!r}; known: {sorted(by_name)}")
            _overrides[by_name[name].env] = value
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, meaning) for each knob, for docs and `tilekit env`."""
    rows = []
    for knob in ALL:
        default = knob.default
        if isinstance(default, bool):
            shown = "1" if default else "0"
        elif isinstance(default, (frozenset, tuple)):
            shown = ",".join(sorted(default)) or "(empty)"
        else:
            shown = str(default) or "(empty)"
        rows.append((knob.env, shown, knob.doc))
    return rows
