"""The JSON API and /metrics in process: the real blueprints in the real quart-trio app
(``runtime.http.create_app``) on a real PostgreSQL with the local embedding model; every
answer checked against the served OpenAPI document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_schema import check_response
from chat_bot import add_pattern
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families
from quart_trio import QuartTrio

from actors.chat.memory_commands import MemoryServices
from actors.web.auth import chat_token, scope_of
from actors.web.routes import web_blueprints
from actors.web.settings import WebSettings
from memory.embeddings.providers import LocalEmbedder
from runtime.db import Database
from runtime.http import create_app
from runtime.settings import load_settings

TOKEN = "operator-token-0123456789"
METRICS_TOKEN = "metrics-token-0123456789"
CHAT, OTHER = 7710001, -1007710002


def app_for(db: Database, local: LocalEmbedder, **env: str) -> QuartTrio:
    settings = load_settings(WebSettings, env, dotenv=None)
    services = MemoryServices(db, local, "UTC")

    def health() -> dict[str, Any]:
        checks = {"outbox": {"severity": "critical", "detail": "3 replies given up"}}
        return {"status": "critical", "checked_at": "2026-11-26T18:00:00+00:00", "checks": checks}

    return create_app(blueprints=web_blueprints(settings, services, health, [CHAT]))


@pytest.fixture
def app(db: Database, local: LocalEmbedder) -> QuartTrio:
    return app_for(db, local, DASHBOARD_TOKEN=TOKEN, METRICS_TOKEN=METRICS_TOKEN)


async def get(app: QuartTrio, path: str, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    r = await app.test_client().get(path, headers=headers)
    return r.status_code, await r.get_json()


async def checked(app: QuartTrio, path: str, token: str | None = TOKEN) -> tuple[int, Any]:
    """GET ``path``; the answer must match the document's promise for its status."""
    status, body = await get(app, path, token)
    _, doc = await get(app, "/api/v1/openapi.json", None)
    check_response(doc, path, status, body)
    return status, body


async def test_openapi_document_is_valid_openapi_3_1(app: QuartTrio) -> None:
    status, doc = await get(app, "/api/v1/openapi.json", None)
    assert status == 200 and doc["openapi"] == "3.1.0"
    validate(doc)


async def test_search_pattern_episodes_usage_chats_health(
    app: QuartTrio, db: Database, local: LocalEmbedder
) -> None:
    pid = await add_pattern(db, local, "Runs along the river every Sunday", chat=CHAT)
    await add_pattern(db, local, "Allergic to cats", chat=CHAT)
    end = datetime.now(UTC)
    for n in range(3):
        await db.execute(
            "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
            "VALUES ($1, $2, $3, $3, 4)",
            CHAT,
            f"episode {n}",
            end - timedelta(days=3 - n),
        )
    await db.execute(
        "INSERT INTO api_usage (chat_id, provider, model, purpose, input_tokens, output_tokens, "
        "cost_usd) VALUES ($1, 'anthropic', 'claude-sonnet-4-6', 'agent', 100, 20, 0.5)",
        CHAT,
    )

    status, body = await checked(app, f"/api/v1/chats/{CHAT}/patterns/search?q=jogging+river")
    assert status == 200
    assert body["patterns"][0]["id"] == pid and body["degraded"] is False

    status, body = await checked(app, f"/api/v1/chats/{CHAT}/patterns/{pid}")
    assert status == 200 and body["content"] == "Runs along the river every Sunday"
    assert body["observations"][0]["evidence"].startswith("I said:")

    status, body = await checked(app, f"/api/v1/chats/{CHAT}/episodes?limit=2")
    assert [e["summary"] for e in body["episodes"]] == ["episode 2", "episode 1"]
    status, body = await checked(
        app, f"/api/v1/chats/{CHAT}/episodes?limit=2&before={body['next_before']}"
    )
    assert [e["summary"] for e in body["episodes"]] == ["episode 0"]
    assert body["next_before"] is None

    status, body = await checked(app, f"/api/v1/chats/{CHAT}/usage?days=7")
    assert body["total"]["calls"] == 1 and body["by_purpose"]["agent"]["cost_usd"] == 0.5
    status, body = await checked(app, "/api/v1/usage")
    assert status == 200 and body["chat_id"] is None

    status, body = await checked(app, "/api/v1/chats")
    assert {"chat_id": CHAT, "messages": 0, "patterns": 2} in body["chats"]
    status, body = await checked(app, "/api/v1/health")
    assert (status, body["database"], body["status"]) == (200, "ok", "critical")
    assert body["checks"]["outbox"]["detail"] == "3 replies given up"


