"""Building a portfolio: every (kernel, bucket, arch) of a declared set, compiled once.

The parent process imports the user's module, turns each abstract call into its bucket
(``calls.buckets_of``) and traces it, which gives each variant's key (``portfolio.VariantKey``)
cheaply; variants with equal keys are compiled once (the call kept for the manifest is the
first in sorted order, so the result does not depend on the order calls were given). The
compiles run in worker processes (spawned, so no state leaks from the parent), each
through the runtime's own path (``gpu.compile_cached``: code generation, nvJitLink for
NVIDIA, the disk cache in ``cache_dir``), and the portfolio is written from the results
sorted by key: the same declarations give the same bytes with any number of workers.
A worker re-derives the key from the call and checks it matches the parent's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tilekit.aot import calls, fingerprint
from tilekit.aot.portfolio import VariantKey, key_of
from tilekit.errors import PortfolioError, SourceLoc, TilekitError

ARCHS = ("sm_80", "sm_90a", "gfx942")


@dataclass(frozen=True)
class Declared:
    """One abstract call and where it was declared (for errors)."""

    call: Mapping[str, Any]
    where: str  # "calls.jsonl:3", "--call 2"
    loc: SourceLoc | None = None


@dataclass(frozen=True)
class Job:
    """One variant to compile, as plain data (it crosses to a worker process)."""

    module: str  # the module file's absolute path
    kernel: str
    call: Mapping[str, Any]
    arch: str
    where: str
    key: tuple[str, ...]  # the parent's VariantKey, checked by the worker
    cache_dir: str
    source: str = ""  # the kernel's fingerprint (fingerprint.source_hash), "" when none


@dataclass
class Report:
    """What a build did."""

    variants: int = 0
    duplicates: int = 0  # declared variants that had the key of another
    skipped: int = 0  # calls of kernels not asked for
    workers: set[int] = field(default_factory=set)  # pids that compiled


# --- the user's module ---------------------------------------------------------------------


def import_module_file(path: str | os.PathLike[str]) -> ModuleType:
    """Import a Python file by path (its folder on ``sys.path`` while it runs, as for
    ``python3 file.py``); once per process."""
    file = Path(path).resolve()
    if not file.is_file():
        raise PortfolioError(f"no module file {os.fspath(path)}",
                             hints=["name the Python file that defines the kernels, e.g. "
                                    "examples/softmax.py"])
    name = f"_tilekit_aot_{hashlib.sha256(str(file).encode()).hexdigest()[:12]}_{file.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise PortfolioError(f"{os.fspath(path)} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PortfolioError(f"importing {os.fspath(path)} failed: {type(exc).__name__}: {exc}",
                             hints=["the module must import without arguments or a GPU"]
                             ) from None
    finally:
        sys.path.remove(str(file.parent))
    return module


def kernels_of(module: ModuleType) -> dict[str, Any]:
    """The module's ``@tk.kernel`` functions by kernel name."""
    from tilekit.rt.launcher import JITKernel

    return {obj.name: obj for obj in vars(module).values() if isinstance(obj, JITKernel)}


# --- declarations --------------------------------------------------------------------------


def read_calls(path: str | os.PathLike[str]) -> list[Declared]:
    """The abstract calls of a file: one JSON object per line, a call or an object with
    one under ``"call"`` (an autotune log); blank lines, ``#`` comments and objects with
    neither are skipped."""
    shown = os.fspath(path)
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PortfolioError(f"cannot read the calls file {shown}: {exc}") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        loc = SourceLoc(shown, number)
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise PortfolioError(f"line {number} of {shown} is not JSON ({exc})", loc,
                                 hints=["each line is one abstract call (docs/aot.md)"]
                                 ) from None
        if isinstance(obj, dict) and "call" in obj:
            obj = obj["call"]
        elif not (isinstance(obj, dict) and ("kernel" in obj or "args" in obj)):
            continue
        out.append(Declared(obj, f"{shown}:{number}", loc))
    return out


