"""Tuning configs: what users write (dicts of constexpr values) in canonical form.

``check_configs`` turns the decorator's ``configs=[{...}, ...]`` into frozen ``Config``
objects, collecting every problem (a name that is not a constexpr of the kernel, a value
that cannot be a constexpr, configs naming different parameters, duplicates) and raising
once at the decorator's line. ``json_value`` is the one place a constexpr becomes JSON
(records on disk, the log, the abstract call): JSON-native values as themselves, tuples
as lists, tilekit dtypes as ``{"dtype": "bfloat16"}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tilekit.diagnostic import Diagnostic
from tilekit.errors import LaunchError, SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.lang.kernel import KernelFunction, ParamKind
from tilekit.rt.launcher import hashable


def json_value(value: Any) -> Any:
    """A constexpr (or scalar) value as JSON-native data; stable across processes."""
    if isinstance(value, DType):
        return {"dtype": value.long}
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return json_value(value.item())
    raise TypeError(f"{value!r} ({type(value).__name__}) has no JSON form")


@dataclass(frozen=True)
class Config:
    """One point of the tuning space: constexpr values, in the kernel's parameter order."""

    values: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def to_json(self) -> dict[str, Any]:
        return {name: json_value(v) for name, v in self.values}

    @property
    def label(self) -> str:
        """``BLOCK=1024,STAGES=3``: how reports and the log name a config."""
        return ",".join(f"{name}={_show(v)}" for name, v in self.values)


def _show(value: Any) -> str:
    if isinstance(value, DType):
        return value.long
    if isinstance(value, tuple):
        return "(" + ",".join(_show(v) for v in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


def check_configs(kernel: KernelFunction, configs: Any, loc: SourceLoc | None) -> tuple[
        Config, ...]:
    """The canonical configs, or one ``LaunchError`` at ``loc`` listing every problem."""
    name = kernel.name
    constexprs = [p.name for p in kernel.params if p.kind is ParamKind.CONSTEXPR]
    if isinstance(configs, Mapping) or not isinstance(configs, Sequence) or \
            isinstance(configs, str):
        raise LaunchError(f"autotune(configs=...) of kernel `{name}` must be a list of dicts, "
                          f"got {type(configs).__name__}", loc,
                          hints=["e.g. configs=[{'BLOCK': 512}, {'BLOCK': 1024}]"])
    if not configs:
        raise LaunchError(f"autotune(configs=[]) of kernel `{name}` gives nothing to choose "
                          "from", loc, hints=["list at least one config, e.g. the values you "
                                              "launch the kernel with today"])
    problems: list[str] = []
    hints: list[str] = []
    out: list[Config] = []
    first_names: tuple[str, ...] | None = None
    for i, cfg in enumerate(configs):
        if not isinstance(cfg, Mapping):
            problems.append(f"config {i} is a {type(cfg).__name__}, not a dict")
            continue
        if not cfg:
            problems.append(f"config {i} is empty")
            continue
        bad = [k for k in cfg if k not in constexprs]
        for k in bad:
            what = "not a parameter" if all(p.name != k for p in kernel.params) else \
                "not a tk.constexpr parameter"
            problems.append(f"config {i} sets `{k}`, which is {what} of kernel `{name}`")
        unhashable = [k for k, v in cfg.items() if not hashable(v) or hasattr(v, "__array__")]
        for k in unhashable:
            problems.append(f"config {i} sets `{k}` to a {type(cfg[k]).__name__}, which cannot "
                            "be a compile-time constant")
        if bad or unhashable:
            continue
        names = tuple(p for p in constexprs if p in cfg)
        if first_names is None:
            first_names = names
        elif names != first_names:
            problems.append(f"config {i} sets {_names(names)}, but config 0 sets "
                            f"{_names(first_names)}")
            continue
        try:
            for v in cfg.values():
                json_value(v)
        except TypeError as exc:
            problems.append(f"config {i}: {exc}")
            continue
        config = Config(tuple((p, cfg[p]) for p in names))
        if config in out:
            problems.append(f"config {i} repeats config {out.index(config)} "
                            f"({config.label})")
            continue
        out.append(config)
    if problems:
        if constexprs:
            hints.append(f"the constexprs of `{name}` are {_names(tuple(constexprs))}")
        else:
            hints.append(f"kernel `{name}` has no tk.constexpr parameter to tune: annotate "
                         "the block sizes `BLOCK: tk.constexpr`")
        hints.append("give every config a value for the same constexprs")
        raise LaunchError(f"bad autotune configs for kernel `{name}`: {problems[0]}", loc,
                          hints=hints,
                          related=[Diagnostic(p) for p in problems[1:]])
    return tuple(out)


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "nothing"
