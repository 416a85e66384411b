"""The TILEKIT_* knobs: one module, one README table, a scoped override, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tilekit import cli, knobs

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_table() -> list[tuple[str, str, str]]:
    """(variable, default, meaning) rows of the README's environment-variable table."""
    text = README.read_text()
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.fullmatch(r"\|\s*`(TILEKIT_\w+)`\s*\|\s*(.*?)\s*\|\s*(.*?)\s*\|", line.strip())
        if m:
            default = m.group(2)
            default = default[1:-1] if default.startswith("`") and default.endswith("`") \
                else default
            rows.append((m.group(1), default, m.group(3)))
    return rows


def test_readme_table_lists_exactly_the_knobs() -> None:
    table = readme_table()
    assert [env for env, _, _ in table] == [k.env for k in knobs.ALL]


def test_readme_table_has_the_defaults_and_meanings() -> None:
    assert readme_table() == knobs.describe()


def test_every_knob_is_prefixed_and_documented() -> None:
    assert len({k.env for k in knobs.ALL}) == len(knobs.ALL)
    for k in knobs.ALL:
        assert k.env.startswith("TILEKIT_") and k.env.upper() == k.env
        assert k.doc.strip().endswith(".")


def test_defaults_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in knobs.ALL:
        monkeypatch.delenv(k.env, raising=False)
    assert knobs.INTERPRET.get() is False
    assert knobs.DUMP.get() == frozenset()
    assert knobs.DUMP_LOCS.get() is True
    assert knobs.VERIFY_PASSES.get() is True


def test_knobs_are_read_when_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEKIT_INTERPRET", "1")
    assert knobs.INTERPRET.get() is True
    monkeypatch.setenv("TILEKIT_INTERPRET", " Off ")
    assert knobs.INTERPRET.get() is False
    monkeypatch.setenv("TILEKIT_DUMP", " ir, eliminate_dead_code ,,")
    assert knobs.DUMP.get() == frozenset({"ir", "eliminate_dead_code"})


@pytest.mark.parametrize("text,value", [
    ("1", True), ("true", True), ("YES", True), ("on", True),
    ("0", False), ("false", False), ("no", False), ("off", False), ("", False),
])
def test_bool_spellings(monkeypatch: pytest.MonkeyPatch, text: str, value: bool) -> None:
    monkeypatch.setenv("TILEKIT_VERIFY_PASSES", text)
    assert knobs.VERIFY_PASSES.get() is value


def test_bad_value_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEKIT_INTERPRET", "maybe")
    with pytest.raises(ValueError) as info:
        knobs.INTERPRET.get()
    message = str(info.value)
    assert message.startswith("environment variable TILEKIT_INTERPRET='maybe': ")
    assert "expected one of" in message and "'1'" in message and "'0'" in message
    # An override wins over the bad environment value (tests can still run).
    with knobs.override(interpret=True):
        assert knobs.INTERPRET.get() is True


def test_override_sets_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEKIT_DUMP", "ir")
    with knobs.override(dump=frozenset({"all"}), verify_passes=False):
        assert knobs.DUMP.get() == frozenset({"all"})
        assert knobs.VERIFY_PASSES.get() is False
        with knobs.override(dump=frozenset()):
            assert knobs.DUMP.get() == frozenset()
            assert knobs.VERIFY_PASSES.get() is False
        assert knobs.DUMP.get() == frozenset({"all"})
    assert knobs.DUMP.get() == frozenset({"ir"})  # the environment again
    assert knobs.VERIFY_PASSES.get() is True
    assert knobs._overrides == {}


def test_override_restores_after_an_exception() -> None:
    with pytest.raises(RuntimeError), knobs.override(interpret=True):
        assert knobs.INTERPRET.get() is True
        raise RuntimeError
    assert knobs._overrides == {}


def test_override_of_an_unknown_knob() -> None:
    with pytest.raises(KeyError, match="no knob named 'dumps'; known: "), \
            knobs.override(dumps=frozenset()):
        pass
    assert knobs._overrides == {}


def test_override_does_not_touch_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.delenv("TILEKIT_INTERPRET", raising=False)
    with knobs.override(interpret=True):
        assert "TILEKIT_INTERPRET" not in os.environ


def test_cli_env_prints_every_knob(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    for k in knobs.ALL:
        monkeypatch.delenv(k.env, raising=False)
    monkeypatch.setenv("TILEKIT_DUMP", "ir,all")
    assert cli.main(["env"]) == 0
    out = capsys.readouterr().out
    for env, default, doc in knobs.describe():
        if env == "TILEKIT_DUMP":
            assert "TILEKIT_DUMP=ir,all\n" in out
        else:
            assert f"{env} (default {default})\n" in out
        assert f"    {doc}\n" in out
    assert out.count("TILEKIT_") == len(knobs.ALL) + sum(d.count("TILEKIT_") for _, _, d in
                                                          knobs.describe())