def _kernels_in(modules: Sequence[str | os.PathLike[str]]) -> dict[str, tuple[Any, str]]:
    """Kernel name -> (the kernel, its module file) over every module; a name defined by
    two modules is an error (the registry keys kernels by name)."""
    found: dict[str, tuple[Any, str]] = {}
    for path in modules:
        for name, kern in kernels_of(import_module_file(path)).items():
            if name in found and found[name][1] != os.fspath(path):
                raise PortfolioError(f"kernel `{name}` is defined in both {found[name][1]} and "
                                     f"{os.fspath(path)}",
                                     hints=["build them into separate portfolios"])
            found[name] = (kern, os.fspath(path))
    return found


def plan(modules: Sequence[str | os.PathLike[str]], declared: Iterable[Declared],
         archs: Sequence[str] = (), kernels: Sequence[str] = (),
         cache_dir: str | None = None) -> tuple[list[Job], Report]:
    """The variants to compile, deduplicated and sorted by key. ``archs`` empty: each
    call's own ``arch``; ``kernels`` empty: every kernel the calls name."""
    from tilekit.rt import cache, gpu

    for arch in archs:
        if arch not in ARCHS:
            raise PortfolioError(f"unknown arch {arch!r}", hints=[f"archs: {', '.join(ARCHS)}"])
    found = _kernels_in(modules)
    shown = ", ".join(os.fspath(m) for m in modules)
    for name in kernels:
        if name not in found:
            raise PortfolioError(f"{shown} define{'s' * (len(modules) == 1)} no kernel "
                                 f"`{name}`",
                                 hints=[f"kernels: {', '.join(sorted(found)) or 'none'}"])
    report = Report()
    chosen: dict[VariantKey, Job] = {}
    used: set[str] = set()
    for d in declared:
        name = calls.kernel_name(d.call, d.where if d.loc is None else "", d.loc)
        if kernels and name not in kernels:
            report.skipped += 1
            continue
        if name not in found:
            raise PortfolioError(f"{d.where}: the call is of kernel `{name}`, which "
                                 f"{shown} do{'es' * (len(modules) == 1)} not define", d.loc,
                                 hints=[f"kernels: {', '.join(sorted(found)) or 'none'}"])
        kern, module_path = found[name]
        used.add(name)
        targets: list[str] = list(archs) or [d.call.get("arch") or ""]
        if targets == [""]:
            raise PortfolioError(f"{d.where}: the call names no arch and none was given",
                                 d.loc, hints=["add --arch sm_90a (and others)"])
        spec, divisible = calls.buckets_of(kern, d.call, d.where if d.loc is None else "",
                                           d.loc)
        traced = kern.specialize(spec)
        for arch in targets:
            if arch not in ARCHS:
                raise PortfolioError(f"{d.where}: unknown arch {arch!r}", d.loc,
                                     hints=[f"archs: {', '.join(ARCHS)}"])
            key = key_of(traced, gpu.spec_text(spec), gpu.size_facts_text(divisible), arch)
            call = {"kernel": {"module": _shown(module_path), "name": name},
                    "args": d.call["args"], "arch": arch}  # the variant's own call
            job = Job(str(Path(module_path).resolve()), name, call, arch, d.where,
                      tuple(key), cache_dir or str(cache.cache_dir()),
                      fingerprint.source_hash(kern) or "")
            other = chosen.get(key)
            if other is not None:
                report.duplicates += 1
                if calls.canonical(other.call) <= calls.canonical(job.call):
                    continue
            chosen[key] = job
    missing = [n for n in kernels if n not in used]
    if missing:
        raise PortfolioError("no call declares a bucket of "
                             + ", ".join(f"`{n}`" for n in missing),
                             hints=["add --call '" + missing[0] + ": X=f32[1024] ...' or "
                                    "--calls FILE"])
    if not chosen:
        raise PortfolioError("no variants to build: no call was given",
                             hints=["--call '...' or --calls calls.jsonl (docs/aot.md)"])
    return [chosen[k] for k in sorted(chosen)], report


# --- compiling -----------------------------------------------------------------------------


