"""Host time per launch on a cache hit: tilekit against a raw cuLaunchKernel, torch, Triton.

One kernel of four arguments (two tensors, an int, a constexpr: ``Y = X + 1`` over
``n`` elements), launched thousands of times from Python. Each variant runs ``--rounds``
rounds of ``--launches`` launches, the variants' rounds interleaved (so that a busy spell
of a shared host slows them alike); a round is timed with ``time.perf_counter`` around
the loop, launches are not synchronized until the round ends (the synchronization is
not in the time), and the figure is the median round's microseconds per launch.

Variants:

* ``tilekit``: ``add_one[grid](x, y, n, BLOCK=BLOCK)``, the fast path (a cache hit) as it
  runs by default: through the native launcher (``tilekit.rt._fastlaunch``) when it is
  built, else the generated Python dispatcher (the table names which);
* ``tilekit (python dispatcher)``: the same launch of a second kernel object whose
  dispatcher was built with ``TILEKIT_NATIVE_LAUNCH=0``: the generated Python function,
  side by side with the native launcher (``TILEKIT_NATIVE_LAUNCH=0 python3
  bench/dispatch.py`` makes both rows the Python dispatcher);
* ``tilekit slow path``: the same launch through the full path (``Launch.__call__`` of
  the base class: bind, specialize, describe, check), what every launch cost before;
* ``raw cuLaunchKernel (argtypes)``: ctypes into libcuda with ``argtypes`` set, all
  arguments packed once, on the same cubin (tilekit's compiled kernel loaded again as
  its own module): the issue's reference (5.7 us on our H100);
* ``raw cuLaunchKernel (no argtypes)``: the same with the arguments pre-converted to
  ctypes objects;
* ``raw cuLaunchKernelEx (pre-packed)``: ``cuLaunchKernelEx`` with its launch
  configuration packed once, four pre-built arguments: what tilekit's fast path calls,
  the cheapest launch ctypes can make;
* ``torch.add``: ``torch.add(a, b, out=c)`` of 4096 floats;
* ``triton``: the same kernel as a tutorial-style ``@triton.jit`` vector add.

Also timed alone: the fast path's key (``Dispatcher.key_fn``, and the native launcher's
``key``) and the torch attributes it reads. Targets (issue 7): tilekit <= 1.3x raw
(argtypes), Triton >= 2.5x tilekit.
``bench/dispatch_cpu.py`` times the same fast path without a GPU, piece by piece.

    python3 bench/dispatch.py [--out DIR] [--launches 5000] [--rounds 9]
"""

from __future__ import annotations

import ctypes
import struct
import sys
import time
import timeit
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import common  # noqa: E402  (bench/common.py)

N = 4096
BLOCK = 1024


def build_tilekit() -> Any:
    import tilekit as tk

    @tk.kernel
    def add_one(X, Y, n, BLOCK: tk.constexpr):
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        mask = offs < n
        tk.store(Y, offs, tk.load(X, offs, mask) + 1.0, mask)

    return add_one