async def test_tokens_and_chat_scopes(app: QuartTrio, db: Database, local: LocalEmbedder) -> None:
    mine = await add_pattern(db, local, "Likes green tea", chat=CHAT)
    theirs = await add_pattern(db, local, "Plays the cello", chat=OTHER)
    path = f"/api/v1/chats/{CHAT}/patterns/{mine}"

    for token in (None, "wrong-token-0123456789", TOKEN[:-1], chat_token("another", CHAT)):
        status, body = await checked(app, path, token)
        assert (status, body["error"]["code"]) == (401, "unauthorized")

    own = chat_token(TOKEN, CHAT)
    assert scope_of(own, TOKEN) is not None
    assert (await checked(app, path, own))[0] == 200
    # another chat named in the path: refused before any lookup
    status, body = await checked(app, f"/api/v1/chats/{OTHER}/patterns/{theirs}", own)
    assert (status, body["error"]["code"]) == (403, "chat_forbidden")
    # another chat's pattern id under one's own chat: the same answer as a missing one
    status, body = await checked(app, f"/api/v1/chats/{CHAT}/patterns/{theirs}", own)
    assert (status, body["error"]["code"]) == (404, "not_found")
    status, missing = await checked(app, f"/api/v1/chats/{CHAT}/patterns/999999999", own)
    assert (status, missing["error"]["code"]) == (404, "not_found")
    # whole-bot views are the operator's
    for whole in ("/api/v1/usage", "/api/v1/health"):
        assert (await checked(app, whole, own))[1]["error"]["code"] == "chat_forbidden"
    status, body = await checked(app, "/api/v1/chats", own)
    assert [c["chat_id"] for c in body["chats"]] == [CHAT]
    # the operator sees both chats (a group's negative id too)
    assert (await checked(app, f"/api/v1/chats/{OTHER}/patterns/{theirs}"))[0] == 200


async def test_bad_input_gets_a_json_error(app: QuartTrio) -> None:
    for path in (
        f"/api/v1/chats/{CHAT}/patterns/search?q=",
        f"/api/v1/chats/{CHAT}/patterns/search?q=x&limit=0",
        f"/api/v1/chats/{CHAT}/patterns/search?q=" + "w" * 501,
        f"/api/v1/chats/{CHAT}/episodes?limit=abc",
        f"/api/v1/chats/{CHAT}/usage?days=999",
        "/api/v1/chats/12x/episodes",
    ):
        status, body = await get(app, path)
        assert (status, body["error"]["code"]) == (400, "bad_request"), path
    status, body = await get(app, "/api/v1/nothing-here")
    assert (status, body["error"]["code"]) == (404, "not_found")
    r = await app.test_client().post("/api/v1/health", headers={"Authorization": f"Bearer {TOKEN}"})
    assert (r.status_code, (await r.get_json())["error"]["code"]) == (405, "method_not_allowed")
    status, body = await get(app, "/api/v1/")  # the prefix itself is an endpoint of none
    assert (status, body["error"]["code"]) == (404, "not_found")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/api/v1/chats", "/api/v1/health"):  # no HTML from the framework, ever
        r = await app.test_client().options(path, headers=auth)
        code = (await r.get_json())["error"]["code"]
        assert (r.status_code, code) == (405, "method_not_allowed")


async def test_api_off_without_token_and_metrics_off(db: Database, local: LocalEmbedder) -> None:
    app = app_for(db, local, METRICS="off")
    client = app.test_client()
    assert (await client.get("/metrics")).status_code == 404
    assert (await client.get("/api/v1/openapi.json")).status_code == 404
    assert (await client.get("/api/v1/health")).status_code == 404


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_need_their_token_and_read_the_database(
    app: QuartTrio, db: Database, local: LocalEmbedder
) -> None:
    client = app.test_client()
    assert (await client.get("/metrics")).status_code == 401
    wrong = {"Authorization": f"Bearer {TOKEN}"}  # the API's token is not the metrics'
    assert (await client.get("/metrics", headers=wrong)).status_code == 401
    await add_pattern(db, None, "one", chat=CHAT)
    await add_pattern(db, None, "two", chat=OTHER, status="deprecated")
    await db.execute(
        "INSERT INTO inbox (update_key, chat_id, kind, payload) VALUES ('u:1', $1, 'message', "
        "'{}'), ('u:2', $1, 'message', '{}')",
        CHAT,
    )
    r = await client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert r.status_code == 200 and r.content_type.startswith("text/plain")
    got = samples(await r.get_data(as_text=True))
    assert got[("engram_inbox_depth", (("status", "pending"),))] == 2
    assert got[("engram_outbox_depth", (("status", "pending"),))] == 0
    assert got[("engram_patterns", (("status", "active"),))] == 1
    assert got[("engram_patterns", (("status", "deprecated"),))] == 1
    assert got[("engram_database_up", ())] == 1
    names = {name for name, _ in got}
    for family in ("engram_first_draft_seconds_count", "engram_turn_seconds_count"):
        assert family in names


@pytest.mark.usefixtures("restore_logging")
def test_api_token_command_prints_the_chat_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from actors.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    assert main(["api-token", "--chat", str(OTHER)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == chat_token(TOKEN, OTHER)
    assert scope_of(printed, TOKEN) is not None and TOKEN not in printed
    monkeypatch.setenv("DASHBOARD_TOKEN", "")
    assert main(["api-token", "--chat", "5"]) == 2
