"""Two-tier dedup against the real database with hand-made unit vectors (exact similarities):
canonical hash, auto-reinforce, adjudication band, insert, cross-chat isolation, non-active
patterns, aliases; and adjudication through the real anthropic SDK against the fake server."""

from __future__ import annotations

import json
import math

import attrs
import numpy as np
import pytest
from fakes.anthropic_api import Failure, FakeAnthropic

from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.store import store_vectors
from memory.embeddings.thresholds import SEED, thresholds_for
from memory.llm.anthropic_provider import AnthropicLLM
from memory.patterns.canonical import canonical_hash
from memory.patterns.dedup import (
    ADJUDICATION_SYSTEM,
    Adjudication,
    LLMAdjudicator,
    find_duplicate,
    kinds_compatible,
)
from runtime.db import Database

CHAT, OTHER = 100, 200
MODEL = "unit-test-4"
QUERY = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)


def at(similarity: float, axis: int = 1) -> np.ndarray:
    """A unit vector whose cosine with QUERY is ``similarity``."""
    v = np.zeros(4, dtype=np.float32)
    v[0], v[axis] = similarity, math.sqrt(max(0.0, 1 - similarity**2))
    return v


@attrs.define
class TinyAdjudicator:
    """Answers with ``verdict`` and records what it was asked."""

    verdict: Adjudication | None = None
    calls: list[tuple[str, str, int]] = attrs.Factory(list)

    async def __call__(self, a: str, b: str, chat_id: int) -> Adjudication | None:
        self.calls.append((a, b, chat_id))
        return self.verdict


SAME = Adjudication("none", True, True)
DIFFERENT = Adjudication("different activity", False, False)


async def add_pattern(
    db: Database,
    content: str,
    vector: np.ndarray | None,
    *,
    chat_id: int = CHAT,
    kind: str = "behavior",
    status: str = "active",
    model: str = MODEL,
) -> int:
    pattern_id: int = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, status, canonical_hash, first_seen, "
        "last_seen) VALUES ($1, $2, $3, $4, $5, now(), now()) RETURNING id",
        chat_id,
        content,
        kind,
        status,
        canonical_hash(content),
    )
    if vector is not None:
        await store_vectors(db, "pattern_embeddings", "pattern_id", [(pattern_id, vector)], model)
    return pattern_id


async def add_alias(db: Database, pattern_id: int, content: str, vector: np.ndarray) -> int:
    alias_id: int = await db.fetchval(
        "INSERT INTO pattern_aliases (pattern_id, chat_id, content) "
        "SELECT id, chat_id, $2 FROM patterns WHERE id = $1 RETURNING id",
        pattern_id,
        content,
    )
    await store_vectors(db, "alias_embeddings", "alias_id", [(alias_id, vector)], MODEL)
    return alias_id


async def decide(
    db: Database,
    content: str,
    adjudicator: TinyAdjudicator,
    *,
    kind: str = "behavior",
    vector: np.ndarray | None = QUERY,
    chat_id: int = CHAT,
) -> tuple[str, int | None, float | None, str]:
    d = await find_duplicate(
        db,
        chat_id=chat_id,
        content=content,
        kind=kind,
        vector=vector,
        model=MODEL,
        thresholds=SEED,
        adjudicator=adjudicator,
    )
    return d.action, d.pattern_id, d.similarity, d.reason


# --- pure --------------------------------------------------------------------------------------


def test_kind_compatibility_table() -> None:
    assert kinds_compatible("goal", "goal")
    assert kinds_compatible("behavior", "temporal") and kinds_compatible("temporal", "behavior")
    assert kinds_compatible("behavior", "preference")
    assert kinds_compatible("causal", "belief")
    assert not kinds_compatible("emotion", "behavior")
    assert not kinds_compatible("goal", "preference")
    assert not kinds_compatible("temporal", "preference")


def test_merge_needs_both_booleans() -> None:
    assert SAME.merge
    assert not Adjudication("x", True, False).merge
    assert not Adjudication("x", False, True).merge


# --- tier 1: canonical hash --------------------------------------------------------------------


async def test_canonical_hash_hit_reinforces_active_patterns_of_the_chat_only(
    db: Database,
) -> None:
    judge = TinyAdjudicator()
    other = await add_pattern(db, "User loves green tea.", None, chat_id=OTHER)
    await add_pattern(db, "User loves green tea.", None, status="merged")
    assert (await decide(db, "user loves green tea", judge, vector=None))[0] == "insert"
    active = await add_pattern(db, "User loves green tea.", None)
    assert await decide(db, "  USER loves green tea!! ", judge, vector=None) == (
        "reinforce",
        active,
        1.0,
        "same canonical text",
    )
    assert await decide(db, "user loves green tea", judge, vector=None, chat_id=OTHER) == (
        "reinforce",
        other,
        1.0,
        "same canonical text",
    )
    assert judge.calls == []


