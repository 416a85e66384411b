"""The fuzzer at scale: N random programs, each on the interpreter and on the GPU, both
compared with the reference, in parallel worker processes.

    python3 -m tests.fuzz.run_device --programs 10000 --seed 1 --workers 14 \\
        --time-limit 480 --out fuzz-out

Without a GPU, ``--backends interp`` runs the interpreter leg alone. Each worker takes
programs ``i = w, w + W, ...`` (program ``i`` is drawn from ``RandomDraw(seed * 10**6 + i)``,
so any one can be rebuilt alone) and stops starting new ones at the time limit, minus the
time kept for minimizing. The output directory gets ``summary.json``, ``programs.jsonl``
(one line per program) and, per kind of failure (its signature), the source of the first
failing program and of its minimized form under ``failures/``. A short table ends the run.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def program_seed(seed: int, i: int) -> int:
    return seed * 10**6 + i


def _check_choices(choices: list[int] | None, pseed: int, features: Any, backends: tuple[str, ...],
                   work: Path, name: str) -> tuple[Any, Any, list[int]]:
    from tests.fuzz import harness
    from tests.fuzz.generate import RandomDraw, generate

    draw = RandomDraw(pseed, replay=choices)
    prog = generate(draw, features)
    return prog, harness.check(prog, backends, work, name), draw.choices


def _worker(w: int, args: argparse.Namespace, deadline: float, queue: Any) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("TILEKIT_CACHE_DIR", str(Path(tempfile.gettempdir())
                                                   / f"tilekit-fuzz-cache-{os.getpid()}"))
    import warnings

    warnings.simplefilter("ignore")
    from tests.fuzz.generate import Features
    from tests.fuzz.known import known

    features = Features(control_flow=args.control_flow)
    backends = tuple(args.backends.split(","))
    work = Path(tempfile.mkdtemp(prefix=f"tilekit-fuzz-{w}-"))
    out = Path(args.out)
    i = w
    while i < args.programs and time.monotonic() < deadline:
        pseed = program_seed(args.seed, i)
        queue.put(("start", w, i))  # so that a worker that dies is reported with its program
        start = time.monotonic()
        record: dict[str, Any] = {"i": i, "seed": pseed}
        try:
            prog, outcome, choices = _check_choices(None, pseed, features, backends, work,
                                                    f"p{i}")
            record["reference"] = outcome.reference
            record["status"] = {b: r.status for b, r in outcome.results.items()}
            record["compared"] = sum(r.compared for r in outcome.results.values())
            record["skipped"] = sum(r.skipped for r in outcome.results.values())
            if outcome.failed:
                sig = outcome.signature()
                record["signature"] = sig
                record["known"] = known(sig)
                _write_failure(out, i, pseed, sig, prog, outcome, choices)
        except Exception:
            record["reference"] = "runner crash"
            record["signature"] = "runner crash: " + traceback.format_exc().splitlines()[-1]
        record["secs"] = round(time.monotonic() - start, 3)
        queue.put(record)
        i += args.workers
    queue.put(("done", w, None))


def _write_failure(out: Path, i: int, pseed: int, sig: str, prog: Any, outcome: Any,
                   choices: list[int]) -> None:
    from tests.fuzz import render

    fdir = out / "failures"
    fdir.mkdir(parents=True, exist_ok=True)
    details = [f"program {i} (RandomDraw({pseed})): {sig}"]
    for backend, r in outcome.results.items():
        if r.status not in ("ok", "rejected", "unreliable"):
            details.append(f"[{backend}] {r.status}: {r.detail}")
    if outcome.reference == "crash":
        details.append(outcome.detail)
    (fdir / f"p{i}.py").write_text(render.source(prog, "\n".join(details)))
    (fdir / f"p{i}.json").write_text(json.dumps({"seed": pseed, "signature": sig,
                                                 "choices": choices}))


def _signature_key(sig: str) -> str:
    """A signature without file names, lines and numbers: one per kind of failure."""
    import re

    return re.sub(r"(/[\w./-]+\.py)?:\d+(:\d+)?|\d+", "#", sig)[:160]


def _shrink_one(item: tuple[int, int, str], args: argparse.Namespace, deadline: float,
                queue: Any) -> None:
    sys.path.insert(0, str(ROOT))
    import warnings

    warnings.simplefilter("ignore")
    from tests.fuzz import render
    from tests.fuzz.generate import Features
    from tests.fuzz.shrink import shrink

    i, pseed, sig = item
    out = Path(args.out)
    choices = json.loads((out / "failures" / f"p{i}.json").read_text())["choices"]
    features = Features(control_flow=args.control_flow)
    backends = tuple(args.backends.split(","))
    work = Path(tempfile.mkdtemp(prefix=f"tilekit-fuzz-shrink-{i}-"))
    key = _signature_key(sig)
    n = [0]

    def fails(candidate: list[int]) -> bool:
        n[0] += 1
        _, outcome, _ = _check_choices(candidate, pseed, features, backends, work,
                                       f"s{i}_{n[0]}")
        return outcome.failed and _signature_key(outcome.signature()) == key

    best, tries = shrink(choices, fails, deadline)
    prog, outcome, _ = _check_choices(best, pseed, features, backends, work, f"min{i}")
    header = f"program {i} minimized ({tries} tries, {len(choices)} -> {len(best)} choices)"
    header += "\n" + outcome.signature()
    for backend, r in outcome.results.items():
        if r.status not in ("ok", "rejected", "unreliable"):
            header += f"\n[{backend}] {r.status}: {r.detail}"
    (out / "failures" / f"p{i}.min.py").write_text(render.source(prog, header))
    queue.put((i, len(best)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", type=int, default=10000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--time-limit", type=float, default=480.0, help="seconds for the whole run")
    p.add_argument("--shrink-time", type=float, default=60.0,
                   help="seconds kept at the end to minimize one program per kind of failure")
    p.add_argument("--backends", default="interp,cuda",
                   help="comma-separated: interp, cuda (cuda needs a GPU)")
    p.add_argument("--control-flow", action="store_true",
                   help="early return/break/continue and carried Python numbers (issue 27)")
    p.add_argument("--out", default="fuzz-out")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if "cuda" in args.backends.split(","):
        sys.path.insert(0, str(ROOT))
        from tilekit.rt import driver

        status = driver.status()
        if not status.available:
            print(f"no GPU ({status.reason}); run with --backends interp", file=sys.stderr)
            return 2
    t0 = time.monotonic()
    deadline = t0 + args.time_limit - args.shrink_time
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(w, args, deadline, queue))
             for w in range(args.workers)]
    for proc in procs:
        proc.start()
    records: list[dict[str, Any]] = []
    finished: set[int] = set()
    running: dict[int, int] = {}  # worker -> the program it started last
    hard_deadline = deadline + 60  # a program that hangs (a kernel that never ends) is cut
    with open(out / "programs.jsonl", "w") as log:
        while len(finished) < len(procs):
            try:
                item = queue.get(timeout=2)
            except Exception:  # queue.Empty: see whether a worker died or hangs
                for w, proc in enumerate(procs):
                    late = time.monotonic() > hard_deadline
                    if w not in finished and (not proc.is_alive() or late):
                        if late:
                            proc.terminate()
                        finished.add(w)
                        if w in running:
                            i = running.pop(w)
                            sig = f"runner: worker {'hung' if late else 'died'} " \
                                  f"(exit code {proc.exitcode})"
                            item = {"i": i, "seed": program_seed(args.seed, i),
                                    "reference": "?", "signature": sig, "secs": 0.0}
                            records.append(item)
                            log.write(json.dumps(item) + "\n")
                continue
            if isinstance(item, tuple):
                kind, w, i = item
                if kind == "start":
                    running[w] = i
                else:
                    finished.add(w)
                    running.pop(w, None)
                continue
            running.pop(next((w for w, i in running.items() if i == item["i"]), -1), None)
            records.append(item)
            log.write(json.dumps(item) + "\n")
            if len(records) % 500 == 0:
                print(f"{len(records)} programs, {time.monotonic() - t0:.0f} s", flush=True)
    for proc in procs:
        proc.join(5)
    run_secs = time.monotonic() - t0
    # one program per kind of failure, minimized in parallel in the time left
    kinds: dict[str, dict[str, Any]] = {}
    for r in records:
        if "signature" in r:
            k = _signature_key(r["signature"])
            entry = kinds.setdefault(k, {"signature": r["signature"], "count": 0,
                                         "first": r["i"], "seed": r["seed"],
                                         "known": r.get("known")})
            entry["count"] += 1
    to_shrink = [(v["first"], v["seed"], v["signature"]) for v in kinds.values()
                 if not v["known"] and (out / "failures" / f"p{v['first']}.json").exists()]
    shrink_deadline = t0 + args.time_limit - 5
    if to_shrink and time.monotonic() < shrink_deadline:
        sq = ctx.Queue()
        running: list[Any] = []
        pending = list(to_shrink)
        while pending or running:
            while pending and len(running) < args.workers:
                sp = ctx.Process(target=_shrink_one, args=(pending.pop(0), args, shrink_deadline,
                                                            sq))
                sp.start()
                running.append(sp)
            running[0].join(max(0.0, shrink_deadline + 10 - time.monotonic()))
            if running[0].is_alive():
                for sp in running:
                    sp.terminate()
                break
            running.pop(0)
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in records:
        for backend, status in r.get("status", {}).items():
            counts[backend][status] += 1
        counts["reference"][r.get("reference", "?")] += 1
    summary = {
        "programs": len(records), "seed": args.seed, "backends": args.backends,
        "control_flow": args.control_flow, "workers": args.workers,
        "seconds": round(time.monotonic() - t0, 1), "run_seconds": round(run_secs, 1),
        "program_seconds_mean": round(sum(r["secs"] for r in records) / max(1, len(records)),
                                      3),
        "elements_compared": sum(r.get("compared", 0) for r in records),
        "elements_skipped": sum(r.get("skipped", 0) for r in records),
        "status": {k: dict(v) for k, v in counts.items()},
        "failures": sorted(kinds.values(), key=lambda v: -v["count"]),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\n{len(records)} programs in {summary['seconds']} s "
          f"({args.workers} workers, backends {args.backends})")
    for name, c in counts.items():
        print(f"  {name:10s} " + "  ".join(f"{k} {v}" for k, v in sorted(c.items())))
    print(f"  elements compared {summary['elements_compared']}, "
          f"unknown (not compared) {summary['elements_skipped']}")
    if kinds:
        print(f"\n{'count':>6}  first  kind of failure")
        for v in summary["failures"]:
            mark = f" [known: {v['known']}]" if v["known"] else ""
            print(f"{v['count']:>6}  p{v['first']:<5} {v['signature'][:110]}{mark}")
        print(f"\nsources: {out / 'failures'} (p<i>.py, minimized p<i>.min.py)")
    new = [v for v in kinds.values() if not v["known"]]
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
