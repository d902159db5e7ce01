"""The conversation's messages: ``chat_messages`` rows, the window a turn shows
(:mod:`~memory.conversation.messages`), the rule saying when a chat must be compacted so that
nothing leaves that window uncompacted (:mod:`~memory.conversation.window`), the purge of
compacted messages (:mod:`~memory.conversation.purge`), and the episodes (summaries of compacted
spans) a turn shows (:mod:`~memory.conversation.episodes`).

Imports ``runtime``, :mod:`memory.untrusted` and :mod:`memory.settings` only. Public:
``messages.ChatMessage``, ``messages.SqlConversationStore``, ``messages.recent_window``,
``window.CompactionRule``, ``purge.PurgeJob``, ``episodes.SqlEpisodes``.
"""
