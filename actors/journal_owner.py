"""Which chat a journal belongs to: the chat an import goes to (``engram journal import
--chat``) and the "first allowed chat" that inherits the entries imported before each chat
owned its journal (migration 012; ``engram serve`` assigns them at start and logs it).

**First allowed chat.** The setting's chats come first: when ``TELEGRAM_ALLOWED_CHAT_IDS``
names chats, ``engram serve`` offers no pairing, so they are the bot's original chats (a private
chat, positive id, before a group; the smallest id first, the setting keeping no order). Then
the chats stored in ``allowed_chats`` (pairing, ``engram chats allow``), earliest allowed first:
with the setting empty, the first chat paired is the person who set the bot up.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from actors.telegram.access import stored_chats
from memory.journal.owner import assign_unowned, count_unowned
from runtime.db import Database
from runtime.logs import get_logger

log = get_logger(__name__)


class JournalChatError(ValueError):
    """No chat, or no single chat, to import into (the message is the one line to show)."""


def chat_order(setting: Collection[int], stored: Sequence[int]) -> list[int]:
    """Every allowed chat once, first allowed chat first (rule in the module doc)."""
    ordered = sorted(setting, key=lambda c: (c < 0, abs(c)))
    return ordered + [c for c in dict.fromkeys(stored) if c not in setting]


async def allowed_chats(db: Database, setting: Collection[int]) -> list[int]:
    """The allowed chats (setting and database), first allowed chat first."""
    return chat_order(setting, [c.chat_id for c in await stored_chats(db)])


def import_chat(requested: int | None, allowed: Sequence[int]) -> int:
    """The chat whose journal an import fills: ``requested`` when allowed; with none
    requested, the only allowed chat. :class:`JournalChatError` otherwise."""
    if requested is not None:
        if requested not in allowed:
            raise JournalChatError(
                f"chat {requested} is not allowed (TELEGRAM_ALLOWED_CHAT_IDS, pairing or "
                "`engram chats allow ID`)"
            )
        return requested
    if not allowed:
        raise JournalChatError(
            "no chat is allowed yet: allow one (TELEGRAM_ALLOWED_CHAT_IDS, pairing or "
            "`engram chats allow ID`), then import with --chat ID"
        )
    if len(allowed) > 1:
        ids = ", ".join(str(c) for c in sorted(allowed))
        raise JournalChatError(
            f"several chats are allowed ({ids}): say whose journal with --chat ID"
        )
    return allowed[0]


async def assign_unowned_entries(db: Database, setting: Collection[int]) -> tuple[int, int | None]:
    """Give the entries that belong to no chat to the first allowed chat, and log it; returns
    (entries assigned, that chat). With no chat allowed yet they wait (logged) for a later
    start."""
    unowned = await count_unowned(db)
    if not unowned:
        return 0, None
    chats = await allowed_chats(db, setting)
    if not chats:
        log.warning(
            "journal.entries_unowned",
            entries=unowned,
            note="no chat is allowed yet: they go to the first allowed chat at a later start",
        )
        return 0, None
    moved = await assign_unowned(db, chats[0])
    log.info(
        "journal.entries_assigned",
        entries=moved,
        chat_id=chats[0],
        message=f"assigned {moved} journal {'entry' if moved == 1 else 'entries'} to chat "
        f"{chats[0]} (the first allowed chat)",
    )
    if moved < unowned:
        log.warning(
            "journal.entries_left_unowned",
            entries=unowned - moved,
            chat_id=chats[0],
            note="the chat already has entries with these uuids (imported again)",
        )
    return moved, chats[0]
