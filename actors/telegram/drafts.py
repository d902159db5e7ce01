"""The Bot API calls of a streamed reply (Bot API 9.5 and 10.3): ``sendMessageDraft`` shows a
draft of the reply that grows while it is written (private chats only; an ephemeral preview that
disappears after 30 s or when the bot sends a message), with the native Stop button
(``can_stop``: the person's press arrives as a ``stopped_message_generation`` update);
``deleteMessage`` removes the placeholder of the edit-based fallback. The chat side is
:mod:`actors.chat.drafts`."""

from __future__ import annotations

from actors.telegram.client import BotApiClient

MAX_DRAFT_CHARS = 4096


async def send_message_draft(
    bot: BotApiClient,
    chat_id: int,
    draft_id: int,
    text: str,
    *,
    can_stop: bool = False,
    keep_on_stop: bool = False,
) -> None:
    """sendMessageDraft: show (or update: same ``draft_id``, animated) the draft; an empty
    ``text`` shows Telegram's "Thinking..." placeholder."""
    params: dict[str, object] = {"chat_id": chat_id, "draft_id": draft_id, "text": text}
    if can_stop:
        params["can_stop"] = True
    if keep_on_stop:
        params["keep_on_stop"] = True
    await bot.call("sendMessageDraft", params)


async def delete_message(bot: BotApiClient, chat_id: int, message_id: int) -> None:
    """deleteMessage of a message the bot sent."""
    await bot.call("deleteMessage", {"chat_id": chat_id, "message_id": message_id})
