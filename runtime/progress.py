"""A tiny progress bar for CLI jobs (imports, re-embedding): no dependencies, stderr.

On a terminal it redraws one line — ``label [#####-----] 120/300 40% 55.2/s ETA 0:03`` — at
most every ``min_interval`` seconds. Elsewhere (pipes, CI, logs) it stays quiet until
``finish()``, which always prints one final line: ``label: 300/300 in 5.4s (55.6/s)``.

Log lines and warnings are written with :func:`write_line` (``runtime.logs`` does it for every
record): while a bar is drawn on the same stream, the bar's line is cleared first and the bar
drawn again below, so neither cuts into the other.

    with Progress(total, label="importing") as bar:
        for item in items:
            ...
            bar.advance()
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO


def format_duration(seconds: float) -> str:
    """``0:07``, ``12:30`` or ``1:02:03``."""
    total = max(0, round(seconds)) if math.isfinite(seconds) else 0
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def render_line(label: str, done: int, total: int | None, elapsed: float, width: int = 24) -> str:
    """The live line: bar (when the total is known), counts, percent, rate and ETA."""
    rate = done / elapsed if elapsed > 0 else 0.0
    prefix = f"{label} " if label else ""
    if not total:
        return f"{prefix}{done} done {rate:.1f}/s"
    fraction = min(1.0, done / total)
    filled = int(fraction * width)
    bar = "#" * filled + "-" * (width - filled)
    eta = format_duration((total - done) / rate) if rate > 0 and done < total else "--:--"
    return f"{prefix}[{bar}] {done}/{total} {fraction:.0%} {rate:.1f}/s ETA {eta}"


def render_final(label: str, done: int, total: int | None, elapsed: float) -> str:
    """The last line: what was done, how long it took, the mean rate."""
    rate = done / elapsed if elapsed > 0 else 0.0
    counts = f"{done}/{total}" if total is not None else str(done)
    prefix = f"{label}: " if label else ""
    return f"{prefix}{counts} in {elapsed:.1f}s ({rate:.1f}/s)"


_lock = threading.RLock()
_drawn: list[Progress] = []  # bars whose line is on screen now (at most one per stream)


def write_line(stream: TextIO, text: str) -> None:
    """Write ``text`` and a newline to ``stream``, above any progress bar drawn there."""
    with _lock:
        bar = next((b for b in _drawn if b.stream is stream), None)
        try:
            stream.write(("\r\x1b[K" if bar is not None else "") + text + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream must not fail the caller
            return
        if bar is not None:
            bar.redraw()


class Progress:
    """Counts work done; draws on a TTY, prints only the final line otherwise."""

    def __init__(
        self,
        total: int | None = None,
        *,
        label: str = "",
        stream: TextIO | None = None,
        tty: bool | None = None,
        min_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else _isatty(self.stream)
        self.total, self.label, self.done = total, label, 0
        self.min_interval = min_interval
        self._clock = clock
        self._started = clock()
        self._drawn_at: float | None = None
        self._finished = False

    def start(self, total: int | None = None) -> None:
        """(Re)start the clock, optionally with a new total."""
        if total is not None:
            self.total = total
        self._started = self._clock()
        self._draw(force=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def update(self, done: int) -> None:
        self.done = done
        self._draw()

    @property
    def elapsed(self) -> float:
        return max(0.0, self._clock() - self._started)

    def finish(self, message: str = "") -> None:
        """Print the final line (once), followed by ``message`` if given."""
        if self._finished:
            return
        self._finished = True
        line = render_final(self.label, self.done, self.total, self.elapsed)
        if message:
            line = f"{line} {message}"
        with _lock:
            if self in _drawn:
                _drawn.remove(self)
            self._write(("\r\x1b[K" if self.tty else "") + line + "\n")

    def redraw(self) -> None:
        """Draw the bar again now (after a line was written above it)."""
        self._draw(force=True)

    def _draw(self, *, force: bool = False) -> None:
        if not self.tty or self._finished:
            return
        now = self._clock()
        if not force and self._drawn_at is not None and now - self._drawn_at < self.min_interval:
            return
        self._drawn_at = now
        line = render_line(self.label, self.done, self.total, self.elapsed)
        with _lock:
            if self not in _drawn:
                _drawn[:] = [b for b in _drawn if b.stream is not self.stream] + [self]
            self._write(f"\r{line}\x1b[K")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream must not fail the job
            pass

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish("(interrupted)" if exc is not None else "")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
