"""``engram systemd-unit``: print a systemd unit that runs ``engram serve`` as a service.

The unit ships with the package (``actors/cli/engram.service``); the command fills in the
``engram`` executable of this installation, the user, the working directory and the environment
file (by default the current user, the current directory and its ``.env``)::

    engram systemd-unit | sudo tee /etc/systemd/system/engram.service
    sudo systemctl daemon-reload && sudo systemctl enable --now engram
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.settings import Settings

UNIT_FILE = "engram.service"


def unit_template() -> str:
    """The packaged unit, with ``{user}``, ``{working_directory}``, ``{environment_file}`` and
    ``{exec_start}`` to fill in."""
    return resources.files("actors.cli").joinpath(UNIT_FILE).read_text(encoding="utf-8")


def engram_executable() -> str:
    """The ``engram`` script beside this interpreter (a venv's bin/), else ``python -m``."""
    script = Path(sys.executable).parent / "engram"
    if script.is_file() and os.access(script, os.X_OK):
        return str(script)
    return f"{sys.executable} -m actors.cli"


def unit_text(*, user: str, working_directory: Path, environment_file: Path) -> str:
    return unit_template().format(
        user=user,
        working_directory=working_directory,
        environment_file=environment_file,
        exec_start=engram_executable(),
    )


def unit_for(args: argparse.Namespace) -> str:
    """The unit for the command's options (defaults: you, the current directory, its .env)."""
    workdir = Path(args.workdir or os.getcwd()).resolve()
    env_file = Path(args.env_file).resolve() if args.env_file else workdir / ".env"
    user = args.user or getpass.getuser()
    return unit_text(user=user, working_directory=workdir, environment_file=env_file)


async def cmd_systemd_unit(settings: Settings, args: argparse.Namespace) -> int:
    print(unit_for(args), end="")
    return 0


def register(subparsers: Any) -> None:
    """Add ``engram systemd-unit [--user U] [--workdir DIR] [--env-file FILE]``."""
    p = subparsers.add_parser(
        "systemd-unit", help="print a systemd unit running `engram serve` (see the README)"
    )
    p.add_argument("--user", help="the user the service runs as (default: you)")
    p.add_argument("--workdir", help="its working directory (default: the current one)")
    p.add_argument("--env-file", help="its settings, NAME=value lines (default: WORKDIR/.env)")
    p.set_defaults(handler=cmd_systemd_unit)
