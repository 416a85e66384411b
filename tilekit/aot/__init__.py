"""Ahead-of-time portfolios: kernels compiled for declared buckets, shipped in one file.

``calls`` declares buckets as abstract calls (shared with the autotuner's log), ``build``
compiles them (``tilekit aot``), ``portfolio`` writes and verifies the file, ``registry``
serves its kernels to launches (``tilekit.load_portfolio``), ``record`` writes the calls a
real run made (``TILEKIT_RECORD``). docs/aot.md describes the format.

This package imports nothing on import: a launch that only looks a kernel up in the
registry must stay light.
"""
