"""Short honest answers to the kinds of message engram does not read (stickers, files, video
notes, ...), instead of one generic line: :func:`answer_for`."""

from __future__ import annotations

from actors.chat.turns import UNSUPPORTED
from actors.telegram.types import Message

ANSWERS: dict[str, str] = {
    "sticker": "I can't see stickers; tell me in words what you meant?",
    "document": "I can't open files yet; paste the text into a message?",
    "video_note": "I can't watch video notes; a voice message or text works.",
    "video": "I can't watch videos yet; a voice message or text works.",
    "animation": "I can't watch GIFs yet; tell me in words?",
    "audio": "I can't listen to audio files, only voice messages.",
    "location": "I can't read locations yet; tell me the place in words?",
    "venue": "I can't read places yet; tell me the place in words?",
    "contact": "I can't read shared contacts; tell me about them in words?",
    "poll": "I can't take part in polls.",
    "dice": "I can't see dice throws.",
}


def answer_for(msg: Message) -> str:
    """The answer to a message without text, caption, voice or photo."""
    if msg.other_kind == "sticker" and msg.sticker_emoji:
        return (
            f"I can't see stickers (that one is tagged {msg.sticker_emoji}); "
            "tell me in words what you meant?"
        )
    return ANSWERS.get(msg.other_kind or "", UNSUPPORTED)
