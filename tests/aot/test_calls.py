"""Abstract calls: the bucket of a described call is the bucket of the real call (the
same code decides both), the JSON and compact forms agree, bad declarations are refused
with what is wrong, and ``TILEKIT_RECORD`` writes calls that give back the launched
variants. No compiler, no GPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples.softmax import softmax
from examples.vector_add import add
from tests.rt.fake_gpu import FakeTensor, use_fake_gpu
from tilekit import knobs
from tilekit.aot import build, calls
from tilekit.codegen.size_facts import size_facts_holding
from tilekit.ir.dtypes import DType
from tilekit.rt import device_arrays
from tilekit.rt.launcher import specialize_arguments


def real_bucket(kern, args, kwargs):  # type: ignore[no-untyped-def]
    """What a GPU launch computes: specialization and size facts of the real arguments."""
    bound = kern.bind(args, kwargs, None)
    spec, runtime = specialize_arguments(kern, bound, None, device_arrays.describe)
    shapes = {n: a.shape for n, a in runtime.items() if hasattr(a, "shape") and a.shape}
    return bound, spec, size_facts_holding(kern.size_candidates(spec), shapes)


@settings(max_examples=40)
@given(rows=st.integers(1, 8), cols=st.sampled_from([1, 31, 64, 1024, 4097]),
       dtype=st.sampled_from(["float32", "float16"]), offset=st.integers(0, 9),
       pad=st.integers(0, 5), host=st.booleans())
def test_a_described_call_lands_in_the_real_calls_bucket(rows: int, cols: int, dtype: str,
                                                         offset: int, pad: int,
                                                         host: bool) -> None:
    """Ragged widths, misaligned bases and padded rows, on device (torch-like) or host
    (staged) arrays: describe the real call, send it through JSON, and ``buckets_of`` gives
    the specialization and size facts the launch computed."""
    item = np.dtype(dtype).itemsize
    if host:
        base = np.zeros(rows * (cols + pad) + offset + 8, dtype)
        x = np.lib.stride_tricks.as_strided(base[offset:], (rows, cols),
                                            ((cols + pad) * item, item))
    else:
        x = FakeTensor((rows, cols), f"torch.{dtype}", ptr=0x7F00_0000_0000 + offset * item,
                       strides=(cols + pad, 1))
    y = FakeTensor((rows, cols))
    bound, spec, facts = real_bucket(softmax, (x, y), {"N": cols})
    call = json.loads(calls.canonical(calls.describe_call(softmax, bound, "sm_90a")))
    assert call["args"]["X"]["strides"] == [cols + pad, 1]
    assert calls.buckets_of(softmax, call) == (spec, facts)
    if not host:
        assert dict(spec.args)["X"].aligned16 == ((offset * item) % 16 == 0)


def test_the_bucket_follows_each_fact() -> None:
    """Each field of the declaration changes the bucket it lands in (so none is ignored)."""
    base = calls.parse_compact("softmax: X=f32[64,4097] Y=f32[64,4097] N=4097")
    spec, facts = calls.buckets_of(softmax, base)
    assert facts == {("X", 1, 4097), ("Y", 1, 4097)}
    for text in ("softmax: X=f32[64,4097]@4 Y=f32[64,4097] N=4097",
                 "softmax: X=f32[64,4097]{4100,1} Y=f32[64,4097] N=4097",
                 "softmax: X=bf16[64,4097] Y=f32[64,4097] N=4097",
                 "softmax: X=f32[64,4097] Y=f32[64,4097] N=4096"):
        assert calls.buckets_of(softmax, calls.parse_compact(text)) != (spec, facts), text
    wide = calls.parse_compact("softmax: X=f32[64,8194] Y=f32[64,8194] N=4097")
    assert calls.buckets_of(softmax, wide) == (spec, facts)  # 8194 % 4097 == 0 as well


def test_the_compact_form_is_the_json_form() -> None:
    compact = calls.parse_compact(
        "add: X=f32[4096] Y=f32[4096]{2}@4 Out=f32[4096] n=i32:4096 BLOCK=1024", arch="sm_80")
    assert compact == {
        "kernel": {"module": "", "name": "add"}, "arch": "sm_80",
        "args": {"X": {"tensor": "float32", "shape": [4096]},
                 "Y": {"tensor": "float32", "shape": [4096], "strides": [2], "align": 4},
                 "Out": {"tensor": "float32", "shape": [4096]},
                 "n": {"scalar": "int32", "value": 4096}, "BLOCK": {"constexpr": 1024}}}
    spec, _ = calls.buckets_of(add, compact)
    assert dict(spec.args)["Y"].aligned16 is False and spec.constexprs == {"BLOCK": 1024}
    other = calls.parse_compact("k: A=dtype(bf16) B=(1,2) C=True D=name E=0.5 F='xy'")
    assert other["args"] == {"A": {"constexpr": {"dtype": "bf16"}},
                             "B": {"constexpr": [1, 2]}, "C": {"constexpr": True},
                             "D": {"constexpr": "name"}, "E": {"constexpr": 0.5},
                             "F": {"constexpr": "xy"}}


def test_constexprs_round_trip_through_json() -> None:
    for value in (3, 2.5, True, "relu", None, (1, (2, 3)), DType.BFLOAT16):
        assert calls.decode_const(json.loads(json.dumps(calls.encode_const(value)))) == value
    with pytest.raises(ValueError, match="has no JSON form"):
        calls.encode_const(object())


GOOD_ADD = {"X": {"tensor": "float32", "shape": [8]}, "Y": {"tensor": "float32", "shape": [8]},
            "Out": {"tensor": "float32", "shape": [8]}, "n": {"scalar": "int32"},
            "BLOCK": {"constexpr": 128}}


@pytest.mark.parametrize("change,message", [
    ({"X": {"tensor": "f33", "shape": [8]}}, "argument `X`: unknown dtype 'f33'"),
    ({"X": {"tensor": "float32", "shape": [8, -1]}}, "shape must not be below 0"),
    ({"X": {"tensor": "float32", "shape": [8], "align": 12}}, "align must be a power of two"),
    ({"X": {"tensor": "float32", "shape": [8], "strides": [1, 1]}}, "1 sizes but 2 strides"),
    ({"X": {"tensor": "float32"}}, "a tensor has `tensor`, `shape`"),
    ({"X": 3}, "argument `X` must be an object"),
    ({"Z": {"constexpr": 1}}, "kernel `add` has no parameter `Z`"),
    ({"n": {"scalar": "uint32"}}, "scalar `n` is declared uint32, but a call passing such a "
                                  "value gets int32"),
    ({"n": {"scalar": "int32", "value": 1.5}}, "1.5 is not a int32 value"),
    ({"Out": {"scalar": "float32"}}, "`Out` is a tk.Tensor parameter"),
    ({"BLOCK": {"tensor": "float32", "shape": [2]}}, "`BLOCK` is a tk.constexpr"),
    ({"BLOCK": {"constexpr": {"dtype": "f32", "x": 1}}}, "a constexpr object must be"),
])
def test_bad_declarations_say_what_is_wrong(change: dict, message: str) -> None:
    call = {"kernel": {"name": "add"}, "args": {**GOOD_ADD, **change}}
    with pytest.raises(calls.CallError) as info:
        calls.buckets_of(add, call, "calls.jsonl:3")
    assert str(info.value).startswith("error: calls.jsonl:3: ")
    assert message in str(info.value)


def test_a_missing_argument_is_named() -> None:
    args = {k: v for k, v in GOOD_ADD.items() if k != "n"}
    with pytest.raises(calls.CallError, match="does not describe `n`") as info:
        calls.buckets_of(add, {"kernel": {"name": "add"}, "args": args})
    assert "its parameters are (X, Y, Out, n, BLOCK)" in str(info.value)


@pytest.mark.parametrize("text,message", [
    ("X=f32[8]", "names no kernel"), ("add: X", "expected NAME=VALUE"),
    ("add: X=1 X=2", "`X` is given twice"), ("add: X=f32[8]+1", "cannot read the value"),
])
def test_bad_compact_calls(text: str, message: str) -> None:
    with pytest.raises(calls.CallError, match=message.replace("[", r"\[")):
        calls.parse_compact(text)


def test_calls_files_take_bare_calls_and_autotune_lines(tmp_path: Path) -> None:
    call = calls.parse_compact("add: X=f32[8] Y=f32[8] Out=f32[8] n=i32 BLOCK=128")
    path = tmp_path / "calls.jsonl"
    path.write_text("# recorded\n\n" + json.dumps(call) + "\n"
                    + json.dumps({"call": call, "best": {"BLOCK": 128}, "us": 3.1}) + "\n"
                    + json.dumps({"summary": "autotune done"}) + "\n")
    found = build.read_calls(path)
    assert [d.call for d in found] == [call, call]
    assert [d.where for d in found] == [f"{path}:3", f"{path}:4"]
    path.write_text(json.dumps(call) + "\n{not json\n")
    with pytest.raises(Exception) as info:
        build.read_calls(path)
    assert f"{path}:2" in str(info.value) and "line 2 of" in str(info.value)
    assert "{not json" in str(info.value)  # the offending line, shown


def test_record_writes_one_call_per_new_variant(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches on the (fake) GPU: a repeated bucket is not written again, and each line
    gives back the variant that was loaded for it."""
    drv = use_fake_gpu(monkeypatch)
    path = tmp_path / "calls.jsonl"
    softmax._loaded.clear()
    with knobs.override(record=str(path)):
        for cols, ptr in ((4097, 0x7F00_0000_0000), (4097, 0x7F00_0000_0000),
                          (1024, 0x7F00_0000_0000), (4097, 0x7F00_0000_0008)):
            softmax[4](FakeTensor((4, cols), ptr=ptr), FakeTensor((4, cols)), N=cols)
    softmax._loaded.clear()
    lines = path.read_text().splitlines()
    assert len(lines) == 3 == drv.loads
    for line, variant in zip(lines, drv.variants):
        call = json.loads(line)
        assert call["arch"] == "sm_90a" and call["kernel"]["name"] == "softmax"
        assert calls.buckets_of(softmax, call) == (variant.spec, variant.divisible)
    assert json.loads(lines[2])["args"]["X"]["align"] == 8


def test_record_off_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_gpu(monkeypatch)
    monkeypatch.chdir(tmp_path)
    softmax._loaded.clear()
    softmax[4](FakeTensor((4, 64)), FakeTensor((4, 64)), N=64)
    softmax._loaded.clear()
    assert list(tmp_path.iterdir()) == []
