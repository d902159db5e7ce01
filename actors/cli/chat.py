"""``engram chat``: talk to engram from a terminal, no Telegram needed.

    engram chat                 connect to the running ``engram serve`` (ENGRAM_HOST/ENGRAM_PORT,
                                or --url) over its WebSocket ``/ws/chat``
    engram chat --standalone    run the bot in this process (needs only an LLM key; the log goes
                                to ENGRAM_HOME/chat.log) and talk to it

Both authenticate with the local token in ENGRAM_HOME (``chat_token``, created on first use,
mode 0600): the client must share the server's ENGRAM_HOME. The conversation is the local
chat's (:mod:`actors.local`): its memory, commands and routines work as in Telegram; a number
answers a numbered choice (the buttons of /forget, /memory...).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from runtime.errors import settings_error

if TYPE_CHECKING:
    from actors.local.terminal import Terminal
    from actors.settings import Settings

#: a line typed by the person; "" at the end of input
ReadLine = Callable[[], Awaitable[str]]
LOG_FILE = "chat.log"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("chat", help="talk to engram from this terminal (no Telegram needed)")
    p.add_argument(
        "--standalone",
        action="store_true",
        help="run the bot in this process (needs only an LLM key; no Telegram token)",
    )
    p.add_argument(
        "--url", help="the server's chat socket (default ws://ENGRAM_HOST:ENGRAM_PORT/ws/chat)"
    )
    p.set_defaults(handler=cmd_chat, check=check_chat_settings)


def check_chat_settings(settings: Settings, args: argparse.Namespace) -> None:
    """``--standalone`` needs what the model needs (and nothing of Telegram)."""
    from memory.llm.factory import llm_settings_problems

    if getattr(args, "standalone", False):
        error = settings_error(llm_settings_problems(settings))
        if error is not None:
            raise error


def chat_url(host: str, port: int) -> str:
    """The socket of a server bound to ``host``: a wildcard bind is reached on the loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    from actors.local.endpoint import CHAT_PATH

    shown = f"[{host}]" if ":" in host else host
    return f"ws://{shown}:{port}{CHAT_PATH}"


async def stdin_line() -> str:
    import trio

    return await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


async def cmd_chat(settings: Settings, args: argparse.Namespace) -> int:
    from actors.local.terminal import Terminal
    from actors.local.token import load_or_create

    token = load_or_create(settings.home)
    terminal = Terminal(sys.stdout)
    if args.standalone:
        return await standalone(settings, terminal, token, stdin_line)
    url = args.url or chat_url(settings.host, settings.port)
    return await converse(url, token, terminal, stdin_line)


async def converse(url: str, token: str, terminal: Terminal, read_line: ReadLine) -> int:
    """Talk until ``/quit`` or the end of input; what was typed is stored before leaving (a few
    seconds at most). 0, or 1 when engram could not be reached to store some of it (said)."""
    import trio

    from actors.local.client import ChatClient
    from actors.local.terminal import Pick, Quit, Say

    def link(up: bool) -> None:
        terminal.write("(reconnected)\n" if up and client.connections > 1 else "")
        if not up:
            terminal.write("(connection lost; reconnecting…)\n")

    client = ChatClient(url, token, terminal.show, on_link=link)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)

        async def patience() -> None:
            with trio.move_on_after(3):
                await client.wait_connected()
                return
            terminal.write(f"(waiting for engram at {url}: is `engram serve` running?)\n")

        nursery.start_soon(patience)
        while True:
            line = await read_line()
            if not line:
                break
            item = terminal.read(line)
            if isinstance(item, Quit):
                break
            if isinstance(item, Say):
                await client.say(item.text)
            elif isinstance(item, Pick):
                await client.choose(item.message_id, item.data)
        with trio.move_on_after(5):
            await client.settled()
        nursery.cancel_scope.cancel()
    if lost := len(client.pending):
        terminal.write(
            f"! {lost} message(s) not delivered: engram at {url} did not answer; "
            "nothing of them was stored, send them again when it runs\n"
        )
        return 1
    return 0


def open_log(path: Path) -> TextIO:
    """The standalone bot's log file (appended to), its folder made when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", encoding="utf-8")


async def standalone(
    settings: Settings, terminal: Terminal, token: str, read_line: ReadLine
) -> int:
    """The bot in this process (no Telegram; HTTP on a free loopback port), and a chat with it."""
    import attrs
    import trio

    from actors.local.endpoint import CHAT_PATH
    from actors.wiring import open_bot
    from runtime.cli import open_settings_database
    from runtime.logs import configure_logging

    settings = attrs.evolve(settings, host="127.0.0.1", port=0)
    log_path = Path(settings.home) / LOG_FILE
    with open_log(log_path) as log_file:
        configure_logging(settings.log_level, "json", settings.secrets(), stream=log_file)
        terminal.write(f"Starting engram in this terminal (its log: {log_path})…\n")
        async with (
            open_settings_database(settings) as database,
            open_bot(settings, database, polling=False) as bot,
            trio.open_nursery() as nursery,
        ):
            binds: list[str] = []
            listening = trio.Event()
            code = [0]

            def bound(addresses: list[str]) -> None:
                binds.extend(addresses)
                listening.set()

            async def serve() -> None:
                try:
                    code[0] = await bot.serve(on_listening=bound)
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(serve)
            await listening.wait()
            url = binds[0].replace("http://", "ws://", 1) + CHAT_PATH
            await converse(url, token, terminal, read_line)
            bot.system.shutdown.request_stop("chat ended")
        return code[0]
