"""runtime/metrics.py: bounded labels, and what the observing functions add to the registry."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime import metrics


def sample(name: str, **labels: str) -> float:
    text = generate_latest(metrics.REGISTRY).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return 0.0


def test_reasons_become_few_labels() -> None:
    assert metrics.reason_label("daily cap: 3 sent today (max 3)") == "daily_cap"
    assert metrics.reason_label("missed: 4000 s late") == "missed"
    assert metrics.reason_label("quiet hours 22-08 past the grace") == "quiet_hours_past_the_grace"
    assert metrics.reason_label("unknown routine 'x' of chat 12") == "unknown_routine_of_chat"
    assert metrics.reason_label(None) == metrics.reason_label("") == "none"
    assert len(metrics.reason_label("word " * 40)) <= 40
    assert metrics.actor_kind("chats[12345]") == "chats"
    assert metrics.actor_kind("sender") == "sender"


def test_observations_reach_the_exposition() -> None:
    before = sample("engram_proactive_skips_total", reason="daily_cap")
    metrics.proactive_skipped("daily cap: 2 sent today (max 2)")
    assert sample("engram_proactive_skips_total", reason="daily_cap") == before + 1
    drafts = sample("engram_first_draft_seconds_count")
    metrics.first_draft_shown(0.7)
    assert sample("engram_first_draft_seconds_count") == drafts + 1
    cost = sample("engram_model_cost_usd_total", purpose="test", model="m")
    metrics.model_call(
        purpose="test",
        model="m",
        ok=True,
        input_tokens=10,
        output_tokens=0,
        cache_read_tokens=0,
        cache_write_tokens=0,
        cost_usd=0.25,
        latency_ms=120,
    )
    assert sample("engram_model_cost_usd_total", purpose="test", model="m") == cost + 0.25
    assert sample("engram_model_tokens_total", purpose="test", kind="input") >= 10
