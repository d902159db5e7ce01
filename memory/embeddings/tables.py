"""The embedding side tables (one per owner: entries, patterns, aliases, episodes), without
the storage code: the CLI offers them as choices when it builds its parser, which must not import
the database or numpy."""

from __future__ import annotations

import attrs


@attrs.frozen
class VectorTable:
    """A side table: its owner (table, key column), the owner's text column, chat scoping."""

    name: str
    owner_col: str
    owner_table: str
    text_col: str
    chat_scoped: bool


VECTOR_TABLES: dict[str, VectorTable] = {
    t.name: t
    for t in (
        VectorTable("entry_embeddings", "entry_id", "entries", "text", True),
        VectorTable("pattern_embeddings", "pattern_id", "patterns", "content", True),
        VectorTable("alias_embeddings", "alias_id", "pattern_aliases", "content", True),
        VectorTable("episode_embeddings", "episode_id", "episodes", "summary", True),
    )
}
ALL_TABLES = tuple(VECTOR_TABLES)


def vector_table(table: str, owner_col: str | None = None) -> VectorTable:
    """The allow-listed side table ``table`` (ValueError otherwise)."""
    spec = VECTOR_TABLES.get(table)
    if spec is None or (owner_col is not None and owner_col != spec.owner_col):
        raise ValueError(f"not an embedding side table: {table!r} ({owner_col!r})")
    return spec
