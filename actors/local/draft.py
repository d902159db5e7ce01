"""A local chat's :class:`~actors.agent.progress.TurnProgress`: the reply as the model writes
it, sent to the client as ``draft`` frames (at most one per
:data:`~actors.local.hub.DRAFT_INTERVAL`, the latest text; ephemeral: the reply itself still
comes through the outbox, once)."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from actors.local.hub import LocalHub
from memory.llm.protocol import StreamEvent, TextDelta, ToolStarted


@attrs.define(eq=False)
class LocalDraft:
    """The draft of one turn of a local chat."""

    hub: LocalHub
    chat_id: int
    text: str = ""
    status: str | None = None
    #: the status line shown while a tool runs (lane B's mapping of tool names can replace it)
    tool_status: Callable[[str], str] = lambda name: f"using {name.replace('_', ' ')}…"

    def on_event(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
            self.status = None
        elif isinstance(event, ToolStarted):
            self.status = self.tool_status(event.name)
        self.hub.draft(self.chat_id, self.text, self.status)
