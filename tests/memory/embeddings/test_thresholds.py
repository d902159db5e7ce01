"""Per-model similarity thresholds and their settings overrides."""

import pytest

from memory.embeddings.thresholds import SEED, Thresholds, default_thresholds, thresholds_for
from memory.settings import MemorySettings
from runtime.errors import SettingsError
from runtime.settings import load_settings


def test_seed_values_for_openai_model() -> None:
    t = default_thresholds("text-embedding-3-small")
    assert (t.min_similarity, t.dedup, t.adjudicate, t.merge) == (0.4, 0.90, 0.82, 0.88)


def test_unknown_model_falls_back_to_seed() -> None:
    assert default_thresholds("some-new-model") == SEED


def test_settings_override_only_what_is_set() -> None:
    settings = load_settings(MemorySettings, {"PATTERN_DEDUP_THRESHOLD": "0.95"}, dotenv=None)
    t = thresholds_for("text-embedding-3-small", settings)
    assert t.dedup == 0.95
    assert t.adjudicate == SEED.adjudicate
    defaults = load_settings(MemorySettings, {}, dotenv=None)
    assert thresholds_for("text-embedding-3-small", defaults) == SEED


def test_bad_threshold_setting_names_the_variable() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(MemorySettings, {"PATTERN_MIN_SIMILARITY": "1.5"}, dotenv=None)
    assert "PATTERN_MIN_SIMILARITY" in str(info.value)


def test_inconsistent_thresholds_are_refused() -> None:
    with pytest.raises(ValueError):
        Thresholds(min_similarity=0.4, dedup=0.8, adjudicate=0.85, merge=0.88)
