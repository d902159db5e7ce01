"""The durable queues: the inbox (every update stored before it is acknowledged), the outbox
(every reply stored before it is sent, chunk by chunk), the group-committing inbox writer of
the webhook, and the in-memory dedupe cache in front of them.

Imports only ``runtime``. Public: ``inbox.insert_update``, ``inbox.take_open``,
``outbox.commit_turn``, ``outbox.OutboxRow``, ``inbox_writer.InboxWriter``,
``dedupe.DedupeCache``.
"""
