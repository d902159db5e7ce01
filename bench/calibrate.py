"""Calibrate the similarity thresholds of an embedding model on the paraphrase set.

    .venv/bin/python bench/calibrate.py [--set bench/data/paraphrases.jsonl] [--smoke]

``bench/data/paraphrases.jsonl`` (written for engram, not derived from any evaluation set) holds
short first-person-memory claims in the style of patterns, in pairs labelled:

* ``same``            the claim and a paraphrase of it (a duplicate: should be reinforced/merged);
* ``related``         same topic, different claim (the hard negatives: must NOT be merged);
* ``unrelated``       claims of different topics;
* ``query``           a user message or question -> the claim it should retrieve;
* ``query_unrelated`` a user message -> a claim of another topic.

Every pair is embedded with the local model (and with OpenAI's ``text-embedding-3-small`` too when
``OPENAI_API_KEY`` is set), the cosine distribution of each label is printed, and thresholds are
picked by the rules below (all values rounded to 0.01):

* ``dedup``: the lowest value with at most ``DEDUP_MAX_RELATED`` (1%) of ``related`` pairs and no
  ``unrelated`` pair at or above it (auto-reinforce must be precise; whatever paraphrases fall
  below go to adjudication). Related pairs the model cannot tell apart at all (cosine >=
  ``INDISTINGUISHABLE``: a mean-pooled static model gives "prefers tea over coffee" and "prefers
  coffee over tea" the same vector) are left out of that count, since no threshold separates
  them, and reported on their own;
* ``adjudicate``: the ``ADJUDICATE_SAME_RECALL`` (90%) recall point of ``same`` pairs (capped at
  ``dedup``): most paraphrases reach the LLM, the rest are inserted as new patterns;
* ``merge``: the lowest value with at most ``MERGE_MAX_RELATED`` (5%) of ``related`` pairs at or
  above it, clamped into [adjudicate, dedup] (the merge job adjudicates every pair, so it may
  reach further than auto-dedup but should not flood the LLM with hard negatives);
* ``min_similarity``: the ``FLOOR_QUERY_RECALL`` (90%) recall point of ``query`` pairs, rounded
  down to 0.05: a floor that keeps relevant query -> claim pairs.

Last line: ``calibration <model> min_similarity=<a> dedup=<b> adjudicate=<c> merge=<d>``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

import attrs
import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _smoke import add_smoke_flag

from memory.embeddings.providers import Embedder, LocalEmbedder, OpenAIEmbedder
from memory.embeddings.thresholds import Thresholds, default_thresholds

DEFAULT_SET = Path(__file__).resolve().parent / "data" / "paraphrases.jsonl"
LABELS = ("same", "related", "unrelated", "query", "query_unrelated")
DEDUP_MAX_RELATED = 0.01
MERGE_MAX_RELATED = 0.05
ADJUDICATE_SAME_RECALL = 0.90
FLOOR_QUERY_RECALL = 0.90
INDISTINGUISHABLE = 0.999
SMOKE_PAIRS = 12


@attrs.frozen
class Pair:
    label: str
    a: str
    b: str
    group: int


def load_pairs(path: Path = DEFAULT_SET) -> list[Pair]:
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if row["label"] not in LABELS:
                raise ValueError(f"unknown label {row['label']!r} in {path}")
            pairs.append(Pair(row["label"], row["a"], row["b"], int(row.get("group", -1))))
    return pairs


async def pair_similarities(embedder: Embedder, pairs: Sequence[Pair]) -> dict[str, np.ndarray]:
    """Cosine similarity of every pair, grouped by label."""
    texts = sorted({t for p in pairs for t in (p.a, p.b)})
    vectors = await embedder.embed(texts, purpose="calibration")
    index = {t: v for t, v in zip(texts, vectors, strict=True)}
    out: dict[str, list[float]] = {label: [] for label in LABELS}
    for p in pairs:
        out[p.label].append(float(np.dot(index[p.a], index[p.b])))
    return {label: np.asarray(v, dtype=np.float64) for label, v in out.items()}


def share_at_or_above(values: np.ndarray, threshold: float) -> float:
    """The fraction of ``values`` >= ``threshold`` (with a 1e-9 tolerance for rounding)."""
    return float(np.mean(values >= threshold - 1e-9)) if len(values) else 0.0


def _grid() -> list[float]:
    return [round(i / 100, 2) for i in range(0, 101)]


def pick_thresholds(sims: Mapping[str, np.ndarray]) -> Thresholds:
    """Thresholds by the module's rules from per-label similarities."""
    grid = _grid()
    separable = sims["related"][sims["related"] < INDISTINGUISHABLE]
    dedup = next(
        t
        for t in grid
        if share_at_or_above(separable, t) <= DEDUP_MAX_RELATED
        and share_at_or_above(sims["unrelated"], t) == 0.0
    )
    same = np.sort(sims["same"])
    recall_point = float(np.quantile(same, 1.0 - ADJUDICATE_SAME_RECALL, method="lower"))
    adjudicate = min(math.floor(recall_point * 100) / 100, dedup)
    merge = next(t for t in grid if share_at_or_above(sims["related"], t) <= MERGE_MAX_RELATED)
    merge = min(max(merge, adjudicate), dedup)
    query_point = float(np.quantile(sims["query"], 1.0 - FLOOR_QUERY_RECALL, method="lower"))
    floor = math.floor(query_point * 20) / 20
    return Thresholds(
        min_similarity=round(floor, 2), dedup=dedup, adjudicate=round(adjudicate, 2), merge=merge
    )


