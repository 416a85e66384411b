"""The one thing setup.cfg cannot declare: the optional native launcher.

``tilekit.rt._fastlaunch`` (``tilekit/rt/_fastlaunch.c``) serves the launch fast path's
cache hits in C. It is optional: without a C compiler (or if it fails to build) the
install still succeeds and launches take the generated Python dispatcher
(``tilekit info`` says which one is active). Metadata stays in setup.cfg.

    python3 setup.py build_ext --inplace   # a source checkout run with PYTHONPATH
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tilekit.rt._fastlaunch",
            sources=["tilekit/rt/_fastlaunch.c"],
            extra_compile_args=["-Wall"],
            optional=True,
        )
    ]
)
