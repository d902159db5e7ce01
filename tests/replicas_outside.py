"""Several ``engram serve`` processes on one PostgreSQL behind the round-robin proxy, a
Telegram-like sender and the checks of issue 26, for ``bench/replicas.py`` and
``tests/e2e/test_replicas_outside.py``.

    async with run_recording_bot() as bot, run_echo_anthropic() as model:
        async with Cluster(work, 3, bot=bot, model=model, url=url, chats=chats) as cluster:
            load = Load(cluster, chats, messages=5)
            await load.run()            # each chat in order, next message after the reply
            checks = await check(cluster, load, db)

Each chat's messages go one at a time: the next after the reply to the previous one (or after
``reply_wait`` seconds without one) and a pause of ``think`` seconds, every POST resent until
it gets a 2xx (Telegram redelivers). The fake Bot API records when each reply arrived and which
updates it answers; the echo model records every user message it is asked to answer.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
from engram_outside import (
    SECRET,
    WEBHOOK,
    Engram,
    answered_ids,
    free_port,
    serve_env,
    update_body,
)
from fakes.recording import MSG, RecordingBot, RecordingModel
from fakes.rr_proxy import RoundRobinProxy, run_rr_proxy

from runtime.errors import DatabaseError


class Cluster:
    """``n`` engram processes (instances ``r0``…) on one database, each with its own home and
    port, behind a :class:`RoundRobinProxy`."""

    def __init__(
        self,
        work: Path,
        n: int,
        *,
        bot: RecordingBot,
        model: RecordingModel,
        url: str,
        chats: Sequence[int],
        **env: str,
    ) -> None:
        self.engrams: list[Engram] = []
        for i in range(n):
            home = work / f"r{i}"
            home.mkdir(parents=True, exist_ok=True)
            extra = {"DATABASE_URL": url, "ENGRAM_INSTANCE": f"r{i}", **env}
            e = serve_env(
                home, bot_api=bot.base_url, model=model.base_url, port=free_port(), chats=chats
            )
            self.engrams.append(Engram({**e, **extra}, home / "engram.log"))
        self.proxy: RoundRobinProxy | None = None
        self._proxy_cm: Any = None

    async def __aenter__(self) -> Cluster:
        first, *rest = self.engrams  # the first migrates the database, then the rest at once
        await first.start()
        await first.wait_ready(180)
        async with trio.open_nursery() as nursery:
            for e in rest:
                nursery.start_soon(self._start, e)
        self._proxy_cm = run_rr_proxy([e.port for e in self.engrams])
        self.proxy = await self._proxy_cm.__aenter__()
        return self

    @staticmethod
    async def _start(engram: Engram) -> None:
        await engram.start()
        await engram.wait_ready(180)

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.stop_all()
        finally:
            await self._proxy_cm.__aexit__(None, None, None)

    async def stop_all(self) -> None:
        async with trio.open_nursery() as nursery:
            for e in self.engrams:
                if e.running:
                    nursery.start_soon(e.stop)

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return self.proxy.base_url


@attrs.define
class Load:
    """``messages`` updates to each of ``chats`` through the cluster's proxy, paced per chat."""

    cluster: Cluster
    bot: RecordingBot
    chats: Sequence[int]
    messages: int
    think: tuple[float, float] = (0.1, 0.5)
    ramp: float = 2.0
    reply_wait: float = 30.0
    seed: int = 1
    posted: dict[int, float] = attrs.Factory(dict)  # update id -> monotonic of its 2xx
    chat_of: dict[int, int] = attrs.Factory(dict)
    started: float = 0.0
    rng: random.Random = attrs.Factory(random.Random)

    def ids(self, index: int) -> list[int]:
        return [index * self.messages + k + 1 for k in range(self.messages)]

    async def run(self) -> None:
        self.rng.seed(self.seed)
        self.started = time.monotonic()
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=0)
        async with (
            httpx.AsyncClient(timeout=30, limits=limits) as client,
            trio.open_nursery() as nursery,
        ):
            for index, chat in enumerate(self.chats):
                nursery.start_soon(self._chat, client, chat, self.ids(index))

    async def _chat(self, client: httpx.AsyncClient, chat: int, ids: list[int]) -> None:
        await trio.sleep(self.rng.uniform(0, self.ramp))
        body_headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        for update_id in ids:
            self.chat_of[update_id] = chat
            event = self.bot.waiting[chat] = trio.Event()
            body = update_body(update_id, chat=chat, text=f"{MSG} {update_id}")
            while True:
                try:
                    r = await client.post(
                        self.cluster.url + WEBHOOK, json=body, headers=body_headers
                    )
                    if 200 <= r.status_code < 300:
                        break
                except httpx.TransportError:
                    pass
                await trio.sleep(0.3 + self.rng.uniform(0, 0.4))  # Telegram retries later
            self.posted[update_id] = time.monotonic()
            with trio.move_on_after(self.reply_wait):
                await event.wait()
            await trio.sleep(self.rng.uniform(*self.think))

    def answered(self) -> Counter[int]:
        return Counter(i for _, _, ids in self.bot.replies for i in ids)

    def settled_without(self, closed: set[int]) -> bool:
        return not (set(self.posted) - set(self.answered()) - closed)

    def turns_per_second(self) -> float:
        """Turns answered per second, from the first POST to the last reply."""
        if not self.bot.replies:
            return 0.0
        span = max(t for t, _, _ in self.bot.replies) - self.started
        return sum(len(ids) > 0 for _, _, ids in self.bot.replies) / max(span, 1e-9)

    def next_turn_after(self, when: float, chats: set[int], model: RecordingModel) -> list[float]:
        """Per chat of ``chats``, seconds from ``when`` until the model is next asked about one
        of its updates (a turn started: the takeover without the reply's queue to the sender)."""
        first: dict[int, float] = {}
        for t, ids in model.seen:
            chat = self.chat_of.get(ids[0])
            if t >= when and chat in chats and chat not in first:
                first[chat] = t - when
        return sorted(first.values())

    def next_answer_after(self, when: float, chats: set[int]) -> list[float]:
        """Per chat of ``chats``, seconds from ``when`` to its first reply after it."""
        first: dict[int, float] = {}
        for t, chat, ids in self.bot.replies:
            if t >= when and chat in chats and ids and chat not in first:
                first[chat] = t - when
        return sorted(first.values())


