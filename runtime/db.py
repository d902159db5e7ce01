"""PostgreSQL access for trio: asyncpg connections driven through trio-asyncio.

This is the only module that imports asyncpg and trio_asyncio. Everything above it sees
:class:`Database` / :class:`Connection` with ``execute``/``fetch``/``fetchrow``/``fetchval``
and the project's own error classes from :mod:`runtime.errors`.

The pool is trio's (:mod:`runtime.db_pool`): taking and returning a connection costs no
crossing, so a plain query crosses into asyncio once, for the statement itself. The pgvector
codec is registered on every connection (vectors in and out as numpy arrays).

Session state (advisory locks, settings, cursors) is only changed on a connection held through
:meth:`Database.connection` / :meth:`Database.transaction`, reset (rollback, ``RESET ALL`` &
co.) before it goes back to the pool; a one-shot query goes back without that round trip.
:func:`listen` keeps a connection of its own.
"""

from __future__ import annotations

import abc
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, ParamSpec, Protocol, TypeVar

import asyncpg
import trio
import trio_asyncio
from pgvector.asyncpg import register_vector

from runtime import errors
from runtime.db_health import DatabaseHealth
from runtime.db_pool import ConnectionPool
from runtime.db_url import redact_url, url_problem
from runtime.logs import get_logger

log = get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
Row = Mapping[str, Any]
EXTENSION_LOCK_KEY = 0x656E677265787401


def asyncio_loop() -> Any:
    """The asyncio loop context every database user must run under (``async with``)."""
    return trio_asyncio.open_loop()


_SQLSTATE_CLASSES: dict[str, type[errors.DatabaseError]] = {
    "23505": errors.UniqueViolation,
    "40001": errors.SerializationFailure,
    "40P01": errors.SerializationFailure,
    "57014": errors.QueryCanceled,
}
_SQLSTATE_PREFIXES: dict[str, type[errors.DatabaseError]] = {
    "23": errors.IntegrityViolation,
    "42": errors.QueryError,
    "22": errors.QueryError,
    "08": errors.DatabaseUnavailable,
    "57": errors.DatabaseUnavailable,
    "53": errors.DatabaseUnavailable,
}


def map_error(exc: BaseException) -> errors.DatabaseError:
    """Translate an asyncpg/OS error into the project's own error class."""
    if isinstance(exc, errors.DatabaseError):
        return exc
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        cls = _SQLSTATE_CLASSES.get(state) or _SQLSTATE_PREFIXES.get(
            state[:2], errors.DatabaseError
        )
        message = str(exc)
        if state == "42704" and "vector" in message:
            return errors.ExtensionMissing(errors.PGVECTOR_HELP, sqlstate=state)
        return cls(f"{type(exc).__name__}: {message}", sqlstate=state or None)
    if isinstance(exc, asyncpg.InterfaceError | asyncpg.exceptions.InternalClientError):
        if "connection" in str(exc).lower() and "closed" in str(exc).lower():
            return errors.DatabaseUnavailable(f"connection lost: {exc}")
        if "cannot switch to state" in str(exc):
            # the protocol was left mid-operation (its connection lost under it): a fresh
            # connection is the cure, as for a lost one
            return errors.DatabaseUnavailable(f"connection broken: {exc}")
        return errors.QueryError(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, OSError | ConnectionError | TimeoutError | EOFError):
        return errors.DatabaseUnavailable(f"{type(exc).__name__}: {exc}")
    return errors.DatabaseError(f"{type(exc).__name__}: {exc}")


_DRIVER = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError)
_MAPPED = (*_DRIVER, OSError, TimeoutError, EOFError)


