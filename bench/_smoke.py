"""``--smoke`` for every benchmark: tiny sizes, seconds, the same code path and the same last
line (its figures from the tiny run, so they mean nothing). CI runs each bench once this way
(``.ci/run``) so a bench cannot silently rot."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "tiny sizes, seconds: checks that the bench still runs (its figures mean nothing)"


def add_smoke_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help=HELP)


def shrink(parser: argparse.ArgumentParser, args: argparse.Namespace, **tiny: Any) -> None:
    """With ``--smoke``, each option in ``tiny`` left at its default takes the tiny value (an
    option given on the command line wins)."""
    if not args.smoke:
        return
    for name, value in tiny.items():
        if getattr(args, name) == parser.get_default(name):
            setattr(args, name, value)
