"""The project's own crash test: ``engram serve`` (webhook mode) as a subprocess, with the test
fakes (``tests/fakes``: the strict fake Bot API, an echo model answering ``re <update id>``) and
its own PostgreSQL (pgserver in a temp dir, reached through DATABASE_URL), under three faults:

a. ``--kills`` SIGKILLs of engram at random moments, a third of them during start-up and its
   recovery (before or just after ``/readyz``), each restarted at once;
b. PostgreSQL stopped (``pg_ctl -m fast``) for 3 s, later crashed (``-m immediate``) for 3 s;
c. the Bot API answering sendMessage 429 (``retry_after`` 3) for 8 s, then 502 for
   ``--outage`` seconds.

A Telegram-like sender POSTs ``--updates`` updates over ``--chats`` chats (each chat in order,
every update resent until it gets a 2xx) while the fault plays. After a settle time the bench
reads what the fake Bot API received and the database, and counts per update:

* ``lost``: acknowledged, and neither answered, nor in an ``uncertain`` outbox row, nor skipped;
* ``duplicated``: answered in more than one sent message;
* ``uncertain``: not answered, its reply in an ``uncertain`` outbox row;
* ``skipped``: its inbox row ``skipped`` (the person got the skip notice);
* ``stuck``: inbox or outbox rows still open at the end.

Also ``in_flight``: outbox chunks marked in flight just after each kill (the most ``uncertain``
may be), ``exits``: times engram exited on its own (escalation), ``sorry``: "something went
wrong" replies. Goal: lost 0, duplicated 0, skipped 0, stuck 0, uncertain <= in_flight.

    python bench/crash.py [--updates 400] [--chats 20] [--kills 20] [--outage 30]
                          [--scenarios abc] [--seed 1] [--keep-logs] [--smoke]

Last line: ``crash updates=… lost=… duplicated=… uncertain=… skipped=… stuck=…`` (all scenarios).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _smoke import add_smoke_flag, shrink  # noqa: E402
from engram_outside import (  # noqa: E402
    Engram,
    answered_ids,
    free_port,
    post_update,
    run_echo_anthropic,
    serve_env,
    update_body,
)
from fakes.bot_api import Failure, FakeBotApi, run_fake_bot_api  # noqa: E402

from runtime import db as dbmod  # noqa: E402
from runtime.errors import DatabaseError  # noqa: E402

SORRY = "something went wrong"
OPEN_INBOX = "('pending', 'processing')"
OPEN_OUTBOX = "('pending', 'sending')"


@attrs.define
class Config:
    updates: int = 400
    chats: int = 20
    kills: int = 20
    outage: float = 30.0
    scenarios: str = "abc"
    seed: int = 1
    settle: float = 180.0
    keep_logs: bool = False
    quiet: bool = False
    #: seconds each scenario's updates are spread over (0: :func:`durations`' own)
    duration: float = 0.0


@attrs.define
class Result:
    scenario: str
    updates: int = 0
    acked: int = 0
    answered: int = 0
    lost: int = 0
    duplicated: int = 0
    uncertain: int = 0
    skipped: int = 0
    stuck: int = 0
    in_flight: int = 0
    exits: int = 0
    sorry: int = 0
    failed: int = 0
    seconds: float = 0.0
    log: str = ""

    def line(self) -> str:
        return (
            f"scenario {self.scenario}: updates={self.updates} acked={self.acked} "
            f"answered={self.answered} lost={self.lost} duplicated={self.duplicated} "
            f"uncertain={self.uncertain} skipped={self.skipped} stuck={self.stuck} "
            f"in_flight={self.in_flight} failed={self.failed} sorry={self.sorry} "
            f"exits={self.exits} ({self.seconds:.0f} s)"
        )

    @property
    def met(self) -> bool:
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.skipped == 0
            and self.stuck == 0
            and self.uncertain <= self.in_flight
            and self.acked == self.updates
        )


class Postgres:
    """The bench's own PostgreSQL (pgserver in a temp dir): one database per scenario, and the
    faults of scenario b."""

    def __init__(self, root: Path) -> None:
        import pgserver

        self.server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")  # type: ignore[attr-defined]

    def create(self, name: str) -> str:
        self.server.psql(f'CREATE DATABASE "{name}";')
        return str(self.server.get_uri(name))

    def stop(self, mode: str) -> None:
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.server.pgdata, user=self.server.system_user)

    def start(self) -> None:
        self.server._postmaster_info = None
        self.server.ensure_postgres_running()

    def cleanup(self) -> None:
        self.server.cleanup()


class Scenario:
    """One scenario's world: the fakes, engram, the sender and the checks."""

    def __init__(self, name: str, cfg: Config, pg: Postgres, work: Path) -> None:
        self.name, self.cfg, self.pg = name, cfg, pg
        self.work = work / name
        self.work.mkdir(parents=True)
        self.url = pg.create(f"crash_{name}_{int(time.time())}")
        self.rng = random.Random(f"{cfg.seed}-{name}")
        self.chats = [900_000 + i for i in range(cfg.chats)]
        self.acked: set[int] = set()
        self.sending_done = trio.Event()
        self.result = Result(name, updates=cfg.updates)
        self.engram: Engram | None = None
        self.fake: FakeBotApi | None = None

    # --- engram -----------------------------------------------------------------------------

    async def start_engram(self) -> Engram:
        assert self.engram is not None
        await self.engram.start()
        return self.engram

    async def keep_alive(self) -> None:
        """Restart engram whenever it exits on its own (counted as ``exits``)."""
        assert self.engram is not None
        while True:
            await trio.sleep(0.2)
            if not self.engram.running and not self._killing:
                self.result.exits += 1
                self.say(f"  engram exited by itself: {self.engram.tail(3)}")
                await self.start_engram()

    _killing = False

    async def kill_and_restart(self, db: Any) -> None:
        assert self.engram is not None and self.engram.proc is not None
        self._killing = True
        self.engram.kill()
        await self.engram.wait()
        self.result.in_flight += await in_flight(db)
        await self.start_engram()
        self._killing = False

    # --- the Telegram side ------------------------------------------------------------------

    async def send_all(self, duration: float) -> None:
        """Every chat's updates in order, spread over ``duration`` seconds, each resent until
        it gets a 2xx."""
        per_chat = self.cfg.updates // len(self.chats)
        extra = self.cfg.updates - per_chat * len(self.chats)
        plan = {c: per_chat + (1 if i < extra else 0) for i, c in enumerate(self.chats)}
        next_id = iter(range(1, self.cfg.updates + 1))
        ids = {c: [next(next_id) for _ in range(n)] for c, n in plan.items()}
        async with httpx.AsyncClient(timeout=10) as client, trio.open_nursery() as nursery:
            for chat, chat_ids in ids.items():
                nursery.start_soon(self._send_chat, client, chat, chat_ids, duration)
        self.sending_done.set()

    async def _send_chat(
        self, client: httpx.AsyncClient, chat: int, ids: list[int], duration: float
    ) -> None:
        assert self.engram is not None
        gap = duration / max(1, len(ids))
        await trio.sleep(self.rng.uniform(0, gap))
        for update_id in ids:
            body = update_body(update_id, chat=chat)
            while not 200 <= await post_update(client, self.engram.port, body) < 300:  # noqa: ASYNC110
                await trio.sleep(0.3 + self.rng.uniform(0, 0.4))  # Telegram retries later
            self.acked.add(update_id)
            await trio.sleep(self.rng.uniform(0.5 * gap, 1.5 * gap))

    # --- results ----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        if not self.cfg.quiet:
            print(text, flush=True)

    def replies(self) -> tuple[Counter[int], int]:
        assert self.fake is not None
        counts: Counter[int] = Counter()
        sorry = 0
        for messages in self.fake.sent.values():
            for message in messages:
                counts.update(answered_ids(message.text))
                sorry += SORRY in message.text
        return counts, sorry

    async def settled(self, db: Any) -> bool:
        """Every acknowledged update accounted for and nothing open."""
        counts, _ = self.replies()
        try:
            open_rows = await db.fetchval(
                f"SELECT (SELECT count(*) FROM inbox WHERE status IN {OPEN_INBOX})"
                f" + (SELECT count(*) FROM outbox WHERE status IN {OPEN_OUTBOX})"
            )
            closed = await closed_ids(db)
        except DatabaseError:
            return False
        pending = self.acked - set(counts) - closed
        return open_rows == 0 and not pending

    async def measure(self, db: Any) -> None:
        r = self.result
        counts, r.sorry = self.replies()
        r.acked = len(self.acked)
        r.answered = len(set(counts) & self.acked)
        r.duplicated = sum(1 for n in counts.values() if n > 1)
        uncertain = await ids_in_outbox(db, "uncertain")
        failed = await ids_in_outbox(db, "failed")
        skipped = {
            row["update_id"]
            for row in await db.fetch("SELECT update_id FROM inbox WHERE status = 'skipped'")
        }
        r.uncertain = len((uncertain - set(counts)) & self.acked)
        r.failed = len((failed - set(counts)) & self.acked)
        r.skipped = len(skipped & self.acked)
        r.lost = len(self.acked - set(counts) - uncertain - skipped)
        r.stuck = await db.fetchval(
            f"SELECT (SELECT count(*) FROM inbox WHERE status IN {OPEN_INBOX})"
            f" + (SELECT count(*) FROM outbox WHERE status IN {OPEN_OUTBOX})"
        )


