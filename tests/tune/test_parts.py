"""The autotuner's small parts: constexprs as JSON, alignment, the abstract call written
here against the AOT helper's writer, the record format."""

from __future__ import annotations

import numpy as np
import pytest

import tilekit as tk
from tilekit.tune import Config, Report, prune_reasons
from tilekit.tune.calls import describe_call
from tilekit.tune.config import json_value
from tilekit.tune.store import BadRecord, Record, RecordKey, decode, encode

from .kernels import accumulate

TOOLS = (("tilekit", "1"), ("cuda_driver", "none"))


@pytest.mark.parametrize("value, expected", [
    (8, 8), (2.5, 2.5), (True, True), ("tma", "tma"), (None, None), ((1, (2, 3)), [1, [2, 3]]),
    (tk.bfloat16, {"dtype": "bfloat16"}), (np.int64(7), 7),
])
def test_constexprs_as_json(value, expected) -> None:
    assert json_value(value) == expected
    assert type(json_value(value)) is type(expected)


def test_a_value_without_json_form_is_refused() -> None:
    with pytest.raises(TypeError, match="no JSON form"):
        json_value(object())


@pytest.mark.parametrize("address, align", [(0, 256), (512, 256), (48, 16), (4, 4), (6, 2),
                                            (1, 1), (384, 128)])
def test_alignment_is_the_largest_power_of_two_up_to_256(address: int, align: int) -> None:
    from tilekit.aot.calls import alignment_of

    assert alignment_of(address) == align


def test_labels_follow_the_parameter_order() -> None:
    assert Config((("BM", 64), ("ENGINE", "tma"), ("T", tk.float16))).label == \
        "BM=64,ENGINE='tma',T=float16"


def test_the_tuners_call_is_the_aot_writers() -> None:
    """The log's abstract call comes from tilekit.aot.calls: the base alignment of an odd
    view is what a launch of it would see."""
    from tilekit.aot.calls import alignment_of

    x = np.zeros(1000, np.float32)[3:]  # an odd base address
    bound = accumulate.kernel.bind((x, x.copy(), 997), {"BLOCK": 64}, None)
    assert describe_call(accumulate.kernel, bound, None)["args"]["X"]["align"] == \
        alignment_of(x.ctypes.data)


def test_records_round_trip_and_refuse_other_keys_and_configs() -> None:
    key = RecordKey.of("k", "ir", {"key": {"n": 1}}, "sm_90a", TOOLS)
    other = RecordKey.of("k", "ir", {"key": {"n": 2}}, "sm_90a", TOOLS)
    configs = [{"B": 1}, {"B": 2}]
    record = Record(1, {"B=1": 2.0, "B=2": 1.0}, {})
    data = encode(key, configs, record)
    assert decode(key, configs, data) == record
    with pytest.raises(BadRecord, match="another key"):
        decode(other, configs, data)  # a renamed file, or a hash collision
    with pytest.raises(BadRecord, match="another list of configs"):
        decode(key, [{"B": 1}, {"B": 3}], data)
    with pytest.raises(BadRecord, match="checksum"):
        decode(key, configs, data.replace(b'"B=2": 1.0', b'"B=2": 9.0'))


def test_prune_rules_leave_unknown_resources_alone() -> None:
    assert prune_reasons({0: Report("interp", ()), 1: Report("sm_90a", ())}) == {}
    # one spills, the other's spills are unknown: nothing is known not to spill
    assert prune_reasons({0: Report("sm_90a", (), local_bytes=8),
                          1: Report("sm_90a", ())}) == {}
