"""Cost of the trio-asyncio database bridge versus plain asyncpg under asyncio.

Runs against one PostgreSQL server (``--url``, else a throwaway embedded server): the median
per-query time of ``SELECT 1`` and of a 10-row fetch, through engram's ``runtime.db`` under trio
and through asyncpg directly under asyncio, interleaved in rounds so drift hits both alike.

    python bench/db_bridge.py [--url postgresql://...] [--queries 3000] [--rounds 5] [--smoke]

Last line: ``db_bridge ratio=<ours/native> ours_us=<x> native_us=<y>`` (ratio over SELECT 1 and
the 10-row fetch together).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _smoke import add_smoke_flag, shrink

from runtime import db as dbmod

SELECT_1 = "SELECT 1"
FETCH_10 = "SELECT g AS id, md5(g::text) AS label FROM generate_series(1, 10) AS g"


async def median_us(call: Callable[[str], Awaitable[object]], query: str, n: int) -> float:
    """The median microseconds of ``n`` runs of ``call(query)``, after 100 to warm up (under
    trio or asyncio alike)."""
    for _ in range(100):
        await call(query)
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        await call(query)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e6


async def ours(url: str, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with dbmod.asyncio_loop(), dbmod.open_database(url, max_size=2) as database:
        for name, query, call in (
            ("select1", SELECT_1, database.fetchval),
            ("fetch10", FETCH_10, database.fetch),
        ):
            out[name] = await median_us(call, query, n)
    return out


async def native(url: str, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    try:
        for name, query, call in (
            ("select1", SELECT_1, pool.fetchval),
            ("fetch10", FETCH_10, pool.fetch),
        ):
            out[name] = await median_us(call, query, n)
    finally:
        await pool.close()
    return out


def run(url: str, n: int, rounds: int) -> None:
    mine: dict[str, list[float]] = {"select1": [], "fetch10": []}
    theirs: dict[str, list[float]] = {"select1": [], "fetch10": []}
    for r in range(rounds):
        a = trio.run(ours, url, n)
        b = asyncio.run(native(url, n))
        for k in mine:
            mine[k].append(a[k])
            theirs[k].append(b[k])
        print(
            f"round {r + 1}: select1 ours={a['select1']:.1f}us native={b['select1']:.1f}us | "
            f"fetch10 ours={a['fetch10']:.1f}us native={b['fetch10']:.1f}us",
            flush=True,
        )
    summary = {}
    for k in mine:
        o, t = statistics.median(mine[k]), statistics.median(theirs[k])
        summary[k] = (o, t)
        print(f"{k}: ours {o:.1f} us/query, native {t:.1f} us/query, ratio {o / t:.2f}")
    ours_us = summary["select1"][0] + summary["fetch10"][0]
    native_us = summary["select1"][1] + summary["fetch10"][1]
    ratio = ours_us / native_us
    print(f"db_bridge ratio={ratio:.2f} ours_us={ours_us:.1f} native_us={native_us:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, queries=200, rounds=1)
    if args.url:
        run(args.url, args.queries, args.rounds)
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")  # type: ignore[attr-defined]
        try:
            run(server.get_uri(), args.queries, args.rounds)
        finally:
            server.cleanup()


if __name__ == "__main__":
    main()
