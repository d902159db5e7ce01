"""What the turn context costs with and without prompt caching: a scripted 500-turn conversation.

One chat's conversation is played through the real turn code — ``actors.agent.handler``'s agent
(context, tool loop, the journal and memory tools, pattern retrieval), the real compaction
(``memory.compaction.run.compact_chat`` under the compaction rule, the memory model
adjudicating) and a real PostgreSQL (a journal of ``--journal`` entries, the hash embedder of
``bench/turn.py``) — against the strict fake Anthropic API (``tests/fakes/anthropic_api.py``)
over HTTP through the real SDK, whose prompt cache bills as the real API does (a prefix per
breakpoint, Sonnet's 1,024-token minimum, reads 0.1x, writes 1.25x for 5 minutes or 2x for an
hour, entries expiring on the simulated clock).

The script (seeded, the same for every variant):

* gaps between messages: sessions of 1 + Geometric(1/8) messages (mean 8) 1-3 minutes apart
  (uniform), separated by pauses drawn from LogNormal(median 3 h, sigma 0.8) clipped to
  20 min..16 h (about nine days for 500 messages);
* the person's messages: LogNormal(median 90 characters, sigma 0.7), clipped 12..900, made of
  the journal's theme words; the model's answers: LogNormal(median 320, sigma 0.6), clipped
  40..2,000;
* 30 % of the turns call one tool first (search_entries 60 %, recall_memory 25 %,
  get_entries_by_date 15 %); the tool runs for real and its result goes back to the model;
* compaction (the memory model's extraction) answers 1-3 new patterns from the chunk's own
  words and a 300-character episode summary; idle chats are compacted when a pause exceeds
  ``COMPACTION_IDLE_AFTER`` (as the maintenance sweep would during the pause).

Retrieval uses ``PATTERN_MIN_SIMILARITY`` 0.1 (``--min-similarity``): the hash embedder's
cosines are low, and at the default floor a turn would never be shown a pattern.

Variants: ``before`` — PROMPT_CACHE_TTL=off: no breakpoint, every window row with its age,
every prompt token billed in full: the content of the request the code sent before the
context was built for caching (then one system string: the order does not change the bill),
with the window it had then (200 rows; ``WINDOW_MESSAGES`` is now 120, chosen with this bench);
``after 5m`` and ``after 1h`` — the context's breakpoints with PROMPT_CACHE_TTL 5m or 1h. Each
runs in its own new database. Figures per turn: billed input-token equivalents of the turn's
agent calls (uncached + 0.1 x read + 1.25 or 2 x written), p50 and mean, and USD per 100
turns at the built-in Sonnet 4.6 rates (input as billed, plus output); the memory work
(compaction, adjudication) on its own line, at the memory model's rates.

    python bench/cost.py [--turns 500] [--journal 2000] [--seed 7] [--url postgresql://...]
                         [--smoke]

Last line: ``cost tokens_per_turn_before=<a> after=<b> usd_per_100_before=<c> after=<d>`` (after =
the variant of the default PROMPT_CACHE_TTL).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import secrets
import statistics
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _smoke import add_smoke_flag, shrink
from _turn_data import THEME_WORDS, THEMES, HashEmbedder
from fakes.anthropic_api import RecordedRequest, Reply, new_id, run_fake_anthropic
from turn import admin, load_journal, with_database

from actors.agent.context import NO_PATTERNS
from actors.agent.handler import agent_tools, sql_agent
from actors.agent.turn import TurnInput
from actors.compactor import WindowEstimate
from actors.settings import load_settings
from memory.compaction.run import CompactionOptions, compact_chat
from memory.conversation.window import CompactionRule
from memory.embeddings.thresholds import thresholds_for
from memory.extraction.prompt import EXTRACTION_SYSTEM
from memory.llm.anthropic_provider import AnthropicLLM
from memory.llm.cost import CACHE_READ_FACTOR, CACHE_WRITE_FACTORS, DEFAULT_RATES, lookup
from memory.llm.protocol import CacheTTL
from memory.patterns.dedup import ADJUDICATION_SYSTEM, LLMAdjudicator
from memory.retrieval.profile import SqlProfile
from memory.retrieval.retriever import SqlPatternRetriever
from memory.retrieval.sql import LexiconCache
from memory.tools.memory_tools import memory_tools
from runtime import db as dbmod
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations

CHAT = 424242
CHAT_MODEL = "claude-sonnet-4-6"
MEMORY_MODEL = "claude-haiku-4-5"
WORDS = [w for theme in THEMES.values() for w in theme[:THEME_WORDS]]
_THEME_WORDS = frozenset(WORDS)
FILLER = (
    "i",
    "the",
    "and",
    "was",
    "really",
    "today",
    "with",
    "my",
    "it",
    "so",
    "a",
    "to",
    "about",
    "after",
    "that",
    "we",
    "feel",
    "think",
)
TOOL_SHARE = 0.30
TOOLS = (("search_entries", 0.60), ("recall_memory", 0.25), ("get_entries_by_date", 0.15))
_SAID = re.compile(r"\[#(\d+) user, [^\]]*\] ([^\n]*)")


# --- the script ----------------------------------------------------------------------------------


@attrs.frozen
class Step:
    """One message of the script: the gap before it, what the person says, the tool the model
    calls first (or None), and the length of its answer."""

    gap: float
    text: str
    tool: tuple[str, dict[str, Any]] | None
    answer_chars: int


def _sentence(rng: np.random.Generator, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        pool = WORDS if rng.random() < 0.45 else FILLER
        words.append(str(pool[int(rng.integers(0, len(pool)))]))
    text = " ".join(words)
    return text[:1].upper() + text[1:] + "."


def script(turns: int, seed: int, start: datetime) -> list[Step]:
    """The seeded conversation (see the module docstring)."""
    rng = np.random.default_rng(seed)
    steps: list[Step] = []
    left_in_session = 0
    day = start
    for i in range(turns):
        if left_in_session == 0:
            left_in_session = 1 + int(rng.geometric(1 / 8))
            gap = float(np.clip(rng.lognormal(math.log(3 * 3600), 0.8), 1200, 16 * 3600))
            if i == 0:
                gap = 0.0
        else:
            gap = float(rng.uniform(60, 180))
        left_in_session -= 1
        day += timedelta(seconds=gap)
        chars = int(np.clip(rng.lognormal(math.log(90), 0.7), 12, 900))
        text = _sentence(rng, chars)
        tool: tuple[str, dict[str, Any]] | None = None
        if rng.random() < TOOL_SHARE:
            name = str(rng.choice([t for t, _ in TOOLS], p=[p for _, p in TOOLS]))
            query = " ".join(str(w) for w in rng.choice(WORDS, size=2, replace=False))
            if name == "get_entries_by_date":
                when = (day - timedelta(days=int(rng.integers(30, 3000)))).date().isoformat()
                tool = (name, {"date_from": when})
            else:
                tool = (name, {"query": query})
        answer = int(np.clip(rng.lognormal(math.log(320), 0.6), 40, 2000))
        steps.append(Step(gap, text, tool, answer))
    return steps


# --- the model -----------------------------------------------------------------------------------


def _system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system", "")
    if isinstance(system, list):
        return "\n\n".join(str(b.get("text", "")) for b in system)
    return str(system)


@attrs.define
class Responder:
    """The fake API's answers: the agent follows the current step (a tool call first, then the
    answer); the extraction answers patterns made of the chunk's words and an episode summary;
    an adjudication says "different"."""

    rng: np.random.Generator
    step: Step | None = None

    def __call__(self, body: Mapping[str, Any]) -> Reply:
        system = _system_text(body)
        if EXTRACTION_SYSTEM in system:
            return self._extraction(body)
        if ADJUDICATION_SYSTEM in system:
            verdict = {
                "differences": "different topics",
                "core_intent_match": False,
                "merge_decision": False,
            }
            return Reply(({"type": "text", "text": json.dumps(verdict)},))
        assert self.step is not None, "an agent request outside a turn"
        last = body["messages"][-1]
        answered = isinstance(last["content"], list) and any(
            b.get("type") == "tool_result" for b in last["content"]
        )
        if self.step.tool is not None and not answered:
            name, args = self.step.tool
            use = {"type": "tool_use", "id": new_id("toolu_01"), "name": name, "input": args}
            return Reply(({"type": "text", "text": "Let me look."}, use), "tool_use")
        return Reply(({"type": "text", "text": _sentence(self.rng, self.step.answer_chars)},))

    def _extraction(self, body: Mapping[str, Any]) -> Reply:
        prompt = "\n".join(
            b["text"]
            for m in body["messages"]
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "text"
        )
        said = [(int(i), text) for i, text in _SAID.findall(prompt)]
        patterns = []
        for k in range(int(self.rng.integers(1, 4)) if said else 0):
            evidence, text = said[(k * 7) % len(said)]
            words = [w for w in re.findall(r"[a-z]+", text.lower()) if w in _THEME_WORDS]
            if len(words) < 2:
                continue
            picked = " ".join(dict.fromkeys(words[:4]))
            kind = ("behavior", "preference", "fact", "goal")[k % 4]
            patterns.append(
                {
                    "content": f"User talks about {picked}",
                    "kind": kind,
                    "confidence": 0.7,
                    "signal": "implicit",
                    "evidence_message_ids": [evidence],
                    "entry_uuids": [],
                }
            )
        answer = {
            "new_patterns": patterns,
            "reinforcements": [],
            "contradictions": [],
            "supersedes": [],
            "meta_patterns": [],
            "episode_summary": _sentence(self.rng, 300),
        }
        return Reply(({"type": "text", "text": json.dumps(answer)},))


# --- accounting ----------------------------------------------------------------------------------


@attrs.frozen
class Billed:
    """A set of calls' input in full-price token equivalents (and its parts: uncached, read,
    written at 5 minutes, at 1 hour), their output tokens, and USD."""

    input_equivalents: float
    prompt_tokens: int
    output_tokens: int
    usd: float
    uncached: int = 0
    read: int = 0
    written_5m: int = 0
    written_1h: int = 0


def billed(requests: Sequence[RecordedRequest]) -> Billed:
    equivalents = 0.0
    prompt = output = uncached = read = w5 = w1 = 0
    usd = 0.0
    for r in requests:
        assert r.usage is not None and r.cache is not None
        u = r.usage
        eq = (
            u["input_tokens"]
            + r.cache.read * CACHE_READ_FACTOR
            + r.cache.write_5m * CACHE_WRITE_FACTORS["5m"]
            + r.cache.write_1h * CACHE_WRITE_FACTORS["1h"]
        )
        rate = lookup(DEFAULT_RATES, r.body["model"])
        assert rate is not None
        equivalents += eq
        uncached += u["input_tokens"]
        read += r.cache.read
        w5 += r.cache.write_5m
        w1 += r.cache.write_1h
        prompt += u["input_tokens"] + r.cache.read + r.cache.write
        output += u["output_tokens"]
        usd += (eq * rate.input_per_mtok + u["output_tokens"] * rate.output_per_mtok) / 1e6
    return Billed(equivalents, prompt, output, usd, uncached, read, w5, w1)


def _tokens(value: Any) -> float:
    return len(json.dumps(value, ensure_ascii=False)) / 4


def request_shape(requests: Sequence[RecordedRequest]) -> dict[str, float]:
    """Mean estimated tokens of the agent requests' parts: tools, the system prompt's blocks
    (first, second, older rows, last) and the messages."""
    parts: dict[str, list[float]] = {}
    for r in requests:
        body = r.body
        system = body.get("system", "")
        blocks = system if isinstance(system, list) else [{"text": system}]
        cached = [b for b in blocks if "cache_control" in b]
        shape = {
            "tools": _tokens(body.get("tools", [])),
            "messages": _tokens(body["messages"]),
            "system": sum(_tokens(b["text"]) for b in blocks),
            "system after the last breakpoint": sum(
                _tokens(b["text"]) for b in blocks[blocks.index(cached[-1]) + 1 :]
            )
            if cached
            else sum(_tokens(b["text"]) for b in blocks),
        }
        for k, v in shape.items():
            parts.setdefault(k, []).append(v)
    return {k: statistics.mean(v) for k, v in parts.items()}


def is_agent(r: RecordedRequest) -> bool:
    return r.status == 200 and bool(r.body.get("tools"))


@attrs.define
class Run:
    """One variant's figures."""

    name: str
    per_turn: list[Billed] = attrs.field(factory=list)
    memory: Billed | None = None
    compactions: int = 0
    reads: int = 0
    calls: int = 0
    shape: dict[str, float] = attrs.field(factory=dict)
    with_patterns: int = 0
    gaps: list[float] = attrs.field(factory=list)
    after_compaction: list[bool] = attrs.field(factory=list)
    patterns: int = 0
    last_system: str = ""

    def equivalents(self) -> list[float]:
        return [b.input_equivalents for b in self.per_turn]

    def usd_per_100(self) -> float:
        return sum(b.usd for b in self.per_turn) / len(self.per_turn) * 100


