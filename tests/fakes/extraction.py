"""A scripted extractor for the fake Anthropic API: answers every compaction request with valid
extraction JSON, leaves every other request to the queue or the default text.

    fake_claude.responder = ScriptedExtractor()

The episode summary names the span's first and last user messages (so a test can see which
messages an episode stands for), and ``patterns`` maps a word to a pattern claimed whenever a
user message of the span contains it (evidence: that message).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from fakes.anthropic_api import Reply

MESSAGE = re.compile(r"^\[#(\d+) (user|assistant|tool_result), [^\]]*\] (.*)$", re.M)


def request_text(body: Mapping[str, Any] | None) -> str:
    """The text of a request's last user message ("" for a request without a readable body:
    one cut off mid-way, as by a restart)."""
    if not body or not body.get("messages"):
        return ""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def is_extraction(body: Mapping[str, Any] | None) -> bool:
    text = request_text(body)
    return "<messages>" in text and "Return the JSON object now." in text


@attrs.define
class ScriptedExtractor:
    """The fake's ``responder``: valid extraction JSON for compaction requests (see above)."""

    patterns: dict[str, str] = attrs.field(factory=dict)
    spans: list[list[int]] = attrs.field(factory=list)  # message ids per extraction request

    def __call__(self, body: Mapping[str, Any]) -> Reply | None:
        if not is_extraction(body):
            return None
        found = MESSAGE.findall(request_text(body))
        self.spans.append([int(i) for i, _, _ in found])
        users = [(int(i), text.strip()) for i, role, text in found if role == "user"]
        if users:
            summary = (
                f'User wrote from "{users[0][1][:80]}" to "{users[-1][1][:80]}" '
                f"({len(users)} messages)."
            )
        else:
            summary = "User and assistant exchanged tool results."
        new = []
        for word, claim in self.patterns.items():
            cited = [i for i, text in users if word in text]
            if cited:
                new.append(
                    {
                        "content": claim,
                        "kind": "belief",
                        "confidence": 0.9,
                        "signal": "explicit",
                        "evidence_message_ids": cited[:1],
                        "entry_uuids": [],
                        "temporal": None,
                    }
                )
        answer = {
            "new_patterns": new,
            "reinforcements": [],
            "contradictions": [],
            "supersedes": [],
            "meta_patterns": [],
            "episode_summary": summary,
        }
        return Reply(({"type": "text", "text": json.dumps(answer)},))
