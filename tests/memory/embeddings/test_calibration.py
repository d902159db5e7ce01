"""The local model's calibrated thresholds still separate the paraphrase set as documented.

Recomputes the figures of memory/thresholds.py from bench/data/paraphrases.jsonl with the real
local embedder: a new model version or changed weights that shift the distributions fails here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.thresholds import BY_MODEL, SEED

ROOT = Path(__file__).resolve().parents[3]
MODEL = "wordllama-l2-supercat-256"


def _load_calibrate() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_calibrate", ROOT / "bench" / "calibrate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


calibrate = _load_calibrate()


@pytest.fixture(scope="module")
def sims() -> dict[str, np.ndarray]:
    import trio

    pairs = calibrate.load_pairs()
    result: dict[str, np.ndarray] = trio.run(calibrate.pair_similarities, LocalEmbedder(), pairs)
    return result


def share(values: np.ndarray, threshold: float) -> float:
    return float(calibrate.share_at_or_above(values, threshold))


def test_the_set_is_balanced_and_well_formed() -> None:
    pairs = calibrate.load_pairs()
    counts = {label: sum(p.label == label for p in pairs) for label in calibrate.LABELS}
    assert counts["same"] >= 80 and counts["related"] >= 80 and counts["query"] >= 80
    assert counts["unrelated"] >= 40 and counts["query_unrelated"] >= 40
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)  # no pair twice
    assert all(p.a != p.b for p in pairs)
    # paraphrases and hard negatives are anchored on the same claim within a group
    anchors: dict[int, set[str]] = {}
    for p in pairs:
        if p.label in ("same", "related"):
            anchors.setdefault(p.group, set()).add(p.a)
    assert all(len(a) == 1 for a in anchors.values())


def test_local_thresholds_are_calibrated_not_the_seed() -> None:
    t = BY_MODEL[MODEL]
    assert t != SEED
    assert t.min_similarity < t.adjudicate <= t.merge <= t.dedup


def test_rules_pick_the_documented_thresholds(sims: dict[str, np.ndarray]) -> None:
    assert calibrate.pick_thresholds(sims) == BY_MODEL[MODEL]


def test_dedup_is_precise(sims: dict[str, np.ndarray]) -> None:
    t = BY_MODEL[MODEL].dedup
    related = sims["related"]
    separable = related[related < calibrate.INDISTINGUISHABLE]
    assert share(separable, t) <= 0.01
    assert share(related, t) <= 0.025  # only the word-order swaps no threshold can separate
    assert len(related) - len(separable) <= 2
    assert share(sims["unrelated"], t) == 0.0
    assert share(sims["same"], t) >= 0.08  # the tier still reinforces the closest rewordings


def test_adjudication_catches_most_paraphrases(sims: dict[str, np.ndarray]) -> None:
    t = BY_MODEL[MODEL].adjudicate
    assert share(sims["same"], t) >= 0.90
    assert share(sims["unrelated"], t) == 0.0  # off-topic claims never cost an LLM call


def test_merge_sits_between_and_spares_related_claims(sims: dict[str, np.ndarray]) -> None:
    t = BY_MODEL[MODEL]
    assert t.adjudicate <= t.merge <= t.dedup
    assert share(sims["related"], t.merge) <= 0.05
    assert share(sims["same"], t.merge) > share(sims["same"], t.dedup)


def test_retrieval_floor_keeps_relevant_queries(sims: dict[str, np.ndarray]) -> None:
    t = BY_MODEL[MODEL].min_similarity
    assert share(sims["query"], t) >= 0.95
    assert share(sims["query_unrelated"], t) <= 0.35
    # the seed's OpenAI floor would throw most relevant pairs away with this model
    assert share(sims["query"], SEED.min_similarity) < 0.5
