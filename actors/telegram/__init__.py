"""The Telegram edge: the Bot API client (:mod:`~actors.telegram.client`), its types and errors
(who a forward came from: :mod:`~actors.telegram.forwards`),
the webhook route, the poller, ingest of an update into the inbox, message chunking and HTML
fallback, voice download and transcription, who may talk to the bot (the allowlist, pairing and
strangers' kept updates: :mod:`~actors.telegram.pairing`, :mod:`~actors.telegram.access`), and
the Telegram settings.

Imports the queues (an update becomes an inbox row) and ``runtime``; no actor, no memory
module but cost and usage accounting of transcription. Public: ``client.BotApiClient``,
``types.parse_update``, ``types.Update``, ``webhook.webhook_handler``, ``poller.Poller``,
``ingest.ingest``, ``chunking.plan_reply``, ``voice.transcribe_voice``, ``errors``,
``keyboards.InlineKeyboard``, ``keyboards.BotCommand``, ``pairing.ChatAccess``.
"""
