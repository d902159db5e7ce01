"""Streamed replies in Telegram (issue 23): a draft of the reply that grows while the model
writes it, and the native Stop button.

:class:`DraftStream` is the turn's :class:`~actors.agent.progress.TurnProgress`: the agent
hands it the model's stream events (text as it is written, a tool call starting) and a task of
its own shows them, at most once per ``interval`` (``DRAFT_INTERVAL``), never faster than
Telegram accepts (a 429 waits its ``retry_after``):

* ``draft`` mode (private chats, ``STREAM_REPLIES=auto``): ``sendMessageDraft`` with
  ``can_stop`` — Telegram shows the draft with a Stop button; pressing it sends a
  ``stopped_message_generation`` update for the stream's ``draft_id``, which stops the
  generation (:mod:`actors.router`). A draft lives 30 s without an update, so an unchanged one
  is refreshed every :data:`KEEPALIVE` seconds (a long tool call). It disappears by itself when
  the reply is sent.
* ``edit`` mode (``STREAM_REPLIES=edit``, any chat): a placeholder message edited as the text
  grows (at most once a second, Telegram's pace for edits), deleted once the reply is queued;
  the reply itself is a new message. Under ``auto`` a group's turn is not streamed (drafts
  exist in private chats only), nor is a chat's once Telegram refused its draft.

Either way the draft is only a view: the reply still goes through the outbox exactly once, so a
crash mid-stream loses the draft and nothing else. A failure to show it is logged and never
reaches the turn. Tool calls show one status line (:data:`TOOL_STATUS`).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Literal, Protocol

import attrs
import trio

from actors.chat.settings import StreamMode
from actors.chat.wakes import RunningTurns
from actors.telegram.client import BotApiClient
from actors.telegram.drafts import MAX_DRAFT_CHARS, delete_message, send_message_draft
from actors.telegram.errors import BadRequest, Forbidden, NotFound, RateLimited, TelegramError
from memory.llm.protocol import StreamEvent, TextDelta, ToolStarted
from runtime.logs import get_logger

log = get_logger(__name__)

ShowMode = Literal["draft", "edit"]

#: what the draft says while a tool runs (one place for every tool's line)
TOOL_STATUS: Mapping[str, str] = {
    "search_entries": "searching your journal…",
    "get_entry": "reading a journal entry…",
    "get_entries_by_date": "reading your journal…",
    "on_this_day": "looking at this day in past years…",
    "find_similar": "looking for similar entries…",
    "list_tags": "looking at your journal's tags…",
    "entry_stats": "counting journal entries…",
    "log_weight": "noting your weight…",
    "weight_history": "looking at your weight history…",
    "get_usage": "checking what I have cost…",
    "schedule_reminder": "setting a reminder…",
    "recall_memory": "remembering…",
    "recall_conversation": "looking back through our conversation…",
    "remember": "making a note…",
    "forget_memory": "preparing to forget…",
    "link_memories": "connecting memories…",
}
WORKING = "working on it…"
#: seconds after which an unchanged draft is shown again (Telegram drops it after 30 s)
KEEPALIVE = 20.0
#: edits of one message at most this often (seconds)
EDIT_INTERVAL = 1.0
#: the most of the text a draft shows (its end), below Telegram's 4,096
VIEW_CHARS = MAX_DRAFT_CHARS - 96


def new_draft_id() -> int:
    """A non-zero draft id (a 31-bit integer)."""
    return random.randrange(1, 2**31)


def utf16_units(text: str) -> int:
    """The length Telegram counts (UTF-16 code units: an emoji is two)."""
    return len(text.encode("utf-16-le")) // 2


def draft_view(text: str, status: str | None) -> str:
    """What the draft shows: the text so far (its end, when long: at most
    :data:`VIEW_CHARS` UTF-16 units, as Telegram counts) and the status line."""
    body = text.strip()
    if utf16_units(body) > VIEW_CHARS:
        start, units = len(body), 1  # the "…" in front
        while start > 0 and units + utf16_units(body[start - 1]) <= VIEW_CHARS:
            start -= 1
            units += utf16_units(body[start])
        body = "…" + body[start:]
    if status:
        return f"{body}\n\n⏳ {status}" if body else f"⏳ {status}"
    return body


class DraftSink(Protocol):
    """Where a stream shows itself (the Bot API; tests give their own)."""

    async def draft(self, chat_id: int, draft_id: int, text: str) -> None: ...

    async def send(self, chat_id: int, text: str) -> int: ...

    async def edit(self, chat_id: int, message_id: int, text: str) -> None: ...

    async def delete(self, chat_id: int, message_id: int) -> None: ...


@attrs.frozen
class BotDraftSink:
    """:class:`DraftSink` on the Bot API."""

    bot: BotApiClient

    async def draft(self, chat_id: int, draft_id: int, text: str) -> None:
        # kept on Stop: what was written stays in view until the "(stopped)" reply replaces it
        await send_message_draft(
            self.bot, chat_id, draft_id, text, can_stop=True, keep_on_stop=True
        )

    async def send(self, chat_id: int, text: str) -> int:
        return await self.bot.send_message(chat_id, text, disable_notification=True)

    async def edit(self, chat_id: int, message_id: int, text: str) -> None:
        await self.bot.edit_message_text(chat_id, message_id, text)

    async def delete(self, chat_id: int, message_id: int) -> None:
        await delete_message(self.bot, chat_id, message_id)


@attrs.define(eq=False)
class DraftStream:
    """One turn's streamed draft (an async context manager: shown while the body runs)."""

    chat_id: int
    sink: DraftSink
    mode: ShowMode
    interval: float = 0.8
    #: called once with the seconds from the stream's start to the first visible text
    on_first_text: Callable[[float], None] | None = None
    draft_id: int = attrs.field(factory=new_draft_id)
    text: str = ""
    status: str | None = None
    shown: str | None = None
    placeholder: int | None = None
    updates: int = 0
    _after_tool: bool = False
    #: starts the stream's task in a nursery that outlives the turn (:class:`Drafts`'), so a
    #: draft request in flight when the turn ends finishes there, without holding the reply
    spawn: Callable[[Callable[[], Awaitable[None]]], None] | None = None
    done: bool = False
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _finished: trio.Event = attrs.field(factory=trio.Event)
    _started: float = 0.0
    _first_text: bool = False

    # --- TurnProgress ----------------------------------------------------------------------

    def on_event(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            if self._after_tool:  # the next model call: its text is the answer now
                self.text, self._after_tool = "", False
            self.text += event.text
            self.status = None
        elif isinstance(event, ToolStarted):
            self.status = TOOL_STATUS.get(event.name, WORKING)
            self._after_tool = True
        self._changed.set()

    # --- showing ---------------------------------------------------------------------------

    def view(self) -> str:
        return draft_view(self.text, self.status)

    async def _show(self, view: str) -> None:
        if self.mode == "draft":
            await self.sink.draft(self.chat_id, self.draft_id, view)
        elif not view.strip():
            return  # an edit-mode placeholder needs text
        elif self.placeholder is None:
            self.placeholder = await self.sink.send(self.chat_id, view)
        else:
            await self.sink.edit(self.chat_id, self.placeholder, view)
        self.shown = view
        self.updates += 1
        if not self._first_text and self.text.strip():
            self._first_text = True
            if self.on_first_text is not None:
                self.on_first_text(trio.current_time() - self._started)

    async def _show_safely(self, view: str) -> bool:
        """Show ``view``; False when the stream should stop showing anything."""
        try:
            await self._show(view)
        except RateLimited as exc:
            wait = exc.retry_after if exc.retry_after is not None else 1.0
            log.info("draft.rate_limited", chat_id=self.chat_id, retry_after=wait)
            await trio.sleep(wait)
            self._changed.set()  # show the latest view after the wait
        except (BadRequest, NotFound, Forbidden) as exc:  # this chat shows no stream: stop
            log.info("draft.refused", chat_id=self.chat_id, mode=self.mode, error=str(exc))
            return False
        except TelegramError as exc:  # the network or the Bot API: the next change retries
            log.info("draft.failed", chat_id=self.chat_id, error=str(exc))
        except Exception as exc:  # never the turn's problem
            log.warning("draft.failed", chat_id=self.chat_id, error=repr(exc)[:300])
        return True

    async def run(self) -> None:
        """Show the draft as it changes, throttled, until the turn is over (:attr:`done`);
        then, once the reply is queued (:meth:`finish`), remove the placeholder."""
        self._started = trio.current_time()
        try:
            await self._stream()
        finally:
            with trio.move_on_after(KEEPALIVE, shield=True):
                await self._finished.wait()
                await self.close()

    async def _stream(self) -> None:
        if self.mode == "draft" and not await self._show_safely(""):  # "Thinking..." at once
            return
        while not self.done:
            with trio.move_on_after(KEEPALIVE if self.mode == "draft" else float("inf")):
                await self._changed.wait()
            self._changed = trio.Event()
            if self.done:
                return
            view = self.view()
            fresh = view != self.shown or self.mode == "draft"  # a draft is refreshed anyway
            if fresh and not await self._show_safely(view):
                return
            edit = self.mode == "edit"
            await trio.sleep(max(self.interval, EDIT_INTERVAL) if edit else self.interval)

    async def close(self) -> None:
        """Remove what the stream left in the chat (the edit mode's placeholder)."""
        if self.placeholder is None:
            return
        with trio.move_on_after(5):
            try:
                await self.sink.delete(self.chat_id, self.placeholder)
            except Exception as exc:  # best effort: the reply is sent either way
                log.info("draft.placeholder_left", chat_id=self.chat_id, error=repr(exc)[:200])
        self.placeholder = None

    def finish(self) -> None:
        """The reply is queued (or the turn gave up): the placeholder may go."""
        self.done = True
        self._changed.set()
        self._finished.set()

    async def __aenter__(self) -> DraftStream:
        if self.spawn is not None:
            self.spawn(self.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.done = True  # no more drafts; one in flight finishes in the stream's own task
        self._changed.set()
        return False


@attrs.define(eq=False)
class Drafts:
    """Makes each turn's :class:`DraftStream` (``STREAM_REPLIES``, ``DRAFT_INTERVAL``) and runs
    the streams' tasks in its nursery (start it with :meth:`run`; until then, and with
    ``off``, nothing streams)."""

    sink: DraftSink
    mode: StreamMode = "auto"
    interval: float = 0.8
    on_first_text: Callable[[float], None] | None = None
    _nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[Drafts] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started(self)
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def open(self, chat_id: int) -> DraftStream | None:
        """The stream of a turn in ``chat_id`` (None: not streamed — ``off``, not running, or a
        group under ``auto``: drafts exist in private chats only, a positive id, and an edited
        message in a group would notify everyone; ``edit`` edits a message everywhere)."""
        if self.mode == "off" or self._nursery is None:
            return None
        if self.mode == "auto" and chat_id < 0:
            return None
        show: ShowMode = "draft" if self.mode == "auto" else "edit"
        return DraftStream(
            chat_id,
            self.sink,
            show,
            self.interval,
            on_first_text=self.on_first_text,
            spawn=self._nursery.start_soon,
        )


@attrs.frozen
class ChatProgress:
    """A chat turn's :class:`~actors.agent.progress.TurnProgress`: its events to the draft
    stream (None: not streamed), its generation stoppable through the chat's running turns
    (by ``/stop``, or by the Stop of this stream's draft)."""

    chat_id: int
    running: RunningTurns
    stream: DraftStream | None = None

    @property
    def streaming(self) -> bool:
        return self.stream is not None

    def on_event(self, event: StreamEvent) -> None:
        if self.stream is not None:
            self.stream.on_event(event)

    @contextmanager
    def stoppable(self) -> Iterator[trio.CancelScope]:
        draft = None if self.stream is None else self.stream.draft_id
        with trio.CancelScope() as scope:
            self.running.register(self.chat_id, scope, draft)
            try:
                yield scope
            finally:
                self.running.unregister(self.chat_id, scope)
