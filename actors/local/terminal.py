"""What ``engram chat`` shows and how it reads the person's lines: replies as they stream
(``draft`` frames, then the message), choices numbered (a number answers the latest offer;
anything else is a message and closes it), ``/quit`` or end of input to leave."""

from __future__ import annotations

from typing import TextIO

import attrs

from actors.local.frames import Choice, Delivery, Draft, Error, Hello, Notice, ServerFrame

QUIT = frozenset({"/quit", "/exit"})


@attrs.frozen
class Say:
    text: str


@attrs.frozen
class Pick:
    message_id: int
    data: str


@attrs.frozen
class Quit:
    pass


@attrs.define(eq=False)
class Terminal:
    """Renders server frames on ``out``; turns typed lines into inputs (:meth:`read`)."""

    out: TextIO
    #: the latest offer: its message and choices (answered by number)
    offer: tuple[int, tuple[Choice, ...]] | None = None
    draft: str = ""
    greeted: bool = False

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def show(self, frame: ServerFrame) -> None:
        if isinstance(frame, Hello):
            if not self.greeted:
                self.greeted = True
                self.write(
                    "Connected to engram. Type a message; a number answers a numbered choice; "
                    "/quit (or Ctrl-D) leaves.\n"
                )
        elif isinstance(frame, Draft):
            if frame.text.startswith(self.draft) and self.draft:
                self.write(frame.text[len(self.draft) :])
            elif frame.text:
                self.write(("\n" if self.draft else "") + "engram: " + frame.text)
            self.draft = frame.text
        elif isinstance(frame, Delivery):
            self._delivery(frame)
        elif isinstance(frame, Notice):
            self.write(f"({frame.text})\n")
        elif isinstance(frame, Error):
            self.write(f"! {frame.text}\n")

    def _delivery(self, frame: Delivery) -> None:
        if frame.kind == "message":
            text = frame.text or ""
            if self.draft and text.startswith(self.draft):
                self.write(text[len(self.draft) :] + "\n")
            else:
                self.write(("\n" if self.draft else "") + f"engram: {text}\n")
            self.draft = ""
        elif frame.text is not None:
            self.write(f"engram (updated): {frame.text}\n")
        if frame.choices:
            for choice in frame.choices:
                link = f" -> {choice.url}" if choice.url else ""
                self.write(f"  {choice.n}) {choice.label}{link}\n")
            self.write("  (answer with a number)\n")
            self.offer = (frame.message_id, frame.choices)
        elif frame.kind == "edit" and self.offer is not None and self.offer[0] == frame.message_id:
            self.offer = None

    def read(self, line: str) -> Say | Pick | Quit | None:
        """What a typed line means (None: nothing to send)."""
        text = line.strip()
        if not text:
            return None
        if text.lower() in QUIT:
            return Quit()
        if self.offer is not None and text.isdigit():
            message_id, choices = self.offer
            chosen = next((c for c in choices if c.n == int(text)), None)
            if chosen is None:
                self.write(f"! choose 1-{len(choices)}\n")
                return None
            if chosen.data is None:
                self.write(f"(open {chosen.url} in a browser)\n")
                return None
            return Pick(message_id, chosen.data)
        self.offer = None  # the person moved on: a number is a message again
        return Say(line.rstrip("\n"))
