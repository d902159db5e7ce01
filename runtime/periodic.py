"""A background job that runs one pass at start and then every ``interval`` seconds.

A failing pass is logged and counted, and the next one runs on schedule: a database hiccup
must not end the job. Subclasses implement :meth:`PeriodicJob.run_once`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import trio

from runtime.logs import get_logger

log = get_logger(__name__)


class PeriodicJob(ABC):
    """Base of the maintenance jobs started with the system (``run`` is the task)."""

    name = "job"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.passes = 0
        self.failures = 0

    @abstractmethod
    async def run_once(self) -> object:
        """One pass of the job."""

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        while True:
            try:
                await self.run_once()
            except Exception as exc:  # a database hiccup must not end the job
                self.failures += 1
                log.warning(f"{self.name}.failed", error=f"{type(exc).__name__}: {exc}")
            else:
                self.passes += 1
            await trio.sleep(self.interval)
