"""The profile ("About the person", issue 14 item 3): its content, grouping, order and budget
(pure), its one query on a real PostgreSQL (this chat only, live patterns only, events of the
next 14 days in TIMEZONE, core tenets always), the context section, and seed 004's Test 4 end to
end: an answer-style preference is still in the prompt 300 messages after it was compacted."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from fakes.anthropic_api import FakeAnthropic

from actors.agent.context import PROFILE_HEADER, build_context, profile_section
from actors.agent.handler import sql_agent
from actors.agent.turn import TurnInput, TurnReply
from memory.compaction.run import CompactionOptions, compact_chat
from memory.conversation.messages import ChatMessage, insert_rows
from memory.embeddings.providers import LocalEmbedder
from memory.llm.anthropic_provider import AnthropicLLM
from memory.retrieval.profile import (
    GROUPS,
    Profile,
    ProfileItem,
    SqlProfile,
    days_away,
    load_profile,
    within_budget,
)
from memory.retrieval.ranking import estimate_tokens
from memory.retrieval.retriever import RetrievedMemory
from runtime.db import Database

CHAT, OTHER = 9990001, 9990002
TZ = "Europe/Madrid"
NOW = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # Monday 3 March 2025, 10:00 in Madrid
TODAY = date(2025, 3, 3)


def item(pid: int, kind: str, content: str, rank: float = 1.0, **kw: Any) -> ProfileItem:
    return ProfileItem(pid, kind, content, strength=rank, confidence=1.0, **kw)


# --- pure ---------------------------------------------------------------------------------------


def test_groups_order_and_lines() -> None:
    items = (
        item(1, "goal", "User wants to run a marathon", 2.0),
        item(
            2, "event", "User has a team offsite", occurs_on=date(2025, 3, 7), occurs_at=time(9, 30)
        ),
        item(3, "preference", "User wants concise answers with bullet points", 1.0),
        item(4, "fact", "User works as a Solution Architect at GovTech", 3.0),
        item(5, "preference", "User prefers tea over coffee", 4.0),
        item(6, "belief", "User values honesty above comfort", 0.5, core=True),
        item(7, "event", "User has a dentist appointment", occurs_on=date(2025, 3, 3)),
    )
    text = Profile(items, TODAY).text
    assert text.splitlines() == [
        GROUPS["core"],
        "- User values honesty above comfort (id 6)",
        GROUPS["fact"],
        "- User works as a Solution Architect at GovTech (id 4)",
        GROUPS["preference"],
        "- User prefers tea over coffee (id 5)",  # ranked by strength x confidence
        "- User wants concise answers with bullet points (id 3)",
        GROUPS["goal"],
        "- User wants to run a marathon (id 1)",
        GROUPS["event"],
        "- Mon 3 Mar 2025 (today): User has a dentist appointment (id 7)",  # by day
        "- Fri 7 Mar 2025, 09:30 (in 4 days): User has a team offsite (id 2)",
    ]
    assert Profile((), TODAY).text == ""
    assert items[1].line(None) == "- Fri 7 Mar 2025, 09:30: User has a team offsite (id 2)"
    assert [days_away(TODAY + timedelta(days=n), TODAY) for n in (-3, -1, 0, 1, 14)] == [
        "3 days ago",
        "yesterday",
        "today",
        "tomorrow",
        "in 14 days",
    ]


def cost(lines: list[str]) -> int:
    return sum(estimate_tokens(line + "\n") for line in lines)


def test_the_budget_takes_core_then_events_then_the_best_ranked() -> None:
    core = item(1, "belief", "User values honesty above comfort", 0.01, core=True)
    event = item(2, "event", "User has a team offsite", occurs_on=date(2025, 3, 7))
    pool = [item(10 + i, "fact", f"User fact number {i} " + "x" * 40, rank=i) for i in range(10)]
    everything = [*pool, event, core]
    assert set(within_budget(everything, 10_000, TODAY)) == set(everything)
    # room for core, the event and three pool lines (with their group headers)
    head = [GROUPS["core"], core.line(TODAY), GROUPS["event"], event.line(TODAY), GROUPS["fact"]]
    budget = cost(head) + 3 * estimate_tokens(pool[9].line(TODAY) + "\n")
    taken = within_budget(everything, budget, TODAY)
    assert [i.id for i in taken] == [1, 2, 19, 18, 17]  # the weakest core tenet comes first
    assert cost(Profile(taken, TODAY).text.splitlines()) <= budget
    # a line too long for what is left is skipped; a shorter, weaker one still fits
    long = item(30, "goal", "User wants " + "y" * 400, rank=50)
    short = item(31, "goal", "User wants tea", rank=0.1)
    room = cost([GROUPS["goal"], short.line(TODAY)])
    assert within_budget([long, short], room, TODAY) == (short,)
    assert within_budget([long, short, core], 0, TODAY) == ()


# --- the query -----------------------------------------------------------------------------------


async def add(
    db: Database,
    content: str,
    kind: str = "fact",
    *,
    chat_id: int = CHAT,
    status: str = "active",
    strength: float = 1.0,
    confidence: float = 0.8,
    core: bool = False,
    occurs_on: date | None = None,
    occurs_at: time | None = None,
    days_ago: float = 0.0,
) -> int:
    seen = NOW - timedelta(days=days_ago)
    return int(
        await db.fetchval(
            "INSERT INTO patterns (chat_id, content, kind, status, strength, confidence,"
            " is_core_tenet, occurs_on, occurs_at, canonical_hash, first_seen, last_seen)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, md5($2), $10, $10) RETURNING id",
            chat_id,
            content,
            kind,
            status,
            strength,
            confidence,
            core,
            occurs_on,
            occurs_at,
            seen,
        )
    )


async def profile_of(db: Database, chat_id: int = CHAT, **kw: Any) -> Profile:
    options: dict[str, Any] = {"now": NOW, "timezone": TZ, "budget_tokens": 600, **kw}
    return await load_profile(db, chat_id, **options)


async def test_the_profile_holds_what_belongs_in_it(db: Database) -> None:
    job = await add(db, "User works as a Solution Architect at GovTech", strength=3)
    style = await add(db, "User wants concise answers with bullet points", "preference")
    goal = await add(db, "User wants to launch the SingPass integration", "goal")
    tenet = await add(
        db,
        "User values honesty above comfort",
        "belief",
        core=True,
        strength=0.1,
        confidence=0.3,
        days_ago=4000,
    )
    today = await add(
        db, "User has a dentist appointment", "event", occurs_on=TODAY, occurs_at=time(16, 0)
    )
    last = await add(db, "User has a team offsite", "event", occurs_on=TODAY + timedelta(days=14))
    # not in it: other kinds, past or far events, dead or disputed patterns, another chat's
    await add(db, "User runs on Sundays", "behavior", strength=20, confidence=1)
    await add(db, "User felt anxious", "emotion")
    await add(db, "User believes in karma", "belief")
    await add(db, "User had a concert", "event", occurs_on=TODAY - timedelta(days=1))
    await add(db, "User has a wedding", "event", occurs_on=TODAY + timedelta(days=15))
    for status in ("superseded", "deprecated", "merged", "disputed"):
        await add(db, f"User lives in a {status} city", status=status, strength=20)
        await add(db, f"User has a {status} core value", "belief", status=status, core=True)
    await add(db, "User works at another company", chat_id=OTHER, strength=20)
    await add(db, "User wants long answers", "preference", chat_id=OTHER, core=True)

    profile = await profile_of(db)
    assert set(profile.ids) == {job, style, goal, tenet, today, last}
    assert profile.today == TODAY
    text = profile.text
    heads = [text.index(GROUPS[g]) for g in ("core", "fact", "preference", "goal", "event")]
    assert heads == sorted(heads)
    assert "- Mon 3 Mar 2025, 16:00 (today): User has a dentist appointment" in text
    assert "- Mon 17 Mar 2025 (in 14 days): User has a team offsite" in text
    assert "another company" not in text and "long answers" not in text
    assert (await profile_of(db, OTHER)).ids != () and job not in (await profile_of(db, OTHER)).ids
    assert (await profile_of(db, budget_tokens=0)).ids == ()


async def test_today_is_reckoned_in_the_persons_time_zone(db: Database) -> None:
    """At 23:30 UTC on 2 March it is 3 March in Madrid: an event of 2 March is past there."""
    gone = await add(db, "User had a haircut", "event", occurs_on=date(2025, 3, 2))
    soon = await add(db, "User has a team offsite", "event", occurs_on=date(2025, 3, 17))
    late = datetime(2025, 3, 2, 23, 30, tzinfo=UTC)
    madrid = await profile_of(db, now=late)
    utc = await profile_of(db, now=late, timezone="UTC")
    assert madrid.ids == (soon,) and set(utc.ids) == {gone}  # 17 March is 15 days on in UTC
    assert "(in 14 days)" in madrid.text


async def test_a_pinned_pattern_never_decays_and_is_always_in_the_profile(db: Database) -> None:
    """Thirty strong facts fill a small budget; the weak, eleven-year-old core tenet is still
    there (and first), a weak ordinary belief is not."""
    for i in range(30):
        await add(db, f"User fact {i}: " + "detail " * 8, strength=10, confidence=1)
    tenet = await add(
        db, "User values honesty", "belief", core=True, strength=0.1, confidence=0.2, days_ago=4000
    )
    profile = await profile_of(db, budget_tokens=120)
    assert profile.ids[0] == tenet and 1 < len(profile.ids) < 31
    assert cost(profile.text.splitlines()) <= 120
    assert profile.text.startswith(f"{GROUPS['core']}\n- User values honesty (id {tenet})")


# --- the section ---------------------------------------------------------------------------------


def test_the_section_is_in_the_prompt_when_something_is_known() -> None:
    """Where it sits is the prompt layout's business (stable parts first, for caching); that it
    is there, whole, with its header, is this section's."""
    profile = Profile((item(4, "fact", "User works at GovTech"),), TODAY)
    assert (
        profile_section(profile) == f"{PROFILE_HEADER}\n{GROUPS['fact']}\n"
        "- User works at GovTech (id 4)"
    )
    assert profile_section(Profile()) == ""
    memory = RetrievedMemory(text_block="- [behavior] Runs on Sundays (id 9)")
    ctx = build_context(now=NOW, timezone=TZ, memory=memory, window=[], tools=[], profile=profile)
    assert profile_section(profile) in ctx.system
    bare = build_context(now=NOW, timezone=TZ, memory=memory, window=[], tools=[])
    assert PROFILE_HEADER not in bare.system
    assert ctx.estimated_tokens > bare.estimated_tokens


