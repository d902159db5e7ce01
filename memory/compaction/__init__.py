"""Compaction: a span of messages becomes patterns and an episode.
:mod:`~memory.compaction.run` (``compact_chat``: lock, extract, apply, mark compacted),
:mod:`~memory.compaction.transaction` (the one transaction that applies an extraction to the
store) and :mod:`~memory.compaction.backlog` (the sweep: idle chats, old backlogs). The rule
saying when a chat must be compacted is the conversation's
(:mod:`memory.conversation.window`).

Imports extraction, patterns, conversation, embeddings, llm and ``runtime``. Public:
``run.compact_chat``, ``backlog.CompactionSweep``, ``backlog.SqlBacklog``.
"""
