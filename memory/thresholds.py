"""Similarity thresholds per embedding model.

Cosine similarities are not comparable across models: the seed's numbers (0.4 retrieval floor,
0.90 auto-dedup, 0.82 adjudication, 0.88 merge) are for OpenAI ``text-embedding-3-small``. Other
models get their own calibrated values here; any value can be overridden by a setting
(``PATTERN_MIN_SIMILARITY`` and friends), which then applies to whatever model is current.
"""

from __future__ import annotations

import attrs

from runtime.settings import Settings


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
    # TODO(calibration): replaced by values measured on the paraphrase set.
    "wordllama-l2-supercat-256": SEED,
}


def default_thresholds(model: str) -> Thresholds:
    """The calibrated thresholds of ``model`` (the seed's values when it is unknown)."""
    return BY_MODEL.get(model, SEED)


def thresholds_for(model: str, settings: Settings | None = None) -> Thresholds:
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
