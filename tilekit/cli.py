"""The ``tilekit`` command.

    tilekit env       the TILEKIT_* environment variables, their values and meanings
    tilekit layout    draw layouts as SVG/PNG pictures (see ``tilekit layout --help``)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tilekit import knobs


def _env(args: argparse.Namespace) -> int:
    for env, default, doc in knobs.describe():
        current = os.environ.get(env)
        shown = f"{env}={current}" if current is not None else f"{env} (default {default})"
        print(shown)
        print(f"    {doc}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilekit", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("env", help="show the TILEKIT_* environment variables")
    env.set_defaults(run=_env)
    try:
        from tilekit.layout import pictures_cli
    except ImportError:
        pictures_cli = None
    if pictures_cli is not None:
        pictures_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
