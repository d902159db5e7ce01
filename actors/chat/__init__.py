"""The per-chat actor: one per chat, its inbox rows in order, fragment and media-group timers,
voice, commands, and the turn loop (:mod:`~actors.chat.actor`), with the timers in
:mod:`~actors.chat.fragments`, the typing indicator in :mod:`~actors.chat.typing_indicator` and
its view of the inbox and outbox in :mod:`~actors.chat.store`; what it shares with the router
(the ``Wake`` message, pending wakes, running turns) in :mod:`~actors.chat.wakes`; inline
buttons (tokens, the table of callback handlers, the tap) in :mod:`~actors.chat.callbacks`.

Imports the turn's interface (:mod:`actors.agent.turn`), the queues and the Telegram types; not
the sender, the system or the CLI. Public: ``actor.chat_factory``, ``actor.ChatDeps``,
``store.SqlChatStore``, ``wakes.Wake``, ``fragments.FragmentBuffer``, ``callbacks.keyboard``,
``callbacks.CallbackTable``, ``callbacks.CallbackContext``.
"""