async def in_flight(db: Any) -> int:
    """Outbox chunks handed to the Bot API whose outcome is not recorded (after a kill)."""
    try:
        has_column = await db.fetchval(
            "SELECT count(*) FROM information_schema.columns"
            " WHERE table_name = 'outbox' AND column_name = 'chunk_in_flight'"
        )
        marked = "chunk_in_flight IS NOT NULL" if has_column else "TRUE"
        return int(
            await db.fetchval(
                f"SELECT count(*) FROM outbox WHERE status IN {OPEN_OUTBOX} AND {marked}"
            )
        )
    except DatabaseError:
        return 0


async def ids_in_outbox(db: Any, status: str) -> set[int]:
    rows = await db.fetch("SELECT text FROM outbox WHERE status = $1", status)
    return {i for row in rows for i in answered_ids(row["text"])}


async def closed_ids(db: Any) -> set[int]:
    """Updates whose fate is final without a sent reply: uncertain or failed reply, skipped."""
    rows = await db.fetch("SELECT update_id FROM inbox WHERE status IN ('skipped', 'failed')")
    return (
        {r["update_id"] for r in rows}
        | await ids_in_outbox(db, "uncertain")
        | await ids_in_outbox(db, "failed")
    )


# --- the faults -----------------------------------------------------------------------------


