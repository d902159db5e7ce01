"""The memory settings section: embeddings, context budget and compaction, retention and
maintenance, and the pattern similarity thresholds."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.errors import SettingsError
from runtime.parsers import choice, float_range, int_range, optional_unit
from runtime.settings import Field, SettingsSection


@attrs.frozen(kw_only=True, slots=False)
class MemorySettings(SettingsSection):
    """What the memory layer reads: embedding provider, compaction, retention, thresholds."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "EMBEDDING_PROVIDER",
            "embedding_provider",
            "auto",
            choice("auto", "openai", "local"),
            "auto: OpenAI text-embedding-3-small when OPENAI_API_KEY is set, else local wordllama.",
        ),
        Field(
            "CONTEXT_TOKEN_BUDGET",
            "context_token_budget",
            "24000",
            int_range(1000, 1_000_000),
            "Estimated context tokens (~4 chars each) above which a chat is compacted.",
        ),
        Field(
            "WINDOW_MESSAGES",
            "window_messages",
            "120",
            int_range(3, 1000),
            "Rows of the conversation a turn shows verbatim, its new message included; older "
            "rows are compacted into patterns and episode summaries first.",
        ),
        # below the rows a turn's window shows, or no compaction could keep every row in view
        # (memory/conversation/window.py; checked by validate)
        Field(
            "COMPACTION_KEEP_RECENT",
            "compaction_keep_recent",
            "20",
            int_range(0, 998),
            "Most recent messages a compaction always leaves verbatim (below WINDOW_MESSAGES - 1).",
        ),
        Field(
            "COMPACTION_CHUNK_MESSAGES",
            "compaction_chunk_messages",
            "40",
            int_range(2, 10_000),
            "At most this many of the oldest messages are compacted per LLM call.",
        ),
        Field(
            "COMPACTION_IDLE_AFTER",
            "compaction_idle_after",
            "21600",
            float_range(60, 31_536_000),
            "Seconds without a message after which a chat is compacted down to "
            "COMPACTION_KEEP_RECENT.",
        ),
        Field(
            "EPISODE_BUDGET_TOKENS",
            "episode_budget_tokens",
            "800",
            int_range(0, 100_000),
            'Estimated tokens of the "Earlier in this conversation" summaries in each turn '
            "(0: none).",
        ),
        Field(
            "MESSAGE_RETENTION_DAYS",
            "message_retention_days",
            "0",
            int_range(0, 36_500),
            "Days after which compacted messages are hard-deleted; 0 (the default) keeps the "
            "exact words forever (recall_conversation still finds them).",
        ),
        Field(
            "MAINTENANCE_INTERVAL",
            "maintenance_interval",
            "3600",
            float_range(1, 604_800),
            "Seconds between runs of the maintenance jobs (message purge, per-chat indexes, "
            "the compaction sweep).",
        ),
        Field(
            "PATTERN_MIN_SIMILARITY",
            "pattern_min_similarity",
            "",
            optional_unit,
            "Retrieval similarity floor; empty = the embedding model's calibrated default.",
        ),
        Field(
            "PATTERN_DEDUP_THRESHOLD",
            "pattern_dedup_threshold",
            "",
            optional_unit,
            "Similarity from which a new pattern reinforces an existing one (empty = per model).",
        ),
        Field(
            "PATTERN_ADJUDICATE_THRESHOLD",
            "pattern_adjudicate_threshold",
            "",
            optional_unit,
            "Similarity from which a near duplicate goes to LLM adjudication (empty = per model).",
        ),
        Field(
            "PATTERN_MERGE_THRESHOLD",
            "pattern_merge_threshold",
            "",
            optional_unit,
            "Similarity from which `engram patterns merge` considers a pair (empty = per model).",
        ),
        Field(
            "PROFILE_BUDGET_TOKENS",
            "profile_budget_tokens",
            "600",
            int_range(0, 100_000),
            'Estimated tokens of the "About the person" profile in every turn (core tenets, '
            "facts, preferences, goals, the next 14 days' events; 0: none).",
        ),
        Field(
            "MAX_PATTERNS_PER_CHAT",
            "max_patterns_per_chat",
            "20000",
            int_range(100, 10_000_000),
            "Most active patterns a chat keeps: past it the maintenance job deprecates the "
            "weakest (never a pinned one), each audited.",
        ),
    )

    embedding_provider: str
    context_token_budget: int
    window_messages: int
    compaction_keep_recent: int
    compaction_chunk_messages: int
    compaction_idle_after: float
    episode_budget_tokens: int
    message_retention_days: int
    maintenance_interval: float
    pattern_min_similarity: float | None
    pattern_dedup_threshold: float | None
    pattern_adjudicate_threshold: float | None
    pattern_merge_threshold: float | None
    profile_budget_tokens: int
    max_patterns_per_chat: int

    def check(self) -> list[SettingsError]:
        if self.compaction_keep_recent < self.window_messages - 1:
            return []
        return [
            SettingsError(
                "COMPACTION_KEEP_RECENT",
                f"must be below WINDOW_MESSAGES - 1 ({self.window_messages - 1}), "
                f"got {self.compaction_keep_recent}",
            )
        ]
