"""The merge job's candidates (seed 000 "Periodic merge job"): every pair of one chat's *active*
patterns whose vectors for a model have cosine similarity at or above the merge threshold.

Cosines are a block matrix product over the chat's stored vectors (10,000 patterns of 256 dims
take ~5 s, where an all-pairs SQL join took 10 s for 3,000). Two events on different days are
never a pair. What is done with a pair is :mod:`memory.patterns.merge`.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from memory.embeddings.store import check_model
from runtime.db import Database


@attrs.frozen
class Candidate:
    """A pair of one chat's active patterns at or above the merge threshold."""

    chat_id: int
    a_id: int
    b_id: int
    a_content: str
    b_content: str
    similarity: float


_CHATS = """
/* all chats: the merge job's scan for chats with candidates (one when given) */
SELECT DISTINCT p.chat_id FROM patterns p
JOIN pattern_embeddings pe ON pe.chat_id = p.chat_id AND pe.pattern_id = p.id AND pe.model = $1
WHERE p.status = 'active' AND ($2::bigint IS NULL OR p.chat_id = $2)
ORDER BY p.chat_id
"""

_VECTORS = """
SELECT p.id, p.content, p.occurs_on, pe.dims, pe.embedding FROM patterns p
JOIN pattern_embeddings pe ON pe.pattern_id = p.id AND pe.model = $1 AND pe.chat_id = $2
  AND p.chat_id = pe.chat_id
WHERE p.chat_id = $2 AND p.status = 'active'
ORDER BY p.id
"""

BLOCK_ROWS = 1024  # rows of the similarity matrix computed at once (memory: BLOCK_ROWS x n)


def similar_pairs(
    vectors: npt.NDArray[np.float32], threshold: float, *, block: int = BLOCK_ROWS
) -> list[tuple[int, int, float]]:
    """``(i, j, cosine)`` for every ``i < j`` with cosine ``>= threshold``, most similar first
    (ties by ``i`` then ``j``). Rows are normalised here, so any non-zero vectors work."""
    n = vectors.shape[0]
    if n < 2:
        return []
    raw = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    m = (raw / np.where(norms == 0, 1, norms)).astype(np.float32)
    out: list[tuple[int, int, float]] = []
    for start in range(0, n, block):
        sims = m[start : start + block] @ m.T
        rows, cols = np.nonzero(sims >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            i = start + r
            if i < c:
                out.append((i, c, float(sims[r, c])))
    out.sort(key=lambda t: (-t[2], t[0], t[1]))
    return out


def _as_array(value: Any) -> npt.NDArray[np.float32]:
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy else value, dtype=np.float32)


async def candidate_pairs(
    db: Database, model: str, threshold: float, *, chat_id: int | None = None
) -> list[Candidate]:
    """Active same-chat pairs at or above ``threshold`` for ``model``: by chat, then most
    similar first. Cosines are computed here over each chat's vectors (an all-pairs scan in
    SQL is quadratic in distance calls; a block matrix product is not)."""
    model = check_model(model)
    out: list[Candidate] = []
    for chat in await db.fetch(_CHATS, model, chat_id):
        rows = await db.fetch(_VECTORS, model, chat["chat_id"])
        by_dims: dict[int, list[Any]] = {}
        for r in rows:  # a model has one size; group anyway so mixed rows never compare
            by_dims.setdefault(int(r["dims"]), []).append(r)
        found: list[Candidate] = []
        for group in by_dims.values():
            matrix = np.stack([_as_array(r["embedding"]) for r in group])
            for i, j, sim in similar_pairs(matrix, threshold):
                a, b = group[i], group[j]
                if a["occurs_on"] != b["occurs_on"]:  # another day is another event
                    continue
                found.append(
                    Candidate(
                        int(chat["chat_id"]),
                        int(a["id"]),
                        int(b["id"]),
                        a["content"],
                        b["content"],
                        sim,
                    )
                )
        found.sort(key=lambda c: (-c.similarity, c.a_id, c.b_id))
        out.extend(found)
    return out
