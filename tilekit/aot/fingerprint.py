"""A kernel's source fingerprint: what lets a portfolio serve a launch without tracing.

It lives in ``tilekit.aot.portfolio`` (``source_hash``, described there), with the keys of
the variants it finds (a first launch from a portfolio imports one module fewer); this
module keeps the name.
"""

from tilekit.aot.portfolio import source_hash  # noqa: F401  (re-exported)
