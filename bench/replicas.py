"""Several ``engram serve`` processes on one PostgreSQL (issue 26): ``--processes`` of them in
webhook mode (own ENGRAM_HOME and ENGRAM_PORT, one DATABASE_URL on the bench's embedded
pgserver) behind a round-robin HTTP proxy (``tests/fakes/rr_proxy.py``), with the fake Bot API
and the echo model of ``tests/fakes``.

1. Throughput: the same load (``--tp-chats`` × ``--messages``) on 1, 2, … processes, no faults:
   turns answered per second from the first POST to the last reply; CPU seconds of each engram,
   of PostgreSQL (all its processes) and of this process (fakes, proxy, sender).
2. Faults: ``--chats`` × ``--messages`` on all processes; at 35 % of the updates acknowledged
   ``r1`` is SIGKILLed, at 65 % ``r2`` SIGTERMed (not restarted). Checks: every update answered
   once (``uncertain`` outbox rows apart), each chat's replies in update order, no turn run twice
   (the model sees each user message once), no ``chat_leases`` row left once the processes
   stopped (``n/a`` without the table). ``takeover_p95_s``: per chat the killed process held,
   seconds from the kill to the chat's next reply; ``handover_p95_s`` likewise after SIGTERM.
3. Memory (``--skip-memory`` skips): one process, ACTOR_MAX_LIVE above ``--idle-chats``; each
   chat sends ``/help`` (answered without the model, the actor stays alive); VmRSS after
   ``--warm`` chats and after all: bytes per idle actor = RSS delta / live actors added
   (``engram_live_actors{kind="chat"}`` of /metrics).

Pacing: a chat sends its next message after the reply to the previous one and a pause of
0.1–0.5 s (a closed loop: throughput phases), or in the faults phase after at most
``--reply-wait`` s without a reply (a person writing again before the answer: updates of a chat
overlap, which is what could run a turn twice or out of order); chats start over the first 2 s.

    python bench/replicas.py [--chats 1000] [--messages 5] [--processes 3] [--tp-chats 300]
                             [--idle-chats 10000] [--lease-ttl 10] [--skip-memory] [--smoke]

Last line: ``replicas p1_turns_s=… p2=… p3=… takeover_p95_s=… handover_p95_s=…
bytes_per_idle_actor=…``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _replicas_memory import measure_memory  # noqa: E402
from _smoke import add_smoke_flag, shrink  # noqa: E402
from crash import Postgres  # noqa: E402
from fakes.recording import run_recording_bot, run_recording_model  # noqa: E402
from replicas_outside import (  # noqa: E402
    Cluster,
    Load,
    check,
    cpu_seconds,
    exits,
    p50,
    p95,
    play_faults,
    quiesce,
    settle,
)

from runtime import db as dbmod  # noqa: E402

CHAT_BASE = 700_000
THROUGHPUT_REPLY_WAIT = 60.0  # closed loop: the next message only after the reply


def postgres_pids(postmaster: int) -> list[int]:
    out = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


class CpuMeter:
    """CPU seconds spent by each engram, by PostgreSQL and by this process over a phase."""

    def __init__(self, pg: Postgres, cluster: Cluster) -> None:
        info = pg.server._postmaster_info
        self.postmaster = int(info.pid) if info is not None else 0
        self.cluster = cluster
        self.start = self.sample()

    def sample(self) -> dict[str, float]:
        out = {
            f"r{i}": cpu_seconds(e.proc.pid) for i, e in enumerate(self.cluster.engrams) if e.proc
        }
        out["postgres"] = sum(cpu_seconds(p) for p in postgres_pids(self.postmaster))
        out["bench"] = cpu_seconds(os.getpid())
        return out

    def line(self, seconds: float) -> str:
        end = self.sample()
        parts = [f"{k}={end[k] - self.start.get(k, 0.0):.1f}" for k in end]
        return f"cpu_s over {seconds:.1f} s wall: " + " ".join(parts)


async def phase(
    args: argparse.Namespace, pg: Postgres, work: Path, n: int, chats: int, faults: bool
) -> dict[str, Any]:
    name = f"p{n}" + ("_faults" if faults else "")
    url = pg.create(f"replicas_{name}_{int(time.time())}")
    ids = [CHAT_BASE + i for i in range(chats)]
    # SEND_RATE: Telegram's ~30 messages/s per bot, shared by the processes, would cap every
    # phase at 30 replies/s; lifted here (--send-rate) to measure the work that is not the
    # model nor Telegram's limit (README "Scaling")
    env = {"CHAT_LEASE_TTL": str(args.lease_ttl), "SEND_RATE": str(args.send_rate)}
    if args.engram_repo:
        env["PYTHONPATH"] = args.engram_repo
    out: dict[str, Any] = {}
    async with (
        run_recording_bot() as bot,
        run_recording_model() as model,
        dbmod.open_database(url, max_size=2, connect_timeout=30) as db,
        Cluster(work / name, n, bot=bot, model=model, url=url, chats=ids, **env) as cluster,
    ):
        wait = args.reply_wait if faults else THROUGHPUT_REPLY_WAIT
        load = Load(cluster, bot, ids, args.messages, reply_wait=wait)
        if not faults:
            await quiesce(cluster)
        meter = CpuMeter(pg, cluster)
        async with trio.open_nursery() as nursery:
            if faults:
                nursery.start_soon(play_faults, cluster, load, db, out)
            await load.run()
            out["sent_s"] = time.monotonic() - load.started
            out["started"] = load.started
            await settle(load, db, args.settle)
            nursery.cancel_scope.cancel()
        for how in ("kill", "term"):
            if how in out:
                when, held = out[how]
                out[f"{how}_waits"] = load.next_answer_after(when, held)
                out[f"{how}_turns"] = load.next_turn_after(when, held, model)
        out["turns_s"] = load.turns_per_second()
        if not faults:
            print(f"  {name}: {meter.line(time.monotonic() - load.started)}", flush=True)
        await cluster.stop_all()
        out["checks"] = await check(load, model, db, exits(out))
        out["served"] = list(cluster.proxy.served) if cluster.proxy else []
    return out


async def run(args: argparse.Namespace) -> str:
    root = Path(tempfile.mkdtemp(prefix="engram-replicas-"))
    pg = await trio.to_thread.run_sync(Postgres, root)
    figures: dict[str, str] = {}
    try:
        async with dbmod.asyncio_loop():
            runs = {int(n) for n in args.tp_runs.split(",") if n} if args.tp_runs else set()
            for n in range(1, args.processes + 1):
                if args.skip_throughput or (runs and n not in runs):
                    figures[f"p{n}"] = "skipped"
                    continue
                r = await phase(args, pg, root / "work", n, args.tp_chats, faults=False)
                figures[f"p{n}"] = f"{r['turns_s']:.1f}"
                print(
                    f"throughput {n} process(es): {r['turns_s']:.1f} turns/s, "
                    f"served per process {r['served']}; {r['checks'].line()}",
                    flush=True,
                )
            r = await phase(args, pg, root / "work", args.processes, args.chats, faults=True)
            c = r["checks"]
            print(
                f"faults ({args.processes} processes, {args.chats} chats × {args.messages}): "
                f"{c.line()} served per process {r['served']}",
                flush=True,
            )
            print(f"faults checks {'MET' if c.met else 'NOT MET'}", flush=True)
            for line in c.examples:
                print(f"  turn twice: {line}")
            if "kill" in r:
                print(
                    f"  (kill at {r['kill'][0] - r['started']:.2f}s, "
                    f"term at {r.get('term', (r['started'],))[0] - r['started']:.2f}s)"
                )
            for how, key in (("kill", "takeover"), ("term", "handover")):
                figures[key] = "n/a"
                if how in r:
                    _, chats = r[how]
                    waits = r.get(f"{how}_waits", [])
                    figures[key] = f"{p95(waits):.2f}" if waits else "n/a"
                    turns = r.get(f"{how}_turns", [])
                    print(
                        f"  {key}: {len(waits)} of {len(chats)} chats answered again; "
                        f"p50 {p50(waits):.2f} s; to the next turn started: p50 {p50(turns):.2f} "
                        f"p95 {p95(turns):.2f} s ({len(turns)} chats)",
                        flush=True,
                    )
            if args.skip_memory:
                figures["bytes"] = "skipped"
            else:
                url = pg.create(f"replicas_memory_{int(time.time())}")
                figures["bytes"] = await measure_memory(args, url, root / "work" / "memory")
    finally:
        await trio.to_thread.run_sync(pg.cleanup)
        if args.keep_logs:
            print(f"logs kept in {root / 'work'}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    p = [f"p{n}" for n in range(1, args.processes + 1)]
    head = " ".join([f"p1_turns_s={figures['p1']}", *(f"{k}={figures[k]}" for k in p[1:])])
    return (
        f"replicas {head} takeover_p95_s={figures['takeover']} "
        f"handover_p95_s={figures['handover']} bytes_per_idle_actor={figures['bytes']}"
    )


def main() -> None:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=1000, help="chats of the faults phase")
    parser.add_argument("--messages", type=int, default=5, help="messages per chat")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--tp-chats", type=int, default=300, help="chats of each throughput run")
    parser.add_argument("--idle-chats", type=int, default=10_000)
    parser.add_argument("--warm", type=int, default=200, help="chats before the first RSS")
    parser.add_argument("--lease-ttl", type=float, default=10.0, help="CHAT_LEASE_TTL")
    parser.add_argument(
        "--send-rate", type=int, default=10_000, help="SEND_RATE (engram's default: 30)"
    )
    parser.add_argument(
        "--reply-wait",
        type=float,
        default=2.0,
        help="faults phase: seconds a chat waits for the reply before its next message anyway",
    )
    parser.add_argument("--settle", type=float, default=120.0)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--tp-runs",
        default="",
        help="throughput runs to make, e.g. 1,3 (default: 1 to --processes)",
    )
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument(
        "--engram-repo", default="", help="run the engram processes from this checkout"
    )
    add_smoke_flag(parser)
    args = parser.parse_args()
    args.engram_repo = str(Path(args.engram_repo).resolve()) if args.engram_repo else ""
    shrink(
        parser,
        args,
        chats=12,
        messages=2,
        processes=3,
        tp_chats=6,
        tp_runs="1",
        idle_chats=300,
        warm=50,
        lease_ttl=3.0,
        settle=30.0,
    )
    print(trio.run(run, args))


if __name__ == "__main__":
    main()
