"""Small structured-concurrency helpers over trio nurseries."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any, Self, TypeVar

import trio

A = TypeVar("A")
B = TypeVar("B")


async def both(
    first: Callable[[], Awaitable[A]], second: Callable[[], Awaitable[B]]
) -> tuple[A, B]:
    """Run two coroutine functions concurrently and return both results.

    The first ``Exception`` either raises cancels the other and is re-raised *as is* (not
    inside an exception group), so callers keep catching the errors they know. Cancellation
    from outside propagates normally."""
    results: dict[int, Any] = {}
    failure: list[Exception] = []

    async def run(index: int, fn: Callable[[], Awaitable[Any]]) -> None:
        try:
            results[index] = await fn()
        except Exception as exc:
            if not failure:
                failure.append(exc)
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, 0, first)
        nursery.start_soon(run, 1, second)
    if failure:
        raise failure[0]
    return results[0], results[1]


class AsyncClosing(abc.ABC):
    """A resource released by ``aclose``; ``async with`` releases it when the block ends."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the resource (connections, an SDK client)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