async def _bridge(fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run one asyncio coroutine function from trio, mapping errors."""
    try:
        return await trio_asyncio.aio_as_trio(fn)(*args, **kwargs)  # type: ignore[no-any-return]
    except _MAPPED as exc:
        raise map_error(exc) from exc
    except AttributeError as exc:  # asyncpg meeting a connection terminated under it (None)
        where = traceback.extract_tb(exc.__traceback__)[-1].filename
        if "NoneType" not in str(exc) or "asyncpg" not in where:
            raise
        raise errors.DatabaseUnavailable(f"connection closed under the statement: {exc}") from exc


class Queries(Protocol):
    """What code above the database needs of it: :class:`Database` or a :class:`Connection`
    (in a transaction). The one declaration; stores and queries take this, not ``Database``,
    unless they open transactions or hold connections themselves."""

    async def execute(self, query: str, *args: Any) -> str: ...

    async def executemany(self, query: str, args: Sequence[Sequence[Any]]) -> None: ...

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]: ...

    async def fetchrow(self, query: str, *args: Any) -> Any: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...


class _Queries(abc.ABC):
    """Query methods shared by the pool handle and a single acquired connection."""

    @abc.abstractmethod
    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run the asyncpg connection method ``method`` (mapping errors)."""

    async def execute(self, query: str, *args: Any) -> str:
        return await self._call("execute", query, *args)  # type: ignore[no-any-return]

    async def executemany(self, query: str, args: Sequence[Sequence[Any]]) -> None:
        await self._call("executemany", query, args)

    async def fetch(self, query: str, *args: Any) -> list[Row]:
        return await self._call("fetch", query, *args)  # type: ignore[no-any-return]

    async def fetchrow(self, query: str, *args: Any) -> Row | None:
        return await self._call("fetchrow", query, *args)  # type: ignore[no-any-return]

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self._call("fetchval", query, *args)

    async def copy_records(
        self, table: str, records: Sequence[Sequence[Any]], columns: Sequence[str]
    ) -> None:
        """Bulk load rows with COPY (fast path for imports and benchmarks)."""
        await self._call("copy_records_to_table", table, records=records, columns=list(columns))


class Connection(_Queries):
    """One connection held by the caller (inside ``transaction()`` or ``connection()``)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await _bridge(getattr(self._raw, method), *args, **kwargs)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A transaction on this connection: committed on success, rolled back on any error."""
        tx = self._raw.transaction()
        await _bridge(tx.start)
        try:
            yield self
        except BaseException:
            with trio.move_on_after(5, shield=True):
                try:
                    await _bridge(tx.rollback)
                except errors.DatabaseError as exc:
                    log.warning("db.rollback_failed", error=str(exc))
            raise
        else:
            await _bridge(tx.commit)


class Database(_Queries):
    """The pool handle. Plain queries use any free connection.

    A plain query leaves no session state behind, so its connection goes straight back to the
    pool; a connection held through :meth:`connection` (the only way to change session state:
    advisory locks, settings, LISTEN) is reset first (asyncpg's reset: rollback, ``RESET ALL``
    & co.). A connection whose statement was interrupted (cancelled, lost) is not reused."""

    def __init__(
        self, pool: ConnectionPool[Any], url: str, health: DatabaseHealth | None = None
    ) -> None:
        self._pool = pool
        self.url = url
        #: fed by the pool's connects; see :mod:`runtime.db_health`
        self.health = health if health is not None else DatabaseHealth()

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        raw = await self._pool.acquire()
        clean = False
        try:
            result = await _bridge(getattr(raw, method), *args, **kwargs)
            clean = True
            return result
        except errors.DatabaseError as exc:
            # the server refused the statement: the connection is idle again (a one-shot
            # statement opens no transaction); one lost or broken under the statement is not
            # reused, even before asyncpg has noticed that it is closed
            clean = (
                isinstance(exc.__cause__, asyncpg.PostgresError)
                and not isinstance(exc, errors.DatabaseUnavailable)
                and not raw.is_in_transaction()
            )
            raise
        finally:
            # interrupted (cancelled): the reset waits for asyncpg's cancel request to end
            # the statement on the server, then undoes whatever it left
            self._pool.release(raw, reusable=clean or await _reset(raw))

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """Hold one connection (e.g. for session-level advisory locks); reset before reuse."""
        raw = await self._pool.acquire()
        try:
            yield Connection(raw)
        finally:
            self._pool.release(raw, reusable=await _reset(raw))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A transaction on one pooled connection: committed on success, rolled back on error."""
        async with self.connection() as conn, conn.transaction():
            yield conn


async def listen(
    url: str,
    channel: str,
    on_payload: Callable[[str], None],
    *,
    retry_cap: float = 5.0,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``LISTEN channel`` on its own connection, ``on_payload`` called here for each notice,
    until cancelled; a lost connection is reopened with backoff (what was sent meanwhile is
    lost: a listener needs a sweep behind it). Started after the first attempt."""
    delay, status = 0.1, task_status
    while True:
        got, payloads = trio.open_memory_channel[str](1024)
        lost = trio.CancelScope()
        raw = await _listening(url, channel, got, lost)
        status.started()
        status = trio.TASK_STATUS_IGNORED
        if raw is not None:
            delay = 0.1
            try:
                with lost:
                    async for payload in payloads:
                        on_payload(payload)
            finally:
                raw.terminate()
            log.warning("db.listen_lost", channel=channel)
        await trio.sleep(delay)
        delay = min(delay * 2, retry_cap)


async def _listening(
    url: str, channel: str, got: trio.MemorySendChannel[str], lost: trio.CancelScope
) -> Any:
    """A connection listening on ``channel`` into ``got`` (None: unreachable)."""
    try:
        raw = await _bridge(asyncpg.connect, url, timeout=10)
        raw.add_termination_listener(lambda _conn: lost.cancel())
        await _bridge(raw.add_listener, channel, lambda *notice: _offer(got, notice[-1], channel))
    except errors.DatabaseUnavailable as exc:
        log.warning("db.listen_unavailable", channel=channel, error=str(exc))
        return None
    return raw


def _offer(to: trio.MemorySendChannel[str], payload: str, channel: str) -> None:
    with suppress(trio.WouldBlock):  # a flood: the sweep catches what is dropped
        to.send_nowait(payload)


async def _reset(raw: Any) -> bool:
    """Reset a connection's session (asyncpg's reset: it first waits for a cancelled statement
    to end, then rolls back an open transaction, ``RESET ALL``, advisory locks, LISTEN);
    False when that fails or takes over 5 s (the pool then drops the connection)."""
    if raw.is_closed() or raw.is_in_transaction() or raw._top_xact is not None:
        return False  # a transaction left open (its start or end cut off): dropped, not reused
    with trio.move_on_after(5, shield=True):
        try:
            await _bridge(raw.reset)
            return True
        except errors.DatabaseError as exc:
            log.warning("db.reset_failed", error=str(exc))
    return False


async def _connect(url: str, connect_timeout: float) -> Any:
    conn = await asyncpg.connect(url, timeout=connect_timeout)
    try:
        await register_vector(conn)
    except BaseException:
        conn.terminate()
        raise
    return conn


async def _connect_tracked(url: str, connect_timeout: float, health: DatabaseHealth) -> Any:
    """A new pool connection; its outcome tells ``health`` whether the server is reachable."""
    try:
        raw = await _bridge(_connect, url, connect_timeout)
    except errors.DatabaseUnavailable as exc:
        health.connect_failed(exc)
        raise
    health.connected()
    return raw


async def _ensure_pgvector(url: str, connect_timeout: float) -> None:
    try:
        conn = await asyncpg.connect(url)
    except ValueError as exc:  # ClientConfigurationError: the driver refused the URL
        raise errors.SettingsError(
            "DATABASE_URL", f"the database driver cannot use it ({type(exc).__name__})"
        ) from None
    try:
        available = await conn.fetchval(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"
        )
        if not available:
            raise errors.ExtensionMissing(errors.PGVECTOR_HELP)
        installed = await conn.fetchval(
            "SELECT count(*) FROM pg_extension WHERE extname = 'vector'"
        )
        if not installed:
            # serialize with other processes starting at the same moment
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", EXTENSION_LOCK_KEY)
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    finally:
        await conn.close()


async def _connect_with_retry(url: str, connect_timeout: float) -> None:
    """Wait until the server accepts connections (it may be starting), up to ``connect_timeout``."""
    timeout = connect_timeout
    delay = 0.1
    last: BaseException | None = None
    with trio.move_on_after(timeout):
        while True:
            try:
                await _bridge(_ensure_pgvector, url, max(0.5, min(5.0, timeout)))
                return
            except errors.DatabaseUnavailable as exc:
                last = exc
            await trio.sleep(delay)
            delay = min(delay * 2, 1.0)
    reason = str(last) if last else "timed out"
    raise errors.DatabaseUnavailable(
        f"cannot reach the database at {redact_url(url)} within {timeout:g}s: {reason}"
    )


@asynccontextmanager
async def open_database(
    url: str, *, min_size: int = 1, max_size: int = 10, connect_timeout: float = 10.0
) -> AsyncIterator[Database]:
    """Open a pool to ``url`` (must run under :func:`asyncio_loop`) and close it on exit.

    A URL the driver could not use is a :class:`~runtime.errors.SettingsError` naming
    DATABASE_URL; every message shows the URL redacted (:func:`runtime.db_url.redact_url`)."""
    problem = url_problem(url)
    if problem is not None:
        raise errors.SettingsError("DATABASE_URL", problem)
    await _connect_with_retry(url, connect_timeout)
    health = DatabaseHealth()
    pool: ConnectionPool[Any] = ConnectionPool(
        lambda: _connect_tracked(url, connect_timeout, health),
        lambda raw: _bridge(raw.close, timeout=connect_timeout),
        max_size=max_size,
    )
    try:
        await pool.fill(min_size)
    except errors.DatabaseUnavailable as exc:
        await pool.close()
        raise errors.DatabaseUnavailable(
            f"cannot reach the database at {redact_url(url)}: {exc}"
        ) from None
    log.info("db.open", url=redact_url(url), pool_max=max_size)
    try:
        yield Database(pool, url, health)
    finally:
        await pool.close()
        log.info("db.closed")
