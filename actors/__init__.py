"""The bot's actors and how they are composed: :mod:`actors.system` is the supervision tree of
``engram serve`` (the one composition root); :mod:`~actors.router` (wakes, recovery sweep) and
:mod:`~actors.compactor` (the singleton compaction actor) sit here; the sender
(:mod:`actors.sender`: outbox -> Telegram), the per-chat actor, the turn, the Telegram edge, the
durable queues and the CLI have sub-packages.

Imports ``memory`` and ``runtime``; nothing here imports :mod:`actors.cli` (the top layer).
Public: ``system.BotSystem``, ``settings.Settings``, ``settings.load_settings``,
``router.Router``, ``compactor.CompactorActor``, ``errors``.
"""