@attrs.define
class Checks:
    updates: int = 0
    acked: int = 0
    unanswered: int = 0  # acknowledged, no reply, not uncertain
    duplicated: int = 0  # answered in more than one sent message
    uncertain: int = 0
    out_of_order: int = 0  # chats whose replies answer their updates out of order
    turns_twice: int = 0  # user messages the model was asked to answer more than once
    #: of those, first seen before a process exited (SIGKILL, or SIGTERM's drain deadline) and
    #: not answered by then: a turn its process died with, run again by the one that took the
    #: chat over (the crash recovery's promise)
    rerun_cut_off: int = 0
    leases: int | None = None  # chat_leases rows left (None: no such table)
    #: a few turns run twice: each sighting by the model and each reply (seconds from start)
    examples: list[str] = attrs.Factory(list)

    @property
    def met(self) -> bool:
        return (
            self.acked == self.updates
            and self.unanswered == self.duplicated == self.out_of_order == 0
            and self.turns_twice == self.rerun_cut_off
            and self.leases in (0, None)
        )

    def line(self) -> str:
        leases = "n/a" if self.leases is None else str(self.leases)
        return (
            f"updates={self.updates} acked={self.acked} unanswered={self.unanswered} "
            f"duplicated={self.duplicated} uncertain={self.uncertain} "
            f"out_of_order={self.out_of_order} turns_twice={self.turns_twice} "
            f"rerun_cut_off={self.rerun_cut_off} leases={leases}"
        )


async def uncertain_ids(db: Any) -> set[int]:
    rows = await db.fetch("SELECT text FROM outbox WHERE status = 'uncertain'")
    return {i for row in rows for i in answered_ids(row["text"])}


async def lease_rows(db: Any, owner: str | None = None) -> int | None:
    """``chat_leases`` rows (of ``owner``), None where the table does not exist."""
    if not await db.fetchval("SELECT to_regclass('chat_leases') IS NOT NULL"):
        return None
    if owner is None:
        return int(await db.fetchval("SELECT count(*) FROM chat_leases"))
    return int(await db.fetchval("SELECT count(*) FROM chat_leases WHERE owner = $1", owner))


async def owned_chats(db: Any, owner: str, load: Load) -> set[int]:
    """The chats ``owner`` holds a lease on; without leases, the chats with an update
    acknowledged and not yet answered (the ones a dead process would leave waiting)."""
    if await lease_rows(db) is not None:
        rows = await db.fetch("SELECT chat_id FROM chat_leases WHERE owner = $1", owner)
        return {int(r["chat_id"]) for r in rows}
    answered = load.answered()
    return {load.chat_of[i] for i in load.posted if i not in answered}


