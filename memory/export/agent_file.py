"""A chat's memory as a Letta Agent File (``.af``): one agent whose two core memory blocks are
``human`` (the profile the turn always sees, then the strongest other active patterns) and
``persona`` (who engram is to this person), valid against Letta's public schema (vendored:
``schemas/letta_agent_file.schema.json``, Apache-2.0, ``schemas/LICENSE-letta``).

Only what a Letta agent can use goes in: no conversation, no tools, no vectors (the snapshot is
the complete export).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from memory.errors import SnapshotError
from memory.export.schema import json_path
from memory.retrieval.profile import load_profile
from runtime.db import Queries

AF_SCHEMA_FILE = "letta_agent_file.schema.json"
BLOCK_LIMIT = 20_000  # characters of a block (Letta's default is 100,000)
PROFILE_TOKENS = 2_000
TOP_PATTERNS = 50
PERSONA = (
    "I am engram, a companion with a long memory. I listen, remember what matters to the "
    "person across conversations (their facts, goals, preferences, habits and the events coming "
    "up), and answer briefly, warmly and honestly. I never invent memories: when I do not know, "
    "I say so."
)

_OTHERS = """
SELECT id, kind, content, strength, confidence, first_seen, last_seen FROM patterns
WHERE chat_id = $1 AND status = 'active' AND NOT (id = ANY($2::bigint[]))
ORDER BY strength * confidence DESC, id LIMIT $3
"""


def _human(profile_text: str, others: list[Any]) -> str:
    parts = ["What I know about the person (profile):", profile_text or "(nothing yet)"]
    if others:
        parts += ["", "Other things I have noticed (strongest first):"]
        for r in others:
            line = (
                f"- {r['content']} ({r['kind']}; strength {r['strength']:.2f}, confidence "
                f"{r['confidence']:.2f}; {r['first_seen']:%Y-%m-%d} to {r['last_seen']:%Y-%m-%d})"
            )
            if sum(len(p) + 1 for p in parts) + len(line) > BLOCK_LIMIT:
                break
            parts.append(line)
    return "\n".join(parts)[:BLOCK_LIMIT]


async def build_agent_file(
    db: Queries,
    chat_id: int,
    *,
    engram_version: str,
    timezone: str = "UTC",
    now: datetime | None = None,
    top: int = TOP_PATTERNS,
) -> dict[str, Any]:
    """The ``.af`` document of ``chat_id`` (checked against Letta's schema)."""
    now = now or datetime.now(UTC)
    profile = await load_profile(
        db, chat_id, now=now, timezone=timezone, budget_tokens=PROFILE_TOKENS
    )
    others = list(await db.fetch(_OTHERS, chat_id, list(profile.ids), top))
    blocks = [
        {
            "id": "block-0",
            "label": "human",
            "value": _human(profile.text, others),
            "limit": BLOCK_LIMIT,
            "description": "What engram remembers about the person: the profile, then patterns.",
            "metadata": {"source": "engram", "chat_id": chat_id},
        },
        {
            "id": "block-1",
            "label": "persona",
            "value": PERSONA,
            "limit": BLOCK_LIMIT,
            "description": "Who the agent is to the person.",
            "metadata": {"source": "engram"},
        },
    ]
    doc: dict[str, Any] = {
        "agents": [
            {
                "id": "agent-0",
                "name": f"engram-chat-{chat_id}",
                "description": "A companion with a long memory, exported from engram.",
                "agent_type": "letta_v1_agent",
                "system": PERSONA,
                "block_ids": [b["id"] for b in blocks],
                "memory_blocks": [],
                "tools": [],
                "tool_ids": [],
                "source_ids": [],
                "tool_rules": [],
                "tags": ["engram"],
                "timezone": timezone,
                "messages": [],
                "in_context_message_ids": [],
                "files_agents": [],
                "group_ids": [],
            }
        ],
        "groups": [],
        "blocks": blocks,
        "files": [],
        "sources": [],
        "tools": [],
        "mcp_servers": [],
        "metadata": {"exported_by": f"engram {engram_version}", "chat_id": str(chat_id)},
        "created_at": now.astimezone(UTC).isoformat(),
    }
    check_agent_file(doc)
    return doc


@cache
def _af_validator() -> Draft202012Validator:
    text = resources.files("memory.export").joinpath("schemas", AF_SCHEMA_FILE).read_text("utf-8")
    return Draft202012Validator(json.loads(text))


def check_agent_file(doc: Any) -> None:
    """Raise :class:`SnapshotError` at the first place ``doc`` breaks Letta's schema."""
    error = next(iter(_af_validator().iter_errors(doc)), None)
    if error is not None:
        raise SnapshotError(json_path(error.absolute_path), error.message[:300])