async def test_no_vector_and_no_hash_match_inserts(db: Database) -> None:
    await add_pattern(db, "User runs every morning", at(0.99))
    assert await decide(db, "User jogs each morning", TinyAdjudicator(), vector=None) == (
        "insert",
        None,
        None,
        "no vector: canonical hash only",
    )


# --- tier 2: similarity ------------------------------------------------------------------------


async def test_at_or_above_dedup_with_compatible_kind_reinforces_without_asking(
    db: Database,
) -> None:
    judge = TinyAdjudicator(DIFFERENT)
    near = await add_pattern(db, "User runs every morning", at(0.95))
    await add_pattern(db, "User runs on mondays", at(0.91, axis=2), kind="temporal")
    action, pattern_id, similarity, reason = await decide(db, "User jogs each morning", judge)
    assert (action, pattern_id) == ("reinforce", near)
    assert similarity == pytest.approx(0.95, abs=1e-5)
    assert reason.startswith("similarity 0.950 >= 0.9 (pattern, behavior)")
    # a temporal pattern counts as the same kind family as a behaviour
    action, pattern_id, *_ = await decide(db, "User jogs each morning", judge, kind="temporal")
    assert (action, pattern_id) == ("reinforce", near)
    assert judge.calls == []


async def test_high_similarity_with_incompatible_kind_goes_to_the_adjudicator(
    db: Database,
) -> None:
    judge = TinyAdjudicator(DIFFERENT)
    await add_pattern(db, "User feels calm when running", at(0.97), kind="emotion")
    action, pattern_id, similarity, reason = await decide(db, "User runs to stay calm", judge)
    assert (action, pattern_id) == ("insert", None)
    assert judge.calls == [("User runs to stay calm", "User feels calm when running", CHAT)]
    assert reason.startswith("kept apart by adjudication")
    assert similarity == pytest.approx(0.97, abs=1e-5)


async def test_adjudication_band_obeys_the_adjudicator(db: Database) -> None:
    band = await add_pattern(db, "User drinks coffee every morning", at(0.86))
    for verdict, expected in [
        (SAME, ("reinforce", band)),
        (DIFFERENT, ("insert", None)),
        (None, ("insert", None)),
        (Adjudication("time differs", True, False), ("insert", None)),
    ]:
        judge = TinyAdjudicator(verdict)
        action, pattern_id, similarity, reason = await decide(db, "User has coffee at 7", judge)
        assert (action, pattern_id) == expected, verdict
        assert judge.calls == [("User has coffee at 7", "User drinks coffee every morning", CHAT)]
        assert similarity == pytest.approx(0.86, abs=1e-5)
    assert reason.startswith("kept apart by adjudication (best 0.860)")


async def test_at_most_two_adjudications_best_first(db: Database) -> None:
    for i, s in enumerate((0.83, 0.88, 0.85)):
        await add_pattern(db, f"User drinks coffee variant {i}", at(s, axis=1 + i))
    judge = TinyAdjudicator(DIFFERENT)
    assert (await decide(db, "User has coffee", judge))[:2] == ("insert", None)
    assert [b for _, b, _ in judge.calls] == [
        "User drinks coffee variant 1",
        "User drinks coffee variant 2",
    ]


async def test_below_the_band_inserts_without_asking(db: Database) -> None:
    await add_pattern(db, "User likes jazz", at(0.81))
    judge = TinyAdjudicator(SAME)
    action, pattern_id, similarity, reason = await decide(db, "User plays chess", judge)
    assert (action, pattern_id) == ("insert", None) and judge.calls == []
    assert similarity == pytest.approx(0.81, abs=1e-5)
    assert reason == "similarity < 0.82 (best 0.810)"
    empty = await decide(db, "User plays chess", judge, chat_id=999)
    assert empty == ("insert", None, None, "no pattern of the chat to compare with")


async def test_other_chats_and_non_active_patterns_never_match(db: Database) -> None:
    judge = TinyAdjudicator(SAME)
    await add_pattern(db, "User runs every morning", QUERY, chat_id=OTHER)
    for status in ("merged", "deprecated", "superseded", "disputed"):
        await add_pattern(db, f"User runs every morning ({status})", QUERY, status=status)
    assert (await decide(db, "User jogs daily", judge))[:3] == ("insert", None, None)
    assert judge.calls == []
    # the same text and vector in the other chat does match there
    action, *_ = await decide(db, "User jogs daily", judge, chat_id=OTHER)
    assert action == "reinforce"


async def test_vectors_of_another_model_are_ignored(db: Database) -> None:
    await add_pattern(db, "User runs every morning", QUERY, model="other-model-4")
    assert (await decide(db, "User jogs daily", TinyAdjudicator(SAME)))[0] == "insert"


