"""Where the streamed drafts of :mod:`actors.chat.drafts` go: a local chat's to its client as
``draft`` frames (the hub sends at most one per :data:`~actors.local.hub.DRAFT_INTERVAL`, the
latest text; ephemeral: the reply itself still comes through the outbox, once), every other
chat's to the Bot API."""

from __future__ import annotations

import attrs

from actors.chat.drafts import DraftSink
from actors.local.hub import LocalHub
from actors.local.ids import is_local_chat


@attrs.frozen
class LocalOrTelegram:
    """A :class:`~actors.chat.drafts.DraftSink` routing by chat: local chats to ``hub``, the
    others to ``telegram``."""

    hub: LocalHub
    telegram: DraftSink

    async def draft(self, chat_id: int, draft_id: int, text: str) -> None:
        if is_local_chat(chat_id):
            self.hub.draft(chat_id, text)
        else:
            await self.telegram.draft(chat_id, draft_id, text)

    async def send(self, chat_id: int, text: str) -> int:
        if is_local_chat(chat_id):  # a local client shows drafts in place: no placeholder
            self.hub.draft(chat_id, text)
            return 0
        return await self.telegram.send(chat_id, text)

    async def edit(self, chat_id: int, message_id: int, text: str) -> None:
        if is_local_chat(chat_id):
            self.hub.draft(chat_id, text)
        else:
            await self.telegram.edit(chat_id, message_id, text)

    async def delete(self, chat_id: int, message_id: int) -> None:
        if not is_local_chat(chat_id):
            await self.telegram.delete(chat_id, message_id)
