"""Local chats: talking to engram from a terminal (``engram chat``) instead of Telegram.

A local chat has an id no Telegram chat can have (:mod:`actors.local.ids`). The terminal
client (:mod:`actors.local.client`, on trio-websocket) connects to ``/ws/chat`` on the same
hypercorn app as the webhook (:mod:`actors.local.endpoint`), authenticated by the local token
in ``ENGRAM_HOME`` (:mod:`actors.local.token`). What the person types enters the inbox like a
Telegram update; replies leave through the outbox and the sender hands a local chat's rows to
its socket (:class:`actors.local.hub.LocalHub`, the sender's local transport) instead of the
Bot API. The wire format is :mod:`actors.local.frames`.
"""
