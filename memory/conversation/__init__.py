"""The conversation's messages: ``chat_messages`` rows, the window a turn shows
(:mod:`~memory.conversation.messages`), and the purge of compacted messages
(:mod:`~memory.conversation.purge`).

Imports ``runtime`` and :mod:`memory.untrusted` only. Public: ``messages.ChatMessage``,
``messages.SqlConversationStore``, ``messages.recent_window``, ``purge.PurgeJob``.
"""
