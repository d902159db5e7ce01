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
    """Cancel scopes of running turns by chat, so ``/stop`` can cancel without queueing."""

    _scopes: dict[int, trio.CancelScope] = attrs.field(factory=dict)
    _stopped: set[int] = attrs.field(factory=set)

    def register(self, chat_id: int, scope: trio.CancelScope) -> None:
        self._scopes[chat_id] = scope

    def unregister(self, chat_id: int, scope: trio.CancelScope) -> None:
        if self._scopes.get(chat_id) is scope:
            del self._scopes[chat_id]

    def cancel(self, chat_id: int) -> bool:
        """Cancel the chat's running turn; True when there was one."""
        scope = self._scopes.pop(chat_id, None)
        if scope is None:
            return False
        scope.cancel()
        self._stopped.add(chat_id)
        return True

    def consume_stopped(self, chat_id: int) -> bool:
        """True once after :meth:`cancel` stopped a turn of this chat."""
        if chat_id in self._stopped:
            self._stopped.discard(chat_id)
            return True
        return False
