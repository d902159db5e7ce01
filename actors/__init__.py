"""The bot's actors and how they are composed: :mod:`actors.wiring` is the one composition root
(``open_bot``: every component from the settings, the periodic jobs' list), :mod:`actors.system`
the supervision tree of ``engram serve`` (its start steps); :mod:`~actors.router` (wakes, recovery
sweep) and :mod:`~actors.compactor` (the singleton compaction actor) sit here; the sender
(:mod:`actors.sender`: outbox -> Telegram), the per-chat actor, the turn, the Telegram edge, the
durable queues, the scheduler and the CLI have sub-packages.

Imports ``memory`` and ``runtime``; nothing here imports :mod:`actors.cli` (the top layer).
Public: ``wiring.open_bot``, ``wiring.JOBS``, ``system.BotSystem``, ``settings.Settings``,
``settings.load_settings``, ``router.Router``, ``compactor.CompactorActor``, ``errors``.
"""
