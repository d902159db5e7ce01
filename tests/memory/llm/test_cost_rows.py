"""api_usage rows with exact tokens and cost for the purposes the other tests check loosely:
``compaction`` (with its repair call), ``adjudication`` (compaction dedup and the merge job) and
``embedding`` (pattern writes and the backfill job). Driven through the real SDK clients against
the strict fake servers, with rows written as in production: through the write-behind
:class:`memory.llm.usage_writer.UsageWriter`, flushed when its block ends. (``agent`` and
``transcription`` rows are checked exactly in test_agent_e2e.py, test_llm.py, test_voice.py.)
Expected costs come from the project's rate table, never typed in."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import fakes.openai_api as fake_openai
import pytest
from fakes.anthropic_api import Failure, FakeAnthropic

from memory.compaction.run import CompactionOptions, compact_chat
from memory.conversation.messages import ChatMessage, insert_rows
from memory.embeddings.providers import OPENAI_MODEL, LocalEmbedder, OpenAIEmbedder
from memory.embeddings.store import backfill_once, store_vectors
from memory.embeddings.thresholds import Thresholds
from memory.llm.anthropic_provider import AnthropicLLM
from memory.llm.cost import DEFAULT_RATES, token_cost
from memory.llm.usage_writer import UsageWriter, open_usage_writer
from memory.patterns.dedup import LLMAdjudicator
from memory.patterns.explicit import store_explicit_pattern
from memory.patterns.merge import merge_patterns
from runtime.db import Database

CHAT = 4240001
T0 = datetime(2025, 5, 4, 9, 0, tzinfo=UTC)
OPTS = CompactionOptions(timezone="Europe/Madrid", keep_recent=2, max_messages=6)
SONNET, HAIKU = "claude-sonnet-4-5", "claude-haiku-4-5-20251001"  # the second priced undated


def expected_cost(model: str, input_tokens: int, output_tokens: int = 0) -> float:
    """The cost by memory.llm.cost's rate table; the model must be priced (else the test is
    moot)."""
    cost = token_cost(DEFAULT_RATES, model, input_tokens, output_tokens)
    assert cost.known and cost.usd > 0, model
    return cost.usd


def fake_embedding_tokens(texts: Sequence[str]) -> int:
    """The ``prompt_tokens`` the fake OpenAI reports: 4 characters a token, at least 1 a text."""
    return sum(max(1, len(t) // 4) for t in texts)


async def usage_rows(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM api_usage ORDER BY id")]


def check_row(
    row: dict[str, Any],
    *,
    provider: str,
    model: str,
    purpose: str,
    chat_id: int | None,
    input_tokens: int,
    output_tokens: int = 0,
) -> None:
    """One successful call's row: who, what, tokens, the rate-table cost, a latency."""
    assert (row["provider"], row["model"], row["purpose"], row["chat_id"]) == (
        provider,
        model,
        purpose,
        chat_id,
    )
    assert (row["input_tokens"], row["output_tokens"]) == (input_tokens, output_tokens)
    assert row["cost_usd"] == pytest.approx(expected_cost(model, input_tokens, output_tokens))
    assert row["ok"] is True and row["error"] is None and row["duration_seconds"] is None
    assert row["latency_ms"] is not None and row["latency_ms"] >= 0


@asynccontextmanager
async def priced_claude(
    db: Database, fake: FakeAnthropic, model: str = SONNET
) -> AsyncIterator[tuple[UsageWriter, AnthropicLLM]]:
    """A write-behind usage writer and the real SDK client logging through it (as ``serve``)."""
    async with (
        open_usage_writer(db) as usage,
        AnthropicLLM(
            api_key=fake.api_key, base_url=fake.base_url, db=usage, model=model, timeout=10.0
        ) as llm,
    ):
        yield usage, llm


@asynccontextmanager
async def openai_embedder(usage: UsageWriter) -> AsyncIterator[tuple[Any, OpenAIEmbedder]]:
    """The fake OpenAI server and the real-SDK embedder logging to ``usage``."""
    async with fake_openai.run_fake_openai() as fake:
        embedder = OpenAIEmbedder(
            api_key=fake_openai.DEFAULT_API_KEY,
            base_url=fake.base_url,
            usage_db=usage,
            max_retries=0,
        )
        try:
            yield fake, embedder
        finally:
            await embedder.aclose()