# --- one variant -------------------------------------------------------------------------------


async def play(url: str, args: argparse.Namespace, name: str, ttl: CacheTTL | None) -> Run:
    """The script in a new database, through the real turn and compaction code."""
    embedder = HashEmbedder(args.dims)
    start = datetime(2026, 3, 2, 7, 30, tzinfo=UTC)
    steps = script(args.turns, args.seed, start)
    sim = {"now": start}

    def clock() -> datetime:
        return sim["now"]

    env = {
        "TIMEZONE": "Europe/Madrid",
        "PATTERN_MIN_SIMILARITY": str(args.min_similarity),
        **(BEFORE_SETTINGS if ttl is None else {}),
        **dict(e.partition("=")[::2] for e in args.env),
    }
    settings = load_settings(env, dotenv=None)
    run = Run(name)
    async with (
        dbmod.asyncio_loop(),
        dbmod.open_database(url, max_size=6) as db,
        run_fake_anthropic() as fake,
    ):
        await apply_migrations(db)
        await load_journal(db, args.journal, embedder, args.seed, CHAT)
        fake.clock = lambda: (sim["now"] - start).total_seconds()
        responder = Responder(np.random.default_rng(args.seed + 1))
        fake.responder = responder
        async with (
            AnthropicLLM(
                api_key=fake.api_key, base_url=fake.base_url, db=db, model=CHAT_MODEL
            ) as chat_llm,
            AnthropicLLM(
                api_key=fake.api_key, base_url=fake.base_url, db=db, model=MEMORY_MODEL
            ) as memory_llm,
        ):
            thresholds = thresholds_for(embedder.model, settings)
            lexicons = LexiconCache()
            tools = agent_tools(
                memory_tools(LLMAdjudicator(memory_llm), thresholds=thresholds, lexicons=lexicons)
            )
            rule = CompactionRule.from_settings(settings)
            options = CompactionOptions(
                timezone=settings.timezone,
                keep_recent=settings.compaction_keep_recent,
                max_messages=settings.compaction_chunk_messages,
                rule=rule,
                thresholds=thresholds,
            )
            estimate = WindowEstimate(
                db,
                settings.timezone,
                tools,
                clock=clock,
                episodes_allowance=settings.episode_budget_tokens,
                cache=ttl,
                window_limit=rule.window_limit,
            )  # as sql_compactor builds it
            wanted: list[int] = []

            async def compact() -> None:
                for _ in range(rule.max_rounds):
                    outcome = await compact_chat(
                        db, memory_llm, embedder, CHAT, options=options, estimate=estimate
                    )
                    if outcome.status != "ok":
                        return
                    run.compactions += 1

            agent = sql_agent(  # as `engram serve` builds it (actors/cli/main.py)
                db,
                chat_llm,
                timezone=settings.timezone,
                embedder=embedder,
                context_token_budget=settings.context_token_budget,
                episode_budget=settings.episode_budget_tokens,
                window_limit=settings.window_messages,
                retriever=SqlPatternRetriever(
                    db, embedder, thresholds, lexicons=lexicons, timezone=settings.timezone
                ),
                profile=SqlProfile(db, settings.timezone, settings.profile_budget_tokens),
                tools=tools,
                clock=clock,
                on_over_budget=wanted.append,
                prompt_cache=ttl,
                **args.agent_options,
            )
            compacted = False
            for n, step in enumerate(steps):
                sim["now"] += timedelta(seconds=step.gap)
                rounds = run.compactions
                if step.gap >= settings.compaction_idle_after:  # the sweep, during the pause
                    await compact()
                responder.step = step
                first = len(fake.requests)
                reply = await agent.run_turn(
                    TurnInput(
                        chat_id=CHAT,
                        text=step.text,
                        inbox_ids=(n + 1,),
                        message_ids=(n + 1,),
                        external_ids=(f"bench:{n}",),
                    )
                )
                if reply.persist is not None:
                    async with db.connection() as conn, conn.transaction():
                        await reply.persist(conn)
                if reply.after_commit is not None:
                    await reply.after_commit()
                calls = [r for r in fake.requests[first:] if is_agent(r)]
                run.per_turn.append(billed(calls))
                run.gaps.append(step.gap)
                run.after_compaction.append(compacted or run.compactions > rounds)
                if calls:
                    run.last_system = _system_text(calls[0].body)
                    run.with_patterns += NO_PATTERNS not in run.last_system
                run.calls += len(calls)
                run.reads += sum(1 for r in calls if r.cache is not None and r.cache.read)
                rounds = run.compactions
                if wanted:
                    wanted.clear()
                    await compact()
                compacted = run.compactions > rounds
                if (n + 1) % 100 == 0:
                    print(f"  {name}: {n + 1} turns", flush=True)
            run.memory = billed([r for r in fake.answered if not is_agent(r)])
            run.patterns = await db.fetchval(
                "SELECT count(*) FROM patterns WHERE chat_id = $1", CHAT
            )
            run.shape = request_shape([r for r in fake.answered if is_agent(r)])
    return run


