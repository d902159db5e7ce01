"""Errors raised by the runtime package (actor kernel, settings, database, migrations)."""

from __future__ import annotations


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``exc`` (``[exc]`` when it is not a group)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaf_exceptions(sub)]
    return [exc]


class EngramError(Exception):
    """Base class of every error engram raises on purpose."""


# --- settings -------------------------------------------------------------------------------


class SettingsError(EngramError):
    """A configuration value is missing or invalid; start-up must stop (exit code 2)."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


class SettingsErrors(SettingsError):
    """Several configuration problems at once (every bad or missing variable, one per name).

    ``problems`` holds them in the configuration table's order; ``partial`` is what could be
    loaded anyway (bad values replaced by their defaults), so later checks can still run and
    add theirs. Build one with :func:`settings_error`.
    """

    def __init__(self, problems: list[SettingsError], partial: object | None = None) -> None:
        EngramError.__init__(self, "; ".join(str(p) for p in problems))
        self.name = problems[0].name
        self.problem = problems[0].problem
        self.problems = problems
        self.partial = partial


def settings_problems(exc: SettingsError) -> list[SettingsError]:
    """The single problems inside ``exc`` (itself when it is one)."""
    return list(exc.problems) if isinstance(exc, SettingsErrors) else [exc]


def settings_error(
    problems: list[SettingsError], partial: object | None = None
) -> SettingsError | None:
    """None for no problem, the problem itself for one, :class:`SettingsErrors` for more (a
    variable named twice is reported once, first come first kept)."""
    unique: dict[str, SettingsError] = {}
    for problem in problems:
        for single in settings_problems(problem):
            unique.setdefault(single.name, single)
    if not unique:
        return None
    found = list(unique.values())
    if len(found) == 1 and partial is None:
        return found[0]
    return SettingsErrors(found, partial)


# --- actor kernel ---------------------------------------------------------------------------


class ActorError(EngramError):
    """Base class of actor-kernel errors."""


class MailboxFull(ActorError):
    """A message was refused because the target mailbox is full (overload policy: reject)."""


class ActorStopped(ActorError):
    """The target actor is stopped or stopping and accepts no more messages."""


class RegistryFull(ActorError):
    """The keyed registry is at its live-actor limit and no idle actor could be evicted."""


class RequestTimeout(ActorError):
    """A request/reply exchange got no reply in time."""


class EscalationError(ActorError):
    """A supervised child crashed more often than its restart budget allows."""

    def __init__(self, name: str, restarts: int, window: float, last: BaseException | None) -> None:
        super().__init__(f"actor {name!r} crashed {restarts} times within {window:g}s; escalating")
        self.actor_name = name
        self.restarts = restarts
        self.window = window
        self.last = last


# --- database -------------------------------------------------------------------------------


class DatabaseError(EngramError):
    """Base class of database errors; asyncpg's own classes never leave runtime/db.py."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class DatabaseUnavailable(DatabaseError):
    """The server cannot be reached, or the connection was lost."""


class DatabaseOutage(DatabaseError):
    """The database stayed unreachable past ``DB_OUTAGE_LIMIT``: the process gives up (exit 1).
    Its message is the whole line the CLI prints (``database unreachable for 300 s``)."""


class ExtensionMissing(DatabaseError):
    """A required extension (pgvector) is not installed on the server."""


PGVECTOR_HELP = (
    "the PostgreSQL server has no pgvector extension; install it "
    "(Debian/Ubuntu: apt install postgresql-16-pgvector; macOS: brew install pgvector; "
    "managed services: enable the 'vector' extension), or unset DATABASE_URL to use the "
    "embedded server, which ships it"
)


class IntegrityViolation(DatabaseError):
    """A constraint rejected the statement (unique, foreign key, check, not null)."""


class UniqueViolation(IntegrityViolation):
    """A unique constraint rejected the statement."""


class SerializationFailure(DatabaseError):
    """A concurrent transaction conflicted (serialization failure or deadlock); retry may work."""


class QueryError(DatabaseError):
    """The statement itself is wrong (syntax, unknown column, bad parameter type)."""


class QueryCanceled(DatabaseError):
    """The server cancelled the statement (statement timeout or explicit cancel)."""


class MigrationError(DatabaseError):
    """A migration could not be applied, or an applied migration file has changed."""
