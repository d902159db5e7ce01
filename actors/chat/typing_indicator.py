"""Best-effort "typing…" indicator shown while a reply is being prepared.

    async with typing_while(client, chat_id):
        reply = await run_turn(...)

``sendChatAction typing`` is sent at once and then every ``interval`` seconds (Telegram shows
it for about 5 s) by a background task in the context manager's own nursery; the task is
cancelled as soon as the body ends. Failures of the chat action are logged and otherwise
ignored: they never reach the body. The body's own exceptions, cancellation included,
propagate unchanged (never wrapped in an ExceptionGroup).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Protocol

import structlog
import trio

from actors.telegram.errors import TelegramError

__all__ = ["DEFAULT_TYPING_INTERVAL", "ChatActionClient", "TypingIndicator", "typing_while"]

log = structlog.get_logger(__name__)

#: Telegram shows a chat action for about 5 s, so it is refreshed at that rate.
DEFAULT_TYPING_INTERVAL = 5.0


class ChatActionClient(Protocol):
    """The part of the Bot API client the indicator uses (``BotApiClient`` satisfies it)."""

    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None: ...


class TypingIndicator:
    """Async context manager behind :func:`typing_while`; one use per instance."""

    def __init__(
        self,
        client: ChatActionClient,
        chat_id: int,
        *,
        interval: float = DEFAULT_TYPING_INTERVAL,
        action: str = "typing",
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._client = client
        self._chat_id = chat_id
        self._interval = interval
        self._action = action
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        #: chat actions attempted and failed so far (for tests and metrics)
        self.sent = 0
        self.failed = 0

    async def __aenter__(self) -> TypingIndicator:
        if self._nursery_manager is not None:
            raise RuntimeError("a TypingIndicator can be entered only once")
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        self._nursery.start_soon(self._refresh)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._nursery_manager is not None and self._nursery is not None
        self._nursery.cancel_scope.cancel()
        # The body's exception is not handed to the nursery (which would wrap it in an
        # ExceptionGroup); returning False lets it propagate exactly as it was raised.
        await self._nursery_manager.__aexit__(None, None, None)
        return False

    async def _refresh(self) -> None:
        """Send the chat action now and every ``interval`` seconds, at a fixed rate."""
        tick = trio.current_time()
        while True:
            with trio.move_on_at(tick + self._interval):
                await self._send_once()
            tick += self._interval
            await trio.sleep_until(tick)

    async def _send_once(self) -> None:
        try:
            await self._client.send_chat_action(self._chat_id, self._action)
        except TelegramError as exc:
            self.failed += 1
            log.debug("typing.failed", chat_id=self._chat_id, error=str(exc))
        except Exception as exc:  # best effort: nothing may reach the body
            self.failed += 1
            log.warning("typing.failed", chat_id=self._chat_id, error=repr(exc))
        else:
            self.sent += 1


def typing_while(
    client: ChatActionClient,
    chat_id: int,
    interval: float = DEFAULT_TYPING_INTERVAL,
    *,
    action: str = "typing",
) -> TypingIndicator:
    """Show ``action`` in ``chat_id`` while the ``async with`` body runs (best effort)."""
    return TypingIndicator(client, chat_id, interval=interval, action=action)