async def kills(sc: Scenario, db: Any, duration: float) -> None:
    """``cfg.kills`` SIGKILLs spread over ``duration``; a third during start-up recovery."""
    assert sc.engram is not None
    for n in range(sc.cfg.kills):
        if sc.rng.random() < 1 / 3:
            await trio.sleep(sc.rng.uniform(0.2, 1.5))  # after the (re)start: in recovery
            when = "start-up"
        else:
            with trio.move_on_after(60):
                await sc.engram.wait_ready(60)
            await trio.sleep(sc.rng.uniform(0.3, max(0.4, duration / sc.cfg.kills - 1.0)))
            when = "running"
        await sc.kill_and_restart(db)
        sc.say(f"  kill {n + 1} ({when}); in flight so far {sc.result.in_flight}")


async def postgres_faults(sc: Scenario, db: Any, duration: float) -> None:
    for mode in ("fast", "immediate"):
        await trio.sleep(duration / 3)
        sc.say(f"  PostgreSQL stop -m {mode} for 3 s")
        await trio.to_thread.run_sync(sc.pg.stop, mode)
        await trio.sleep(3)
        await trio.to_thread.run_sync(sc.pg.start)
        sc.say("  PostgreSQL back")


async def bot_api_faults(sc: Scenario, db: Any, duration: float) -> None:
    assert sc.fake is not None
    await trio.sleep(duration / 4)
    sc.say("  Bot API: 429 retry_after=3 for 8 s")
    sc.fake.fail_while("sendMessage", Failure.rate_limited(3))
    await trio.sleep(8)
    sc.say(f"  Bot API: 502 for {sc.cfg.outage:g} s")
    sc.fake.fail_while("sendMessage", Failure.server_error(502, "Bad Gateway"))
    await trio.sleep(sc.cfg.outage)
    sc.fake.stop_failing("sendMessage")
    sc.say("  Bot API back")