# --- report --------------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def report(runs: Sequence[Run]) -> None:
    print()
    print(
        f"{'variant':10} {'p50':>8} {'mean':>8} {'prompt':>8} {'USD/100':>8} "
        f"{'reads':>6} {'memory USD/100':>15}"
    )
    for run in runs:
        eq = run.equivalents()
        prompt = statistics.mean(b.prompt_tokens for b in run.per_turn)
        memory = run.memory.usd / len(run.per_turn) * 100 if run.memory else 0.0
        print(
            f"{run.name:10} {pct(eq, 50):8.0f} {statistics.mean(eq):8.0f} {prompt:8.0f} "
            f"{run.usd_per_100():8.3f} {run.reads / max(run.calls, 1):6.0%} "
            f"{memory:15.3f}"
        )
    print(
        "(billed input-token equivalents per turn; prompt: mean prompt tokens per turn; "
        "reads: share of agent calls reading the cache)"
    )
    print()
    print("where a turn's billed input goes (mean tokens per turn, and their billed equivalents)")
    for run in runs:
        n = len(run.per_turn)
        parts = {
            "uncached": (sum(b.uncached for b in run.per_turn) / n, 1.0),
            "read": (sum(b.read for b in run.per_turn) / n, CACHE_READ_FACTOR),
            "written 5m": (sum(b.written_5m for b in run.per_turn) / n, CACHE_WRITE_FACTORS["5m"]),
            "written 1h": (sum(b.written_1h for b in run.per_turn) / n, CACHE_WRITE_FACTORS["1h"]),
        }
        text = ", ".join(f"{k} {v:.0f} (= {v * f:.0f})" for k, (v, f) in parts.items() if v)
        print(
            f"  {run.name:10} {text}; compaction rounds {run.compactions}, "
            f"agent calls {run.calls}, turns with retrieved patterns {run.with_patterns}, "
            f"patterns {run.patterns}"
        )
        shape = ", ".join(f"{k} {v:.0f}" for k, v in run.shape.items())
        print(f"  {'':10} a request (mean estimated tokens): {shape}")
        kinds = [
            "after a pause > 5 min"
            if gap > 300
            else "within a session, after a compaction"
            if compacted
            else "within a session, otherwise"
            for gap, compacted in zip(run.gaps, run.after_compaction, strict=True)
        ]
        for label in dict.fromkeys(sorted(kinds)):
            chosen = [b for b, kind in zip(run.per_turn, kinds, strict=True) if kind == label]
            if chosen:
                total = sum(b.input_equivalents for b in chosen) / n
                print(
                    f"  {'':10} {label}: {len(chosen)} turns, "
                    f"{statistics.mean(b.input_equivalents for b in chosen):.0f} each, "
                    f"{total:.0f} of the mean per turn"
                )


