"""Whether the launch fast path's hits run in C (``tilekit.rt._fastlaunch``), and why not.

The code lives in ``tilekit.rt.fastpath`` (a first launch imports one module fewer); this
module keeps its names for ``tilekit info``, the benchmarks and the tests.
"""

from tilekit.rt.fastpath import _load_native as _load  # noqa: F401  (re-exported)
from tilekit.rt.fastpath import function_address  # noqa: F401
from tilekit.rt.fastpath import native_module as module  # noqa: F401
from tilekit.rt.fastpath import native_status as status  # noqa: F401
