"""``TILEKIT_RECORD``: the buckets a real run used, as abstract calls, one per line.

Each variant a process loads for the GPU appends one line of JSON (``calls.canonical``)
to the file, in one ``write`` on a file opened with ``O_APPEND``: lines of concurrent
processes do not interleave (on local file systems), and no lock is taken. A recording
failure never fails the launch; it is logged at debug level on ``tilekit.aot``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tilekit.aot import calls
from tilekit.lang.kernel import KernelFunction, Specialization


def append(path: str, kern: KernelFunction, spec: Specialization,
           runtime: Mapping[str, Any], arch: str) -> bool:
    """Append the call's line to ``path``; False (logged) when it cannot be written."""
    try:
        line = calls.canonical(calls.describe_runtime(kern, spec, runtime, arch)) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        import logging

        logging.getLogger("tilekit.aot").debug("not recorded to %s: %s", path, exc)
        return False
    return True
