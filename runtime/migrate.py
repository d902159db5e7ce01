"""Schema migrations: ``migrations/NNN_name.sql`` applied in order, once, under a lock.

Each file runs in its own transaction together with the row that records it (version, name,
SHA-256 checksum). The whole run holds a session-level advisory lock, so two processes starting
together apply each migration exactly once: the second waits, then finds nothing to do.
An applied file whose checksum changed stops start-up: edit history by adding a migration.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import attrs

from runtime.db import Database
from runtime.errors import MigrationError
from runtime.logs import get_logger

log = get_logger(__name__)

# "engram migrations" folded into a signed 64-bit advisory lock key
MIGRATION_LOCK_KEY = 0x656E6772616D6D
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INT PRIMARY KEY,
    name        TEXT NOT NULL,
    checksum    TEXT NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


@attrs.frozen
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()

    @property
    def filename(self) -> str:
        return f"{self.version:03d}_{self.name}.sql"


def load_migrations(package: str = "migrations") -> list[Migration]:
    """Every ``NNN_name.sql`` in the package, in version order (works from an installed copy)."""
    found: list[Migration] = []
    for item in resources.files(package).iterdir():
        match = _NAME.match(item.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], item.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError("two migration files share a version number")
    return found


def check_applied(migrations: list[Migration], applied: dict[int, tuple[str, str]]) -> None:
    """Refuse when an applied file changed or the database knows migrations this code lacks."""
    known = {m.version: m for m in migrations}
    for version, (name, checksum) in sorted(applied.items()):
        mig = known.get(version)
        if mig is None:
            raise MigrationError(
                f"the database has migration {version:03d}_{name}.sql, which this engram does "
                "not know; run a newer engram"
            )
        if mig.checksum != checksum:
            raise MigrationError(
                f"migration {mig.filename} was changed after it was applied (checksum "
                f"{checksum[:12]} in the database, {mig.checksum[:12]} on disk); restore the "
                "file and put the change in a new migration"
            )


async def _applied(db: Database) -> dict[int, tuple[str, str]]:
    rows = await db.fetch("SELECT version, name, checksum FROM schema_migrations")
    return {r["version"]: (r["name"], r["checksum"]) for r in rows}


async def apply_migrations(db: Database, migrations: list[Migration] | None = None) -> list[str]:
    """Apply what is pending; returns the file names applied by this call."""
    migrations = load_migrations() if migrations is None else migrations
    done: list[str] = []
    async with db.connection() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        try:
            await conn.execute(_CREATE_TABLE)
            applied = {
                r["version"]: (r["name"], r["checksum"])
                for r in await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
            }
            check_applied(migrations, applied)
            for mig in migrations:
                if mig.version in applied:
                    continue
                try:
                    async with conn.transaction():
                        await conn.execute(mig.sql)
                        await conn.execute(
                            "INSERT INTO schema_migrations (version, name, checksum) "
                            "VALUES ($1, $2, $3)",
                            mig.version,
                            mig.name,
                            mig.checksum,
                        )
                except MigrationError:
                    raise
                except Exception as exc:
                    raise MigrationError(f"migration {mig.filename} failed: {exc}") from exc
                log.info("db.migration_applied", migration=mig.filename)
                done.append(mig.filename)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return done


async def migrations_current(db: Database, migrations: list[Migration] | None = None) -> bool:
    """True when every known migration is applied with an unchanged checksum."""
    migrations = load_migrations() if migrations is None else migrations
    exists = await db.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return False
    applied = await _applied(db)
    try:
        check_applied(migrations, applied)
    except MigrationError:
        return False
    return all(m.version in applied for m in migrations)
