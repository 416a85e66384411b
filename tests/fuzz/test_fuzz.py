"""The random-program differential fuzzer in CI: the interpreter against the reference.

Each example is a whole kernel drawn by ``generate.py`` (hypothesis shrinks a failing one),
written to a file, traced and run by tilekit's interpreter, and compared with the same
program evaluated by ``reference.py``, which does not use tilekit. About two minutes on two
cores (the ``ci`` profile is derandomized: the same programs every run; ``HYPOTHESIS_PROFILE=
dev`` explores new ones). The GPU leg is ``tests/fuzz/run_device.py`` (docs/fuzzing.md).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import harness, render
from tests.fuzz.generate import Features, HypothesisDraw, generate
from tests.fuzz.known import known

# Early exits and carried Python numbers (issue 27, item 1, landed);
# TILEKIT_FUZZ_CONTROL_FLOW=0 turns them off.
CONTROL_FLOW = os.environ.get("TILEKIT_FUZZ_CONTROL_FLOW", "1") == "1"
EXAMPLES = int(os.environ.get("TILEKIT_FUZZ_EXAMPLES", "800"))  # about 2 minutes on 2 cores


def failure_report(prog, outcome) -> str:  # type: ignore[no-untyped-def]
    lines = [outcome.signature()]
    if outcome.reference == "crash":
        lines.append(outcome.detail)
    for backend, r in outcome.results.items():
        if r.status not in ("ok", "rejected", "unreliable"):
            lines.append(f"[{backend}] {r.status}\n{r.detail}")
    lines.append(render.source(prog))
    return "\n".join(lines)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_interpreter_matches_reference(data, tmp_path_factory):  # type: ignore[no-untyped-def]
    prog = generate(HypothesisDraw(data), Features(control_flow=CONTROL_FLOW))
    directory = tmp_path_factory.getbasetemp() / "fuzz"
    outcome = harness.check(prog, ("interp",), directory, f"k{abs(hash(prog)) % 10**12}")
    if outcome.failed and known(outcome.signature()) is not None:
        return  # pinned by its regression test (tests/fuzz/known.py)
    assert not outcome.failed, failure_report(prog, outcome)


@pytest.mark.parametrize("seed", range(3))
def test_programs_replay_from_their_choices(seed: int) -> None:
    """The device runner minimizes by replaying choices: a recorded list must give the
    same program back."""
    from tests.fuzz.generate import RandomDraw

    first = RandomDraw(seed)
    prog = generate(first, Features(control_flow=True))
    again = generate(RandomDraw(replay=first.choices), Features(control_flow=True))
    assert render.source(prog) == render.source(again)
