"""The ``engram`` command: the runtime's core commands plus the bot's.

``engram serve`` composes the process (see :mod:`runtime.serve`) with the bot's actor system.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from runtime.cli import base_parser, open_settings_database, run_cli
from runtime.serve import EmptySystem, serve
from runtime.settings import Settings


async def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    async with open_settings_database(settings) as database:
        return await serve(settings, database, lambda s, d, sh: EmptySystem())


def build_parser() -> argparse.ArgumentParser:
    parser, sub = base_parser()
    p = sub.add_parser("serve", help="run the bot (HTTP server, actors)")
    p.set_defaults(handler=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