def compile_job(job: Job) -> dict[str, Any]:
    """Compile one variant (in a worker, or inline): plain data back, or ``{"error"}``."""
    from tilekit import __version__, knobs
    from tilekit.rt import cache_key, gpu

    try:
        with knobs.override(cache_dir=job.cache_dir, jitter=False):
            kern = kernels_of(import_module_file(job.module))[job.kernel]
            spec, divisible = calls.buckets_of(kern, job.call, job.where)
            traced = kern.specialize(spec)
            key = key_of(traced, gpu.spec_text(spec), gpu.size_facts_text(divisible), job.arch)
            if tuple(key) != tuple(job.key):
                return {"error": "the kernel traced differently in the worker process (is the "
                                 "module's code nondeterministic?)"}
            entry = gpu.compile_cached(traced, spec, job.arch, kern.loc, divisible=divisible)
            tools = {"tilekit": __version__, **cache_key.installed_tools()}
        from tilekit.rt.cache import kernel_to_json

        return {"kernel": kernel_to_json(entry.kernel), "binary": entry.kernel.binary,
                "image": entry.image, "toolchain": tools,
                "candidates": gpu.size_facts_text(frozenset(kern.size_candidates(spec))),
                "pid": os.getpid()}
    except TilekitError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # a tilekit bug: say so, with the variant
        import traceback

        return {"error": f"internal error {type(exc).__name__}: {exc} (a tilekit bug; "
                         f"please report it)\n{traceback.format_exc(limit=-3)}"}


class Progress:
    """tqdm when it is installed, else one line on stderr (rewritten on a terminal)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, desc="tilekit aot", unit="variant",
                                file=sys.stderr)

    def step(self, label: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(1)
        elif self.enabled:
            text = f"tilekit aot: {self.done}/{self.total} variants compiled ({label})"
            if sys.stderr.isatty():
                sys.stderr.write("\r" + text + "\x1b[K" + ("\n" if self.done == self.total
                                                            else ""))
            else:
                sys.stderr.write(text + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run(jobs: list[Job], workers: int, progress: Progress) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in jobs]
    label: Callable[[Job], str] = lambda j: f"{j.kernel} {j.arch}"  # noqa: E731
    if workers <= 1:
        for i, job in enumerate(jobs):
            results[i] = compile_job(job)
            progress.step(label(job))
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(compile_job, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            i = futures[future]
            try:
                results[i] = future.result()
            except Exception as exc:  # the worker died (out of memory, a signal)
                results[i] = {"error": f"the worker process failed: {exc}"}
            progress.step(label(jobs[i]))
    return results


def build(modules: Sequence[str | os.PathLike[str]], declared: Iterable[Declared],
          out: str | os.PathLike[str], archs: Sequence[str] = (),
          kernels: Sequence[str] = (), workers: int | None = None, show_progress: bool = True,
          cache_dir: str | None = None) -> Report:
    """Compile every declared variant and write the portfolio ``out`` (atomically). A
    ``PortfolioError`` lists every variant that failed, with its declaration and the
    compiler's error at the kernel's line; nothing is written then."""
    import tilekit
    from tilekit.aot import portfolio
    from tilekit.rt.cache import kernel_from_json

    jobs, report = plan(modules, declared, archs, kernels, cache_dir)
    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    progress = Progress(len(jobs), show_progress)
    try:
        results = _run(jobs, n, progress)
    finally:
        progress.close()
    failures = [f"{job.kernel} for {job.arch}, declared at {job.where}:\n{r['error']}"
                for job, r in zip(jobs, results) if "error" in r]
    if failures:
        raise PortfolioError(f"{len(failures)} of {len(jobs)} variants failed to compile; "
                             "no portfolio was written\n" + "\n".join(failures))
    variants = []
    for job, r in zip(jobs, results):
        compiled = kernel_from_json(r["kernel"], r["binary"])
        variants.append(portfolio.Variant(VariantKey(*job.key), job.call["kernel"]["module"],
                                          r["candidates"], job.call, r["toolchain"],
                                          compiled, r["image"], source=job.source))
        report.workers.add(r["pid"])
    portfolio.write(out, variants, tilekit.__version__)
    report.variants = len(variants)
    return report


def _shown(path: str | os.PathLike[str]) -> str:
    """The module as the manifest names it: relative to the current directory if inside."""
    rel = os.path.relpath(Path(path).resolve())
    return Path(path).resolve().as_posix() if rel.startswith("..") else Path(rel).as_posix()
