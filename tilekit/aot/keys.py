"""What identifies a prebuilt kernel: ``VariantKey`` (kernel name, IR hash, bucket, arch),
``ir_hash``, ``key_of``, and the source fingerprint ``source_hash``.

They live in ``tilekit.aot.portfolio``, with the file their variants are read from (a first
launch from a portfolio imports one module fewer); this module keeps their names.
"""

from tilekit.aot.portfolio import VariantKey, ir_hash, key_of, source_hash  # noqa: F401
