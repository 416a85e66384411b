"""tilekit: an embedded Python DSL and JIT for layout-typed, pipelined GPU tile kernels."""

__version__ = "0.1.0.dev0"