async def settle(load: Load, db: Any, limit: float) -> None:
    """Until every acknowledged update is answered or uncertain (at most ``limit`` s)."""
    with trio.move_on_after(limit):
        while True:
            try:
                if load.settled_without(await uncertain_ids(db)):
                    break
            except DatabaseError:
                pass
            await trio.sleep(0.5)
    await trio.sleep(1.0)  # a duplicate sent late shows up by now


async def check(load: Load, model: RecordingModel, db: Any, ended: Sequence[float] = ()) -> Checks:
    """The four checks, once the cluster has stopped (leases are counted then); ``ended``:
    when the faulted processes exited (:func:`exits`)."""
    c = Checks(updates=len(load.chats) * load.messages, acked=len(load.posted))
    answered = load.answered()
    uncertain = await uncertain_ids(db)
    c.uncertain = len((uncertain - set(answered)) & set(load.posted))
    c.unanswered = len(set(load.posted) - set(answered) - uncertain)
    c.duplicated = sum(1 for n in answered.values() if n > 1)
    per_chat: dict[int, list[int]] = {}
    for _, chat, ids in load.bot.replies:
        per_chat.setdefault(chat, []).extend(ids)
    c.out_of_order = sum(
        1 for ids in per_chat.values() if list(dict.fromkeys(ids)) != sorted(set(ids))
    )
    first_seen: dict[int, float] = {}
    seen: Counter[int] = Counter()
    for t, ids in model.seen:
        seen.update(ids)
        for i in ids:
            first_seen.setdefault(i, t)
    first_reply: dict[int, float] = {}
    for t, _, ids in load.bot.replies:
        for i in ids:
            first_reply.setdefault(i, t)
    for i in sorted(i for i, n in answered.items() if n > 1)[:5]:
        sent = [f"{t - load.started:.2f}s{ids}" for t, _, ids in load.bot.replies if i in ids]
        c.examples.append(f"update {i} answered twice: replies {sent}")
    twice = [i for i, n in seen.items() if n > 1]
    c.turns_twice = len(twice)

    def cut_off(i: int) -> bool:
        return any(first_seen[i] < k < first_reply.get(i, float("inf")) for k in ended)

    for i in sorted(twice, key=lambda i: (cut_off(i), i))[:5]:  # the unexplained ones first
        asked = [f"{t - load.started:.2f}s{ids}" for t, ids in model.seen if i in ids]
        sent = [f"{t - load.started:.2f}s{ids}" for t, _, ids in load.bot.replies if i in ids]
        c.examples.append(f"update {i}: model asked {asked}; replies {sent}")
    c.rerun_cut_off = sum(1 for i in twice if cut_off(i))
    c.leases = await lease_rows(db)
    return c


async def play_faults(cluster: Cluster, load: Load, db: Any, out: dict[str, Any]) -> None:
    """At 35 % of the updates acknowledged SIGKILL ``r1``, at 65 % SIGTERM ``r2``; ``out``
    gets ``kill`` and ``term``: (monotonic, the chats it held just before), and ``kill_exit``
    and ``term_exit``: when each process had exited."""
    total = len(load.chats) * load.messages
    for fraction, index, how in ((0.35, 1, "kill"), (0.65, 2, "term")):
        if index >= len(cluster.engrams):
            return
        while len(load.posted) < fraction * total:  # noqa: ASYNC110 (the sender's progress)
            await trio.sleep(0.05)
        engram = cluster.engrams[index]
        chats = await owned_chats(db, f"r{index}", load)
        when = time.monotonic()
        if how == "kill":
            engram.kill()
        else:
            assert engram.proc is not None
            engram.proc.terminate()
        out[how] = (when, chats)
        await engram.wait()
        out[f"{how}_exit"] = time.monotonic()
        print(f"  {how} r{index} at {len(load.posted)}/{total} updates: it held {len(chats)} chats")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def quiesce(cluster: Cluster, limit: float = 30.0) -> None:
    """Until no engram spends over 5 % of a core (its start-up work done), ``limit`` s at most."""
    pids = [e.proc.pid for e in cluster.engrams if e.proc is not None]
    with trio.move_on_after(limit):
        while True:
            before = [cpu_seconds(p) for p in pids]
            await trio.sleep(1.0)
            if all(cpu_seconds(p) - b < 0.05 for p, b in zip(pids, before, strict=True)):
                return


def exits(out: dict[str, Any]) -> list[float]:
    """When the faults' processes exited (for :func:`check`)."""
    return [out[k] for k in ("kill_exit", "term_exit") if k in out]


def p50(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2] if values else float("nan")


def p95(values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