VARIANTS: dict[str, CacheTTL | None] = {"before": None, "after 5m": "5m", "after 1h": "1h"}
#: What "before" ran with besides no breakpoints: the window of 200 rows it had (WINDOW_MESSAGES'
#: default was chosen with this bench; see README's Performance).
BEFORE_SETTINGS = {"WINDOW_MESSAGES": "200"}


def run_all(url: str, args: argparse.Namespace) -> list[Run]:
    runs = []
    for name, ttl in VARIANTS.items():
        if name not in args.variants:
            continue
        db_name = f"engram_bench_cost_{secrets.token_hex(3)}"
        admin(url, f'CREATE DATABASE "{db_name}"')
        try:
            runs.append(trio.run(play, with_database(url, db_name), args, name, ttl))
        finally:
            admin(url, f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--journal", type=int, default=2000, help="journal entries")
    parser.add_argument("--dims", type=int, default=256, help="fake embedding dimensions")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--min-similarity",
        type=float,
        default=0.1,
        help="PATTERN_MIN_SIMILARITY for the hash embedder (%(default)s)",
    )
    parser.add_argument("--default-ttl", default="5m", choices=("5m", "1h"))
    parser.add_argument(
        "--show-prompt", action="store_true", help="print the last turn's system prompt"
    )
    parser.add_argument("--only", default="", help="comma-separated variants (default: all)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        help="a setting for the run, e.g. EPISODE_BUDGET_TOKENS=1200 (repeatable)",
    )
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        help="an integer Agent option, e.g. recent_rows=8 (repeatable)",
    )
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, turns=12, journal=100)
    args.variants = [v.strip() for v in args.only.split(",") if v.strip()] or list(VARIANTS)
    args.agent_options = {}
    for option in args.agent:
        key, _, value = option.partition("=")
        args.agent_options[key] = int(value)
    with tempfile.TemporaryDirectory(prefix="engram-bench-cost-") as tmp:
        log = open(Path(tmp) / "engram.log", "w", encoding="utf-8")  # noqa: SIM115
        configure_logging("WARNING", "json", [], stream=log)
        if args.url:
            runs = run_all(args.url, args)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pgserver

                server = pgserver.get_server(  # type: ignore[attr-defined,no-untyped-call]
                    Path(tmp) / "pg", cleanup_mode="delete"
                )
            try:
                runs = run_all(server.get_uri(), args)
            finally:
                server.cleanup()
        log.close()
    report(runs)
    if args.show_prompt:
        print(runs[-1].last_system)
    if len(runs) < len(VARIANTS):
        return
    before = runs[0]
    after = next(r for r in runs if r.name == f"after {args.default_ttl}")
    b, a = statistics.mean(before.equivalents()), statistics.mean(after.equivalents())
    print(f"after/before: {a / b:.1%} of the billed input per turn")
    print(
        f"cost tokens_per_turn_before={b:.0f} after={a:.0f} "
        f"usd_per_100_before={before.usd_per_100():.3f} after={after.usd_per_100():.3f}"
    )


if __name__ == "__main__":
    main()
