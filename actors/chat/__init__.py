"""The per-chat actor: one per chat, its inbox rows in order, fragment and media-group timers, voice
and commands (:mod:`~actors.chat.actor`), its state and turn loop (:mod:`~actors.chat.turns`), what
every chat actor shares (:mod:`~actors.chat.deps`), with the timers in
:mod:`~actors.chat.fragments`, the typing indicator in :mod:`~actors.chat.typing_indicator` and its
view of the inbox and outbox in :mod:`~actors.chat.store`; what it shares with the router (the
``Wake`` message, pending wakes, running turns) in :mod:`~actors.chat.wakes`; inline buttons
(tokens, the table of callback handlers, the tap) in :mod:`~actors.chat.callbacks`; the chat
commands — the table in :mod:`~actors.chat.commands` (what a command is in
:mod:`~actors.chat.command_base`), the memory commands in :mod:`~actors.chat.memory_commands`
(``/summary`` and ``/stats`` in :mod:`~actors.chat.summary_stats`) and those confirmed with buttons
in :mod:`~actors.chat.forget_command`; what the model asked to forget or supersede, confirmed by the
person (and ``/memory restore``), in :mod:`~actors.chat.model_asks`; the proactive lane's side:
a due run of a routine or reminder handled in the chat's order (:mod:`~actors.chat.due_runs`,
:mod:`~actors.chat.proactive`) and the commands that steer it (``/active``, ``/quiet``,
``/digest``, ``/routines``, ``/remind``) in :mod:`~actors.chat.proactive_commands`.

Imports the turn's interface (:mod:`actors.agent.turn`), the queues, the Telegram types, the
memory domain (the commands' reads and actions) and the scheduler's store and routines; not the
sender, the system or the CLI. Public:
``actor.chat_factory``, ``deps.ChatDeps``, ``store.SqlChatStore``, ``wakes.Wake``,
``fragments.FragmentBuffer``, ``callbacks.keyboard``, ``callbacks.CallbackTable``,
``callbacks.CallbackContext``, ``commands.command_table``, ``memory_commands.MemoryServices``,
``model_asks.model_asks``.
"""