async def store_messages(db: Database, texts: Sequence[str]) -> list[int]:
    rows = [
        ChatMessage(role="user", content=t, created_at=T0 + timedelta(minutes=i))
        for i, t in enumerate(texts)
    ]
    await insert_rows(db, CHAT, rows)
    got = await db.fetch("SELECT id FROM chat_messages WHERE chat_id = $1 ORDER BY id", CHAT)
    return [r["id"] for r in got]


def extraction(summary: str, **parts: Any) -> str:
    body = {
        "new_patterns": [],
        "reinforcements": [],
        "contradictions": [],
        "supersedes": [],
        "meta_patterns": [],
        "episode_summary": summary,
        **parts,
    }
    return json.dumps(body)


def new(content: str, evidence: list[int]) -> dict[str, Any]:
    return {
        "content": content,
        "kind": "behavior",
        "confidence": 0.8,
        "signal": "explicit",
        "evidence_message_ids": evidence,
        "entry_uuids": [],
    }


# --- compaction (and its repair call) with OpenAI embeddings -----------------------------------


async def test_compaction_repair_and_embedding_rows(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    said = "I swim 2 km at the municipal pool every Tuesday evening after work."
    content = "User swims 2 km at the municipal pool every Tuesday evening"
    summary = "User described a weekly Tuesday evening swim at the municipal pool."
    r = await store_messages(db, [said, "It keeps me sane.", "ok", "bye"])
    fake_claude.queue_text(
        "Here are the patterns I found: one about swimming.", input_tokens=1_517, output_tokens=23
    )  # invalid: no JSON
    fake_claude.queue_text(
        extraction(summary, new_patterns=[new(content, [r[0]])]),
        input_tokens=1_864,
        output_tokens=241,
    )  # the repair's valid answer
    async with (
        priced_claude(db, fake_claude) as (usage, llm),
        openai_embedder(usage) as (openai, embedder),
    ):
        out = await compact_chat(db, llm, embedder, CHAT, options=OPTS)
        [embed_call] = openai.calls_to(fake_openai.EMBEDDINGS)
    assert out.status == "ok" and out.patterns_created == 1
    assert len(fake_claude.answered) == 2
    assert usage.written == 3  # every row went through the write-behind writer

    compaction, repair, embedding = await usage_rows(db)
    check_row(
        compaction,
        provider="anthropic",
        model=SONNET,
        purpose="compaction",
        chat_id=CHAT,
        input_tokens=1_517,
        output_tokens=23,
    )
    check_row(
        repair,
        provider="anthropic",
        model=SONNET,
        purpose="compaction",
        chat_id=CHAT,
        input_tokens=1_864,
        output_tokens=241,
    )
    # one request embeds the new pattern and the episode summary together
    assert embed_call.params["input"] == [content, summary]
    check_row(
        embedding,
        provider="openai",
        model=OPENAI_MODEL,
        purpose="embedding",
        chat_id=CHAT,
        input_tokens=fake_embedding_tokens([content, summary]),
    )
    assert compaction["cost_usd"] != repair["cost_usd"]  # each call priced by its own usage


# --- adjudication -------------------------------------------------------------------------------


async def test_adjudication_row_in_compaction_dedup(
    db: Database, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    first = "User runs along the river every Sunday morning"
    near = "User goes running by the river on Sunday mornings"
    said = "I go running by the river on Sunday mornings, always."
    async with priced_claude(db, fake_claude) as (usage, llm):
        decision = await store_explicit_pattern(
            db,
            local,
            LLMAdjudicator(llm),
            chat_id=CHAT,
            content=first,
            kind="behavior",
            now=T0 - timedelta(days=7),
        )
        assert decision.action == "insert" and fake_claude.requests == []  # nothing to ask yet
        r = await store_messages(db, [said, "a", "b"])
        fake_claude.queue_text(
            extraction("User talked about Sunday runs.", new_patterns=[new(near, [r[0]])]),
            input_tokens=2_048,
            output_tokens=310,
        )
        verdict = {"differences": "wording only", "core_intent_match": True, "merge_decision": True}
        fake_claude.queue_text(json.dumps(verdict), input_tokens=433, output_tokens=37)
        out = await compact_chat(db, llm, local, CHAT, options=OPTS)
    assert out.status == "ok" and (out.patterns_created, out.patterns_reinforced) == (0, 1)
    assert usage.written == 2

    compaction, adjudication = await usage_rows(db)  # the local embedder is free: no row
    check_row(
        compaction,
        provider="anthropic",
        model=SONNET,
        purpose="compaction",
        chat_id=CHAT,
        input_tokens=2_048,
        output_tokens=310,
    )
    check_row(
        adjudication,
        provider="anthropic",
        model=SONNET,
        purpose="adjudication",
        chat_id=CHAT,
        input_tokens=433,
        output_tokens=37,
    )


async def test_adjudication_row_of_the_merge_job(
    db: Database, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    texts = ("User drinks green tea every morning", "User drinks green tea each morning")
    ids = []
    for text in texts:
        pid = await db.fetchval(
            "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen) "
            "VALUES ($1, $2, md5($2), $3, $3) RETURNING id",
            CHAT,
            text,
            T0,
        )
        [vector] = await local.embed([text], purpose="embedding")
        await store_vectors(db, "pattern_embeddings", "pattern_id", [(pid, vector)], local.model)
        ids.append(pid)
    verdict = {"differences": "each vs every", "core_intent_match": True, "merge_decision": True}
    fake_claude.queue_text(json.dumps(verdict), input_tokens=512, output_tokens=41)
    thresholds = Thresholds(min_similarity=0.05, dedup=0.92, adjudicate=0.57, merge=0.9)
    async with priced_claude(db, fake_claude, HAIKU) as (usage, llm):
        report = await merge_patterns(
            db, local, LLMAdjudicator(llm), dry_run=False, thresholds=thresholds
        )
    assert report.merged == 1 and len(fake_claude.answered) == 1
    assert fake_claude.answered[0].body["model"] == HAIKU
    assert usage.written == 1
    [row] = await usage_rows(db)
    check_row(
        row,
        provider="anthropic",
        model=HAIKU,
        purpose="adjudication",
        chat_id=CHAT,
        input_tokens=512,
        output_tokens=41,
    )
    assert row["cost_usd"] != pytest.approx(expected_cost(SONNET, 512, 41))  # Haiku's rate


async def test_failed_adjudication_is_a_free_row(db: Database, fake_claude: FakeAnthropic) -> None:
    fake_claude.fail_next(Failure.server_error(503))
    async with priced_claude(db, fake_claude) as (usage, llm):
        assert await LLMAdjudicator(llm)("User naps daily", "User sleeps at noon", CHAT) is None
    assert usage.written == 1
    [row] = await usage_rows(db)
    assert (row["provider"], row["model"], row["purpose"], row["chat_id"]) == (
        "anthropic",
        SONNET,
        "adjudication",
        CHAT,
    )
    assert (row["ok"], row["input_tokens"], row["output_tokens"], row["cost_usd"]) == (
        False,
        0,
        0,
        0.0,
    )
    assert "503" in row["error"] and row["latency_ms"] is not None and row["latency_ms"] >= 0


# --- embedding ----------------------------------------------------------------------------------


async def test_embedding_rows_of_an_explicit_pattern_and_the_backfill(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    fact = "User is allergic to shellfish"
    entries = ["Long walk in the hills with Ana today.", "Slept nine hours.", "Bought new shoes."]
    for i, text in enumerate(entries):
        await db.execute(
            "INSERT INTO entries (uuid, created_at, text) VALUES ($1, now(), $2)", f"E{i:03d}", text
        )
    async with (
        priced_claude(db, fake_claude) as (usage, llm),
        openai_embedder(usage) as (openai, embedder),
    ):
        decision = await store_explicit_pattern(
            db, embedder, LLMAdjudicator(llm), chat_id=CHAT, content=fact, kind="belief", now=T0
        )
        assert decision.action == "insert"  # no pattern to compare with: the judge is not asked
        stored = await backfill_once(db, embedder, tables=["entry_embeddings"], batch=2)
        calls = [c.params["input"] for c in openai.calls_to(fake_openai.EMBEDDINGS)]
    assert stored == 3 and fake_claude.requests == []
    assert calls == [[fact], entries[:2], entries[2:]]
    assert usage.written == 3

    pattern, *backfill = await usage_rows(db)
    check_row(
        pattern,
        provider="openai",
        model=OPENAI_MODEL,
        purpose="embedding",
        chat_id=CHAT,
        input_tokens=fake_embedding_tokens([fact]),
    )
    assert len(backfill) == 2  # one row per request, belonging to no chat
    for row, batch in zip(backfill, calls[1:], strict=True):
        check_row(
            row,
            provider="openai",
            model=OPENAI_MODEL,
            purpose="embedding",
            chat_id=0,  # no chat (NO_CHAT, migration 023)
            input_tokens=fake_embedding_tokens(batch),
        )