def describe(values: np.ndarray) -> str:
    q = np.quantile(values, [0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0])
    return "  ".join(f"{v:.3f}" for v in q)


def report(
    model: str, sims: Mapping[str, np.ndarray], chosen: Thresholds, out: TextIO = sys.stdout
) -> None:
    print(f"\n== {model}", file=out)
    print(f"{'label':<16} {'n':>4}   min    p5     p25    p50    p75    p95    max", file=out)
    for label in LABELS:
        print(f"{label:<16} {len(sims[label]):>4}   {describe(sims[label])}", file=out)
    print("\nshare of pairs at or above each threshold:", file=out)
    print(f"{'threshold':<26}" + "".join(f"{lb:>16}" for lb in LABELS), file=out)
    for name in ("dedup", "merge", "adjudicate", "min_similarity"):
        t = getattr(chosen, name)
        shares = "".join(f"{share_at_or_above(sims[lb], t):>16.3f}" for lb in LABELS)
        print(f"{name + f' = {t:.2f}':<26}{shares}", file=out)
    tied = int(np.sum(sims["related"] >= INDISTINGUISHABLE))
    print(
        f"related pairs the model cannot separate (cosine >= {INDISTINGUISHABLE}): {tied}", file=out
    )
    current = default_thresholds(model)
    if current != chosen:
        print(f"(memory.embeddings.thresholds has {current} for this model)", file=out)


async def calibrate(path: Path, smoke: bool = False) -> list[tuple[str, Thresholds]]:
    pairs = load_pairs(path)
    if smoke:  # the first SMOKE_PAIRS of each label; the local model only
        pairs = [p for lb in LABELS for p in [q for q in pairs if q.label == lb][:SMOKE_PAIRS]]
    counts = {lb: sum(p.label == lb for p in pairs) for lb in LABELS}
    print(f"{len(pairs)} pairs from {path}: {counts}")
    embedders: list[Embedder] = [LocalEmbedder()]
    if os.environ.get("OPENAI_API_KEY") and not smoke:
        embedders.append(OpenAIEmbedder(api_key=os.environ["OPENAI_API_KEY"]))
    results = []
    for embedder in embedders:
        sims = await pair_similarities(embedder, pairs)
        chosen = pick_thresholds(sims)
        report(embedder.model, sims, chosen)
        results.append((embedder.model, chosen))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--set", type=Path, default=DEFAULT_SET, help="paraphrase set (JSONL)")
    add_smoke_flag(parser)
    args = parser.parse_args()
    results = trio.run(calibrate, args.set, args.smoke)
    print()
    for model, t in results:
        print(
            f"calibration {model} min_similarity={t.min_similarity:.2f} dedup={t.dedup:.2f} "
            f"adjudicate={t.adjudicate:.2f} merge={t.merge:.2f}"
        )


if __name__ == "__main__":
    main()
