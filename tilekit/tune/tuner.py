"""``@tk.autotune``: pick the fastest of a kernel's configs per tuning key, once.

``autotune(configs=[...], key=[...])`` above ``@tk.kernel`` returns an ``Autotuner`` with
the kernel's launch surface, ``tuned[grid](...)``. A call computes its tuning key (the
values of the scalars and constexprs named by ``key``, the dtype and shape of the tensors
it names, the dtype of every tensor, the constexprs not tuned, the arch), then

1. memory: the config chosen for that key in this process;
2. disk: a record stored by an earlier process (``store``: verified, else a miss);
3. else tunes: each config is compiled (``probe``) and pruned when it cannot run well
   (``probe.prune_reasons``, and the user's ``prune=``); each survivor is timed on the
   call's own arguments (``timing``), the arrays the kernel writes saved before and
   restored after each config's runs; the fastest median wins (ties: the earlier config).
   The choice is stored and one line is appended to the log.

Then it launches the chosen config once on the arguments, so they end as after one
launch. Passing a tuned constexpr in the call is an error: the tuner owns it.
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilekit import knobs
from tilekit.errors import LaunchError, SourceLoc, TilekitError, user_loc
from tilekit.lang.kernel import ParamKind
from tilekit.rt.device_arrays import is_array
from tilekit.rt.launcher import JITKernel
from tilekit.tune import store
from tilekit.tune.config import Config, check_configs, json_value
from tilekit.tune.probe import Probe, Report, probe_gpu, probe_interp, prune_reasons
from tilekit.tune.timing import CudaEventTimer, Timer

# prune(config, arguments) -> falsy to keep the config, else why it is dropped (a str) or True
PruneFn = Callable[[dict[str, Any], dict[str, Any]], "bool | str | None"]

INTERP = "interp"  # the arch of a call that runs on the interpreter

_stats = {"tunings": 0, "timings": 0, "disk_hits": 0, "bad_records": 0, "untimed": 0}


def stats() -> dict[str, int]:
    """Counters since the process started (or ``reset_stats``): ``tunings`` (decisions made
    by timing), ``timings`` (configs timed), ``disk_hits`` (decisions read from disk),
    ``bad_records`` (records rejected on read) and ``untimed`` (decisions on the
    interpreter without a timer: the first config that survives pruning)."""
    return dict(_stats)


def reset_stats() -> None:
    for k in _stats:
        _stats[k] = 0


def autotune(configs: Sequence[Mapping[str, Any]], key: Sequence[str] = (), *,
             warmup: int = 3, rep: int = 20, restore: str | Sequence[str] | None = "auto",
             prune: PruneFn | None = None, log: str | Path | None = None,
             timer: Timer | None = None, probe: Probe | None = None) -> Callable[
                 [JITKernel], Autotuner]:
    """Decorator (above ``@tk.kernel``): tune the kernel's constexprs over ``configs``.

    ``key``: parameter names whose values (scalars, constexprs) or dtype and shape
    (tensors) select a tuning. ``warmup``/``rep``: untimed and timed launches per config.
    ``restore``: ``"auto"`` saves and restores the arrays the kernel writes, a list names
    them, None restores nothing (the kernel overwrites its outputs whole). ``prune``:
    ``prune(config, arguments)`` returns a reason (or True) to drop a config before it is
    compiled. ``log``: a file that gets each decision's line too. ``timer``/``probe``:
    stand-ins for CUDA events and the compiler (tests; see ``timing`` and ``probe``)."""
    loc = user_loc()

    def decorate(kern: Any) -> Autotuner:
        if isinstance(kern, Autotuner):
            raise LaunchError("@tk.autotune is applied twice", loc,
                              hints=["merge the configs into one @tk.autotune(...)"])
        if not isinstance(kern, JITKernel):
            raise LaunchError(f"@tk.autotune(...) decorates a tilekit kernel, got "
                              f"{type(kern).__name__}", loc,
                              hints=["put @tk.autotune(...) above @tk.kernel"])
        return Autotuner(kern, configs, key, warmup=warmup, rep=rep, restore=restore,
                         prune=prune, log=log, timer=timer, probe=probe, loc=loc)

    return decorate


@dataclass
class Decision:
    """One tuning key's choice, and how it was made (for ``tuning_report``)."""

    key: dict[str, Any]
    chosen: Config
    how: str  # "timed", "disk" or "untimed"
    medians: dict[Config, float] = field(default_factory=dict)
    pruned: dict[Config, str] = field(default_factory=dict)
    path: Path | None = None
    note: str = ""