async def test_alias_vectors_match_their_pattern(db: Database) -> None:
    judge = TinyAdjudicator()
    pattern = await add_pattern(db, "User cycles to work", at(0.30))
    await add_alias(db, pattern, "User bikes to the office", at(0.96, axis=2))
    action, pattern_id, similarity, reason = await decide(db, "User bikes to work", judge)
    assert (action, pattern_id) == ("reinforce", pattern)
    assert similarity == pytest.approx(0.96, abs=1e-5) and "(alias, behavior)" in reason
    await db.execute("UPDATE patterns SET status = 'merged' WHERE id = $1", pattern)
    assert (await decide(db, "User bikes to work", judge))[0] == "insert"


# --- adjudication through the fake Anthropic server --------------------------------------------


async def test_adjudicate_through_the_sdk(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    judge = LLMAdjudicator(claude)
    fake_claude.queue_text(
        'Thinking...\n```json\n{"differences": "none", '
        '"core_intent_match": true, "merge_decision": true}\n```'
    )
    assert await judge("User runs daily", "User <b>jogs</b> every day", CHAT) == SAME
    [request] = fake_claude.answered
    assert request.body["system"] == ADJUDICATION_SYSTEM
    assert '"differences"' in ADJUDICATION_SYSTEM and "First list every difference" in (
        ADJUDICATION_SYSTEM
    )
    assert request.messages[0]["content"][0]["text"] == (
        '<statement id="A">User runs daily</statement>\n'
        '<statement id="B">User &lt;b&gt;jogs&lt;/b&gt; every day</statement>'
    )
    row = await db.fetchrow("SELECT purpose, chat_id FROM api_usage")
    assert row is not None and (row["purpose"], row["chat_id"]) == ("adjudication", CHAT)


@pytest.mark.parametrize(
    "reply",
    [
        '{"core_intent_match": true, "merge_decision": true}',
        '{"differences": "none", "core_intent_match": "yes", "merge_decision": true}',
        "Yes, they are the same.",
    ],
)
async def test_unusable_verdicts_are_none(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, reply: str
) -> None:
    fake_claude.queue_text(reply)
    assert await LLMAdjudicator(claude)("a", "b", CHAT) is None


async def test_llm_failure_is_none(claude: AnthropicLLM, fake_claude: FakeAnthropic) -> None:
    fake_claude.fail_next(Failure.server_error(503))
    assert await LLMAdjudicator(claude)("a", "b", CHAT) is None
    assert [r.status for r in fake_claude.requests] == [503]


async def test_find_duplicate_with_the_llm_adjudicator(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    band = await add_pattern(db, "User drinks coffee every morning", at(0.85))
    verdict = {"differences": "wording only", "core_intent_match": True, "merge_decision": True}
    fake_claude.queue_text(json.dumps(verdict))
    d = await find_duplicate(
        db,
        chat_id=CHAT,
        content="User has coffee each morning",
        kind="behavior",
        vector=QUERY,
        model=MODEL,
        thresholds=SEED,
        adjudicator=LLMAdjudicator(claude),
    )
    assert (d.action, d.pattern_id) == ("reinforce", band)
    fake_claude.queue_text(json.dumps({**verdict, "merge_decision": False}))
    d = await find_duplicate(
        db,
        chat_id=CHAT,
        content="User has coffee each morning",
        kind="behavior",
        vector=QUERY,
        model=MODEL,
        thresholds=SEED,
        adjudicator=LLMAdjudicator(claude),
    )
    assert d.action == "insert" and len(fake_claude.answered) == 2


async def test_with_the_local_model_and_its_thresholds(db: Database) -> None:
    embedder = LocalEmbedder()
    thresholds = thresholds_for(embedder.model)
    texts = [
        "User drinks green tea every morning",
        "User drinks green tea each morning",
        "User has a cup of green tea every morning",
        "User is afraid of flying",
    ]
    vectors = await embedder.embed(texts, purpose="test")
    stored = await add_pattern(db, texts[0], vectors[0], model=embedder.model)
    judge = TinyAdjudicator(SAME)

    async def run(i: int) -> tuple[str, int | None]:
        d = await find_duplicate(
            db,
            chat_id=CHAT,
            content=texts[i],
            kind="behavior",
            vector=vectors[i],
            model=embedder.model,
            thresholds=thresholds,
            adjudicator=judge,
        )
        return d.action, d.pattern_id

    assert await run(1) == ("reinforce", stored) and judge.calls == []  # near-identical wording
    assert await run(2) == ("reinforce", stored)  # a paraphrase: in the band, adjudicated
    assert judge.calls == [(texts[2], texts[0], CHAT)]
    assert await run(3) == ("insert", None) and len(judge.calls) == 1  # unrelated
