"""/metrics and /api/v1/ from outside (issue 25 items 3-4): ``engram serve --webhook`` as a
subprocess with DASHBOARD_TOKEN and METRICS_TOKEN, the strict fake Bot API and the echo model.
After a scripted turn (webhook -> turn -> model -> reply), /metrics is parsed with
prometheus_client's parser and its values checked; the API answers good, wrong and missing
tokens, refuses another chat, and every answer matches the served OpenAPI document."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from api_schema import check_response
from engram_outside import Engram, free_port, post_update, run_echo_anthropic, serve_env
from fakes.bot_api import run_fake_bot_api
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

from actors.web.auth import chat_token
from runtime.db import Database

pytestmark = pytest.mark.slow

CHAT, OTHER = 5520301, 5520302
TOKEN = "outside-dashboard-token-42"
METRICS_TOKEN = "outside-metrics-token-42"


def value(text: str, name: str, **labels: str) -> float:
    """The sample ``name`` with (at least) ``labels`` summed over the rest."""
    total, found = 0.0, False
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total, found = total + s.value, True
    assert found, f"{name} {labels} not in /metrics"
    return total


async def test_metrics_after_a_turn_and_the_api_from_outside(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with (
        run_fake_bot_api() as bot,
        run_echo_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        port = free_port()
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=port,
            chats=[CHAT, OTHER],
            DATABASE_URL=database_url,
            DASHBOARD_TOKEN=TOKEN,
            METRICS_TOKEN=METRICS_TOKEN,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        base = f"http://127.0.0.1:{port}"
        try:
            await engram.wait_ready()
            auth = {"Authorization": f"Bearer {METRICS_TOKEN}"}
            assert (await client.get(f"{base}/metrics")).status_code == 401
            assert await post_update(client, port, bot.push_message(CHAT, "msg 1")) == 200
            with trio.fail_after(30):
                while not bot.sent_texts(CHAT):  # noqa: ASYNC110 - another process's doing
                    await trio.sleep(0.05)
            with trio.fail_after(10):  # the turn is counted once its reply is committed
                while True:
                    text = (await client.get(f"{base}/metrics", headers=auth)).text
                    if value(text, "engram_turns_total", outcome="ok") >= 1:
                        break
                    await trio.sleep(0.05)
            assert value(text, "engram_turns_total", outcome="ok") == 1
            assert value(text, "engram_turn_seconds_count") == 1
            assert value(text, "engram_webhook_responses_total", code="200") == 1
            assert value(text, "engram_webhook_seconds_count") == 1
            assert value(text, "engram_model_calls_total", purpose="agent", ok="true") >= 1
            assert value(text, "engram_model_tokens_total", purpose="agent", kind="input") > 0
            assert value(text, "engram_model_tokens_total", purpose="agent", kind="output") > 0
            assert value(text, "engram_model_cost_usd_total", purpose="agent") > 0
            assert value(text, "engram_live_actors", kind="chats") == 1
            assert value(text, "engram_live_actors", kind="sender") == 1
            assert value(text, "engram_chat_leases") == 1  # the one chat, served here
            assert value(text, "engram_inbox_depth", status="pending") == 0
            assert value(text, "engram_database_up") == 1
            assert value(text, "engram_first_draft_seconds_count") in (0, 1)  # a text draft, if any

            api = f"{base}/api/v1"
            doc = (await client.get(f"{api}/openapi.json")).json()
            validate(doc)
            pid = await db.fetchval(
                "INSERT INTO patterns (chat_id, content, kind, canonical_hash, first_seen, "
                "last_seen) VALUES ($1, 'Walks the dog at dawn', 'behavior', 'h1', now(), now()) "
                "RETURNING id",
                OTHER,
            )
            cases = [
                (f"/chats/{CHAT}/usage", None, 401, "unauthorized"),
                (f"/chats/{CHAT}/usage", "not-the-token-at-all-0", 401, "unauthorized"),
                (f"/chats/{CHAT}/usage", TOKEN, 200, None),
                (f"/chats/{CHAT}/usage", chat_token(TOKEN, CHAT), 200, None),
                (f"/chats/{OTHER}/patterns/{pid}", chat_token(TOKEN, CHAT), 403, "chat_forbidden"),
                (f"/chats/{CHAT}/patterns/{pid}", chat_token(TOKEN, CHAT), 404, "not_found"),
                (f"/chats/{OTHER}/patterns/{pid}", chat_token(TOKEN, OTHER), 200, None),
                ("/health", TOKEN, 200, None),
                (f"/chats/{CHAT}/patterns/search?q=dog", TOKEN, 200, None),
            ]
            for path, token, status, code in cases:
                headers = {} if token is None else {"Authorization": f"Bearer {token}"}
                r = await client.get(f"{api}{path}", headers=headers)
                assert r.status_code == status, (path, r.text)
                check_response(doc, f"/api/v1{path}", status, r.json())
                if code is not None:
                    assert r.json()["error"]["code"] == code
            r = await client.get(
                f"{api}/chats/{CHAT}/usage", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert r.json()["by_purpose"]["agent"]["calls"] >= 1  # the turn's model call
            assert TOKEN not in engram.tail(10_000) and METRICS_TOKEN not in engram.tail(10_000)
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()