# --- seed 004 Test 4, end to end -------------------------------------------------------------


STYLE = "Please always give me concise responses with bullet points, I hate long paragraphs"
STYLE_PATTERN = "User wants concise responses with bullet points, no long paragraphs"


def turn(text: str, update: int) -> TurnInput:
    return TurnInput(CHAT, text, (update,), (update + 1,), (f"update:{update}",))


async def commit(db: Database, reply: TurnReply) -> None:
    async with db.transaction() as conn:
        if reply.persist is not None:
            await reply.persist(conn)


async def test_a_stated_answer_style_is_in_the_prompt_300_messages_after_compaction(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    clock = [NOW]
    now: Callable[[], datetime] = lambda: clock[0]  # noqa: E731
    agent = sql_agent(db, claude, timezone=TZ, clock=now)  # the production profile, no retriever
    fake_claude.queue_text("Got it: short bullet points from now on.")
    await commit(db, await agent.run_turn(turn(STYLE, 1)))
    [said] = await db.fetch(
        "SELECT id FROM chat_messages WHERE chat_id = $1 AND role = 'user'", CHAT
    )

    # compaction turns the stated style into a preference (scripted extraction)
    fake_claude.queue_text(
        json.dumps(
            {
                "new_patterns": [
                    {
                        "content": STYLE_PATTERN,
                        "kind": "preference",
                        "confidence": 0.9,
                        "signal": "explicit",
                        "evidence_message_ids": [said["id"]],
                    }
                ],
                "episode_summary": "User asked for concise bullet-point answers.",
            }
        )
    )
    opts = CompactionOptions(timezone=TZ, keep_recent=0, max_messages=40)
    out = await compact_chat(db, claude, local, CHAT, options=opts)
    assert out.status == "ok" and out.patterns_created == 1

    # 300 messages about other things, over the following days
    later = [
        ChatMessage(
            role="user" if i % 2 == 0 else "assistant",  # type: ignore[arg-type]
            content=f"Message {i} about the garden, the weather and work.",
            created_at=NOW + timedelta(days=1, minutes=10 * i),
        )
        for i in range(300)
    ]
    await insert_rows(db, CHAT, later)
    clock[0] = NOW + timedelta(days=3)
    fake_claude.queue_text("- Services: small, independent\n- Each owns its data")
    await commit(db, await agent.run_turn(turn("Explain microservices to me", 2)))

    system = fake_claude.answered[-1].body["system"]
    system = system if isinstance(system, str) else "\n".join(b["text"] for b in system)
    assert STYLE not in system  # the words themselves left the window with the compaction
    assert "Message 299 about the garden" in system  # the window is the newest rows
    profile = system[system.index(PROFILE_HEADER) :]
    assert f"- {STYLE_PATTERN} (id " in profile.split("═══ ", 2)[1]
    assert "═══ WHAT YOU KNOW ABOUT THE PERSON ═══\n(nothing yet)" in system  # not retrieval's


async def test_the_agent_reads_the_profile_it_is_given(db: Database) -> None:
    agent = sql_agent(db, object(), timezone=TZ)  # type: ignore[arg-type]
    assert isinstance(agent.profile, SqlProfile) and agent.profile.timezone == TZ
    assert agent.profile.budget_tokens == 600
