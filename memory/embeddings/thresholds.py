"""Similarity thresholds per embedding model.

Cosine similarities are not comparable across models: the seed's numbers (0.4 retrieval floor,
0.90 auto-dedup, 0.82 adjudication, 0.88 merge) are for OpenAI ``text-embedding-3-small``. Other
models get their own calibrated values here; any value can be overridden by a setting
(``PATTERN_MIN_SIMILARITY`` and friends), which then applies to whatever model is current.

The local model (wordllama ``l2_supercat``, 256-d) is calibrated by ``bench/calibrate.py`` on
``bench/data/paraphrases.jsonl`` (368 pairs of pattern-style claims written for engram: 92
paraphrases, 92 related-but-different claims, 46 unrelated, 92 query -> relevant claim and 46
query -> unrelated claim); ``tests/memory/embeddings/test_calibration.py`` re-checks the figures
below. It is a
mean-pooled static embedding, so its cosines run lower for queries and paraphrases and cannot
see word order ("prefers tea over coffee" == "prefers coffee over tea", cosine 1.0: 2 of the 92
related pairs), which is why auto-dedup sits high and most near-duplicates are adjudicated.
"""

from __future__ import annotations

import attrs

from memory.settings import MemorySettings


@attrs.frozen
class Thresholds:
    """The four similarity cut-offs pattern memory uses for one embedding model."""

    min_similarity: float  # retrieval: candidates below this are never injected
    dedup: float  # >= this (same kind): reinforce the existing pattern, keep the text as alias
    adjudicate: float  # [adjudicate, dedup): ask the LLM whether it is the same pattern
    merge: float  # `engram patterns merge` considers active pairs at or above this

    def __attrs_post_init__(self) -> None:
        for name in ("min_similarity", "dedup", "adjudicate", "merge"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.adjudicate > self.dedup:
            raise ValueError("the adjudication threshold must not exceed the dedup threshold")


SEED = Thresholds(min_similarity=0.4, dedup=0.90, adjudicate=0.82, merge=0.88)

# Calibrated per model (see README "Memory thresholds"); unknown models fall back to SEED.
BY_MODEL: dict[str, Thresholds] = {
    "text-embedding-3-small": SEED,
    # bench/calibrate.py on bench/data/paraphrases.jsonl (share of pairs at or above):
    #   dedup 0.92:       10.9% of paraphrases, 0% of separable related pairs (2.2% with the
    #                     2 word-order swaps no threshold separates), 0% unrelated
    #   merge 0.87:       25.0% of paraphrases, 4.3% of related pairs
    #   adjudicate 0.57:  90.2% of paraphrases, 59.8% of related pairs (the LLM decides those)
    #   min_similarity 0.05: 95.7% of query -> relevant claim pairs, 28.3% of query ->
    #                     unrelated claim (the seed's 0.4 would keep only 41% of relevant pairs)
    "wordllama-l2-supercat-256": Thresholds(
        min_similarity=0.05, dedup=0.92, adjudicate=0.57, merge=0.87
    ),
}


def default_thresholds(model: str) -> Thresholds:
    """The calibrated thresholds of ``model`` (the seed's values when it is unknown)."""
    return BY_MODEL.get(model, SEED)


def thresholds_for(model: str, settings: MemorySettings | None = None) -> Thresholds:
    """``model``'s thresholds with any ``PATTERN_*`` setting applied over them."""
    base = default_thresholds(model)
    if settings is None:
        return base
    overrides = {
        "min_similarity": settings.pattern_min_similarity,
        "dedup": settings.pattern_dedup_threshold,
        "adjudicate": settings.pattern_adjudicate_threshold,
        "merge": settings.pattern_merge_threshold,
    }
    return attrs.evolve(base, **{k: v for k, v in overrides.items() if v is not None})