def build_triton() -> Any:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def triton_add_one(X, Y, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(Y + offs, tl.load(X + offs, mask=mask) + 1.0, mask=mask)

    return triton_add_one


def interleaved_rounds_us(loops: dict[str, Any], launches: int, rounds: int
                          ) -> dict[str, list[float]]:
    """Microseconds per launch of each round of each loop (``loop(k)`` makes k launches,
    warmed first), the rounds interleaved (round i of every variant, then
    round i + 1; the order rotates): a busy spell of the host slows every variant alike,
    not the one that happened to be running, so the ratios hold on a noisy machine."""
    import torch

    for loop in loops.values():
        loop(100)  # warm
    torch.cuda.synchronize()
    names = list(loops)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            loops[name](launches)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            out[name].append((t1 - t0) / launches * 1e6)
    return out


def rounds_us(loop: Any, launches: int, rounds: int) -> list[float]:
    """``interleaved_rounds_us`` of one loop."""
    return interleaved_rounds_us({"loop": loop}, launches, rounds)["loop"]


def main() -> int:
    p = common.parser(__doc__.split("\n", 1)[0])
    p.add_argument("--launches", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    torch = common.require_gpu()
    env = common.environment()
    common.print_header(env)

    from tilekit import knobs
    from tilekit.rt import device_arrays, driver, fastpath, gpu
    from tilekit.rt.launcher import Launch

    dev = torch.cuda.current_device()
    x = torch.randn(N, device="cuda")
    y = torch.zeros(N, device="cuda")
    grid = ((N + BLOCK - 1) // BLOCK,)
    expected = x + 1

    add_one = build_tilekit()
    add_one[grid](x, y, N, BLOCK=BLOCK)  # compile, load, install the fast path
    add_one[grid](x, y, N, BLOCK=BLOCK)
    torch.cuda.synchronize()
    assert torch.equal(y, expected), "tilekit's add_one is wrong"
    if not add_one._loaded.fast:
        sys.exit("tilekit installed no fast path entry for this launch (a bug)")
    launcher = "native launcher" if next(iter(add_one._loaded.fast.values())).native \
        is not None else "python dispatcher"
    print(f"# tilekit's fast path: {launcher}; the launcher: {fastpath.native_status()}")
    add_one_py = build_tilekit()  # the same kernel again, its dispatcher the generated one
    with knobs.override(native_launch=False):
        add_one_py[grid](x, y, N, BLOCK=BLOCK)
    py_dispatcher = next(iter(add_one_py._loaded.fast.values()))
    assert py_dispatcher.native is None and add_one_py._fast_call is py_dispatcher.python_call

    def loop_tilekit(k: int) -> None:
        for _ in range(k):
            add_one[grid](x, y, N, BLOCK=BLOCK)

    def loop_tilekit_py(k: int) -> None:
        for _ in range(k):
            add_one_py[grid](x, y, N, BLOCK=BLOCK)

    def loop_slow(k: int) -> None:
        for _ in range(k):
            Launch(add_one, grid)(x, y, N, BLOCK=BLOCK)

    # raw: tilekit's cubin loaded again as its own module, its arguments packed once
    variant, loaded = next(iter(add_one._loaded.items()))
    entry = gpu.compile_cached(add_one.specialize(variant.spec), variant.spec,
                               loaded.props.arch, divisible=variant.divisible,
                               check=variant.checked)
    image = entry.image or entry.kernel.binary
    function = driver.load_function(image, entry.kernel.name, variant.device,
                                    entry.kernel.shared_bytes)
    raw = gpu.LoadedKernel.build(entry.kernel, function, loaded.props, loaded.status_ptr)
    ctypes.memmove(raw.buffer, loaded.buffer, len(loaded.buffer))  # the same arguments
    stream = int(torch.cuda.current_stream().cuda_stream)
    threads, shared = entry.kernel.block_threads, entry.kernel.shared_bytes
    lib = ctypes.CDLL("libcuda.so.1")
    launch_at = lib.cuLaunchKernel
    launch_at.restype = ctypes.c_int
    launch_at.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    launch_plain = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    launch_plain.restype = ctypes.c_int
    launch_ex = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    launch_ex.restype = ctypes.c_int
    fh, pp = function.handle, raw.params_ptr
    fh_obj, pp_obj = ctypes.c_void_p(fh), ctypes.c_void_p(pp)
    st_obj = ctypes.c_void_p(stream) if stream else None
    gx = grid[0]
    config = (ctypes.c_char * fastpath.CONFIG_BYTES)()
    struct.pack_into(fastpath.CONFIG_FORMAT, config, 0, gx, 1, 1, threads, 1, 1, shared,
                     stream)
    y.zero_()
    rc = launch_at(fh, gx, 1, 1, threads, 1, 1, shared, stream, pp, None)
    rc |= launch_plain(fh_obj, gx, 1, 1, threads, 1, 1, shared, st_obj, pp_obj, None)
    rc |= launch_ex(config, fh_obj, raw.params, None)
    torch.cuda.synchronize()
    if rc or not torch.equal(y, expected):
        sys.exit(f"the raw launch failed (status {rc}) or computed a wrong result")

    def loop_raw_argtypes(k: int) -> None:
        for _ in range(k):
            launch_at(fh, gx, 1, 1, threads, 1, 1, shared, stream, pp, None)

    def loop_raw_plain(k: int) -> None:
        for _ in range(k):
            launch_plain(fh_obj, gx, 1, 1, threads, 1, 1, shared, st_obj, pp_obj, None)

    params = raw.params

    def loop_raw_ex(k: int) -> None:
        for _ in range(k):
            launch_ex(config, fh_obj, params, None)

    a, b, c = torch.randn(N, device="cuda"), torch.randn(N, device="cuda"), torch.empty(
        N, device="cuda")

    def loop_torch(k: int) -> None:
        for _ in range(k):
            torch.add(a, b, out=c)

    variants: list[tuple[str, Any]] = [
        ("tilekit", loop_tilekit),
        ("tilekit (python dispatcher)", loop_tilekit_py),
        ("raw cuLaunchKernel (argtypes)", loop_raw_argtypes),
        ("raw cuLaunchKernel (no argtypes)", loop_raw_plain),
        ("raw cuLaunchKernelEx (pre-packed)", loop_raw_ex),
        ("torch.add", loop_torch),
    ]
    triton_kernel = build_triton()
    if triton_kernel is not None:
        y.zero_()
        triton_kernel[grid](x, y, N, BLOCK=BLOCK)
        torch.cuda.synchronize()
        assert torch.equal(y, expected), "the Triton kernel is wrong"

        def loop_triton(k: int) -> None:
            for _ in range(k):
                triton_kernel[grid](x, y, N, BLOCK=BLOCK)

        variants.append(("triton", loop_triton))
    else:
        print("# triton is not installed: no Triton row")

    results: dict[str, dict[str, Any]] = {}
    for name, per in interleaved_rounds_us(dict(variants), args.launches,
                                           args.rounds).items():
        results[name] = {"us_per_launch": common.median(per), "rounds_us": per,
                         "launches_per_round": args.launches}
    slow = rounds_us(loop_slow, max(1, args.launches // 20), args.rounds)
    results["tilekit slow path"] = {"us_per_launch": common.median(slow), "rounds_us": slow,
                                    "launches_per_round": max(1, args.launches // 20)}
    for loop in (loop_tilekit, loop_tilekit_py):
        y.zero_()
        loop(1)
        torch.cuda.synchronize()
        assert torch.equal(y, expected), "tilekit's result changed after the timing"

    # the fast path's key alone, and what it reads of torch
    dispatcher = next(iter(add_one._loaded.fast.values()))
    key_fn = dispatcher.key_fn
    assert key_fn(x, y, N, BLOCK) is not None
    reps = 200_000
    key_us = timeit.timeit(lambda: key_fn(x, y, N, BLOCK), number=reps) / reps * 1e6
    empty_us = timeit.timeit(lambda: None, number=reps) / reps * 1e6
    native_key_us = None
    if dispatcher.native is not None:
        native_key = dispatcher.native.key
        assert native_key(x, y, N, BLOCK) == key_fn(x, y, N, BLOCK)
        native_key_us = timeit.timeit(lambda: native_key(x, y, N, BLOCK), number=reps) / reps \
            * 1e6 - empty_us
    raw_stream = device_arrays.torch_current_stream()
    attrs = {
        "t.dtype": lambda: x.dtype, "t.dim()": lambda: x.dim(),
        "t.data_ptr()": lambda: x.data_ptr(), "t.get_device()": lambda: x.get_device(),
        "t.device.index": lambda: x.device.index, "t.shape": lambda: x.shape,
        "t.stride()": lambda: x.stride(), "t.numel()": lambda: x.numel(),
        "t.is_contiguous()": lambda: x.is_contiguous(),
        "t.storage_offset()": lambda: x.storage_offset(),
        "torch._C._cuda_getCurrentRawStream(d)": lambda: raw_stream(dev),
        "torch.cuda.current_stream().cuda_stream":
            lambda: torch.cuda.current_stream().cuda_stream,
    }
    attr_us = {k: timeit.timeit(f, number=reps) / reps * 1e6 - empty_us for k, f in attrs.items()}

    raw_at = results["raw cuLaunchKernel (argtypes)"]["us_per_launch"]
    raw_plain = results["raw cuLaunchKernel (no argtypes)"]["us_per_launch"]
    raw_ex = results["raw cuLaunchKernelEx (pre-packed)"]["us_per_launch"]
    tk_us = results["tilekit"]["us_per_launch"]
    py_us = results["tilekit (python dispatcher)"]["us_per_launch"]
    tri_us = results.get("triton", {}).get("us_per_launch")
    rows = []
    order = ["tilekit", "tilekit (python dispatcher)", "raw cuLaunchKernel (argtypes)",
             "raw cuLaunchKernel (no argtypes)", "raw cuLaunchKernelEx (pre-packed)",
             "torch.add", "triton", "tilekit slow path"]
    for name in order:
        if name in results:
            per = results[name]["rounds_us"]
            us = results[name]["us_per_launch"]
            label = f"tilekit ({launcher})" if name == "tilekit" else name
            rows.append([label, us, min(per), max(per), us / raw_at])
    print(f"\nHost time per launch, median of {args.rounds} rounds of {args.launches} "
          f"launches ({N} float32, grid {grid}, BLOCK {BLOCK}):\n")
    print(common.format_table(["variant", "us/launch", "min", "max", "x raw (argtypes)"], rows))
    summary = {
        "tilekit_over_raw_argtypes": tk_us / raw_at,
        "tilekit_over_raw_no_argtypes": tk_us / raw_plain,
        "tilekit_over_raw_ex": tk_us / raw_ex,
        "tilekit_minus_raw_ex_us": tk_us - raw_ex,
        "triton_over_tilekit": None if tri_us is None else tri_us / tk_us,
        "slow_over_fast": results["tilekit slow path"]["us_per_launch"] / tk_us,
        "launcher": launcher,
        "python_dispatcher_over_tilekit": py_us / tk_us,
        "key_us": key_us - empty_us,
        "native_key_us": native_key_us,
        "targets": {"tilekit_over_raw_argtypes <=": 1.3, "triton_over_tilekit >=": 2.5},
    }
    print(f"\ntilekit / raw (argtypes) = {summary['tilekit_over_raw_argtypes']:.2f} "
          "(target <= 1.3); tilekit / raw (no argtypes) = "
          f"{summary['tilekit_over_raw_no_argtypes']:.2f}; tilekit - raw cuLaunchKernelEx = "
          f"{summary['tilekit_minus_raw_ex_us']:.2f} us (the fast path's own cost)")
    print(f"python dispatcher / tilekit ({launcher}) = "
          f"{summary['python_dispatcher_over_tilekit']:.2f}")
    if tri_us is not None:
        print(f"triton / tilekit = {summary['triton_over_tilekit']:.2f} (target >= 2.5)")
    print(f"slow path / fast path = {summary['slow_over_fast']:.1f}")
    print(f"\nthe fast path's key alone: {summary['key_us']:.3f} us per call "
          f"({len(key_fn(x, y, N, BLOCK))} items)" + (
              "" if native_key_us is None else f"; the native launcher's: {native_key_us:.3f} us")
          + "\n")
    print(common.format_table(["torch read", "us"], [[k, v] for k, v in attr_us.items()]))
    data = {"environment": env, "kernel": {"n": N, "block": BLOCK, "grid": grid},
            "results": results, "summary": summary, "torch_attribute_us": attr_us}
    for path in common.write_json("dispatch", data, args.out):
        print(f"# wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
