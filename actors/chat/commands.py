"""The chat command table: every ``/command`` the bot answers itself, without the model — one
entry per command (name, one-line help, handler), in the order ``/help`` and the menu show them.

The chat actor hands every message starting with ``/`` to :meth:`CommandTable.run
<actors.chat.command_base.CommandTable.run>` in the chat's order, like any message: no model
call, no ``api_usage`` row; the reply is committed with the inbox row like a turn's (and chunked
by the sender like any reply). ``/help`` is generated from this table, and so is the menu
Telegram shows for ``/`` (registered with ``setMyCommands`` when ``engram serve`` starts,
printed by ``engram telegram info``). An unknown command gets "Unknown command /x, see /help."

======================  ==================================================================
``/memory [sub]``       the profile; ``list [kind]``, ``search``, ``why``, ``forget``, ``pin``,
                        ``unpin``, ``merge``, ``restore`` (:mod:`actors.chat.memory_commands`,
                        :mod:`actors.chat.forget_command`, :mod:`actors.chat.model_asks`)
``/remember <fact>``    an explicit memory, at once (no model)
``/forget <topic>``     the memories about a topic, with buttons; ``/forget everything``
                        erases the whole chat (:mod:`actors.chat.erase_command`)
``/summary``            the episode summaries and the window
``/stats``              cost, turns, latency, memory activity of this chat
``/active`` ``/quiet``  the proactive controls (:mod:`actors.chat.proactive_commands`): ``/digest``,
                        ``/routines``, ``/remind`` too
``/help`` ``/start``    the intro and this list; ``/stop`` cancels the reply being worked on
======================  ==================================================================

Without memory services (:func:`command_table` with ``None``: tests, a bot without memory) only
``/start``, ``/help`` and ``/stop`` exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.agent.turn import TurnReply
from actors.chat import erase_command as erase
from actors.chat import forget_command as forget
from actors.chat import memory_commands as mem
from actors.chat import model_asks
from actors.chat.callbacks import CallbackTable
from actors.chat.command_base import Command, CommandCall, CommandTable
from actors.chat.summary_stats import stats_text, summary_text

STOPPED = "Stopped."
NOTHING_TO_STOP = "There was nothing to stop."


def command_table(
    services: mem.MemoryServices | None = None,
    taps: CallbackTable | None = None,
    extra: Sequence[Command] = (),
) -> CommandTable:
    """The table; with ``services``, the memory commands too (their buttons' handlers are
    registered in ``taps``); ``extra``: more commands before /help (the proactive controls,
    :mod:`actors.chat.proactive_commands`)."""

    async def start(call: CommandCall) -> TurnReply:
        return TurnReply(table.help_text())

    async def stop(call: CommandCall) -> TurnReply:
        return TurnReply(STOPPED if call.consume_stopped() else NOTHING_TO_STOP)

    memory: list[Command] = []
    if services is not None:
        s = services
        subs = {**mem.SUBCOMMANDS, **forget.confirmations(), **model_asks.subcommands()}

        async def memory_command(call: CommandCall) -> TurnReply:
            return await mem.memory(s, call, subs)

        async def remember(call: CommandCall) -> TurnReply:
            return await mem.remember_command(s, call)

        async def forget_topic(call: CommandCall) -> TurnReply:
            if erase.is_everything(call.args):
                return await erase.forget_everything(s.db, call)
            return await forget.forget_topic(s, call)

        async def summary(call: CommandCall) -> TurnReply:
            return TurnReply(await summary_text(s, call.chat_id))

        async def stats(call: CommandCall) -> TurnReply:
            return TurnReply(await stats_text(s, call.chat_id, call.now))

        memory = [
            Command(
                "memory",
                "what I remember about you (your profile)",
                memory_command,
                usage=tuple(mem.USAGE[k] for k in mem.USAGE if k in subs),
            ),
            Command("remember", "remember a fact about you, at once: /remember <fact>", remember),
            Command(
                "forget",
                "forget what I know about a topic: /forget <topic>",
                forget_topic,
                usage=("/forget everything — erase this whole chat (asks twice)",),
            ),
            Command("summary", "summaries of our earlier conversations", summary),
            Command("stats", "what I cost and how quickly I answer, in this chat", stats),
        ]
        if taps is not None:
            forget.register_taps(taps)
            erase.register_taps(taps)
            model_asks.register_taps(taps)
    table = CommandTable(
        (
            Command("start", "start talking to engram", start, menu=False),
            *memory,
            *extra,
            Command("help", "what engram does and its commands", start),
            Command("stop", "cancel the reply I'm working on", stop),
        )
    )
    return table
