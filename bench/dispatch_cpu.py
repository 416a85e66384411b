"""Host time of a cache-hit launch without a GPU: the fast path with the driver stubbed.

``bench/dispatch.py``'s kernel (two tensors, an int, a constexpr) launched through
tilekit's fast path with fake torch tensors (``tests/rt/fake_gpu.py``: C-callable
attributes that cost ~0.02 us, where torch's cost 0.07-0.22 us) and ``cuLaunchKernelEx``
replaced by a C function that ignores its arguments and returns 0 (libm's
``fegetround``), so that the ctypes call itself is real. Timed:

* the whole ``add_one[grid](x, y, n, BLOCK=...)`` and the key alone; the same for a kernel
  that reads a global and a helper (``add_offset``: its hits also check that ``OFFSET`` and
  ``plus_offset`` still hold the objects its trace read, ``KernelFunction.globals_guards``);
* statement by statement: the generated function cut after each top-level statement of
  its ``try`` (each row is what that statement adds);
* the ctypes calls of the launch forms (what remains of a raw launch without the driver).

Torch's reads are then counted in the generated source and priced with the figures of the
last device run (``bench/results/dispatch.json``, ``torch_attribute_us``), for an
estimate of the fast path's own cost on the device host (the driver's time inside
``cuLaunchKernelEx`` comes on top). The device host runs Python about 2.5x slower than a
recent desktop core; compare figures of one machine only.

    python3 bench/dispatch_cpu.py [--out DIR] [--reps 200000]
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import sys
import timeit
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import common  # noqa: E402  (bench/common.py)

N = 4096
BLOCK = 1024
OFFSET = 1.0  # read by add_offset through plus_offset: two globals its hits check


def plus_offset(v: Any) -> Any:
    return v + OFFSET


def stub(name: str = "fegetround") -> Any:
    """A C function that returns 0 whatever it is passed (extra arguments are ignored by
    the C calling convention), as a fresh ctypes function object."""
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int
    return fn


def best_us(fn: Any, reps: int) -> float:
    return min(timeit.repeat(fn, number=reps, repeat=7)) / reps * 1e6


def statement_costs(dispatcher: Any, call: Any, grid: Any, reps: int) -> list[list[Any]]:
    """What each top-level statement of the generated call's ``try`` adds (us): the
    function is regenerated cut after each statement."""
    lines = dispatcher.sources["call"].rstrip("\n").split("\n")
    end = next(i for i, line in enumerate(lines) if line.startswith("    except Exception"))
    body = lines[2:end]
    starts = [i for i, line in enumerate(body) if len(line) - len(line.lstrip()) == 8
              and not line.lstrip().startswith(("else:", "elif "))]
    rows, prev = [], 0.0
    empty = best_us(lambda: None, reps)
    for k in range(len(starts) + 2):
        if k <= len(starts):
            cut = starts[k] if k < len(starts) else len(body)
            text = "\n".join([lines[0], "    try:", *body[:cut], "        pass",
                              "    except Exception:", "        raise", "    return None"])
            label = "call and bind (kern[grid](...) of an empty function)" if k == 0 else \
                body[starts[k - 1]].strip()
        else:  # the whole function: the launch and the status check after the try
            text = dispatcher.sources["call"]
            label = "the launch (stub cuLaunchKernelEx) and the assert check"
        env = dict(dispatcher.env)
        exec(compile(text, "<bench>", "exec"), env)
        fn = env["_tk_call"]
        total = best_us(lambda fn=fn: types.MethodType(fn, grid)(*call[0], **call[1]),
                        reps) - empty
        label = label if len(label) <= 72 else label[:69] + "..."
        rows.append([label, total - prev])
        prev = total
    return rows


def main() -> int:
    p = common.parser(__doc__.split("\n", 1)[0])
    p.add_argument("--reps", type=int, default=200_000)
    args = p.parse_args()
    env = common.environment()
    common.print_header(env)

    import pytest

    import tilekit as tk
    from tests.rt.fake_gpu import FakeTensor, use_fake_gpu
    from tilekit.rt import driver, fastpath

    launch_ex = stub()
    with pytest.MonkeyPatch.context() as mp:
        use_fake_gpu(mp)
        mp.setattr(driver, "launch_ex_fn", lambda: launch_ex)

        @tk.kernel
        def add_one(X, Y, n, BLOCK: tk.constexpr):
            offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
            mask = offs < n
            tk.store(Y, offs, tk.load(X, offs, mask) + 1.0, mask)

        @tk.kernel
        def add_offset(X, Y, n, BLOCK: tk.constexpr):
            offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
            mask = offs < n
            tk.store(Y, offs, plus_offset(tk.load(X, offs, mask)), mask)

        x = FakeTensor((N,), ptr=0x7F00_0000_0000)
        y = FakeTensor((N,), ptr=0x7F00_0001_0000)
        grid = ((N + BLOCK - 1) // BLOCK,)
        add_one[grid](x, y, N, BLOCK=BLOCK)  # the slow path installs the entry
        add_offset[grid](x, y, N, BLOCK=BLOCK)
        dispatcher = next(iter(add_one._loaded.fast.values()))
        assert len(add_offset.globals_guards) == 2, add_offset.globals_guards
        reps = args.reps
        empty = best_us(lambda: None, reps)
        whole = best_us(lambda: add_one[grid](x, y, N, BLOCK=BLOCK), reps) - empty
        guarded = best_us(lambda: add_offset[grid](x, y, N, BLOCK=BLOCK), reps) - empty
        key = best_us(lambda: dispatcher.key_fn(x, y, N, BLOCK), reps) - empty
        getitem = best_us(lambda: add_one[grid], reps) - empty
        rows = statement_costs(dispatcher, ((x, y, N), {"BLOCK": BLOCK}), grid, reps)

    # the ctypes calls alone (a stub for the driver)
    plain, typed, ex = stub(), stub(), stub()
    typed.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    fh, params = ctypes.c_void_p(0x1000), (ctypes.c_void_p * 8)()
    config = (ctypes.c_char * fastpath.CONFIG_BYTES)()
    launches = {
        "cuLaunchKernel, argtypes, ints": lambda: typed(0x1000, 4, 1, 1, 128, 1, 1, 0, 0x5000,
                                                        0x6000, None),
        "cuLaunchKernel, pre-converted (the slow path's)":
            lambda: plain(fh, 4, 1, 1, 128, 1, 1, 0, fh, fh, None),
        "cuLaunchKernelEx, 4 pre-built (the fast path's)": lambda: ex(config, fh, params, None),
    }
    launch_us = {k: best_us(f, reps) - empty for k, f in launches.items()}

    print(f"\nfast path, {N} float32, grid {grid}, fake tensors, stub driver "
          f"(best of 7 x {reps}):\n")
    print(common.format_table(["measure", "us"], [
        ["add_one[grid](x, y, n, BLOCK=...) (whole hit)", whole],
        ["add_offset[grid](...) (whole hit; checks 2 globals)", guarded],
        ["add_one[grid] alone (a bound method)", getitem],
        ["the key alone (Dispatcher.key_fn)", key]]))
    print("\nstatement by statement:\n")
    print(common.format_table(["statement", "us"], rows))
    print("\nctypes calls with a stub C function:\n")
    print(common.format_table(["call", "us"], [[k, v] for k, v in launch_us.items()]))

    # torch's reads on the device host, counted in the generated source
    source = dispatcher.sources["call"]
    reads = {"t.data_ptr()": source.count(".data_ptr()"), "t.shape": source.count(".shape"),
             "t.stride()": source.count(".stride()"),
             "t.get_device()": source.count(".get_device()"),
             "t.dtype": source.count(".dtype"), "t.dim()": source.count(".dim()"),
             "torch._C._cuda_getCurrentRawStream(d)": 1}
    estimate = None
    device = common.RESULTS / "dispatch.json"
    if device.exists():
        costs = json.loads(device.read_text()).get("torch_attribute_us", {})
        priced = {k: n * costs[k] for k, n in reads.items() if n and k in costs}
        estimate = sum(priced.values())
        print(f"\ntorch reads per hit: {reads}; on the device host (dispatch.json) "
              f"{estimate:.2f} us")
    data = {"environment": env, "kernel": {"n": N, "block": BLOCK, "grid": grid},
            "whole_us": whole, "guarded_whole_us": guarded, "getitem_us": getitem, "key_us": key,
            "statements_us": rows, "ctypes_launch_us": launch_us, "torch_reads": reads,
            "torch_reads_device_us": estimate}
    for path in common.write_json("dispatch_cpu", data, args.out):
        print(f"# wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
