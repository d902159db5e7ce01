"""What an idle keyed actor costs (issue 26: 10,000 idle chats in one process, goal 16 KB each
in RSS): the registry's share, measured on the Python heap."""

from __future__ import annotations

import gc
import tracemalloc

import trio

from runtime.registry import Registry

ACTORS = 2000
#: the registry's share of an idle actor (task, coroutine frames, cancel scope, mailbox and its
#: channel, slot): ~7.2 KB measured; the chat actor's state (~0.8 KB) and the allocator's
#: slack come on top in RSS
BUDGET = 8 * 1024


class Idle:
    async def handle(self, msg: object) -> None:
        pass


async def test_an_idle_actor_costs_under_8_kb_of_heap() -> None:
    async with trio.open_nursery() as nursery:
        registry: Registry[int, object] = await nursery.start(
            Registry("chats", lambda key: Idle(), idle_timeout=3600, max_actors=ACTORS + 100).run
        )
        for key in range(100):  # warm: first-use allocations, caches
            await registry.send(key, object())
        await trio.sleep(0.01)
        tracemalloc.start()
        try:
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            for key in range(100, 100 + ACTORS):
                await registry.send(key, object())
            await trio.sleep(0.01)
            gc.collect()
            per_actor = (tracemalloc.get_traced_memory()[0] - before) / ACTORS
        finally:
            tracemalloc.stop()
        assert len(registry) == ACTORS + 100
        await registry.aclose()
    assert per_actor < BUDGET, f"{per_actor:.0f} B per idle actor"
