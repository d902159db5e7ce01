"""The sender: outbox rows -> Telegram, exactly once or visibly uncertain.
:mod:`~actors.sender.actor` (the actor: claims due rows, chunks, sends, waits out outages),
:mod:`~actors.sender.store` (its outbox SQL: claim, in-flight marks, outcomes),
:mod:`~actors.sender.db_retry` (its database steps, retried through outages) and
:mod:`~actors.sender.policy` (the pure rules: pacing per chat and globally, the settings).

Imports ``actors.telegram``, ``actors.queues``, ``memory`` and ``runtime``. Public:
``actor.SenderActor``, ``actor.OutboxReady``, ``policy.SenderSettings``,
``policy.SenderLedger``.
"""