class Autotuner:
    """A tuned kernel: ``tuned[grid](...)`` launches the config chosen for the call's key.
    ``tuned.kernel`` is the kernel underneath (launch it to run one config yourself)."""

    def __init__(self, kernel: JITKernel, configs: Any, key: Any, *, warmup: int, rep: int,
                 restore: Any, prune: PruneFn | None, log: str | Path | None,
                 timer: Timer | None, probe: Probe | None, loc: SourceLoc | None) -> None:
        self.kernel = kernel
        self.name = kernel.name
        self.__doc__ = kernel.__doc__
        self.__wrapped__ = kernel.fn
        self.loc = loc
        self.configs = check_configs(kernel, configs, loc)
        self.tuned = tuple(name for name, _ in self.configs[0].values)
        self.key = _check_key(kernel, key, self.tuned, loc)
        for what, value, least in (("warmup", warmup, 0), ("rep", rep, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise LaunchError(f"autotune({what}={value!r}) of kernel `{self.name}` must be "
                                  f"an int >= {least}", loc)
        self.warmup, self.rep = warmup, rep
        self.restore = _check_restore(kernel, restore, loc)
        if prune is not None and not callable(prune):
            raise LaunchError(f"autotune(prune=...) of kernel `{self.name}` must be a function "
                              "(config, arguments) -> reason or None", loc)
        self.prune = prune
        self.log = Path(log) if log is not None else None
        self.timer = timer
        self.probe = probe
        self._json_configs = [c.to_json() for c in self.configs]
        self._params = {p.name: p for p in kernel.params}
        self._chosen: dict[tuple[Any, ...], Config] = {}
        self.decisions: dict[tuple[Any, ...], Decision] = {}

    def __repr__(self) -> str:
        return f"<tilekit autotuned kernel {self.name} ({len(self.configs)} configs)>"

    def __getitem__(self, grid: Any) -> TunedLaunch:
        return TunedLaunch(self, grid)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise LaunchError(f"kernel `{self.name}` was called without a grid", user_loc(),
                          hints=[f"launch it as {self.name}[grid](...)"])

    # --- one call ------------------------------------------------------------------------

    def _launch(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        loc = user_loc()
        kern = self.kernel
        extra: dict[str, Any] = {}
        if "stream" in kwargs and not kern._stream_is_param:
            kwargs = dict(kwargs)
            extra["stream"] = kwargs.pop("stream")
        arguments = self._arguments(args, kwargs, loc)
        arch, device = _arch_of(arguments, loc)
        mem_key = self._memory_key(arguments, arch)
        config = self._chosen.get(mem_key)
        if config is None:
            config = self._decide(grid, args, kwargs, extra, arguments, arch, device, mem_key,
                                  loc)
        kern[grid](*args, **kwargs, **config.as_dict(), **extra)

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                   loc: SourceLoc | None) -> dict[str, Any]:
        """The call's arguments by name (defaults applied), without the tuned constexprs,
        which the call may not pass."""
        try:
            bound = self.kernel.signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            self.kernel.bind(args, {**kwargs, **self.configs[0].as_dict()}, loc)  # its message
            raise LaunchError(f"bad arguments for kernel `{self.name}`: {exc}", loc) from None
        given = [n for n in self.tuned if n in bound.arguments]
        if given:
            raise LaunchError(
                f"`{given[0]}` of kernel `{self.name}` is chosen by @tk.autotune; the call "
                "may not pass it", loc,
                hints=[f"remove `{given[0]}` from the call",
                       f"to run one config yourself, launch the kernel underneath: "
                       f"{self.name}.kernel[grid](..., {given[0]}=...)"])
        bound.apply_defaults()
        out = {k: v for k, v in bound.arguments.items() if k not in self.tuned}
        missing = [p for p in self._params if p not in out and p not in self.tuned]
        if missing:  # the kernel's own message, naming the parameters
            self.kernel.bind(args, {**kwargs, **self.configs[0].as_dict()}, loc)
        return out

    def _memory_key(self, arguments: Mapping[str, Any], arch: str) -> tuple[Any, ...]:
        """The tuning key, cheap to compute on every call (hashable, not JSON), with the
        values of the globals the kernel reads: a changed one is another kernel, tuned
        again (the record on disk is keyed by its IR)."""
        self.kernel.check_globals()
        parts: list[Any] = [arch, self.kernel.globals_key]
        for name in self.key:
            value = arguments[name]
            if is_array(value):
                parts.append((_dtype_name(value), tuple(int(n) for n in value.shape)))
            else:
                parts.append(_hashable_value(value))
        for name, value in arguments.items():
            if name in self.key:
                continue
            if is_array(value):
                parts.append(_dtype_name(value))
            elif self._params[name].kind is ParamKind.CONSTEXPR:
                parts.append(_hashable_value(value))
        return tuple(parts)

    def _key_doc(self, arguments: Mapping[str, Any], arch: str) -> dict[str, Any]:
        """The tuning key as JSON (for the record on disk and the reports)."""
        named: dict[str, Any] = {}
        for name in self.key:
            value = arguments[name]
            named[name] = ({"dtype": _dtype_name(value),
                            "shape": [int(n) for n in value.shape]}
                           if is_array(value) else _json_or_repr(value))
        dtypes = {n: _dtype_name(v) for n, v in arguments.items()
                  if n not in self.key and is_array(v)}
        constexprs = {n: _json_or_repr(v) for n, v in arguments.items()
                      if n not in self.key and self._params[n].kind is ParamKind.CONSTEXPR}
        return {"key": named, "dtypes": dtypes, "constexprs": constexprs, "arch": arch}

    # --- a decision ----------------------------------------------------------------------

    def _decide(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                extra: dict[str, Any], arguments: dict[str, Any], arch: str, device: int,
                mem_key: tuple[Any, ...], loc: SourceLoc | None) -> Config:
        kern = self.kernel
        bounds = [kern.bind(args, {**kwargs, **c.as_dict()}, loc) for c in self.configs]
        key_doc = self._key_doc(arguments, arch)
        record_key = self._record_key(bounds, key_doc, arch, loc)
        decision = None
        note = ""
        if record_key is not None:
            record, why = store.load(record_key, self._json_configs)
            if record is not None:
                _stats["disk_hits"] += 1
                by_label = {c.label: c for c in self.configs}
                decision = Decision(key_doc, self.configs[record.chosen], "disk",
                                    {by_label[k]: v for k, v in record.timings_ms.items()
                                     if k in by_label},
                                    {by_label[k]: v for k, v in record.pruned.items()
                                     if k in by_label}, store.path_of(record_key))
            elif why:
                _stats["bad_records"] += 1
                note = f"stored record not used: {why}"
        if decision is None:
            decision = self._tune(grid, args, kwargs, extra, arguments, bounds, key_doc, arch,
                                  device, loc)
            decision.note = note
            if decision.how == "timed" and record_key is not None:
                decision.path = self._store(record_key, decision, bounds, arch, loc)
        self._chosen[mem_key] = decision.chosen
        self.decisions[mem_key] = decision
        if "tune" in knobs.DUMP.get():
            sys.stderr.write(self._render(decision) + "\n")
            sys.stderr.flush()
        return decision.chosen

    def _record_key(self, bounds: list[dict[str, Any]], key_doc: dict[str, Any], arch: str,
                    loc: SourceLoc | None) -> store.RecordKey | None:
        """Keyed like the kernel cache, on the IR of the first config that traces (it
        covers every function the kernel calls); None when none traces (all are pruned
        then, and the error says why)."""
        from tilekit.ir.printer import print_module
        from tilekit.rt.launcher import specialize_arguments

        describe = _describer(arch)
        for bound in bounds:
            try:
                spec, _ = specialize_arguments(self.kernel, bound, loc, describe)
                module = self.kernel.specialize(spec)
            except TilekitError:
                continue
            return store.RecordKey.of(self.name, print_module(module, with_locs=True),
                                      key_doc, arch)
        return None

    def _tune(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
              extra: dict[str, Any], arguments: dict[str, Any], bounds: list[dict[str, Any]],
              key_doc: dict[str, Any], arch: str, device: int,
              loc: SourceLoc | None) -> Decision:
        kern = self.kernel
        on_gpu = arch != INTERP
        probe = self.probe or (probe_gpu if on_gpu else probe_interp)
        timer = self.timer
        if timer is None and on_gpu:
            timer = CudaEventTimer([arguments[n] for n in arguments], device)
        reasons: dict[int, str] = {}
        reports: dict[int, Report] = {}
        for i, (config, bound) in enumerate(zip(self.configs, bounds)):
            if self.prune is not None:
                verdict = self.prune(config.as_dict(), dict(bound))
                if verdict:
                    reasons[i] = verdict if isinstance(verdict, str) else "dropped by prune="
                    continue
            try:
                reports[i] = probe(kern, bound, loc)
            except TilekitError as exc:
                reasons[i] = f"does not compile: {exc.message}"
        reasons.update(prune_reasons(reports))
        survivors = [i for i in range(len(self.configs)) if i not in reasons]
        if not survivors:
            self._all_pruned(reasons, loc)
        if timer is None:  # the interpreter is no performance model: nothing to time
            _stats["untimed"] += 1
            return Decision(key_doc, self.configs[survivors[0]], "untimed",
                            pruned=self._by_config(reasons))
        if self.restore == "auto":
            names: Iterable[str] = dict.fromkeys(n for i in survivors for n in reports[i].written)
        else:
            names = self.restore or ()
        snapshot = Snapshot({n: arguments[n] for n in names if n in arguments}, loc)
        medians: dict[int, float] = {}
        for i in survivors:
            config = self.configs[i]
            run = functools.partial(_run, kern, grid, args,
                                    {**kwargs, **config.as_dict(), **extra})
            try:
                times = [float(t) for t in timer.measure(config, run, self.warmup, self.rep)]
            except TilekitError as exc:
                reasons[i] = f"failed when run: {exc.message}"
                continue
            finally:
                snapshot.restore()
            _stats["timings"] += 1
            if not times or not all(math.isfinite(t) and t >= 0 for t in times):
                reasons[i] = f"the timer returned no usable time ({times!r})"
                continue
            medians[i] = statistics.median(times)
        if not medians:
            self._all_pruned(reasons, loc)
        chosen = min(medians, key=lambda i: (medians[i], i))
        _stats["tunings"] += 1
        return Decision(key_doc, self.configs[chosen], "timed",
                        {self.configs[i]: m for i, m in medians.items()},
                        self._by_config(reasons))

    def _by_config(self, reasons: Mapping[int, str]) -> dict[Config, str]:
        return {self.configs[i]: r for i, r in sorted(reasons.items())}

    def _all_pruned(self, reasons: Mapping[int, str], loc: SourceLoc | None) -> None:
        raise LaunchError(
            f"every config of autotuned kernel `{self.name}` was pruned, so there is nothing "
            "to launch", loc,
            hints=[f"{c.label}: {reasons[i]}" for i, c in enumerate(self.configs)] +
                  ["add configs that fit (smaller blocks, fewer stages), or relax prune="])

    def _store(self, record_key: store.RecordKey, decision: Decision,
               bounds: list[dict[str, Any]], arch: str, loc: SourceLoc | None) -> Path | None:
        from tilekit.tune.calls import describe_call

        chosen = self.configs.index(decision.chosen)
        timings = {c.label: m for c, m in decision.medians.items()}
        path = store.save(record_key, self._json_configs,
                          store.Record(chosen, timings,
                                       {c.label: r for c, r in decision.pruned.items()}))
        call = describe_call(self.kernel, bounds[chosen], None if arch == INTERP else arch, loc,
                             _describer(arch))
        store.append_log({"call": call, "config": decision.chosen.to_json(),
                          "timings_ms": timings}, self.log)
        return path

    def forget(self) -> None:
        """Drop this process's choices (the records on disk stay): the next call of each
        key reads the disk again."""
        self._chosen.clear()
        self.decisions.clear()

    # --- reports -------------------------------------------------------------------------

    def tuning_report(self) -> str:
        """Every decision this process made or read for this kernel: each config's median,
        or why it was pruned, and which was chosen."""
        if not self.decisions:
            return f"autotune {self.name}: no decision yet"
        return "\n".join(self._render(d) for d in self.decisions.values())

    def _render(self, d: Decision) -> str:
        import json

        how = {"timed": "timed", "disk": "read from disk",
               "untimed": "first surviving config (the interpreter times nothing)"}[d.how]
        head = f"autotune {self.name} {json.dumps(d.key, sort_keys=True)}: {how}"
        if d.path is not None:
            head += f" ({d.path})"
        lines = [head] + ([f"  note: {d.note}"] if d.note else [])
        width = max(len(c.label) for c in self.configs)
        for c in self.configs:
            if c in d.pruned:
                shown = f"pruned: {d.pruned[c]}"
            elif c in d.medians:
                shown = f"{d.medians[c]:.4f} ms"
            else:
                shown = "-"
            mark = "  <- chosen" if c == d.chosen else ""
            lines.append(f"  {c.label:<{width}}  {shown}{mark}")
        return "\n".join(lines)


class TunedLaunch:
    """``tuned[grid]``: call it with the kernel's arguments, less the tuned constexprs."""

    __slots__ = ("tuner", "grid")

    def __init__(self, tuner: Autotuner, grid: Any) -> None:
        self.tuner = tuner
        self.grid = grid

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        try:
            self.tuner._launch(self.grid, args, kwargs)
        except TilekitError as exc:
            raise exc.with_traceback(None) from None


def _run(kern: JITKernel, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    kern[grid](*args, **kwargs)


# --- saving and restoring what the kernel writes --------------------------------------------


class Snapshot:
    """Copies of the arrays a kernel writes, taken before timing, written back after each
    config's runs: the timings start from the user's values, and the final launch of the
    chosen config leaves the arrays as one launch would."""

    def __init__(self, arrays: Mapping[str, Any], loc: SourceLoc | None) -> None:
        self.saved: list[tuple[Any, Any]] = []
        for name, value in arrays.items():
            if _is_torch(value):
                self.saved.append((value, value.detach().clone()))
            elif isinstance(value, np.ndarray) or (hasattr(value, "copy") and
                                                   hasattr(value, "__setitem__")):
                self.saved.append((value, value.copy()))
            else:
                raise LaunchError(
                    f"autotune cannot save `{name}` (a {type(value).__name__}) to restore it "
                    "after timing", loc,
                    hints=["pass numpy, torch or cupy arrays",
                           "or autotune(restore=None) if the kernel overwrites it whole"])

    def restore(self) -> None:
        for dst, saved in self.saved:
            if _is_torch(dst):
                dst.detach().copy_(saved)
            else:
                dst[...] = saved


# --- helpers --------------------------------------------------------------------------------


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")


def _dtype_name(value: Any) -> str:
    """``float32``, ``bfloat16``... for numpy, torch and cupy arrays alike."""
    return str(value.dtype).removeprefix("torch.")


def _hashable_value(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    if isinstance(value, np.generic):
        return (type(value).__name__, value.item())
    return (type(value).__name__, value)


def _json_or_repr(value: Any) -> Any:
    try:
        return json_value(value)
    except TypeError:
        return repr(value)


@functools.cache
def _codegen_available() -> bool:
    from tilekit.rt.device_arrays import codegen_available

    return codegen_available()


def _arch_of(arguments: Mapping[str, Any], loc: SourceLoc | None) -> tuple[str, int]:
    """The arch the call runs on (``interp`` on the interpreter) and its device ordinal
    (-1 on the interpreter), decided as ``Launch`` decides its backend."""
    if knobs.INTERPRET.get():
        return INTERP, -1
    from tilekit.rt import device_arrays, driver

    if not driver.status().available or not _codegen_available():
        return INTERP, -1
    device = -1
    for name, value in arguments.items():
        if is_array(value) and device_arrays.is_device_array(value):
            found = device_arrays.describe(value, name, loc).device
            device = -1 if found is None else found
            break
    if device < 0:
        device = driver.current_device()
    return driver.device_props(device).arch, device


def _describer(arch: str) -> Callable[[Any, str, SourceLoc | None], Any]:
    if arch == INTERP:
        from tilekit.rt.arrays import to_host

        return to_host
    from tilekit.rt.device_arrays import describe

    return describe


def _check_key(kernel: JITKernel, key: Any, tuned: tuple[str, ...],
               loc: SourceLoc | None) -> tuple[str, ...]:
    names = [p.name for p in kernel.params]
    if isinstance(key, str) or not isinstance(key, (list, tuple)):
        raise LaunchError(f"autotune(key=...) of kernel `{kernel.name}` must be a list of "
                          f"parameter names, got {key!r}", loc,
                          hints=[f"e.g. key=[{names[0]!r}]" if names else "e.g. key=[]"])
    for k in key:
        if k not in names:
            raise LaunchError(f"autotune(key=...) names `{k}`, which is not a parameter of "
                              f"kernel `{kernel.name}`", loc,
                              hints=[f"its parameters are {', '.join(names)}"])
        if k in tuned:
            raise LaunchError(f"autotune(key=...) names `{k}`, which the configs tune", loc,
                              hints=[f"drop `{k}` from key=: the tuner chooses it"])
    return tuple(dict.fromkeys(key))


def _check_restore(kernel: JITKernel, restore: Any, loc: SourceLoc | None) -> Any:
    if restore is None or restore == "auto":
        return restore
    if isinstance(restore, str) or not isinstance(restore, (list, tuple)):
        raise LaunchError(f"autotune(restore=...) of kernel `{kernel.name}` must be 'auto', "
                          f"None or a list of parameter names, got {restore!r}", loc)
    arrays = [p.name for p in kernel.params
              if p.kind in (ParamKind.TENSOR, ParamKind.ANY)]
    for name in restore:
        if name not in arrays:
            raise LaunchError(f"autotune(restore=...) names `{name}`, which is not an array "
                              f"parameter of kernel `{kernel.name}`", loc,
                              hints=[f"its array parameters are {', '.join(arrays) or 'none'}"])
    return tuple(restore)