FAULTS: dict[str, Callable[[Scenario, Any, float], Awaitable[None]]] = {
    "a": kills,
    "b": postgres_faults,
    "c": bot_api_faults,
}


def durations(cfg: Config) -> dict[str, float]:
    """How long each scenario's updates are spread over (the fault plays meanwhile)."""
    return {"a": max(20.0, cfg.kills * 3.0), "b": 24.0, "c": max(20.0, 8 + cfg.outage + 6)}


async def run_scenario(name: str, cfg: Config, pg: Postgres, work: Path) -> Result:
    sc = Scenario(name, cfg, pg, work)
    started = time.monotonic()
    duration = cfg.duration or durations(cfg)[name]
    sc.say(f"scenario {name}: {cfg.updates} updates over {cfg.chats} chats in ~{duration:.0f} s")
    async with (
        run_fake_bot_api() as fake,
        run_echo_anthropic() as model,
        dbmod.asyncio_loop(),
        dbmod.open_database(sc.url, max_size=2, connect_timeout=30) as db,
    ):
        sc.fake = fake
        env = serve_env(
            sc.work,
            bot_api=fake.base_url,
            model=model.base_url,
            port=free_port(),
            chats=sc.chats,
            DATABASE_URL=sc.url,
        )
        sc.engram = Engram(env, sc.work / "engram.log")
        await sc.start_engram()
        await sc.engram.wait_ready(120)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sc.send_all, duration)
            nursery.start_soon(sc.keep_alive)
            await FAULTS[name](sc, db, duration)
            await sc.sending_done.wait()
            sc.say(f"  all {len(sc.acked)} updates acknowledged; settling")
            with trio.move_on_after(cfg.settle):
                while not await sc.settled(db):  # noqa: ASYNC110 (state in other processes)
                    await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
        await trio.sleep(1.0)  # a duplicate sent late would show up by now
        await sc.measure(db)
        await sc.engram.stop()
    sc.result.seconds = time.monotonic() - started
    sc.result.log = str(sc.engram.log_path)
    return sc.result


async def run_all(cfg: Config) -> list[Result]:
    root = Path(tempfile.mkdtemp(prefix="engram-crash-"))
    pg = await trio.to_thread.run_sync(Postgres, root)
    results = []
    try:
        for name in cfg.scenarios:
            result = await run_scenario(name, cfg, pg, root / "work")
            results.append(result)
            if not cfg.quiet:
                print(result.line(), flush=True)
    finally:
        await trio.to_thread.run_sync(pg.cleanup)
        if cfg.keep_logs:
            print(f"logs kept in {root / 'work'}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return results


def summary(results: list[Result]) -> str:
    total = {
        k: sum(getattr(r, k) for r in results)
        for k in ("updates", "lost", "duplicated", "uncertain", "skipped", "stuck")
    }
    return "crash " + " ".join(f"{k}={v}" for k, v in total.items())


def main() -> None:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--outage", type=float, default=30.0)
    parser.add_argument("--scenarios", default="abc")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=180.0)
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument(
        "--duration",
        type=float,
        default=0.0,
        help="seconds each scenario's updates are spread over (default: its own)",
    )
    add_smoke_flag(parser)
    args = parser.parse_args()
    # smoke: scenario a alone (SIGKILLs), a few updates over a few seconds
    shrink(parser, args, updates=12, chats=3, kills=1, scenarios="a", settle=30.0, duration=4.0)
    cfg = Config(
        args.updates,
        args.chats,
        args.kills,
        args.outage,
        args.scenarios,
        args.seed,
        args.settle,
        args.keep_logs,
        duration=args.duration,
    )
    results = trio.run(run_all, cfg)
    print(summary(results))


if __name__ == "__main__":
    main()
