"""A kernel's source fingerprint (``tilekit.aot.fingerprint``): equal for the same code
reading the same values wherever the file lives, different after any edit of what the
code or the values it names are, absent when the code names a value it cannot describe;
and the registry's lookup by it (``registry.untraced``), which falls back to the IR hash."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from tilekit.aot import build, calls, fingerprint, portfolio, registry
from tilekit.rt import gpu

from .conftest import CALLS, SOFTMAX, Built

KERNEL = '''
import tilekit as tk
{prelude}

@tk.kernel
def scale(X: tk.Tensor, Y: tk.Tensor, n, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    m = offs < n
    tk.store(Y, offs, {body}, m)
'''


def kernel_from(tmp_path: Path, name: str, body: str = "tk.load(X, offs, m) * 2.0",
                prelude: str = "", lines_before: int = 0) -> object:
    path = tmp_path / name / "kern.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n" * lines_before + KERNEL.format(prelude=prelude, body=body))
    return build.kernels_of(build.import_module_file(path))["scale"]


def hash_of(tmp_path: Path, name: str, **kw: object) -> str | None:
    return fingerprint.source_hash(kernel_from(tmp_path, name, **kw))


def test_the_same_code_elsewhere_has_the_same_fingerprint(tmp_path: Path) -> None:
    a = hash_of(tmp_path, "a")
    assert a is not None and len(a) == 64
    assert hash_of(tmp_path, "b", lines_before=5) == a  # another path, moved down


@pytest.mark.parametrize("edit", [
    {"body": "tk.load(X, offs, m) * 3.0"},  # a constant
    {"body": "tk.load(X, offs, m) + 2.0"},  # an operator
    {"body": "tk.load(X, offs, m) * K", "prelude": "K = 2.0"},  # a global's value ...
    {"body": "helper(tk.load(X, offs, m))", "prelude": "def helper(x):\n    return x * 2.0"},
])
def test_any_edit_changes_the_fingerprint(tmp_path: Path, edit: dict[str, str]) -> None:
    base = hash_of(tmp_path, "base")
    assert hash_of(tmp_path, "edited", **edit) not in (None, base)


def test_globals_and_helpers_are_covered_by_value(tmp_path: Path) -> None:
    def h(name: str, prelude: str, body: str) -> str | None:
        return hash_of(tmp_path, name, prelude=prelude, body=body)

    body = "helper(tk.load(X, offs, m)) * K"
    one = h("one", "K = 2.0\ndef helper(x):\n    return x + C\nC = 1.0", body)
    assert one is not None
    assert h("two", "K = 2.0\ndef helper(x):\n    return x + C\nC = 1.0", body) == one
    assert h("k", "K = 3.0\ndef helper(x):\n    return x + C\nC = 1.0", body) != one
    assert h("c", "K = 2.0\ndef helper(x):\n    return x + C\nC = 5.0", body) != one  # nested
    assert h("d", "K = tk.float16\ndef helper(x):\n    return x + C\nC = 1.0", body) != one


def test_a_user_module_is_covered_by_the_attributes_the_code_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "userlib_fp.py"
    monkeypatch.syspath_prepend(str(tmp_path))
    lib.write_text("SCALE = 2.0\nUNUSED = 1\n")
    body = "tk.load(X, offs, m) * userlib_fp.SCALE"
    first = hash_of(tmp_path, "m1", prelude="import userlib_fp", body=body)
    assert first is not None
    import userlib_fp  # type: ignore[import-not-found]

    userlib_fp.UNUSED = 7  # an attribute the kernel does not name
    assert hash_of(tmp_path, "m2", prelude="import userlib_fp", body=body) == first
    userlib_fp.SCALE = 3.0
    assert hash_of(tmp_path, "m3", prelude="import userlib_fp", body=body) != first


def test_a_value_it_cannot_describe_means_no_fingerprint(tmp_path: Path) -> None:
    """A global array (or any object) may change between the build and the launch
    without changing the code: no fingerprint, so launches trace and use the IR hash."""
    kern = kernel_from(tmp_path, "arr", prelude="import numpy as np\nW = np.ones(3)",
                       body="tk.load(X, offs, m) * W[0]")
    assert fingerprint.source_hash(kern) is None
    kern2 = kernel_from(tmp_path, "cfg", prelude="CFG = {'scale': 2.0}",
                        body="tk.load(X, offs, m) * CFG['scale']")
    assert fingerprint.source_hash(kern2) is None


def test_the_fingerprint_is_computed_once_per_kernel(tmp_path: Path) -> None:
    kern = kernel_from(tmp_path, "once")
    first = fingerprint.source_hash(kern)
    kern.fn.__globals__["tk"] = np  # type: ignore[attr-defined]
    assert fingerprint.source_hash(kern) == first  # cached on the kernel


def test_a_global_changed_in_this_process_is_a_new_fingerprint(tmp_path: Path) -> None:
    """The fingerprint is kept per values of the globals the kernel reads (as of its last
    ``check_globals``, which every launch makes): a portfolio built with the old value is
    not looked up untraced for the new one."""
    kern = kernel_from(tmp_path, "changed", prelude="K = 2.0", body="tk.load(X, offs, m) * K")
    kern.check_globals()  # type: ignore[attr-defined]
    first = fingerprint.source_hash(kern)
    kern.fn.__globals__["K"] = 3.0  # type: ignore[attr-defined]
    assert fingerprint.source_hash(kern) == first  # not checked since: as before
    kern.check_globals()  # type: ignore[attr-defined]
    second = fingerprint.source_hash(kern)
    assert second not in (None, first)
    kern.fn.__globals__["K"] = 2.0  # type: ignore[attr-defined]
    kern.check_globals()  # type: ignore[attr-defined]
    assert fingerprint.source_hash(kern) == first


def test_the_portfolio_carries_the_fingerprint(built: Built) -> None:
    from examples.softmax import softmax

    found = portfolio.read(built.path)
    assert found.format == portfolio.FORMAT == 2
    sources = {v.source for v in found.variants if v.key.kernel == "softmax"}
    assert sources == {fingerprint.source_hash(softmax)}


def test_untraced_lookup_by_fingerprint_then_by_ir_hash(built: Built, tmp_path: Path) -> None:
    """The registry finds softmax's variants by its fingerprint and specialization
    without tracing; a copy whose bytecode differs (a renamed local) but whose IR does not
    has another fingerprint, misses there, and still hits by the IR hash."""
    from examples.softmax import softmax

    registry.clear()
    registry.load_portfolio(built.path)
    try:
        spec, divisible = calls.buckets_of(softmax, calls.parse_compact(CALLS[0]))
        group = registry.untraced(softmax, gpu.spec_text(spec), "sm_90a")
        assert group is not None and set(group.candidates) >= set(divisible)
        assert registry.take(group, gpu.size_facts_text(divisible)) is not None
        assert registry.untraced(softmax, gpu.spec_text(spec), "sm_75") is None

        source = Path(SOFTMAX)
        text = source.read_text().replace("    z = x - tk.max", "    zz = x - tk.max") \
            .replace("tk.exp(z)", "tk.exp(zz)")
        copy = tmp_path / "renamed" / "softmax.py"
        copy.parent.mkdir()
        copy.write_text(textwrap.dedent(text))
        (copy.parent / "_common.py").write_text(
            (source.parent / "_common.py").read_text())
        renamed = build.kernels_of(build.import_module_file(copy))["softmax"]
        assert fingerprint.source_hash(renamed) != fingerprint.source_hash(softmax)
        assert registry.untraced(renamed, gpu.spec_text(spec), "sm_90a") is None
        module = renamed.specialize(spec)
        assert registry.find(module, gpu.spec_text(spec), gpu.size_facts_text(divisible),
                             "sm_90a") is not None
    finally:
        registry.clear()
