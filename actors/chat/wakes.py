"""What the router and the chat actors share: the :class:`Wake` message, the coalescing of
wakes (:class:`PendingWakes`: at most one undelivered per chat) and the cancel scopes of running
turns (:class:`RunningTurns`, for ``/stop``)."""

from __future__ import annotations

import attrs
import trio

__all__ = ["PendingWakes", "RunningTurns", "Wake"]


@attrs.frozen
class Wake:
    """New inbox rows may exist for this chat."""


@attrs.define
class PendingWakes:
    """At most one undelivered :class:`Wake` per chat (the router claims, the actor takes)."""

    _chats: set[int] = attrs.field(factory=set)

    def claim(self, chat_id: int) -> bool:
        """True when no wake is pending for the chat (the caller must then deliver one)."""
        if chat_id in self._chats:
            return False
        self._chats.add(chat_id)
        return True

    def release(self, chat_id: int) -> None:
        """The wake was taken by the actor (or could not be delivered)."""
        self._chats.discard(chat_id)


@attrs.define
class RunningTurns:
    """Cancel scopes of running turns by chat, so ``/stop`` and Telegram's Stop button can
    cancel without queueing. A chat may hold nested scopes (the turn's, and inside it the
    generation's, registered with its draft's id): a stop cancels the innermost."""

    _scopes: dict[int, list[tuple[trio.CancelScope, int | None]]] = attrs.field(factory=dict)
    _stopped: set[int] = attrs.field(factory=set)

    def register(self, chat_id: int, scope: trio.CancelScope, draft_id: int | None = None) -> None:
        self._scopes.setdefault(chat_id, []).append((scope, draft_id))

    def unregister(self, chat_id: int, scope: trio.CancelScope) -> None:
        stack = [entry for entry in self._scopes.get(chat_id, []) if entry[0] is not scope]
        if stack:
            self._scopes[chat_id] = stack
        else:
            self._scopes.pop(chat_id, None)

    def cancel(self, chat_id: int, draft_id: int | None = None) -> bool:
        """Cancel the chat's running turn (its innermost scope; with ``draft_id``: only the
        generation showing that draft); True when there was one."""
        stack = self._scopes.get(chat_id)
        if not stack:
            return False
        scope, shown = stack[-1]
        if draft_id is not None and shown != draft_id:
            return False  # a Stop pressed on an older draft
        self.unregister(chat_id, scope)
        scope.cancel()
        self._stopped.add(chat_id)
        return True

    def consume_stopped(self, chat_id: int) -> bool:
        """True once after :meth:`cancel` stopped a turn of this chat."""
        if chat_id in self._stopped:
            self._stopped.discard(chat_id)
            return True
        return False
