"""The op table. Importing this package registers every op in ``opdef.REGISTRY``.

One module per family: elementwise arithmetic, tile structure (shapes,
reductions, dot), memory, control flow, and pipelines with their asynchronous ops.
"""

from tilekit.ir.ops import asynchronous, control, elementwise, memory, structure  # noqa: F401
