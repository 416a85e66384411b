"""The op table. Importing this package registers every op in ``opdef.REGISTRY``.

One module per family: elementwise arithmetic, tile structure (shapes,
reductions, dot), memory, and control flow.
"""

from tilekit.ir.ops import control, elementwise, memory, structure  # noqa: F401
